'use strict';
// What the benchmark scripts share: argument parsing, statistics, and writing a generated
// section of BENCHMARKS.md between markers (prose outside them is kept).

const { execFileSync, spawn } = require('child_process');
const fs = require('fs');
const path = require('path');

/** Where the benchmarks look: the repository, its built `kern`, BENCHMARKS.md, the test rootfs. */
const REPO = path.resolve(__dirname, '..');
const KERN = path.join(REPO, 'kern');
const OUT = path.join(REPO, 'BENCHMARKS.md');
const ROOTFS = process.env.KERN_TEST_ROOTFS || '/var/cache/kern-sandbox-test/rootfs-bookworm';

/** `die(msg)` for a script named `name`. */
function dieFor(name) {
  return (msg) => {
    console.error(`${name}: ${msg}`);
    process.exit(1);
  };
}

function parsePositiveInt(value, dflt, name, die) {
  if (value === undefined || value === '') return dflt;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) die(`${name} must be a positive integer, got ${JSON.stringify(value)}`);
  return n;
}

function which(cmd) {
  for (const dir of (process.env.PATH || '/usr/bin:/bin').split(':')) {
    const p = path.join(dir || '.', cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {}
  }
  return null;
}

function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[idx];
}

function median(sorted) {
  const n = sorted.length;
  if (!n) return NaN;
  return n % 2 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/** Replaces the text between `start` and `end` in `file` with `block` (which holds both), or
 * appends it; `fresh` is the file's text when it does not exist yet. */
function writeSection(file, start, end, block, fresh = '# Benchmarks\n\n') {
  let doc;
  try {
    doc = fs.readFileSync(file, 'utf8');
  } catch {
    doc = fresh;
  }
  const a = doc.indexOf(start);
  const b = doc.indexOf(end);
  if (a !== -1 && b > a) doc = doc.slice(0, a) + block + doc.slice(b + end.length);
  else doc = doc.replace(/\n*$/, '\n\n') + block + '\n';
  fs.writeFileSync(file, doc);
}

/** The built package (addon + `kern`), or a `die` that says to build it. */
function requireBuilt(repo, kern, die) {
  try {
    fs.accessSync(kern, fs.constants.X_OK);
  } catch {
    die(`kern runtime not found at ${kern}. Build it with: npm run build`);
  }
  let api;
  try {
    api = require(repo);
  } catch (e) {
    die(`cannot load the kern-sandbox addon (${e.message.split('\n')[0]}). Build it with: npm run build`);
  }
  if (typeof api.Sandbox !== 'function') die('the package does not export Sandbox; is the build complete?');
  return api;
}

// Spawns argv (`opts`: cwd, env), drains its output, resolves with elapsed ms once it has exited and its pipes closed.
// Rejects (with its stderr) when it exits non-zero, so a broken case never passes for a fast one.
function timeSpawn(argv, opts = {}) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], cwd: opts.cwd, env: opts.env });
    let err = '';
    child.stdout.on('data', () => {});
    child.stderr.on('data', (d) => {
      if (err.length < 4000) err += d;
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (code === 0) resolve(ms);
      else reject(new Error(`exit ${code ?? signal}: ${err.trim().split('\n').slice(-3).join(' | ') || '(no stderr)'}`));
    });
  });
}

/** bubblewrap with the isolation a box has (user, pid, net, ipc, uts and cgroup namespaces; the
 * rootfs read-only, /proc, /dev, a /tmp tmpfs, the workspace `ws` bound at `wsTarget`). */
function bwrapArgs(rootfs, ws, wsTarget, cmd) {
  return ['bwrap', '--unshare-user', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts',
    '--unshare-cgroup-try', '--die-with-parent', '--new-session',
    '--ro-bind', rootfs, '/', '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp',
    '--bind', ws, wsTarget, '--chdir', wsTarget, '--cap-drop', 'ALL', '--', ...cmd];
}

/** A command's trimmed stdout, or '' when it can't run or fails (for version strings and facts). */
function sh(cmd, args) {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return '';
  }
}

/** A file's text, or null when it is gone or not readable (a /proc entry of a process that ended). */
function readText(file) {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

/** pid -> {comm, state, ppid, cpu (utime + stime, ticks), start} for every process visible now. */
function readProcs() {
  const procs = new Map();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readText(`/proc/${name}/stat`);
    if (!stat) continue;
    const close = stat.lastIndexOf(')');
    const f = stat.slice(close + 2).split(' '); // f[0] is field 3 (state)
    procs.set(Number(name), {
      comm: stat.slice(stat.indexOf('(') + 1, close),
      state: f[0],
      ppid: Number(f[1]),
      cpu: Number(f[11]) + Number(f[12]),
      start: f[19],
    });
  }
  return procs;
}

/** Whether `pid` is this process or one of its descendants, in a `readProcs()` map. */
function isOurs(procs, pid) {
  for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
    if (p === process.pid) return true;
    const e = procs.get(p);
    if (!e) return false;
    p = e.ppid;
  }
  return false;
}

/** Which build ./kern is (scripts/install-kern.js copies it from target/<triple>/<profile>/):
 * `{ key: 'release' | 'dev' | 'unknown', label }`. Each build's figures have their own sections. */
function builtProfile() {
  try {
    const k = fs.readFileSync(KERN);
    for (const [dir, key, label] of [['release', 'release', 'release build (`npm run build`)'], ['debug', 'dev', 'dev build (`npm run build:debug`: our crate unoptimised)']]) {
      const built = path.join(REPO, 'target', `${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-unknown-linux-gnu`, dir, 'kern');
      if (fs.existsSync(built) && fs.readFileSync(built).equals(k)) return { key, label };
    }
  } catch {}
  return { key: 'unknown', label: 'unknown build' };
}

/** Other work on a shared machine disturbs the numbers, so a report says how much there was.
 * `sample()` between rounds (never inside a timed call) adds the CPU time of processes that are
 * neither this process, its descendants or its ancestors, nor kernel threads; processes that
 * start and end between two samples are missed, so `note()` gives a lower bound. */
function otherWork() {
  const CLK_TCK = Number(sh('getconf', ['CLK_TCK'])) || 100;
  const others = { cpu: new Map(), last: null, t0: Date.now() };
  function sample() {
    const procs = readProcs();
    // This process's ancestors (npm, the shell) only wait for it.
    const ancestors = new Set();
    for (let p = procs.get(process.pid)?.ppid, hops = 0; p > 1 && hops < 64; hops++) {
      ancestors.add(p);
      p = procs.get(p)?.ppid;
    }
    if (others.last) {
      for (const [pid, e] of procs) {
        if (pid === 2 || e.ppid === 2 || isOurs(procs, pid) || ancestors.has(pid)) continue;
        const before = others.last.get(pid);
        const used = before && before.start === e.start ? e.cpu - before.cpu : e.cpu;
        if (used > 0) others.cpu.set(e.comm, (others.cpu.get(e.comm) || 0) + used / CLK_TCK);
      }
    }
    others.last = procs;
  }
  function note() {
    const wall = (Date.now() - others.t0) / 1000;
    const total = [...others.cpu.values()].reduce((a, b) => a + b, 0);
    const top = [...others.cpu].sort((a, b) => b[1] - a[1]).slice(0, 4).map(([c, v]) => `${c} ${v.toFixed(1)} s`).join(', ');
    if (total < 0.01 * wall) return `no other busy process was seen during the run (${total.toFixed(1)} CPU-s outside this benchmark over ${Math.round(wall)} s, sampled between rounds)`;
    return `other work ran during this run: at least ${total.toFixed(1)} CPU-s outside this benchmark over ${Math.round(wall)} s of wall time (${top}); on ${require('os').cpus().length} CPU(s) that disturbs the numbers, rerun on an idle machine to be sure`;
  }
  return { sample, note };
}

/** What a benchmark opened (Sandboxes, kernels): push onto `opened`; `closeAll()` closes them
 * newest first, and so does SIGINT/SIGTERM/SIGHUP before exiting. */
function closeOnExit(log) {
  const opened = [];
  async function closeAll() {
    while (opened.length) {
      const x = opened.pop();
      try {
        await x.close();
      } catch (e) {
        log(`close failed: ${String(e.message || e).replace(/\s+/g, ' ').trim()}`);
      }
    }
  }
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.once(sig, () => {
      log(`${sig}: closing the sandboxes`);
      closeAll().finally(() => process.exit(130));
    });
  }
  return { opened, closeAll };
}

module.exports = {
  bwrapArgs,
  timeSpawn,
  REPO,
  KERN,
  OUT,
  ROOTFS,
  dieFor,
  parsePositiveInt,
  which,
  percentile,
  median,
  writeSection,
  requireBuilt,
  sh,
  readText,
  readProcs,
  isOurs,
  otherWork,
  closeOnExit,
  builtProfile,
};
