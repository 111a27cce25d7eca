#!/usr/bin/env node
// Image benchmarks: what a cold `kern pull` costs next to skopeo (with and without a naive tar
// unpack), where that time goes, and what opening an already cached image costs next to a plain
// root filesystem directory and "host". One run, one machine, medians over N iterations.
//
//   node bench/images.js                          # BENCH_N = 5 cold pulls, BENCH_N_OPEN = 50 opens
//   BENCH_N=10 BENCH_N_OPEN=200 node bench/images.js
//
// Needs: `npm run build` (./kern and the addon), the test rootfs (scripts/build-test-rootfs.sh) and
// the test images (scripts/build-test-images.sh, run here through the harness's ensureImages()),
// Debian's docker-registry, skopeo, GNU tar, gzip, zstd, curl, openssl. Writes its section between
// the bench-images markers of BENCHMARKS.md (appended at the end when absent; nothing outside the
// markers is touched) and prints it. Measurements only: nothing here passes or fails on a number.
//
// Method:
// - A plain docker-registry (no auth) from __tests__/support/registry.js on loopback, with the
//   `rootfs` OCI layout pushed as kern/test:oci (2 layers: 89 MB gzip + a 225-byte zstd one). Its
//   storage is on this machine's disk and warm in the page cache: "download" here is loopback HTTP
//   from a warm cache, no real network.
// - Cold pull cases run interleaved round-robin (one of each, then the next round), each into a
//   fresh empty directory (KERN_HOME, skopeo destination, tar root) created before the clock starts
//   and deleted after it stops, followed by `sync` so one case's writeback is not paid by the next
//   (kern syncs what it writes, so it would be). One untimed warm-up round first, which also checks
//   that every case produces what it should; a case that does not is reported instead of timed.
// - skopeo runs with an empty blob-info cache of its own every time, as the test harness does it:
//   for root, in a private mount namespace (unshare -m) with a temp dir bind-mounted over
//   /var/lib/containers/cache. The unshare + mount cost (a few ms) is inside the skopeo timings.
// - Components of a pull are timed alone, interleaved the same way, on the registry's copy of the
//   big layer blob and on its uncompressed tar (both warm in the page cache).
// - Cached-open cases (BENCH_N_OPEN) are interleaved round-robin after BENCH_WARMUP untimed
//   warm-ups, timed from just before the call to its completion with process.hrtime.bigint();
//   spawned cases resolve on 'close' (exited, output drained), as in bench/run.js.
'use strict';

const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, which, percentile, median, writeSection, requireBuilt, readProcs, isOurs } = require('./common');

const die = dieFor('bench-images');
const parsePositiveInt = (value, dflt, name) => positiveInt(value, dflt, name, die);
const zlib = require('zlib');
const { pipeline } = require('stream/promises');
const { Writable } = require('stream');

const N = parsePositiveInt(process.env.BENCH_N, 5, 'BENCH_N');
const N_OPEN = parsePositiveInt(process.env.BENCH_N_OPEN, 50, 'BENCH_N_OPEN');
const WARMUP = parsePositiveInt(process.env.BENCH_WARMUP, 5, 'BENCH_WARMUP');
const START = '<!-- bench-images:start -->';
const END = '<!-- bench-images:end -->';
const REPO_TAG = 'kern/test:oci';
const ROOT_BIC = '/var/lib/containers/cache'; // skopeo's blob-info cache for root (fixed path)

function log(msg) {
  process.stderr.write(`bench-images: ${msg}\n`);
}

/** First line of a command's output (stdout, else stderr), or '' when it cannot run. */
function version(cmd, args) {
  try {
    const r = require('child_process').spawnSync(cmd, args, { encoding: 'utf8' });
    return ((r.stdout || '').trim() || (r.stderr || '').trim()).split('\n')[0];
  } catch {
    return '';
  }
}

// ---- scratch space and cleanup ------------------------------------------------------------------

// Everything this run creates lives under one scratch dir; it goes on every way out, including
// a failure or Ctrl-C. The registry harness kills its registry from its own exit hook.
let scratch = null;
const liveChildren = new Set();
function cleanupSync() {
  for (const child of liveChildren) {
    try {
      child.kill('SIGKILL');
    } catch {}
  }
  liveChildren.clear();
  if (scratch) {
    fs.rmSync(scratch, { recursive: true, force: true });
    scratch = null;
  }
}
process.on('exit', cleanupSync);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    log(`${sig}: stopping`);
    process.exit(130);
  });
}

let dirCounter = 0;
/** A path under scratch that does not exist yet (created by the caller or the tool). */
function freshPath(prefix) {
  return path.join(scratch, `${prefix}-${++dirCounter}`);
}

function freshDir(prefix) {
  const p = freshPath(prefix);
  fs.mkdirSync(p);
  return p;
}

function rm(p) {
  fs.rmSync(p, { recursive: true, force: true });
}

// ---- other work on the machine ----------------------------------------------------------------

// A benchmark on a shared machine should say when it was not alone. Between rounds (never inside
// a timed call) this reads /proc and adds up the CPU time used by processes that are neither ours
// (this process and its descendants) nor kernel threads (whose writeback is mostly our own I/O).
// Processes that start and end between two samples are missed, so it is a lower bound.
const CLK_TCK = Number(version('getconf', ['CLK_TCK'])) || 100;
const foreign = { byComm: new Map(), last: null, t0: Date.now(), samples: 0 };
function sampleForeign() {
  const procs = readProcs();
  if (foreign.last) {
    for (const [pid, e] of procs) {
      if (pid === 2 || e.ppid === 2 || isOurs(procs, pid)) continue;
      const prev = foreign.last.get(pid);
      const delta = prev && prev.start === e.start ? e.cpu - prev.cpu : e.cpu;
      if (delta > 0) foreign.byComm.set(e.comm, (foreign.byComm.get(e.comm) || 0) + delta / CLK_TCK);
    }
  }
  foreign.last = procs;
  foreign.samples++;
}
function foreignNote() {
  const wall = (Date.now() - foreign.t0) / 1000;
  const total = [...foreign.byComm.values()].reduce((a, b) => a + b, 0);
  const top = [...foreign.byComm].sort((a, b) => b[1] - a[1]).slice(0, 4).map(([c, v]) => `${c} ${v.toFixed(1)} s`).join(', ');
  if (total < 0.01 * wall) return `no other busy process was seen during the run (${total.toFixed(1)} CPU-s outside this benchmark over ${Math.round(wall)} s, sampled between rounds)`;
  return `other work ran during this run: ${total.toFixed(1)} CPU-s outside this benchmark over ${Math.round(wall)} s of wall time (${top}); on ${os.cpus().length} cores that disturbs the numbers, rerun on an idle machine to be sure`;
}

// ---- timing primitives --------------------------------------------------------------------------

/**
 * Spawns argv (optionally with env), drains its output, resolves { ms, stdout } once it has exited
 * and its pipes closed. Rejects with its stderr when it exits non-zero.
 */
function timeSpawn(argv, { env, cwd, marks } = {}) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env, cwd });
    liveChildren.add(child);
    let out = '';
    let err = '';
    let partial = '';
    const seen = {};
    child.stdout.on('data', (d) => {
      if (out.length < 4000) out += d;
    });
    child.stderr.on('data', (d) => {
      if (err.length < 4000) err += d;
      if (!marks) return;
      // Progress lines, stamped when they arrive: the child is unbuffered and we are idle.
      const now = Number(process.hrtime.bigint() - t0) / 1e6;
      const lines = (partial + d).split('\n');
      partial = lines.pop();
      for (const line of lines) {
        for (const [name, re] of Object.entries(marks)) if (!(name in seen) && re.test(line)) seen[name] = now;
      }
    });
    child.on('error', (e) => {
      liveChildren.delete(child);
      reject(e);
    });
    child.on('close', (code, signal) => {
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      liveChildren.delete(child);
      if (code === 0) resolve({ ms, stdout: out, marks: seen });
      else reject(new Error(`${path.basename(argv[0])} exit ${code ?? signal}: ${err.trim().split('\n').slice(-3).join(' | ') || '(no stderr)'}`));
    });
  });
}

async function timed(fn) {
  const t0 = process.hrtime.bigint();
  const r = await fn();
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, r };
}

function checkResult(r) {
  if (r.fault || r.exitCode !== 0) {
    const why = r.fault ? `fault ${r.fault.type}: ${r.fault.message}` : `exit ${r.exitCode}`;
    throw new Error(`${why}${r.stderr ? ` | stderr: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`);
  }
  return r;
}

function summarise(times) {
  const s = [...(times || [])].sort((a, b) => a - b);
  return { n: s.length, median: median(s), p90: s.length >= 10 ? percentile(s, 0.9) : NaN, min: s[0], max: s[s.length - 1] };
}

/**
 * Runs cases round-robin: `warmup` untimed rounds (a case that throws there is marked failed and
 * not timed), then `n` timed rounds. A case's fn resolves the ms to record, or an object
 * { ms, parts: { name: ms } } for cases that also record sub-times. `between` runs after every
 * case call, outside any timing.
 */
async function roundRobin(cases, { n, warmup, label, between }) {
  for (let w = 0; w < warmup; w++) {
    for (const c of cases) {
      if (c.skip || c.error) continue;
      try {
        await c.fn(true);
      } catch (e) {
        c.error = oneLine(e);
      }
      if (between) await between();
    }
  }
  const live = cases.filter((c) => !c.skip && !c.error).length;
  log(`${label}: ${warmup} warm-up + ${n} timed rounds of ${live} case(s)`);
  for (let i = 0; i < n; i++) {
    for (const c of cases) {
      if (c.skip || c.error) continue;
      try {
        const v = await c.fn(false);
        const ms = typeof v === 'number' ? v : v.ms;
        c.times.push(ms);
        if (v && v.parts) {
          c.parts = c.parts || {};
          for (const [k, x] of Object.entries(v.parts)) (c.parts[k] = c.parts[k] || []).push(x);
        }
      } catch (e) {
        c.error = `failed in round ${i + 1}: ${oneLine(e)}`;
      }
      if (between) await between();
    }
    sampleForeign();
    if (n <= 10 || (i + 1) % 10 === 0 || i + 1 === n) log(`${label}: ${i + 1}/${n}`);
  }
  for (const c of cases) Object.assign(c, summarise(c.times));
}

function oneLine(e) {
  return String((e && e.message) || e).replace(/\s+/g, ' ').slice(0, 300);
}

// ---- skopeo with a private blob-info cache ------------------------------------------------------

// Same approach as __tests__/support/registry.js: containers/image keeps a host-wide blob-info
// cache (for root at a fixed path) and would otherwise remember blobs across runs. Each run gets an
// empty one: XDG_DATA_HOME for non-root; for root a private mount namespace with a fresh dir
// bind-mounted over the cache path. Probed once; without mount namespaces the host cache is shared
// (and the report says so).
let privateCache = null;
function skopeoArgv(args, cacheDir) {
  const env = { ...process.env, XDG_DATA_HOME: cacheDir };
  const all = ['--insecure-policy', ...args];
  if (process.getuid() !== 0) return { argv: ['skopeo', ...all], env };
  if (privateCache === null) {
    try {
      fs.mkdirSync(ROOT_BIC, { recursive: true, mode: 0o700 });
      execFileSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', `mount --bind "$1" ${ROOT_BIC}`, 'sh', cacheDir], { stdio: 'ignore' });
      privateCache = true;
    } catch {
      privateCache = false;
    }
  }
  if (!privateCache) return { argv: ['skopeo', ...all], env };
  return {
    argv: ['unshare', '-m', '--propagation', 'private', 'sh', '-c', `mount --bind "$1" ${ROOT_BIC} && shift && exec skopeo "$@"`, 'sh', cacheDir, ...all],
    env,
  };
}

/** Layer descriptors of the single-manifest OCI layout skopeo wrote to `dir`. */
function layoutLayers(dir) {
  const blob = (d) => path.join(dir, 'blobs', 'sha256', d.replace(/^sha256:/, ''));
  const index = JSON.parse(fs.readFileSync(path.join(dir, 'index.json'), 'utf8'));
  const manifest = JSON.parse(fs.readFileSync(blob(index.manifests[0].digest), 'utf8'));
  return manifest.layers.map((l) => ({ mediaType: l.mediaType, size: l.size, file: blob(l.digest) }));
}

/** What GNU tar needs to read a layer: -z for gzip (it runs gzip -d), --zstd (runs zstd -d). */
function tarArgv(layer, root) {
  const m = layer.mediaType;
  const z = m.endsWith('gzip') ? ['-z'] : m.endsWith('zstd') ? ['--zstd'] : m.endsWith('tar') ? [] : null;
  if (!z) throw new Error(`layer media type ${m} has no tar flag here`);
  return ['tar', ...z, '-xf', layer.file, '-C', root];
}

// ---- preconditions ------------------------------------------------------------------------------

function checkPrerequisites() {
  if (!fs.existsSync(path.join(ROOTFS, 'usr/bin/python3')) || !fs.existsSync(path.join(ROOTFS, 'bin/true'))) {
    die(`test rootfs not found at ${ROOTFS} (needs usr/bin/python3 and bin/true).\n` +
      '       Build it with: bash scripts/build-test-rootfs.sh   (or set KERN_TEST_ROOTFS)');
  }
  const missing = ['skopeo', 'tar', 'gzip', 'zstd', 'curl', 'openssl', 'sha256sum', 'unshare', 'sync'].filter((c) => !which(c));
  if (missing.length) die(`missing tools: ${missing.join(', ')} (scripts/setup-deps.sh installs them)`);
  return requireBuilt(REPO, KERN, die);
}

// ---- formatting ---------------------------------------------------------------------------------

const sec = (ms) => (Number.isFinite(ms) ? (ms / 1000).toFixed(2) : '—');
const msf = (ms) => (Number.isFinite(ms) ? ms.toFixed(2) : '—');
const mb = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}×` : '—');
const pct = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${Math.round((100 * a) / b)} %` : '—');
const esc = (s) => s.replace(/\|/g, '\\|');

/** A table row: failed/skipped cases say why instead of numbers. */
function row(c, cells, unit) {
  const f = unit === 's' ? sec : msf;
  if (c.skip) return `| ${c.name} | ${c.skip} |${' — |'.repeat(cells.length + 2)}`;
  if (!c.times.length) return `| ${c.name} | failed: ${esc(c.error || 'no samples')} |${' — |'.repeat(cells.length + 2)}`;
  const flag = c.error ? ` (stopped: ${esc(c.error)})` : '';
  const p90 = c.n >= 10 ? f(c.p90) : '—';
  return `| ${c.name}${flag} | ${f(c.median)} | ${p90} | ${f(c.min)}–${f(c.max)} | ${cells.join(' | ')} |`;
}

// ---- main ---------------------------------------------------------------------------------------

async function main() {
  const { Sandbox } = checkPrerequisites();
  const harness = require(path.join(REPO, '__tests__', 'support', 'registry.js'));
  log('test images: scripts/build-test-images.sh (a no-op when cached)');
  harness.ensureImages();
  const info = harness.imagesInfo().images.rootfs;
  const expectDigest = info.manifest;
  const compressed = info.layers.reduce((s, l) => s + l.size, 0);
  const big = info.layers.reduce((a, l) => (l.size > a.size ? l : a));

  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-images-'));
  foreign.t0 = Date.now();
  sampleForeign();
  const notes = [];
  const sandboxes = new Set();
  let registry = null;
  try {
    registry = await harness.startRegistry();
    log(`registry on ${registry.host}; pushing the rootfs layout as ${REPO_TAG}`);
    const pushed = await harness.push(registry, 'rootfs', REPO_TAG);
    if (pushed !== expectDigest) die(`pushed digest ${pushed}, images.json says ${expectDigest}`);
    const REF = `${registry.host}/${REPO_TAG}`;
    const quietSync = () => timeSpawn(['sync']);

    // ---- 1. cold pulls ------------------------------------------------------------------------
    /** @type {any[]} */
    const pulls = [];
    const facts = {};
    pulls.push({
      key: 'kern',
      name: '(a) `kern pull REF`, fresh KERN_HOME',
      does: 'download + sha256 of every blob + gunzip/zstd + diff_id sha256 + safe unpack (whiteouts) + fsync/syncfs → ready rootfs',
      times: [],
      fn: async (check) => {
        const home = freshDir('kern-home');
        try {
          // Not -q: on a pipe kern prints one line per step ("unpacking layer 1/2", ...) and
          // nothing else, which splits the pull into its download and unpack phases.
          const { ms, stdout, marks } = await timeSpawn([KERN, 'pull', REF], {
            env: { ...process.env, KERN_HOME: home },
            marks: { unpack: /^unpacking layer 1\// },
          });
          if (check) {
            if (!stdout.includes(expectDigest)) throw new Error(`kern pull printed ${JSON.stringify(stdout.trim())}, expected ${expectDigest}`);
            const root = path.join(home, 'images', expectDigest.slice(7), 'rootfs');
            if (!fs.existsSync(path.join(root, 'etc/kern-layer2'))) throw new Error(`${root}/etc/kern-layer2 missing after kern pull`);
            facts.kernMotdGone = !fs.existsSync(path.join(root, 'etc/motd'));
            const meta = JSON.parse(fs.readFileSync(path.join(home, 'images', expectDigest.slice(7), 'image.json'), 'utf8'));
            facts.unpacked = meta.size;
            if (!('unpack' in marks)) throw new Error('kern pull printed no "unpacking layer 1/…" line; the phase split needs it');
          }
          return { ms, parts: 'unpack' in marks ? { download: marks.unpack, unpack: ms - marks.unpack } : {} };
        } finally {
          rm(home);
        }
      },
    });
    const skopeoCopy = async (dest) => {
      const cache = freshDir('skopeo-cache');
      const { argv, env } = skopeoArgv(['copy', '-q', '--src-tls-verify=false', `docker://${REF}`, `oci:${dest}:latest`], cache);
      try {
        return (await timeSpawn(argv, { env })).ms;
      } finally {
        rm(cache);
      }
    };
    pulls.push({
      key: 'skopeo',
      name: '(b) `skopeo copy docker://REF oci:DIR:latest`',
      does: 'download + sha256 of every blob; layers stay compressed, no unpack',
      times: [],
      fn: async (check) => {
        const dest = freshPath('skopeo-oci');
        try {
          const ms = await skopeoCopy(dest);
          if (check && layoutLayers(dest).length !== info.layers.length) throw new Error('skopeo layout has the wrong number of layers');
          return ms;
        } finally {
          rm(dest);
        }
      },
    });
    pulls.push({
      key: 'naive',
      name: '(d) (b) + `tar -xzf` big layer + `tar --zstd -xf` small one',
      does: 'as (b), then a shell-script unpack: no whiteouts, no diff_id check, no fsync',
      times: [],
      fn: async (check) => {
        const dest = freshPath('naive-oci');
        const root = freshDir('naive-root');
        try {
          const copyMs = await skopeoCopy(dest);
          const t0 = process.hrtime.bigint();
          for (const layer of layoutLayers(dest)) await timeSpawn(tarArgv(layer, root));
          const tarMs = Number(process.hrtime.bigint() - t0) / 1e6;
          if (check) {
            if (!fs.existsSync(path.join(root, 'etc/kern-layer2'))) throw new Error('etc/kern-layer2 missing after the tar unpack');
            facts.naiveWhiteoutLeft = fs.existsSync(path.join(root, 'etc/.wh.motd')) && fs.existsSync(path.join(root, 'etc/motd'));
          }
          return { ms: copyMs + tarMs, parts: { tar: tarMs } };
        } finally {
          rm(dest);
          rm(root);
        }
      },
    });
    // (c) skopeo copy to dir: is not run: it is the same download and digest check as (b), only
    // the files are named differently.
    await quietSync();
    await roundRobin(pulls, { n: N, warmup: 1, label: 'cold pull', between: quietSync });
    const naive = pulls.find((c) => c.key === 'naive');

    // ---- 2. components of a pull, alone -------------------------------------------------------
    const blobFile = harness.blobPath(registry, big.digest);
    const layerTar = path.join(scratch, 'layer.tar');
    execFileSync('sh', ['-c', 'gzip -dc "$1" > "$2"', 'sh', blobFile, layerTar]);
    const tarSize = fs.statSync(layerTar).size;
    const blobUrl = `http://${registry.host}/v2/${REPO_TAG.split(':')[0]}/blobs/${big.digest}`;
    const comps = [];
    const comp = (key, name, fn) => comps.push({ key, name, fn, times: [] });
    // Download and writeback are one step with two clocks (as file creation and syncfs below):
    // kern fsyncs every blob it stores, and a sync only means something right after the write.
    comps.push({ key: 'download', name: `download the ${mb(big.size)} blob: \`curl -o FILE\` from the registry`, times: [] });
    comps.push({ key: 'blobsync', name: 'writeback of that file: `sync -f FILE` right after', times: [], skip: 'recorded with the row above' });
    comps[comps.length - 2].fn = async () => {
      const f = freshPath('blob');
      try {
        const d = (await timeSpawn(['curl', '-sSf', '-o', f, blobUrl])).ms;
        const s = (await timeSpawn(['sync', '-f', f])).ms;
        return { ms: d, parts: { sync: s } };
      } finally {
        rm(f);
      }
    };
    comp('sha256sum', 'sha256 of the blob: `sha256sum` (coreutils, no SHA-NI)', async () => (await timeSpawn(['sha256sum', blobFile])).ms);
    comp('sha256', 'sha256 of the blob: `openssl dgst -sha256` (SHA-NI)', async () => (await timeSpawn(['openssl', 'dgst', '-sha256', blobFile])).ms);
    comp('gzip', 'gunzip: `gzip -dc BLOB > /dev/null` (GNU gzip)', async () =>
      (await timeSpawn(['sh', '-c', 'gzip -dc "$1" > /dev/null', 'sh', blobFile])).ms);
    comp('zlib', 'gunzip: Node `zlib.createGunzip()` stream, output discarded (zlib)', async () =>
      (await timed(() => pipeline(fs.createReadStream(blobFile, { highWaterMark: 256 << 10 }), zlib.createGunzip({ chunkSize: 256 << 10 }),
        new Writable({ write: (_c, _e, cb) => cb() })))).ms);
    comp('sha256tar', `sha256 of the ${mb(tarSize)} tar (the diff_id): \`openssl dgst -sha256\``, async () =>
      (await timeSpawn(['openssl', 'dgst', '-sha256', layerTar])).ms);
    // File creation and its writeback are one step with two clocks: the syncfs only makes sense
    // right after the files it flushes.
    comps.push({ key: 'untar', name: 'file creation: `tar -xf layer.tar` (uncompressed) into an empty dir', times: [] });
    comps.push({ key: 'syncfs', name: 'writeback of those files: `sync -f DIR` (syncfs) right after', times: [] });
    const untar = comps[comps.length - 2];
    const syncfs = comps[comps.length - 1];
    untar.fn = async () => {
      const root = freshDir('untar');
      try {
        const t = (await timeSpawn(['tar', '-xf', layerTar, '-C', root])).ms;
        const s = (await timeSpawn(['sync', '-f', root])).ms;
        return { ms: t, parts: { syncfs: s } };
      } finally {
        rm(root);
      }
    };
    syncfs.skip = 'recorded with the row above';
    await roundRobin(comps, { n: N, warmup: 1, label: 'components', between: quietSync });
    // The second clock of a two-clock step becomes a row of its own.
    const adopt = (from, part, to) => {
      if (from.parts && from.parts[part]) {
        to.times = from.parts[part];
        Object.assign(to, summarise(to.times));
        delete to.skip;
      } else {
        to.skip = `not measured: ${from.error || 'no samples'}`;
      }
    };
    adopt(comps.find((c) => c.key === 'download'), 'sync', comps.find((c) => c.key === 'blobsync'));
    adopt(untar, 'syncfs', syncfs);
    rm(layerTar);

    // ---- 3. cached opens ----------------------------------------------------------------------
    const warmHome = freshDir('kern-home-warm');
    execFileSync(KERN, ['pull', '-q', REF], { env: { ...process.env, KERN_HOME: warmHome }, stdio: 'ignore' });
    process.env.KERN_HOME = warmHome; // read by open(); the CLI cases get it through the env too
    const ws = freshDir('kern-ws');
    const opens = [];
    const openCase = (key, name, image) =>
      opens.push({
        key, name, times: [],
        fn: async () => {
          const { ms } = await timed(async () => {
            const sb = new Sandbox({ image });
            sandboxes.add(sb);
            await sb.open();
            await sb.close();
            sandboxes.delete(sb);
          });
          return ms;
        },
      });
    openCase('api-ref', 'API `new Sandbox({image: REF})` + `open()` + `close()`, cached', REF);
    openCase('api-dir', 'API same, `image: ROOTFS_DIR`', ROOTFS);
    openCase('api-host', "API same, `image: 'host'`", 'host');
    const cli = (key, name, image) =>
      opens.push({
        key, name, times: [],
        fn: async () => (await timeSpawn([KERN, 'run', '--image', image, '--workspace', ws, '--', '/bin/true'], { env: process.env })).ms,
      });
    cli('cli-ref', 'CLI `kern run --image REF -- /bin/true`, cached', REF);
    cli('cli-dir', 'CLI `kern run --image ROOTFS_DIR -- /bin/true`', ROOTFS);
    cli('cli-host', 'CLI `kern run --image host -- /bin/true`', 'host');
    const firstCode = (key, name, image) =>
      opens.push({
        key, name, times: [],
        fn: async () => {
          const sb = new Sandbox({ image });
          sandboxes.add(sb);
          try {
            await sb.open();
            const { ms, r } = await timed(() => sb.runCode('print(1)', { language: 'python' }));
            checkResult(r);
            if (r.stdout !== '1\n') throw new Error(`runCode printed ${JSON.stringify(r.stdout)}`);
            return ms;
          } finally {
            await sb.close().catch(() => {});
            sandboxes.delete(sb);
          }
        },
      });
    firstCode('code-ref', "first `sb.runCode('print(1)')` after `open()`, `image: REF`", REF);
    firstCode('code-dir', "first `sb.runCode('print(1)')` after `open()`, `image: ROOTFS_DIR`", ROOTFS);
    await roundRobin(opens, { n: N_OPEN, warmup: WARMUP, label: 'cached open' });
    delete process.env.KERN_HOME;

    // ---- report -------------------------------------------------------------------------------
    const byKey = (list, k) => list.find((c) => c.key === k) || {};
    const kp = byKey(pulls, 'kern');
    const sk = byKey(pulls, 'skopeo');
    const pullRows = [];
    const subRow = (label, times, does) => {
      const t = summarise(times);
      if (!t.n) return;
      const p90 = t.n >= 10 ? sec(t.p90) : '—';
      pullRows.push(`| ${label} | ${sec(t.median)} | ${p90} | ${sec(t.min)}–${sec(t.max)} | ${does} | ${ratio(t.median, sk.median)} |`);
    };
    for (const c of pulls) {
      pullRows.push(row(c, [c.does, ratio(c.median, sk.median)], 's'));
      if (c.key === 'kern' && c.parts) {
        subRow('(a) of which: start → "unpacking layer 1/2"', c.parts.download, 'resolve, download, sha256 and fsync every blob');
        subRow('(a) of which: "unpacking layer 1/2" → exit', c.parts.unpack, 'read back, sha256, inflate, diff_id, unpack both layers, syncfs');
      }
    }
    if (naive.parts) subRow('(d) of which: the two `tar` runs', naive.parts.tar, 'the unpack alone');
    const compRows = comps.map((c) => row(c, [pct(c.median, kp.median)], 's'));
    const openRef = { 'api-ref': 'api-dir', 'api-dir': 'api-dir', 'api-host': 'api-dir', 'cli-ref': 'cli-dir', 'cli-dir': 'cli-dir', 'cli-host': 'cli-dir', 'code-ref': 'code-dir', 'code-dir': 'code-dir' };
    const openRows = opens.map((c) => row(c, [c.key === openRef[c.key] ? '—' : ratio(c.median, byKey(opens, openRef[c.key]).median)], 'ms'));

    const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) || [])[1] || 'unknown';
    const shaNi = /\bsha_ni\b/.test(fs.readFileSync('/proc/cpuinfo', 'utf8'));
    if (privateCache === false) notes.push('no mount namespaces here: skopeo shared the host blob-info cache');
    if (facts.naiveWhiteoutLeft) notes.push('the naive unpack (d) leaves `etc/motd` and its whiteout marker `etc/.wh.motd` in place; kern removes both' + (facts.kernMotdGone ? '' : ' (NOT seen this run: check)'));

    const g = (list, k) => byKey(list, k).median;
    const mid = (times) => summarise(times || []).median;
    const kDown = mid(kp.parts && kp.parts.download);
    const kUnpack = mid(kp.parts && kp.parts.unpack);
    const nv = byKey(pulls, 'naive');
    const nvTar = mid(nv.parts && nv.parts.tar);
    const dl = g(comps, 'download');
    const inflate = Math.min(g(comps, 'zlib'), g(comps, 'gzip'));
    const hashes = 2 * g(comps, 'sha256') + g(comps, 'sha256tar');
    const rest = kUnpack - inflate - hashes - g(comps, 'syncfs');
    const reading = [];
    if (Number.isFinite(kp.median) && Number.isFinite(sk.median)) {
      reading.push(`- A cold \`kern pull\` of this image took ${sec(kp.median)} s: ${ratio(kp.median, sk.median)} a \`skopeo copy\` that only downloads and checks digests (${sec(sk.median)} s), and ${ratio(kp.median, nv.median)} skopeo copy plus a naive \`tar\` unpack (${sec(nv.median)} s, of which ${sec(nvTar)} s in tar) that applies no whiteouts, checks no diff_id and syncs nothing.`);
    }
    if (Number.isFinite(kDown) && Number.isFinite(kUnpack)) {
      reading.push(`- kern's own split: ${sec(kDown)} s (${pct(kDown, kp.median)}) to resolve, download, hash and fsync the blobs, ${sec(kUnpack)} s (${pct(kUnpack, kp.median)}) to unpack. The bytes themselves cross loopback from the warm registry in ${sec(dl)} s (\`curl\`), so here ${kUnpack > kDown ? 'the unpack, not the transfer, is most of the pull' : 'the download phase is the larger, though not for the bytes on the wire'}; on a real 100 Mbit/s link the ${mb(compressed)} alone would take about ${((compressed * 8) / 100e6).toFixed(1)} s and dominate.`);
    }
    if (Number.isFinite(inflate) && Number.isFinite(hashes)) {
      const ranked = [['inflate', inflate], ['file creation (estimated as above)', rest], ['sha256, all three passes', hashes], ['syncfs', g(comps, 'syncfs')]]
        .filter(([, v]) => Number.isFinite(v) && v > 0)
        .sort((a, b) => b[1] - a[1]);
      const est = Number.isFinite(rest) && rest > 0
        ? ` That leaves about ${sec(rest)} s of kern's unpack phase for creating the ${info.layers[0].entries ?? ''} entries, if its inflate (zlib-rs) runs at zlib's speed;`
        : ' Those alone account for all of kern\'s unpack phase, so kern\'s inflate must be faster than these tools\';';
      reading.push(`- Inside the unpack, inflating the ${mb(big.size)} layer costs ${sec(g(comps, 'zlib'))} s with zlib (${sec(g(comps, 'gzip'))} s with GNU gzip), the three sha256 passes kern makes (blob on download, blob again and the ${mb(tarSize)} tar on unpack) ${sec(hashes)} s together with SHA-NI (\`sha256sum\` without it is ${ratio(g(comps, 'sha256sum'), g(comps, 'sha256'))} slower), and the final writeback (syncfs) ${sec(g(comps, 'syncfs'))} s.${est} GNU tar needs ${sec(g(comps, 'untar'))} s for the same files from an already uncompressed tar${g(comps, 'untar') > kUnpack ? ", more than kern's whole unpack phase" : ''}. Largest first: ${ranked.map(([k, v]) => `${k} ${sec(v)} s`).join(', ')}.`);
    }
    const oo = (k) => g(opens, k);
    reading.push(`- Once cached, an image reference opens in ${msf(oo('api-ref'))} ms through the API (open + close) against ${msf(oo('api-dir'))} ms for the plain rootfs directory (${ratio(oo('api-ref'), oo('api-dir'))}) and ${msf(oo('api-host'))} ms for \`host\`; \`kern run -- /bin/true\` takes ${msf(oo('cli-ref'))} ms by reference and ${msf(oo('cli-dir'))} ms by directory (${ratio(oo('cli-ref'), oo('cli-dir'))}).`);
    const rc = oo('code-ref') / oo('code-dir');
    reading.push(`- The first \`runCode('print(1)')\` on an open sandbox takes ${msf(oo('code-ref'))} ms for the image and ${msf(oo('code-dir'))} ms for the directory (${ratio(oo('code-ref'), oo('code-dir'))}): ${Number.isFinite(rc) && rc > 0.85 && rc < 1.15 ? 'the same within noise, as it should be: after open() both run the same box path.' : 'a difference that should not exist (after open() both run the same box path): compare the p90s and rerun before reading anything into it.'}`);
    notes.push(foreignNote());

    let pkgVersion = '?';
    try {
      pkgVersion = require(path.join(REPO, 'package.json')).version;
    } catch {}
    const lines = [
      START,
      '<!-- Generated by bench/images.js (`node bench/images.js`); everything between these markers is overwritten. -->',
      '',
      '## Images: cold pull and cached open',
      '',
      `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`,
      `- Kernel: ${version('uname', ['-r']) || os.release()}; ${os.cpus().length} CPU(s): ${cpu.trim()}${shaNi ? ' (SHA-NI)' : ''}; ${Math.round(os.totalmem() / 2 ** 30)} GiB RAM; running as ${process.getuid() === 0 ? 'root' : `uid ${process.getuid()}`}`,
      `- Versions: ${version(KERN, ['--version'])} (package ${pkgVersion}); ${version('skopeo', ['--version'])}; ${version('docker-registry', ['--version']) || 'docker-registry'}; ${version('tar', ['--version'])}; ${version('gzip', ['--version'])}; ${version('openssl', ['version'])}; Node ${process.version}`,
      `- Image: the test image \`rootfs\` (Debian bookworm) pushed as \`${REPO_TAG}\` to a local docker-registry on loopback, OCI media types, digest \`${expectDigest.slice(0, 19)}…\`; ${info.layers.length} layers, ${mb(compressed)} compressed (${info.layers.map((l) => `${l.mediaType.split('+')[1]} ${l.size < 1e6 ? `${l.size} B` : mb(l.size)}`).join(' + ')}); big layer ${mb(tarSize)} as tar, ${info.layers[0].entries ?? '?'} entries; unpacked root ${Number.isFinite(facts.unpacked) ? mb(facts.unpacked) : '?'} (kern's image.json)`,
      `- Reproduce: \`npm run build && node bench/images.js\` (\`BENCH_N\` cold pulls, default 5; \`BENCH_N_OPEN\` opens, default 50; \`BENCH_WARMUP\` untimed opens, default 5)`,
      '',
      'Method:',
      '',
      `- Cold pulls: ${N} timed rounds after 1 untimed round that also checks each result, cases interleaved round-robin. Each case starts from a fresh empty directory (created before the clock, deleted after it, then \`sync\` outside the timing so no case pays the previous one's writeback). Times are spawn-to-exit from Node, in seconds.`,
      '- The registry\'s storage is on the same disk and warm in the page cache: the "download" is loopback HTTP, not a network. The blob-info cache of skopeo is empty for every run (private mount namespace, as in `__tests__/support/registry.js`); the `unshare` + `mount` it needs (a few ms) is inside the skopeo timings.',
      '- (b) is not an unpack: skopeo leaves the layers compressed in an OCI layout. (c) `skopeo copy … dir:` was not run: same download and digest check as (b), other file names. (d) adds the unpack a shell script would do with GNU tar (`-z` runs gzip, `--zstd` runs zstd), as root, so owners are kept as kern keeps them.',
      `- Components: each step of a pull timed alone on the registry's copy of the big layer (and on its uncompressed tar, made beforehand), ${N} rounds interleaved the same way; "share" is the step's median over kern pull's median.`,
      `- Cached opens: ${N_OPEN} timed rounds after ${WARMUP} warm-ups, interleaved; KERN_HOME holds the pulled image; no registry request is made (pull policy "missing"). The CLI rows use a fixed \`--workspace\` (as bench/run.js does) and the default limits. The runCode rows open a sandbox untimed, time its first \`runCode('print(1)')\` (checked to print 1), then close it untimed.`,
      '- p90 is shown only where N ≥ 10; min–max always.',
      ...notes.map((n) => `- Note: ${n}`),
      '',
      `### Cold pull (N = ${N}, seconds)`,
      '',
      '| case | median s | p90 s | min–max s | what it does | vs (b) skopeo copy |',
      '| --- | ---: | ---: | ---: | --- | ---: |',
      ...pullRows,
      '',
      `### Where a cold pull's time goes (each step alone, N = ${N}, seconds)`,
      '',
      '| step | median s | p90 s | min–max s | share of kern pull |',
      '| --- | ---: | ---: | ---: | ---: |',
      ...compRows,
      '',
      `### Opening a cached image (N = ${N_OPEN}, ms)`,
      '',
      '| case | median ms | p90 ms | min–max ms | vs same with ROOTFS_DIR |',
      '| --- | ---: | ---: | ---: | ---: |',
      ...openRows,
      '',
      '### Reading (generated from this run\'s medians)',
      '',
      ...reading,
      '',
      END,
    ];
    const block = lines.join('\n');

    writeSection(OUT, START, END, block);
    console.log(block);
    console.log(`\nbench-images: wrote ${path.relative(process.cwd(), OUT) || OUT}`);
    if ([...pulls, ...comps, ...opens].some((c) => c.error)) {
      console.error('bench-images: some cases failed (see the tables); the other numbers are still valid');
    }
  } finally {
    for (const sb of sandboxes) await sb.close().catch(() => {});
    if (registry) await registry.stop().catch(() => {});
    cleanupSync();
  }
}

main().catch((e) => {
  console.error('bench-images: ' + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
});
