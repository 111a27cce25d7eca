// rootless: yes
'use strict';
// `kern serve` as a user starts it (`npx kern-sandbox serve` runs bin/kern.js): its flags
// checked before it listens, the variables it prints, TLS, --insecure-no-auth on loopback only,
// and SIGTERM ending every sandbox with nothing left on the host (processes, cgroups, mounts,
// state).

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, spawnSync, execFileSync } = require('child_process');
const { requireRootfs, ROOTFS, hostProcessesMatching, uniqueName, waitFor, listPids, procStat, ourDescendant } = require('../helpers.js');
const { sdk, KEY } = require('./serve-helpers.js');

const KERN_JS = path.join(__dirname, '..', '..', 'bin', 'kern.js');

beforeAll(() => requireRootfs());

/** Runs `kern serve args` to its end (for refusals). */
function serveOnce(args, env = {}) {
  return spawnSync(process.execPath, [KERN_JS, 'serve', ...args], { env: { ...process.env, KERN_API_KEYS: '', ...env }, encoding: 'utf8', timeout: 30_000 });
}

/** Starts `kern serve args`; resolves once it printed its variables, with them. */
function startCli(args, env = {}) {
  const child = spawn(process.execPath, [KERN_JS, 'serve', '--listen', '127.0.0.1:0', '--image', ROOTFS, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (c) => (err += c));
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (c) => {
      out += c;
      const m = /export E2B_API_URL=(\S+)\n\s*export E2B_SANDBOX_URL=(\S+)\n\s*export E2B_API_KEY=(\S+)/.exec(out);
      if (m) resolve({ child, apiUrl: m[1], sandboxUrl: m[2], keyHint: m[3], out: () => out, err: () => err });
    });
    child.on('exit', (code) => reject(new Error(`kern serve exited ${code}: ${out}${err}`)));
  });
}

const exited = (child) => new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));

/** kern-sandbox's cgroup directories on this host (v1 controllers; none where it has none) that
 * belong to a kern `ours` has seen (a box's leaf is `box-<its kern's pid>-...`): the root run's
 * side Jest makes boxes of its own beside this one. */
function kernCgroups(ours) {
  const out = [];
  for (const root of ['/sys/fs/cgroup/memory/kern-sandbox', '/sys/fs/cgroup/pids/kern-sandbox', '/sys/fs/cgroup/cpu/kern-sandbox']) {
    try {
      for (const d of fs.readdirSync(root)) {
        const m = /^box-(\d+)-/.exec(d);
        if (m && ours.has(Number(m[1]))) out.push(path.join(root, d));
      }
    } catch {
      // not on this host
    }
  }
  return out;
}

/** The kern runtimes this process's descendants (the server's) run, sampled until stopped. */
function kernsOfOurs() {
  const seen = new Set();
  const sample = () => {
    for (const pid of listPids()) {
      const st = procStat(pid);
      if (st && st.comm === 'kern' && ourDescendant(pid)) seen.add(pid);
    }
  };
  sample();
  const timer = setInterval(sample, 50);
  return { seen, stop: () => { sample(); clearInterval(timer); } };
}

test('refusals before it listens: no key, no auth off loopback, unknown or incomplete flags', () => {
  const cases = [
    [[], {}, /no API key: give --api-keys FILE or KERN_API_KEYS/],
    [['--insecure-no-auth', '--listen', '0.0.0.0:49982'], {}, /loopback address only|listens only on a loopback/],
    [['--api-keys', '/no/such/keys'], {}, /--api-keys \/no\/such\/keys: no such file/],
    [['--listen', 'nowhere'], { KERN_API_KEYS: KEY }, /--listen "nowhere": give HOST:PORT/],
    [['--tls-cert', '/etc/hostname'], { KERN_API_KEYS: KEY }, /--tls-cert and --tls-key go together/],
    [['--template', 'noequals'], { KERN_API_KEYS: KEY }, /--template "noequals": give NAME=IMAGE/],
    [['--bogus'], { KERN_API_KEYS: KEY }, /unknown argument "--bogus"/],
    [[], { KERN_API_KEYS: 'short' }, /shorter than 16 characters/],
    [['--max-sandboxes', '0'], { KERN_API_KEYS: KEY }, /--max-sandboxes "0": give a whole number/],
  ];
  for (const [args, env, msg] of cases) {
    const r = serveOnce(args, env);
    expect([args, r.status]).toEqual([args, 2]);
    expect(r.stderr).toMatch(msg);
    expect(r.stdout).toBe('');
  }
  // The native `kern` hands `serve` to the same server, through node.
  const native = spawnSync(path.join(__dirname, '..', '..', 'kern'), ['serve', '--bogus'], { env: { ...process.env, KERN_API_KEYS: KEY }, encoding: 'utf8', timeout: 30_000 });
  expect(native.status).toBe(2);
  expect(native.stderr).toMatch(/^kern serve: unknown argument "--bogus"/);
  const help = serveOnce(['--help']);
  expect(help.status).toBe(0);
  expect(help.stderr).toMatch(/^kern serve: usage: kern serve \[--listen HOST:PORT\]/);
});

test('it prints the three variables; SIGTERM ends every sandbox and leaves nothing on the host', async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-serve-cli-'));
  const kerns = kernsOfOurs();
  const srv = await startCli(['--state-dir', stateDir], { KERN_API_KEYS: KEY });
  expect(srv.apiUrl).toBe(srv.sandboxUrl);
  expect(srv.apiUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  expect(srv.keyHint).toBe('<one');
  const markers = [uniqueName('term'), uniqueName('term')];
  const env = { E2B_API_URL: srv.apiUrl, E2B_SANDBOX_URL: srv.sandboxUrl, E2B_API_KEY: KEY };
  const ids = [];
  for (const m of markers) {
    ids.push(await sdk(`
      const sb = await Sandbox.create('base', { timeoutMs: 600000 });
      await sb.files.write('kept.txt', 'x');
      const h = await sb.commands.run('sleep 900; : ${m}', { background: true, timeoutMs: 0 });
      await h.disconnect();
      return sb.sandboxId;`, env));
  }
  for (const m of markers) expect(hostProcessesMatching(m).length).toBeGreaterThan(0);
  // Its sandboxes, and those opened ahead (--pool, 2 by default).
  expect(fs.readdirSync(stateDir)).toEqual(expect.arrayContaining(ids));
  expect(fs.readdirSync(stateDir).length).toBeGreaterThan(ids.length);

  srv.child.kill('SIGTERM');
  expect(await exited(srv.child)).toEqual({ code: 0, signal: null });
  for (const m of markers) expect(hostProcessesMatching(m)).toEqual([]);
  expect(fs.readdirSync(stateDir)).toEqual([]);
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  expect(mounts).not.toContain(stateDir);
  kerns.stop();
  expect(kerns.seen.size).toBeGreaterThan(0);
  await waitFor(() => kernCgroups(kerns.seen).length === 0, 10_000);
  expect(kernCgroups(kerns.seen)).toEqual([]);
  const logs = srv.err().trim().split('\n').map((l) => JSON.parse(l));
  expect(logs.map((l) => l.msg)).toEqual(expect.arrayContaining(['listening', 'sandbox created', 'stopping', 'sandbox ended', 'stopped']));
  expect(logs.filter((l) => l.msg === 'sandbox ended').map((l) => l.reason)).toEqual(['shutdown', 'shutdown']);
  expect(srv.err()).not.toContain(KEY);
  fs.rmSync(stateDir, { recursive: true, force: true });
}, 120_000);

test('--insecure-no-auth on loopback takes any key; TLS with --tls-cert/--tls-key', async () => {
  const open = await startCli(['--insecure-no-auth']);
  try {
    expect(open.keyHint).toBe('anything');
    const r = await sdk(`const sb = await Sandbox.create('base'); const o = (await sb.commands.run('echo open')).stdout; await sb.kill(); return o;`,
      { E2B_API_URL: open.apiUrl, E2B_SANDBOX_URL: open.sandboxUrl, E2B_API_KEY: 'whatever-the-client-has' });
    expect(r).toBe('open\n');
  } finally {
    open.child.kill('SIGTERM');
    await exited(open.child);
  }

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-serve-tls-'));
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  const tls = await startCli(['--tls-cert', cert, '--tls-key', key], { KERN_API_KEYS: KEY });
  try {
    expect(tls.apiUrl).toMatch(/^https:\/\//);
    const env = { E2B_API_URL: tls.apiUrl, E2B_SANDBOX_URL: tls.sandboxUrl, E2B_API_KEY: KEY, NODE_EXTRA_CA_CERTS: cert };
    const r = await sdk(`const sb = await Sandbox.create('base'); const o = (await sb.commands.run('echo over-tls')).stdout; await sb.kill(); return o;`, env);
    expect(r).toBe('over-tls\n');
    // Plain HTTP to the TLS port gets nothing a client could mistake for an answer.
    const plain = await fetch(tls.apiUrl.replace('https:', 'http:') + '/health').then((res) => res.status, (e) => e.name);
    expect(plain).not.toBe(200);
  } finally {
    tls.child.kill('SIGTERM');
    await exited(tls.child);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);
