// rootless: yes
'use strict';
// `kern serve`'s control plane through the real `e2b` SDK (run as a separate program, as a user
// runs it): create, list, get, kill, timeouts, connect, API keys, quotas, key isolation, bad
// requests, and the routes it does not serve yet.

const fs = require('fs');
const path = require('path');
const { requireRootfs, hostProcessesMatching, uniqueName, waitFor } = require('../helpers.js');
const { startServe, sdk, KEY, OTHER_KEY } = require('./serve-helpers.js');

let srv;
beforeAll(async () => {
  requireRootfs();
  srv = await startServe(['--max-sandboxes', '3', '--memory-mb', '128', '--max-memory-mb', '384']);
});
afterAll(() => srv && srv.close());

const api = (p, init = {}) => fetch(srv.url + p, { ...init, headers: { 'x-api-key': KEY, 'content-type': 'application/json', ...init.headers } });
const sandboxDirs = () => fs.readdirSync(srv.stateDir);

test('create, get, list by metadata, kill: the SDK sees what it asked for, the host keeps nothing after', async () => {
  const tag = uniqueName('meta');
  const made = await sdk(`
    const sb = await Sandbox.create('base', { metadata: { tag: '${tag}' }, timeoutMs: 120000 });
    const info = await sb.getInfo();
    const listed = await Sandbox.list({ query: { metadata: { tag: '${tag}' } } }).nextItems();
    return { id: sb.sandboxId, info, life: info.endAt - info.startedAt, listed: listed.map((s) => s.sandboxId), running: await sb.isRunning() };`);
  expect(made.info).toMatchObject({ sandboxId: made.id, templateId: 'base', metadata: { tag }, state: 'running' });
  expect(made.life).toBeGreaterThan(100_000);
  expect(made.listed).toEqual([made.id]);
  expect(made.running).toBe(true);
  const dir = path.join(srv.stateDir, made.id);
  expect(fs.existsSync(dir)).toBe(true);

  const gone = await sdk(`
    const sb = await Sandbox.connect('${made.id}');
    await sb.kill();
    let info;
    try { await Sandbox.getInfo('${made.id}'); } catch (e) { info = e.constructor.name; }
    return { info, again: await Sandbox.kill('${made.id}'), running: await sb.isRunning() };`);
  expect(gone).toEqual({ info: 'SandboxNotFoundError', again: false, running: false });
  expect(fs.existsSync(dir)).toBe(false);
});

test('a sandbox ends at its timeout, with its running command; setTimeout moves the deadline', async () => {
  const marker = uniqueName('deadline');
  const made = await sdk(`
    const sb = await Sandbox.create('base', { timeoutMs: 3000 });
    await sb.setTimeout(6000);
    const info = await sb.getInfo();
    const h = await sb.commands.run('sleep 600; : ${marker}', { background: true, timeoutMs: 0 });
    await h.disconnect();
    return { id: sb.sandboxId, left: info.endAt - Date.now(), pid: h.pid };`);
  expect(made.left).toBeGreaterThan(4000);
  expect(made.pid).toBeGreaterThan(0);
  expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10_000)).toBeTruthy();
  // Ended by the server, not by any client: the process is gone from the host, the files too.
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 20_000)).toBeTruthy();
  // The files go after the processes (the box's close() first, then its directory): wait for both.
  expect(await waitFor(() => !fs.existsSync(path.join(srv.stateDir, made.id)), 10_000)).toBeTruthy();
  const after = await sdk(`return await Sandbox.getInfo('${made.id}');`);
  expect(after.thrown.name).toBe('SandboxNotFoundError');
});

test('connect reaches a running sandbox by id and never shortens its life', async () => {
  const r = await sdk(`
    const sb = await Sandbox.create('base', { timeoutMs: 200000 });
    const again = await Sandbox.connect(sb.sandboxId, { timeoutMs: 10000 });
    const out = (await again.commands.run('echo reached')).stdout;
    const left = (await again.getInfo()).endAt - Date.now();
    await sb.kill();
    let late;
    try { await Sandbox.connect(sb.sandboxId); } catch (e) { late = e.constructor.name; }
    return { out, left, late };`);
  expect(r).toEqual({ out: 'reached\n', left: expect.any(Number), late: 'SandboxNotFoundError' });
  expect(r.left).toBeGreaterThan(150_000);
});

test('a wrong or missing API key is refused before anything starts, and no key is ever logged', async () => {
  const before = sandboxDirs().length;
  const wrong = 'not-a-key-of-this-server-000000';
  const r = await sdk(`return await Sandbox.create('base');`, { E2B_API_KEY: wrong });
  expect(r.thrown.name).toBe('AuthenticationError');
  const bare = await fetch(srv.url + '/v2/sandboxes', { method: 'POST', body: '{"templateID":"base"}', headers: { 'content-type': 'application/json' } });
  expect(bare.status).toBe(401);
  expect(await bare.json()).toEqual({ code: 401, message: expect.stringMatching(/API key/) });
  expect(sandboxDirs().length).toBe(before);
  const logs = srv.logs.join('');
  expect(logs).toContain('refused: no valid API key');
  expect(logs).not.toContain(wrong);
  expect(logs).not.toContain(KEY);
  expect(logs).not.toContain(OTHER_KEY);
});

test('one key neither sees nor reaches another key\'s sandbox, its files or its processes', async () => {
  const mine = await sdk(`const sb = await Sandbox.create('base', { timeoutMs: 60000 }); return sb.sandboxId;`);
  try {
    const seen = await sdk(`
      const out = {};
      out.listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
      for (const [k, f] of Object.entries({ info: () => Sandbox.getInfo('${mine}'), connect: () => Sandbox.connect('${mine}') })) {
        try { await f(); out[k] = 'reached'; } catch (e) { out[k] = e.constructor.name; }
      }
      out.kill = await Sandbox.kill('${mine}');
      return out;`, { E2B_API_KEY: OTHER_KEY });
    expect(seen).toEqual({ listed: expect.not.arrayContaining([mine]), info: 'SandboxNotFoundError', connect: 'SandboxNotFoundError', kill: false });
    // The sandbox's own traffic needs its access token, which only its creator got.
    for (const token of [undefined, 'f'.repeat(48)]) {
      const headers = { 'e2b-sandbox-id': mine, 'e2b-sandbox-port': '49983', ...(token ? { 'x-access-token': token } : {}) };
      expect((await fetch(srv.url + '/files?path=/etc/hostname', { headers })).status).toBe(401);
      expect((await fetch(srv.url + '/contexts', { headers: { ...headers, 'e2b-sandbox-port': '49999' } })).status).toBe(401);
    }
    expect(fs.existsSync(path.join(srv.stateDir, mine))).toBe(true);
  } finally {
    await api(`/sandboxes/${mine}`, { method: 'DELETE' });
  }
});

test('quotas: concurrent sandboxes and total memory per key answer the SDK\'s rate-limit error', async () => {
  const r = await sdk(`
    const held = [];
    const out = {};
    try {
      for (let i = 0; i < 3; i++) held.push(await Sandbox.create('base', { timeoutMs: 60000 }));
      try { await Sandbox.create('base', { timeoutMs: 60000 }); out.fourth = 'made'; } catch (e) { out.fourth = e.constructor.name + ': ' + e.message; }
      const other = await Sandbox.create('base', { apiKey: '${OTHER_KEY}', timeoutMs: 60000 });
      out.otherKey = await other.isRunning();
      await other.kill();
    } finally {
      for (const s of held) await s.kill();
    }
    return out;`);
  expect(r.fourth).toMatch(/^RateLimitError: .*already runs 3 sandboxes/);
  expect(r.otherKey).toBe(true);
  expect(sandboxDirs()).toEqual([]);
}, 180_000);

test('memory quota: a key whose sandboxes hold --max-memory-mb gets the rate-limit error', async () => {
  const s2 = await startServe(['--memory-mb', '256', '--max-memory-mb', '300']);
  try {
    const r = await sdk(`
      const a = await Sandbox.create('base');
      let second;
      try { await Sandbox.create('base'); second = 'made'; } catch (e) { second = e.constructor.name + ': ' + e.message; }
      await a.kill();
      return second;`, { E2B_API_URL: s2.url, E2B_SANDBOX_URL: s2.url });
    expect(r).toMatch(/^RateLimitError: .*hold 256 MiB of 300/);
  } finally {
    await s2.close();
    process.env.E2B_API_URL = srv.url;
    process.env.E2B_SANDBOX_URL = srv.url;
  }
}, 120_000);

test('bad requests get E2B\'s error shape with a reason, never a 500, and start nothing', async () => {
  const cases = [
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID": 7}' }, 400, /templateID/],
    ['/v2/sandboxes', { method: 'POST', body: 'not json' }, 400, /not JSON/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","timeout":-1}' }, 400, /timeout/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","metadata":{"a":1}}' }, 400, /metadata/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","envVars":["A"]}' }, 400, /envVars/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","autoPause":true}' }, 400, /paus/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","allow_internet_access":"yes"}' }, 400, /allow_internet_access/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","network":{"denyOut":["1.2.3.4"]}}' }, 400, /denyOut/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["10.0.0.0/8"]}}' }, 400, /address ranges/],
    ['/v2/sandboxes', { method: 'POST', body: '{"templateID":"base","network":{"allowOut":["https://pypi.org/simple"]}}' }, 400, /allowOut.*URL/],
    ['/v2/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base', pad: 'x'.repeat(2 << 20) }) }, 413, /over/],
    ['/sandboxes/nope/pause', { method: 'POST', body: '{}' }, 404, /not found/],
    ['/snapshots', { method: 'GET' }, 501, /not supported/],
    ['/secrets', { method: 'GET' }, 501, /not supported/],
    ['/volumes/nope', { method: 'GET' }, 404, /not found/],
    ['/volumecontent/nope/dir?path=/', { method: 'GET' }, 401, /volume token/],
    ['/nowhere', { method: 'GET' }, 404, /no route/],
  ];
  for (const [p, init, status, msg] of cases) {
    const res = await api(p, init);
    expect([p, init.body && init.body.slice(0, 60), res.status]).toEqual([p, init.body && init.body.slice(0, 60), status]);
    const body = await res.json();
    expect(body.code).toBe(status);
    expect(body.message).toMatch(msg);
  }
  expect(sandboxDirs()).toEqual([]);
});

test('a sandbox\'s unsupported action answers 501 through the SDK; a gone sandbox is not found', async () => {
  const r = await sdk(`
    const sb = await Sandbox.create('base', { timeoutMs: 60000 });
    const out = {};
    try { await sb.pause(); } catch (e) { out.pause = e.message; }
    try { await sb.getMetrics(); } catch (e) { out.metrics = e.message; }
    out.running = await sb.isRunning();
    await sb.kill();
    try { await sb.commands.run('true'); } catch (e) { out.after = e.constructor.name; }
    return out;`);
  expect(r.pause).toMatch(/501: pausing a sandbox is not supported by kern serve yet/);
  expect(r.metrics).toMatch(/501/);
  expect(r.running).toBe(true);
  expect(r.after).toBe('SandboxNotFoundError');
});

test('/health and /metrics answer without a key and name no key', async () => {
  expect((await fetch(srv.url + '/health')).status).toBe(200);
  const m = await (await fetch(srv.url + '/metrics')).text();
  expect(m).toMatch(/^kern_serve_sandboxes_created_total \d+/m);
  expect(m).toMatch(/kern_serve_request_seconds_bucket\{/);
  expect(m).not.toContain(KEY);
});

test('--pool: a create takes a Sandbox opened ahead, the pool fills again, and a stop closes the pooled ones', async () => {
  const s2 = await startServe(['--pool', '1']);
  const env = { E2B_API_URL: s2.url, E2B_SANDBOX_URL: s2.url };
  try {
    // The first create of an image opens its own and starts the pool.
    const first = await sdk(`return (await Sandbox.create('base', { envs: { WHO: 'first' } })).sandboxId;`, env);
    const pooled = await waitFor(() => fs.readdirSync(s2.stateDir).find((d) => d !== first), 20_000);
    expect(pooled).toBeTruthy();
    // The next takes it: its id is the pooled directory's, and its envs are its own.
    const r = await sdk(`
      const sb = await Sandbox.create('base', { envs: { WHO: 'second' } });
      return { id: sb.sandboxId, who: (await sb.commands.run('echo "$WHO $E2B_SANDBOX_ID"')).stdout };`, env);
    expect(r.id).toBe(pooled);
    expect(r.who).toBe(`second ${pooled}\n`);
    expect(await waitFor(() => fs.readdirSync(s2.stateDir).length === 3, 20_000)).toBeTruthy();
    await s2.serve.close();
    expect(fs.readdirSync(s2.stateDir)).toEqual([]);
  } finally {
    await s2.close();
  }
});
