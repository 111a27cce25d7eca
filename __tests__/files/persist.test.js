'use strict';
// rootless: yes
// Resident boxes (`persist`): one box per name, met by every Sandbox and every process that names
// it, kept to its TTL by kern itself. Real boxes, real processes, no mocks.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { requireRootfs, tempDirs, uniqueName, isAlive, waitFor, expectSandboxError, isRoot, startNodeUntilReady } = require('../helpers');

// Workspaces of the resident boxes, removed once every box is destroyed (afterAll).
const temps = tempDirs();
const makeTempDir = () => temps.temp('kern-persist-ws-');

// Where kern keeps the state files (the rule of `state_dir` in
// src/engine/monitor/resident/state.rs). Jest's process.env is not the environment the addon
// sees, so it is read, never changed, here; the boxes' names are unique.
function stateDir() {
  const e = process.env;
  if (e.XDG_RUNTIME_DIR && path.isAbsolute(e.XDG_RUNTIME_DIR)) return path.join(e.XDG_RUNTIME_DIR, 'kern-sandbox');
  if (e.KERN_HOME) return path.join(e.KERN_HOME, 'resident');
  if (e.XDG_CACHE_HOME && path.isAbsolute(e.XDG_CACHE_HOME)) return path.join(e.XDG_CACHE_HOME, 'kern-sandbox', 'resident');
  return path.join(e.HOME, '.cache', 'kern-sandbox', 'resident');
}
const STATE_DIR = stateDir();
const REPO = path.join(__dirname, '..', '..');
const KERN = process.env.KERN_BIN || path.join(REPO, 'kern');

const kern = require('../..');
const { Sandbox, SandboxError } = kern;

let rootfs;
const names = [];
const sandboxes = [];

function boxName() {
  const n = uniqueName('res');
  names.push(n);
  return n;
}

function persistOpts(name, workspace, extra = {}) {
  return { image: rootfs, persist: true, name, workspace, ...extra };
}

async function open(o) {
  const sb = new Sandbox(o);
  sandboxes.push(sb);
  return sb.open();
}

function statePath(name) {
  return path.join(STATE_DIR, `${name}.json`);
}

function readState(name) {
  try {
    return JSON.parse(fs.readFileSync(statePath(name), 'utf8'));
  } catch {
    return null;
  }
}

// The box's PID 1 as the box itself sees it: its start time (stat field 22) only matches across
// calls when it is the same process.
/** The box's PID namespace, as a call sees it: the same box answers the same. (PID 1 itself is
 * hidden from calls: the box's /proc is hidepid=invisible, and kern's reaper is not theirs.) */
async function pidNamespace(sb) {
  const r = await sb.run(['readlink', '/proc/self/ns/pid']);
  expect(r.exitCode).toBe(0);
  return r.stdout.trim();
}

// cgroup leaves kern made for the box whose monitor has this pid (none rootless).
function cgroupLeaves(monitorPid) {
  const found = [];
  let self;
  try {
    self = fs.readFileSync('/proc/self/cgroup', 'utf8');
  } catch {
    return found;
  }
  for (const line of self.trim().split('\n')) {
    const [, ctrls, rel] = line.split(':');
    const mount = ctrls === '' ? '/sys/fs/cgroup' : path.join('/sys/fs/cgroup', ctrls.split(',')[0]);
    const parent = path.join(mount, rel, 'kern-sandbox');
    let entries = [];
    try {
      entries = fs.readdirSync(parent);
    } catch {
      continue;
    }
    for (const e of entries) if (e.startsWith(`box-${monitorPid}-`)) found.push(path.join(parent, e));
  }
  return found;
}

function kernCli(args) {
  const r = spawnSync(KERN, args, { encoding: 'utf8', timeout: 60000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

// A second Node process running `body` with `sb`, a Sandbox opened on `o`; prints what body returns.
function nodeScript(o, body) {
  return `
    const { Sandbox } = require(${JSON.stringify(REPO)});
    (async () => {
      const sb = new Sandbox(${JSON.stringify(o)});
      const out = await (async () => { ${body} })();
      console.log(JSON.stringify(out === undefined ? null : out));
    })().catch((e) => { console.error(e && e.stack || e); process.exit(1); });
  `;
}

function runNode(script) {
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 120000, env: process.env });
  if (r.status !== 0) throw new Error(`node child failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

beforeAll(() => {
  rootfs = requireRootfs();
});

afterAll(async () => {
  for (const sb of sandboxes) await sb.close().catch(() => {});
  for (const n of names) kernCli(['stop', n]);
  // Last: every box is stopped, so nothing uses its workspace any more.
  temps.removeAll();
});

test('state in /tmp survives across calls; the first call says what a resident box is', async () => {
  const name = boxName();
  const sb = await open(persistOpts(name, makeTempDir()));
  const first = await sb.run(['sh', '-c', 'echo kept > /tmp/resident-file']);
  expect(first.exitCode).toBe(0);
  expect(first.runtimeNotes.join('\n')).toMatch(/resident box .*\/tmp .*processes a call leaves running stay/);
  const second = await sb.runCode('print(open("/tmp/resident-file").read().strip())');
  expect(second.stdout).toBe('kept\n');
  expect(second.runtimeNotes.join('\n')).not.toMatch(/resident box/);
  // A fresh interpreter each call, in the same box.
  expect(await pidNamespace(sb)).toBe(await pidNamespace(sb));
  const state = readState(name);
  expect(state).toMatchObject({ name });
  expect(fs.statSync(statePath(name)).mode & 0o777).toBe(0o600);
  expect(fs.statSync(STATE_DIR).mode & 0o777).toBe(0o700);
  expect(isAlive(state.pid1.pid)).toBe(true);
  if (isRoot) {
    // Its PID 1 holds no pipe of the kern that started it (whose caller would otherwise wait
    // for their EOF): its stdout and stderr are /dev/null once it is ready.
    for (const fd of [1, 2]) expect(fs.readlinkSync(`/proc/${state.pid1.pid}/fd/${fd}`)).toBe('/dev/null');
  }
  await sb.close();
  // close() leaves the box running.
  expect(isAlive(state.pid1.pid)).toBe(true);
  await sb.destroy();
});

/** The processes on the host holding the pipe or socket `link` (`pipe:[N]`, `socket:[N]`). */
function holdersOf(link) {
  const out = [];
  for (const p of fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    let fds = [];
    try {
      fds = fs.readdirSync(`/proc/${p}/fd`);
    } catch {
      continue; // gone, or not ours to read
    }
    for (const f of fds) {
      try {
        if (fs.readlinkSync(`/proc/${p}/fd/${f}`) === link) {
          out.push(Number(p));
          break;
        }
      } catch {
        // closed meanwhile
      }
    }
  }
  return out.sort((a, b) => a - b);
}

// open() of a new resident box waits for its kern's output to end; a PID 1 that kept any of that
// kern's pipes (or any other channel of its opener) made it wait out the drain grace every time.
(isRoot ? test : test.skip)('the resident box\'s PID 1 holds no pipe or socket of its opener: only its own with its monitor', async () => {
  const name = boxName();
  const sb = await open(persistOpts(name, makeTempDir(), { setup: 'echo set up; echo warned >&2' }));
  try {
    const state = readState(name);
    const pid1 = state.pid1.pid;
    const monitor = state.monitor.pid;
    const links = fs.readdirSync(`/proc/${pid1}/fd`).map((f) => fs.readlinkSync(`/proc/${pid1}/fd/${f}`));
    const channels = links.filter((l) => /^(pipe|socket):/.test(l));
    // Each it holds is shared with nobody but its monitor (never with this process, a kern that
    // has exited, or anything else).
    for (const l of channels) expect({ l, holders: holdersOf(l).filter((p) => p !== pid1 && p !== monitor) }).toEqual({ l, holders: [] });
    // Its standard streams are /dev/null, not a pipe of the kern that started it.
    for (const fd of [0, 1, 2]) expect(fs.readlinkSync(`/proc/${pid1}/fd/${fd}`)).toMatch(/^\/(dev\/)?null$/);
    // And a call still gets its own output.
    expect((await sb.run(['echo', 'hi'])).stdout).toBe('hi\n');
  } finally {
    await sb.destroy();
  }
});

test('two Sandbox objects and a second Node process meet the same box', async () => {
  const name = boxName();
  const ws = makeTempDir();
  const o = persistOpts(name, ws);
  const a = await open(o);
  const b = await open(o);
  const token = uniqueName('tok');
  await a.run(['sh', '-c', `echo ${token} > /tmp/shared`]);
  expect((await b.run(['cat', '/tmp/shared'])).stdout).toBe(`${token}\n`);
  const stat = await pidNamespace(a);
  expect(await pidNamespace(b)).toBe(stat);
  const other = runNode(
    nodeScript(o, `
      await sb.open();
      const r = await sb.run(['cat', '/tmp/shared']);
      const s = (await sb.run(['readlink', '/proc/self/ns/pid'])).stdout.trim();
      await sb.run(['sh', '-c', 'echo from-child > /tmp/back']);
      await sb.close();
      return { shared: r.stdout, stat: s };
    `)
  );
  expect(other).toEqual({ shared: `${token}\n`, stat });
  expect((await a.run(['cat', '/tmp/back'])).stdout).toBe('from-child\n');
  await a.destroy();
});

test('a box of the same name under another posture is refused, naming the options', async () => {
  const name = boxName();
  const ws = makeTempDir();
  await open(persistOpts(name, ws));
  await expectSandboxError(
    () => new Sandbox(persistOpts(name, ws, { memoryMb: 256, pids: 64 })).open(),
    SandboxError,
    /already runs with another posture/,
    /memoryMb \(box: 512, here: 256\)/,
    /pids/
  );
  await expectSandboxError(
    () => new Sandbox(persistOpts(name, makeTempDir())).open(),
    SandboxError,
    /workspace/
  );
  await new Sandbox(persistOpts(name, ws)).destroy();
});

test('destroy() is idempotent and works from another process; the other Sandbox then says so', async () => {
  const name = boxName();
  const ws = makeTempDir();
  const o = persistOpts(name, ws);
  const sb = await open(o);
  expect((await sb.run(['true'])).exitCode).toBe(0);
  const state = readState(name);
  runNode(nodeScript(o, 'await sb.destroy(); await sb.destroy();'));
  expect(readState(name)).toBeNull();
  expect(isAlive(state.pid1.pid)).toBe(false);
  expect(isAlive(state.monitor.pid)).toBe(false);
  expect(cgroupLeaves(state.monitor.pid)).toEqual([]);
  await expectSandboxError(() => sb.run(['true']), SandboxError, new RegExp(`resident box ${name} was destroyed`), /open a new Sandbox/);
  await sb.destroy();
  await new Sandbox(o).destroy();
  // A new Sandbox starts a new box; the workspace was kept throughout.
  expect(fs.existsSync(ws)).toBe(true);
  const again = await open(o);
  expect((await again.run(['true'])).exitCode).toBe(0);
  expect(readState(name).pid1).not.toEqual(state.pid1);
  await again.destroy();
});

test('a call past its timeout is killed, its process tree with it, and the box goes on', async () => {
  const name = boxName();
  const sb = await open(persistOpts(name, makeTempDir()));
  const before = await pidNamespace(sb);
  const t = await sb.run(['sh', '-c', 'sleep 300 & sleep 301'], { timeoutS: 1 });
  expect(t.fault && t.fault.type).toBe('timeout');
  expect(t.exitCode).toBe(137);
  const count = `import os
n = 0
for p in os.listdir('/proc'):
    try:
        if p.isdigit() and open(f'/proc/{p}/cmdline', 'rb').read().startswith(b'sleep\\x0030'):
            n += 1
    except OSError:
        pass
print(n)`;
  expect((await sb.runCode(count)).stdout).toBe('0\n');
  expect(await pidNamespace(sb)).toBe(before);
  const ok = await sb.run(['sh', '-c', 'echo fine; exit 4']);
  expect(ok).toMatchObject({ stdout: 'fine\n', exitCode: 4 });
  expect(ok.fault).toBeFalsy();
  await sb.destroy();
});

test('a resident call streams, caps its output and reports faults as a fresh box does', async () => {
  const name = boxName();
  const chunks = [];
  const sb = await open(persistOpts(name, makeTempDir(), { maxOutputBytes: 1000, memoryMb: 64, onStdout: (c) => chunks.push(c.toString()) }));
  const before = await pidNamespace(sb);
  chunks.length = 0;
  const big = await sb.run(['sh', '-c', 'echo first; yes x | head -c 100000']);
  expect(big.stdout.length).toBe(1000);
  expect(big.truncated).toBe(true);
  expect(chunks.join('').startsWith('first\n')).toBe(true);
  const missing = await sb.run(['no-such-program-here']);
  expect(missing.fault && missing.fault.type).toBe('exec_failed');
  expect(missing.exitCode).toBe(127);
  const err = await sb.runCode('raise ValueError("boom")');
  expect(err.exitCode).not.toBe(0);
  expect(err.codeStderr).toMatch(/ValueError: boom/);
  expect(err.fault).toBeNull();
  if (isRoot) {
    // The box's memory cgroup is shared by its calls: the one that blows it is the one killed.
    const oom = await sb.runCode('x = bytearray(512 * 1024 * 1024)\nprint(len(x))');
    expect(oom.fault && oom.fault.type).toBe('oom');
  }
  expect(await pidNamespace(sb)).toBe(before);
  const ok = await sb.run(['sh', '-c', 'echo still-here']);
  expect(ok.stdout).toBe('still-here\n');
  await sb.destroy();
});

test('the box outlives its killed owner and ends at its TTL, leaving nothing behind', async () => {
  const name = boxName();
  const ws = makeTempDir();
  const o = persistOpts(name, ws, { persistTtlS: 5 });
  const { child, ready, err } = await startNodeUntilReady(
    nodeScript(o, `await sb.open(); await sb.run(['true']); console.log('ready'); await new Promise(() => {});`)
  );
  expect({ ready, err }).toEqual({ ready: true, err: '' });
  const state = readState(name);
  child.kill('SIGKILL');
  await new Promise((r) => child.on('exit', r));
  expect(state).not.toBeNull();
  // Polled with a generous bound, not timed: the TTL is kern's, the owner is gone.
  const gone = await waitFor(
    () => readState(name) === null && !isAlive(state.pid1.pid) && !isAlive(state.monitor.pid) && cgroupLeaves(state.monitor.pid).length === 0,
    60000,
    200
  );
  expect(gone).toBe(true);
  expect(fs.existsSync(ws)).toBe(true);
  const fresh = await open(o);
  expect((await fresh.run(['true'])).exitCode).toBe(0);
  expect(readState(name).pid1).not.toEqual(state.pid1);
  await fresh.destroy();
});

test('a stale state file naming a live but unrelated process is not mistaken for the box', async () => {
  const name = boxName();
  const ws = makeTempDir();
  const stat = fs.readFileSync('/proc/self/stat', 'utf8');
  const start = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
  const me = { pid: process.pid, start: start + 1 };
  fs.mkdirSync(STATE_DIR, { recursive: true, mode: 0o700 });
  const forged = {
    name,
    pid1: me,
    monitor: me,
    posture_hash: 'x',
    posture: {},
    workspace: ws,
    created_unix_ms: Date.now(),
    deadline_unix_ms: Date.now() + 3600000,
    spec: {
      root: { kind: 'host' },
      workspace: ws,
      workspace_target: '/workspace',
      tmpfs: [],
      limits: { memory_bytes: null, pids: null, cpus: null, enforce: false },
      timeout_ms: 1000,
      argv: [],
      env: [],
      hostname: 'kern',
    },
    rlimits: {},
    cgroup_ns: false,
    ns_fds: [],
  };
  fs.writeFileSync(statePath(name), JSON.stringify(forged), { mode: 0o600 });
  expect(kernCli(['ps']).stdout).not.toContain(name);
  expect(kernCli(['exec', name, '--', 'true']).code).toBe(125);
  const sb = await open(persistOpts(name, ws));
  expect((await sb.run(['true'])).exitCode).toBe(0);
  const state = readState(name);
  expect(state.pid1.pid).not.toBe(process.pid);
  expect(isAlive(process.pid)).toBe(true);
  await sb.destroy();
});

test('kern exec, kern ps and kern stop from a terminal', async () => {
  const name = boxName();
  const ws = makeTempDir();
  const sb = await open(persistOpts(name, ws));
  await sb.run(['sh', '-c', 'echo from-api > /tmp/cli']);
  const r = kernCli(['exec', name, '--', 'sh', '-c', 'cat /tmp/cli; pwd; echo err >&2; exit 3']);
  expect(r).toMatchObject({ code: 3, stdout: 'from-api\n/workspace\n' });
  expect(r.stderr).toContain('err');
  const t = kernCli(['exec', name, '--timeout', '1', '--', 'sleep', '30']);
  expect(t.code).toBe(137);
  expect(t.stderr).toMatch(/fault timeout/);
  if (isRoot) {
    // The image's accounts, as the `user` option.
    expect(kernCli(['exec', name, '-u', 'nobody', '--', 'id', '-un']).stdout).toBe('nobody\n');
  }
  const ps = kernCli(['ps']);
  expect(ps.code).toBe(0);
  expect(ps.stdout).toMatch(new RegExp(`^${name}\\s+\\d+\\s+\\d+s\\s+\\d+s\\s+${ws}$`, 'm'));
  const state = readState(name);
  expect(kernCli(['stop', name])).toMatchObject({ code: 0, stdout: `stopped ${name}\n` });
  expect(readState(name)).toBeNull();
  expect(isAlive(state.monitor.pid)).toBe(false);
  expect(kernCli(['stop', name])).toMatchObject({ code: 0 });
  expect(kernCli(['ps']).stdout).not.toContain(name);
  expect(kernCli(['exec', name, '--', 'true']).code).toBe(125);
  await expectSandboxError(() => sb.run(['true']), SandboxError, /was destroyed/);
});

test('a resident box keeps its workspaceMount: calls start there, another mount is another posture', async () => {
  const name = boxName();
  const ws = makeTempDir();
  const sb = await open(persistOpts(name, ws, { workspaceMount: '/home/user' }));
  const r = await sb.run(['sh', '-c', 'pwd; echo r > f']);
  expect(r.stdout).toBe('/home/user\n');
  expect(fs.readFileSync(path.join(ws, 'f'), 'utf8')).toBe('r\n');
  fs.mkdirSync(path.join(ws, 'sub'));
  expect((await sb.run(['pwd'], { cwd: 'sub' })).stdout).toBe('/home/user/sub\n');
  await expectSandboxError(
    () => new Sandbox(persistOpts(name, ws)).open(),
    SandboxError,
    /another posture/,
    /workspaceMount \(box: \/home\/user, here: unset\)/
  );
  await sb.destroy();
});

test('option combinations that cannot work are refused', async () => {
  const ws = makeTempDir();
  const bad = [
    [{ persist: true, workspace: ws }, /needs a `name`/],
    [{ persist: true, name: 'x1' }, /needs a `workspace`/],
    [{ name: 'x1' }, /only used with `persist: true`/],
    [{ persistTtlS: 5 }, /only used with `persist: true`/],
    [{ persist: true, name: '../etc', workspace: ws }, /not a valid sandbox name/],
    [{ persist: true, name: 'x1', workspace: ws, persistTtlS: -1 }, /persistTtlS/],
    [{ persist: true, name: 'x1', workspace: ws, prewarm: 1 }, /prewarm/],
    [{ persist: true, name: 'x1', workspace: ws, capDrop: ['SETFCAP'] }, /SYS_ADMIN/],
    [{ persist: true, name: 'x1', workspace: ws, pycCache: true }, /pycCache/],
    [{ persist: true, name: 'x1', workspace: ws, egressAllow: ['example.com'] }, /egressAllow/],
  ];
  for (const [o, re] of bad) {
    await expectSandboxError(() => new Sandbox({ image: rootfs, ...o }).open(), SandboxError, re);
  }
  const name = boxName();
  const sb = await open(persistOpts(name, ws));
  await expectSandboxError(() => sb.kernel(), SandboxError, /kernel\(\) is not available with `persist`/);
  await sb.destroy();
  // Without persist, destroy() has nothing to stop.
  await new Sandbox({ image: rootfs }).destroy();
});
