'use strict';
// Shared helpers for the kern-sandbox Jest suite. No mocks: everything here looks at the real host.

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { spawn } = require('child_process');

/** The Debian bookworm test rootfs built by scripts/build-test-rootfs.sh. */
const ROOTFS = process.env.KERN_TEST_ROOTFS || '/var/cache/kern-sandbox-test/rootfs-bookworm';
const ROOTFS_STAMP = path.join(ROOTFS, '.kern-test-rootfs');
const isRoot = process.getuid() === 0;
/** Whether this run asserts the memory/pids/cpu caps as cgroup-enforced: as root, and wherever
 * KERN_TEST_REQUIRE_ENFORCED_CAPS=1 says a rootless run has a delegated cgroup to put them in
 * (the cgroup-v2 guest's rootless run, scripts/test-cgv2.sh). There the tests that would accept
 * the rlimit fallback, or skip, assert enforcement instead. */
const capsEnforced = isRoot || process.env.KERN_TEST_REQUIRE_ENFORCED_CAPS === '1';

function rootfsReady() {
  return fs.existsSync(ROOTFS_STAMP);
}

/** Throws a clear message (instead of a cascade of odd failures) when the test image is missing. */
function requireRootfs() {
  if (!rootfsReady()) {
    throw new Error(
      `test rootfs missing: ${ROOTFS_STAMP} not found. Build it with scripts/build-test-rootfs.sh ` +
        '(or point KERN_TEST_ROOTFS at one).'
    );
  }
  return ROOTFS;
}

/** The most a box may keep: every capability, less SETFCAP when run as root (kern refuses that:
 * a file capability box root sets in the workspace would be one the host honours). */
const KEEP_ALL_CAPS = isRoot ? ['SETFCAP'] : [];

/** The warning an unprivileged run adds on cgroup v1 for each cap that is best-effort there. */
const BEST_EFFORT = /^warning: (memory|pids|cpu) cap .* is best-effort/;

/** A result's runtime notes less the best-effort warnings, so one expectation holds root and
 * rootless. */
function notesOf(r) {
  return r.runtimeNotes.filter((n) => !BEST_EFFORT.test(n));
}

/** A result's stderr lines less the best-effort warnings (they open a box's first output). */
function stderrLinesOf(r) {
  return r.stderr.split('\n').filter((l) => l && !BEST_EFFORT.test(l));
}

/** Runs `code` as a cell of `kernel`, expects no error and no stderr (but the best-effort
 * warnings), and gives its stdout. */
async function cellStdout(kernel, code) {
  const r = await kernel.runCode(code);
  expect({ error: r.error && `${r.error.name}: ${r.error.value}`, stderr: stderrLinesOf(r) }).toEqual({ error: null, stderr: [] });
  return r.stdout;
}

/** Sandbox options on the test image, plus overrides. */
function opts(extra = {}) {
  return { image: ROOTFS, ...extra };
}

/** A name nobody else on the host uses: safe as a canary file name, env value or process marker. */
function uniqueName(prefix = 'kerncanary') {
  return `${prefix}${process.pid}x${crypto.randomBytes(6).toString('hex')}`;
}

function readProcFile(pid, name) {
  try {
    return fs.readFileSync(`/proc/${pid}/${name}`);
  } catch {
    return null;
  }
}

function listPids() {
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number);
}

/** Host processes (any namespace: the host /proc sees them all) whose cmdline contains `marker`. */
function hostProcessesMatching(marker) {
  const out = [];
  for (const pid of listPids()) {
    if (pid === process.pid) continue;
    const raw = readProcFile(pid, 'cmdline');
    if (!raw || raw.length === 0) continue;
    const cmdline = raw.toString('utf8').split('\0').join(' ').trim();
    if (cmdline.includes(marker)) out.push({ pid, cmdline });
  }
  return out;
}

/** Parsed /proc/<pid>/stat: { pid, comm, state, ppid }, or null if the process is gone. */
function procStat(pid) {
  const raw = readProcFile(pid, 'stat');
  if (!raw) return null;
  const s = raw.toString();
  const open = s.indexOf('(');
  const close = s.lastIndexOf(')');
  const rest = s.slice(close + 2).split(' ');
  return { pid, comm: s.slice(open + 1, close), state: rest[0], ppid: Number(rest[1]) };
}

/** The members of `pids` whose parent is not one of them: the roots of a process tree (one that
 * ended since `pids` was listed is none). */
function treeRoots(pids) {
  return pids.filter((p) => {
    const st = procStat(p);
    return !!st && !pids.includes(st.ppid);
  });
}

/** Whether `pid` descends from this process (the boxes of its Sandboxes do): another Jest
 * worker's boxes, beside it, do not. */
function ourDescendant(pid) {
  for (let p = pid, n = 0; p > 1 && n < 64; n++) {
    if (p === process.pid) return true;
    const st = procStat(p);
    if (!st) return false;
    p = st.ppid;
  }
  return false;
}

/** Direct children of `ppid` (default: this process) whose comm is `comm`. */
function childrenNamed(comm, ppid = process.pid) {
  const out = [];
  for (const pid of listPids()) {
    const st = procStat(pid);
    if (st && st.ppid === ppid && st.comm === comm) out.push(pid);
  }
  return out;
}

function isAlive(pid) {
  const st = procStat(pid);
  return !!st && st.state !== 'Z' && st.state !== 'X';
}

/** This process's `kern` children, but those in `others`, that wait with no box under them
 * yet: a Sandbox's ready runtimes (`others`: an earlier suite's of the same Jest worker). */
function readyKerns(others = new Set()) {
  const pids = listPids();
  const hasLiveChild = (pid) =>
    pids.some((p) => {
      const st = procStat(p);
      return !!st && st.ppid === pid && st.state !== 'Z';
    });
  return childrenNamed('kern').filter((pid) => !others.has(pid) && isAlive(pid) && !hasLiveChild(pid));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `pred` until true or `ms` elapse; returns the last value. A grace period, not a timing assertion. */
async function waitFor(pred, ms = 5000, step = 100) {
  const end = Date.now() + ms;
  let v = pred();
  // A promise is truthy: an async predicate would pass at once, whatever it resolves to.
  if (v && typeof v.then === 'function') throw new Error('waitFor takes a synchronous predicate');
  while (!v && Date.now() < end) {
    await sleep(step);
    v = pred();
  }
  return v;
}

/**
 * Starts a long-lived HOST process whose cmdline carries `marker` (a `sh -c` that stays alive because
 * its command is not a single exec). Returns { pid, kill() }.
 */
function startHostCanaryProcess(marker, seconds = 300) {
  const child = spawn('/bin/sh', ['-c', `sleep ${seconds}; echo ${marker} >/dev/null`], {
    detached: true,
    stdio: 'ignore',
  });
  child.unref();
  return {
    pid: child.pid,
    kill() {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    },
  };
}

/** Creates a host canary file with known content in `dir` (default os.tmpdir()). */
function makeCanaryFile(dir = os.tmpdir(), content) {
  const name = uniqueName('kerncanaryfile');
  const file = path.join(dir, name);
  const body = content || `canary ${name}\n`;
  fs.writeFileSync(file, body);
  return {
    name,
    file,
    body,
    intact() {
      try {
        return fs.readFileSync(file, 'utf8') === body;
      } catch {
        return false;
      }
    },
    remove() {
      fs.rmSync(file, { force: true });
    },
  };
}

/** Makes a host directory for a user-provided workspace; returns its absolute path. */
function makeTempDir(prefix = 'kern-test-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Temp dirs made through `temp(prefix)` are all removed by `removeAll()` (call it in afterAll). */
/** Gives the owner write access to every directory under `dir` (kern seals its pyc cache 0555), so
 * an unprivileged run can delete it. */
function unseal(dir) {
  if (!fs.existsSync(dir)) return;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) unseal(path.join(dir, e.name));
  }
  fs.chmodSync(dir, 0o755);
}

function tempDirs() {
  const made = [];
  return {
    temp(prefix) {
      const d = makeTempDir(prefix);
      made.push(d);
      return d;
    },
    removeAll() {
      for (const d of made.splice(0)) fs.rmSync(d, { recursive: true, force: true });
    },
  };
}

/**
 * The race the host file API must survive: resets `d` in the workspace `ws` to a real directory
 * holding `d/f` (content `inside`), then starts, in `box` (a Sandbox on `ws`), a loop that for
 * `seconds` keeps swapping `d` for a symlink to the host directory `raceDir` and back. Resolves
 * once the loop runs, to `{ box, isDone }`: the call's promise (stdout "looped\n") and whether it
 * has ended.
 */
async function startSwapLoop(box, ws, raceDir, { seconds, timeoutS, inside }) {
  // A loop killed mid-iteration may have left d.real (or d as a symlink) behind.
  for (const n of ['d', 'd.real', 'started']) fs.rmSync(path.join(ws, n), { recursive: true, force: true });
  fs.mkdirSync(path.join(ws, 'd'));
  fs.writeFileSync(path.join(ws, 'd', 'f'), inside);
  let done = false;
  const call = box
    .run(
      [
        'sh',
        '-c',
        `cd /workspace && : > started && timeout ${seconds} sh -c ` +
          // -T: never move d *into* a d.real left behind.
          `'while :; do mv -T d d.real; ln -s ${raceDir} d; rm d; mv -T d.real d; done' 2>/dev/null; echo looped`,
      ],
      { timeoutS }
    )
    .finally(() => {
      done = true;
    });
  if (!(await waitFor(() => fs.existsSync(path.join(ws, 'started')), 20000))) {
    throw new Error('the swapping loop did not start within 20 s');
  }
  return { box: call, isDone: () => done };
}

/**
 * Walks `root` at most `depth` levels deep, skipping unreadable directories: `visit(entry, path)`
 * sees every entry and returns true to descend into it.
 */
function walkTree(root, depth, visit) {
  const walk = (dir, d) => {
    let entries;
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (visit(e, p) && d > 0) walk(p, d - 1);
    }
  };
  walk(root, depth);
}

/** Finds files named `name` under `root`, at most `depth` levels deep (skips unreadable dirs). */
function findFileNamed(root, name, depth = 3) {
  const hits = [];
  walkTree(root, depth, (e, p) => {
    if (e.name === name) hits.push(p);
    return e.isDirectory() && !e.isSymbolicLink();
  });
  return hits;
}

/**
 * Asserts that `fn()` (sync throw or async rejection) fails with a SandboxError whose message
 * matches every regex in `patterns`. Returns the error.
 */
async function expectSandboxError(fn, SandboxError, ...patterns) {
  let err = null;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  if (!err) throw new Error(`expected a SandboxError matching ${patterns.join(', ')}, got success`);
  if (!(err instanceof SandboxError)) {
    throw new Error(`expected a SandboxError, got ${err && err.constructor && err.constructor.name}: ${err && err.message}`);
  }
  for (const p of patterns) {
    if (!p.test(err.message)) throw new Error(`SandboxError message ${JSON.stringify(err.message)} does not match ${p}`);
  }
  return err;
}

/** Opens a Sandbox with `o`, closing it again if it opened: the option-error probe. */
async function openAndClose(Sandbox, o) {
  const sb = new Sandbox(o);
  try {
    await sb.open();
  } finally {
    try {
      await sb.close();
    } catch {
      /* close of a never-opened sandbox may legitimately complain */
    }
  }
}

/**
 * Points KERN_BIN (read by the Sandbox constructor) at a wrapper of kern that leaves a mark on
 * the host whenever a kern runtime starts. `started()` says whether one did; `restore()` undoes it.
 */
function markingKern() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-mark-'));
  const mark = path.join(dir, 'started');
  const wrapper = path.join(dir, 'kern');
  const saved = process.env.KERN_BIN;
  const real = saved || path.join(__dirname, '..', 'kern');
  fs.writeFileSync(wrapper, `#!/bin/sh\n: > '${mark}'\nexec '${real}' "$@"\n`, { mode: 0o755 });
  process.env.KERN_BIN = wrapper;
  return {
    started: () => fs.existsSync(mark),
    restore() {
      if (saved === undefined) delete process.env.KERN_BIN;
      else process.env.KERN_BIN = saved;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Expects opening a Sandbox with `o` to fail with a SandboxError matching `patterns` before any
 * box, or even a kern runtime, started (see markingKern). Returns the error.
 */
async function expectRefusedBeforeAnyBox(Sandbox, SandboxError, o, ...patterns) {
  const kern = markingKern();
  try {
    const err = await expectSandboxError(() => openAndClose(Sandbox, o), SandboxError, ...patterns);
    if (kern.started()) throw new Error(`a kern runtime started before the refusal: ${err.message}`);
    return err;
  } finally {
    kern.restore();
  }
}

/** Reads the memory/pids/cpu caps of the cgroup `pid` is in, from the host side (v1 or v2). */
function hostCgroupCaps(pid) {
  const lines = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
  const v1 = {};
  let v2 = null;
  for (const l of lines) {
    const [, ctrls, p] = l.match(/^\d+:([^:]*):(.*)$/);
    if (ctrls === '') v2 = p;
    for (const c of ctrls.split(',')) v1[c] = p;
  }
  const rd = (f) => fs.readFileSync(f, 'utf8').trim();
  if (fs.existsSync('/sys/fs/cgroup/memory/memory.limit_in_bytes')) {
    const quota = Number(rd(`/sys/fs/cgroup/cpu${v1.cpu}/cpu.cfs_quota_us`));
    const period = Number(rd(`/sys/fs/cgroup/cpu${v1.cpu}/cpu.cfs_period_us`));
    return {
      memory: Number(rd(`/sys/fs/cgroup/memory${v1.memory}/memory.limit_in_bytes`)),
      pids: rd(`/sys/fs/cgroup/pids${v1.pids}/pids.max`),
      cpus: quota > 0 ? quota / period : null,
    };
  }
  const [q, per] = rd(`/sys/fs/cgroup${v2}/cpu.max`).split(' ');
  return {
    memory: Number(rd(`/sys/fs/cgroup${v2}/memory.max`)),
    pids: rd(`/sys/fs/cgroup${v2}/pids.max`),
    cpus: q === 'max' ? null : Number(q) / Number(per),
  };
}

/** A compact description of a result for failure messages. */
function describeResult(r) {
  if (!r) return String(r);
  return JSON.stringify(
    {
      exitCode: r.exitCode,
      fault: r.fault,
      stdout: String(r.stdout).slice(0, 2000),
      stderr: String(r.stderr).slice(0, 2000),
      truncated: r.truncated,
    },
    null,
    1
  );
}

/** Compact view of a result whose diff shows stdout/stderr when an assertion on it fails. */
function summary(r) {
  return {
    exitCode: r.exitCode,
    fault: r.fault,
    stdout: String(r.stdout).slice(0, 3000),
    stderr: String(r.stderr).slice(0, 3000),
  };
}

/** Asserts the call exited 0 with no fault, printing stdout/stderr if not. */
function expectOk(r) {
  const s = summary(r);
  // toEqual on the whole summary, so a failure prints stdout and stderr too.
  if (s.exitCode !== 0 || s.fault !== null) expect(s).toEqual({ ...s, exitCode: 0, fault: null });
  expect(r.success).toBe(true);
}

/**
 * Opens one Sandbox on the test rootfs (plus `extra` options) for the enclosing test file or
 * describe block, and closes it afterwards. Returns a handle that forwards to the open Sandbox,
 * so tests call `sb.runCode(...)` as on the Sandbox itself.
 */
function sharedSandbox(extra = {}) {
  const { Sandbox } = require('..');
  let sb = null;
  beforeAll(async () => {
    requireRootfs();
    sb = await new Sandbox(opts(extra)).open();
  });
  afterAll(async () => {
    if (sb) await sb.close();
  });
  return lateBound(() => sb, 'sharedSandbox');
}

/** A handle whose property reads go to the object `get()` returns once a beforeAll has made it
 * (methods bound to it), so a describe block can name it before it exists. */
function lateBound(get, what) {
  return new Proxy(
    {},
    {
      get(_target, key) {
        const obj = get();
        if (!obj) throw new Error(`${what} used outside its tests (before beforeAll ran)`);
        const v = obj[key];
        return typeof v === 'function' ? v.bind(obj) : v;
      },
    }
  );
}

/** Starts `node -e script` and waits until it prints `ready` (or exits first): its child
 * process, whether it got ready, and what it wrote to stderr by then. */
async function startNodeUntilReady(script) {
  const child = require('child_process').spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'], env: process.env });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const ready = await new Promise((resolve) => {
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('ready')) resolve(true);
    });
    child.on('exit', () => resolve(false));
  });
  return { child, ready, err };
}

/** Opens a Sandbox with `opts(sbOpts)` and a kernel of it with `kOpts`, runs `fn(kernel, sandbox)`,
 * and closes both whatever happens. */
async function withKernel(sbOpts, kOpts, fn) {
  const { Sandbox } = require('..');
  const sb = await new Sandbox(opts(sbOpts)).open();
  try {
    const k = await sb.kernel(kOpts);
    try {
      return await fn(k, sb);
    } finally {
      await k.close();
    }
  } finally {
    await sb.close();
  }
}

module.exports = {
  stderrLinesOf,
  cellStdout,
  KEEP_ALL_CAPS,
  notesOf,
  unseal,
  sharedSandbox,
  lateBound,
  withKernel,
  startNodeUntilReady,
  summary,
  expectOk,
  ROOTFS,
  ROOTFS_STAMP,
  isRoot,
  capsEnforced,
  rootfsReady,
  requireRootfs,
  opts,
  uniqueName,
  listPids,
  walkTree,
  hostProcessesMatching,
  procStat,
  treeRoots,
  ourDescendant,
  childrenNamed,
  readyKerns,
  isAlive,
  sleep,
  waitFor,
  startHostCanaryProcess,
  makeCanaryFile,
  makeTempDir,
  tempDirs,
  startSwapLoop,
  findFileNamed,
  expectSandboxError,
  openAndClose,
  markingKern,
  expectRefusedBeforeAnyBox,
  describeResult,
  hostCgroupCaps,
};
