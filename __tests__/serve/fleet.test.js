// rootless: yes
'use strict';
// A fleet: two `kern serve` instances (--instance kern-serve-0 / kern-serve-1, as the
// StatefulSet names its pods) behind a real HAProxy running deploy/k8s/haproxy.cfg, the router
// of deploy/k8s/serve.yaml, unchanged. Sandboxes created through it land on both instances and
// every later request for one (control plane, envd, code interpreter) reaches the instance that
// holds it.

const fs = require('fs');
const net = require('net');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { requireRootfs } = require('../helpers.js');
const { startServe, sdk, KEY } = require('./serve-helpers.js');

const CFG = path.join(__dirname, '..', '..', 'deploy', 'k8s', 'haproxy.cfg');
// Debian's haproxy is in /usr/sbin, which an unprivileged user's PATH may lack.
const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((p) => fs.existsSync(p)) || 'haproxy';

let a;
let b;
let lb;
let url;

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

beforeAll(async () => {
  requireRootfs();
  if (spawnSync(HAPROXY, ['-v']).status !== 0) throw new Error('haproxy is missing: run scripts/setup-deps.sh');
  // Each server knows the fleet (--peers), as the manifest's do, so a list is the fleet's.
  const ports = [await freePort(), await freePort()];
  const peers = ports.map((p, i) => `kern-serve-${i}=http://127.0.0.1:${p}`).join(',');
  a = await startServe(['--instance', 'kern-serve-0', '--listen', `127.0.0.1:${ports[0]}`, '--peers', peers]);
  b = await startServe(['--instance', 'kern-serve-1', '--listen', `127.0.0.1:${ports[1]}`, '--peers', peers]);
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  lb = spawn(HAPROXY, ['-db', '-f', CFG], {
    env: { ...process.env, KERN_SERVE_BIND: `127.0.0.1:${port}`, KERN_SERVE_0: a.url.slice(7), KERN_SERVE_1: b.url.slice(7) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  lb.stderr.on('data', (c) => (err += c));
  let up = false;
  for (let i = 0; i < 100 && !up; i++) {
    up = await fetch(`${url}/health`).then((r) => r.ok, () => false);
    if (!up) await new Promise((r) => setTimeout(r, 100));
  }
  if (!up) throw new Error(`haproxy did not come up: ${err}`);
  process.env.E2B_API_URL = url;
  process.env.E2B_SANDBOX_URL = url;
});
afterAll(async () => {
  if (lb) lb.kill('SIGTERM');
  await Promise.all([a && a.close(), b && b.close()]);
});

test('sandboxes made through the router land on both instances, named for the one that holds them', async () => {
  const ids = await sdk(`
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push((await Sandbox.create('base', { timeoutMs: 120000 })).sandboxId);
    return ids;`);
  const on = (id) => [a, b].filter((s) => s.serve.sandboxes.byId.has(id)).map((s) => s.serve.sandboxes.cfg.instance);
  for (const id of ids) {
    expect(id).toMatch(/^kern-serve-[01]-[0-9a-f]{20}$/);
    expect(on(id)).toEqual([id.slice(0, 12)]);
  }
  expect(new Set(ids.map((id) => id.slice(0, 12)))).toEqual(new Set(['kern-serve-0', 'kern-serve-1']));
  // A list through the router, whichever server answers it, is the fleet's, and pages over it.
  for (let i = 0; i < 2; i++) {
    const listed = await sdk(`
      const all = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
      const pager = Sandbox.list({ limit: 3 });
      const pages = [];
      while (pager.hasNext) pages.push((await pager.nextItems()).map((s) => s.sandboxId));
      return { all, pages };`);
    expect([...listed.all].sort()).toEqual([...ids].sort());
    expect(listed.pages.map((p) => p.length)).toEqual([3, 1]);
    expect(listed.pages.flat().sort()).toEqual([...ids].sort());
  }

  // Every later request reaches the holder: getInfo, commands, files, a cell, setTimeout, kill.
  const r = await sdk(`
    const out = [];
    for (const id of ${JSON.stringify(ids)}) {
      const info = await Sandbox.getInfo(id);
      const sb = await CISandbox.connect(id);
      const cmd = (await sb.commands.run('echo "$E2B_SANDBOX_ID"')).stdout.trim();
      await sb.files.write('who.txt', id);
      const read = await sb.files.read('who.txt');
      const cell = (await sb.runCode('open("who.txt").read()')).text;
      await sb.setTimeout(90000);
      out.push({ info: info.sandboxId, cmd, read, cell });
      await sb.kill();
    }
    return out;`);
  expect(r).toEqual(ids.map((id) => ({ info: id, cmd: id, read: id, cell: `'${id}'` })));
  for (const id of ids) {
    expect(on(id)).toEqual([]);
    expect(fs.existsSync(path.join(a.stateDir, id)) || fs.existsSync(path.join(b.stateDir, id))).toBe(false);
  }
}, 180_000);

test('a sandbox id no instance holds is not found through the router, whichever instance it names', async () => {
  for (const id of ['kern-serve-0-0000000000000000dead', 'kern-serve-1-0000000000000000dead', 'elsewhere-1']) {
    const res = await fetch(`${url}/sandboxes/${id}`, { headers: { 'x-api-key': KEY } });
    expect(res.status).toBe(404);
  }
});
