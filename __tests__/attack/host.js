'use strict';
// The host side of the attack suite: what "the host is untouched" means, checked for real.
//
//   const guard = await hostGuard();          // before any Sandbox of the file is opened
//   ... attacks ...
//   guard.assertUntouched();                  // after each attack (sandboxes may still be open)
//   await guard.assertNoLeaks();              // once every Sandbox of the file is closed
//   guard.cleanup();                          // afterAll
//
// assertUntouched: the canary files (a private watched dir, one in the host temp dir) keep their
// content, inode and mtime; the watched dir holds exactly what it held; nothing named with the
// guard's token appeared in the host temp dir, /, /etc or the home directory; the canary host
// process is alive; the host's own mount table (this process's mount namespace) is unchanged;
// the files passed in `files` (the kern binary, an image binary...) hash the same.
//
// assertNoLeaks: no descendant of this process remains that was not there at the start (kern
// monitors, box processes), no process carries the guard's token in its cmdline, and no cgroup
// leaf kern made for one of our boxes is left behind. kern names its leaves `box-<kern pid>-…`;
// only leaves whose kern pid was one of our descendants count (other test runs on this machine
// may make their own at the same time).

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { uniqueName, listPids, walkTree, makeCanaryFile, startHostCanaryProcess, isAlive, hostProcessesMatching, waitFor } = require('../helpers');

const REPO = path.resolve(__dirname, '..', '..');
/** The kern runtime binary the addon spawns (the host binary a CVE-2019-5736-style attack wants). */
const KERN_BIN = process.env.KERN_BIN || path.join(REPO, 'kern');

function ppidOf(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

function commOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}

/** pid -> comm of every live descendant of `root`. */
function descendants(root = process.pid) {
  const parent = new Map();
  for (const p of listPids()) parent.set(p, ppidOf(p));
  const out = new Map();
  for (const p of parent.keys()) {
    let q = parent.get(p);
    let hops = 0;
    while (q && q !== root && hops < 64) {
      q = parent.get(q);
      hops += 1;
    }
    if (q === root) {
      const st = (() => {
        try {
          return fs.readFileSync(`/proc/${p}/stat`, 'utf8');
        } catch {
          return '';
        }
      })();
      const state = st ? st.slice(st.lastIndexOf(')') + 2).split(' ')[0] : 'X';
      if (state !== 'Z' && state !== 'X') out.set(p, commOf(p));
    }
  }
  return out;
}

/** The cgroup-v2 guest's rig (scripts/test-cgv2.sh runs beside the rootless Jest run; the first
 * run on a machine builds the guest's image, whose debootstrap mounts /proc and /sys there). */
const RIG = `${process.env.CGV2_RIG_DIR || '/var/tmp/cgv2-rig'}/`;

/** This mount namespace's mounts as "mountpoint fstype source", sorted (other runs' netns binds
 * and the guest rig's mounts left out). */
function hostMounts() {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .trim()
    .split('\n')
    .map((l) => {
      const f = l.split(' ');
      const sep = f.indexOf('-');
      return `${f[4]} ${f[sep + 1]} ${f[sep + 2]}`;
    })
    .filter((m) => !/^\/(var\/)?run\/netns\//.test(m) && !m.startsWith(RIG))
    .sort();
}

/** Every `box-*` cgroup leaf under a `kern-sandbox` directory, v1 and v2. */
function kernCgroupLeaves() {
  const out = [];
  const roots = [];
  let ctrls = [];
  try {
    ctrls = fs.readdirSync('/sys/fs/cgroup');
  } catch {
    return out;
  }
  roots.push('/sys/fs/cgroup');
  for (const c of ctrls) roots.push(path.join('/sys/fs/cgroup', c));
  for (const r of roots) {
    // The leaf lives under the caller's own cgroup (v1) or at the top (v2): a few levels suffice.
    walkTree(r, 3, (e, p) => {
      if (!e.isDirectory()) return false;
      if (e.name !== 'kern-sandbox') return true;
      for (const leaf of fs.readdirSync(p, { withFileTypes: true })) {
        if (leaf.isDirectory() && leaf.name.startsWith('box-')) out.push(path.join(p, leaf.name));
      }
      return false;
    });
  }
  return [...new Set(out)].sort();
}

/** Identity and content of a file: inode, size, mtime, sha256 (null when missing). */
function fileState(p) {
  try {
    const st = fs.statSync(p);
    const sha = crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex');
    return { path: p, ino: st.ino, size: st.size, mtimeMs: st.mtimeMs, mode: st.mode, sha };
  } catch (e) {
    return { path: p, missing: e.code };
  }
}

function listing(dir) {
  try {
    return fs.readdirSync(dir).sort();
  } catch {
    return null;
  }
}

/** Names containing `token` in the host places an escaping write would most likely land. */
function tokenHits(token) {
  const hits = [];
  for (const d of [os.tmpdir(), '/', '/etc', '/var/tmp', os.homedir(), '/dev/shm']) {
    for (const n of listing(d) || []) if (n.includes(token)) hits.push(path.join(d, n));
  }
  return hits;
}

/**
 * Takes the "before" picture. `files`: more host files that must stay byte-identical (the kern
 * binary is always included). `watch`: more host directories whose listing must not change.
 */
async function hostGuard({ files = [], watch = [] } = {}) {
  const token = uniqueName('kernatk');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-attack-guard-'));
  const canary = makeCanaryFile(dir);
  const tmpCanary = makeCanaryFile(os.tmpdir());
  const proc = startHostCanaryProcess(token, 600);
  await waitFor(() => hostProcessesMatching(token).length > 0, 5000);
  const watched = [dir, ...watch];
  const fileList = [canary.file, tmpCanary.file, KERN_BIN, ...files];
  const before = {
    mounts: hostMounts(),
    leaves: new Set(kernCgroupLeaves()),
    descendants: new Set(descendants().keys()),
    listings: Object.fromEntries(watched.map((d) => [d, listing(d)])),
    files: fileList.map(fileState),
  };
  // Every kern this process starts is a descendant for a while (spares wait idle): remember them,
  // so a cgroup leaf named after one of them is known to be ours.
  const ourPids = new Set();
  const sample = () => {
    for (const [p, comm] of descendants()) if (comm === 'kern') ourPids.add(p);
  };
  sample();
  const timer = setInterval(sample, 100);
  timer.unref();

  const ours = (leaf) => {
    const m = /box-(\d+)-/.exec(path.basename(leaf));
    return !!m && ourPids.has(Number(m[1]));
  };

  return {
    token,
    dir,
    canary,
    tmpCanary,
    proc,
    kernBin: KERN_BIN,
    sample,
    /** Host files, dirs, process and mounts exactly as before. */
    assertUntouched() {
      sample();
      expect(fileList.map(fileState)).toEqual(before.files);
      expect(Object.fromEntries(watched.map((d) => [d, listing(d)]))).toEqual(before.listings);
      expect(tokenHits(token)).toEqual([]);
      expect({ canaryProcessAlive: isAlive(proc.pid) }).toEqual({ canaryProcessAlive: true });
      expect(hostMounts()).toEqual(before.mounts);
    },
    /** Nothing a box started is left: processes, token-marked processes, our cgroup leaves. */
    async assertNoLeaks() {
      sample();
      // The canary is `sh -c 'sleep …'`: its `sleep` may be forked after the "before" picture, so
      // the canary's whole subtree is left out, not only its pid.
      const extra = () => {
        const canaryTree = descendants(proc.pid);
        return [...descendants()].filter(([p]) => p !== proc.pid && !canaryTree.has(p) && !before.descendants.has(p));
      };
      await waitFor(() => extra().length === 0, 10000);
      expect(extra().map(([p, c]) => `${p} ${c}`)).toEqual([]);
      const marked = () => hostProcessesMatching(token).filter((p) => p.pid !== proc.pid);
      await waitFor(() => marked().length === 0, 5000);
      expect(marked()).toEqual([]);
      const leaked = () => kernCgroupLeaves().filter((l) => !before.leaves.has(l) && ours(l));
      await waitFor(() => leaked().length === 0, 10000);
      expect(leaked()).toEqual([]);
      expect(hostMounts()).toEqual(before.mounts);
    },
    /** How many kern processes this guard has seen (a sanity check that sampling works). */
    kernSeen() {
      sample();
      return ourPids.size;
    },
    cleanup() {
      clearInterval(timer);
      proc.kill();
      canary.remove();
      tmpCanary.remove();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Runs python `code` in `box` (a Sandbox or Kernel); the code prints one JSON document as its last
 * stdout line. Returns { r, j }: the result and the parsed JSON. Throws with the whole result if no
 * JSON came back, so a probe that broke never reads as "the attack failed".
 */
async function runJson(box, code, o = {}) {
  const r = await box.runCode(code, o);
  const lines = String(r.stdout).trim().split('\n');
  try {
    return { r, j: JSON.parse(lines[lines.length - 1]) };
  } catch {
    throw new Error(`probe printed no JSON: ${JSON.stringify({ exitCode: r.exitCode, fault: r.fault, stdout: String(r.stdout).slice(-2000), stderr: String(r.stderr).slice(-2000) })}`);
  }
}

/** Python prelude for probes: ctypes libc, errno names, and try_(f) -> "ok"/"ok:<v>" or the errno name. */
const PY_PRELUDE = [
  'import ctypes, ctypes.util, errno, json, os, socket, struct, sys',
  'libc = ctypes.CDLL(None, use_errno=True)',
  'libc.syscall.restype = ctypes.c_long',
  'def ename(n): return errno.errorcode.get(n, str(n))',
  'def sc(nr, *a):',
  '    ctypes.set_errno(0)',
  '    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])',
  '    return "ok" if r >= 0 else ename(ctypes.get_errno())',
  'def try_(f):',
  '    try:',
  '        v = f()',
  '        return "ok" if v is None else "ok:" + str(v)[:200]',
  '    except OSError as e:',
  '        return ename(e.errno) if e.errno else "OSError:" + str(e)[:100]',
  '    except Exception as e:',
  '        return type(e).__name__ + ":" + str(e)[:100]',
  '',
].join('\n');

/** The real process environment (Jest hands tests a copy; the addon and child processes see this one). */
const realEnv = require('vm').runInThisContext('process').env;

/**
 * The setup most attack files share: a host guard made before any Sandbox of the file, temp
 * dirs, and at the end no leaks. `suite.guard` is the guard once `beforeAll` has run.
 */
function guardedSuite() {
  const { requireRootfs, tempDirs } = require('../helpers');
  const suite = { guard: null, dirs: tempDirs() };
  beforeAll(async () => {
    requireRootfs();
    suite.guard = await hostGuard();
  });
  afterAll(async () => {
    await suite.guard.assertNoLeaks();
    suite.guard.cleanup();
    suite.dirs.removeAll();
  });
  return suite;
}

module.exports = {
  REPO,
  guardedSuite,
  KERN_BIN,
  hostGuard,
  descendants,
  hostMounts,
  kernCgroupLeaves,
  fileState,
  realEnv,
  runJson,
  PY_PRELUDE,
};
