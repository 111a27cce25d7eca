#!/usr/bin/env node
// Live state: `Kernel.pause()` + `resume()` of a kernel holding 100 MiB, and `sb.fork({ count })`
// of a workspace of 1,000 files (10 MiB) beside opening as many fresh Sandboxes, in ONE run on
// one machine; medians over N iterations.
//
//   npm run bench:live                 # N = 20
//   BENCH_N=50 npm run bench:live      # tighter numbers
//
// Needs `npm run build` (or build:debug) and the test rootfs (scripts/build-test-rootfs.sh;
// KERN_TEST_ROOTFS). Writes its section (one per build: release, dev) between the bench-live
// markers of BENCHMARKS.md and prints it. Measurements only: nothing passes or fails on a number;
// the goals are printed beside what was measured.
//
// Method: every timed step runs from just before the call to its awaited completion
// (process.hrtime.bigint()). Per iteration, in this order with a 100 ms pause before each step:
// a new kernel (not timed) fills 100 MiB (`bytearray(b"x" * (100 << 20))`, every page touched);
// its first pause() (on cgroup v1 this moves the box's processes into the freezer leaf) and
// resume(); a second pause() + resume() (the steady state); the kernel is checked to still hold
// the data, then closed. Then fork({ count: 1 }) and fork({ count: 8 }) of one Sandbox whose
// workspace holds 1,000 files of 10 KiB, each copy checked to hold them, and beside them opening
// 1 and 8 fresh Sandboxes of the same options (what a fork costs beyond its open()), and `cp -a`
// of the same tree (what a copy costs on this filesystem). Every
// Sandbox made is closed outside the timing.
//
// Kernel state (on the test image with numpy, KERN_TEST_ROOTFS_SCI; BENCH_KN iterations, default
// 5): a python kernel imports numpy, pandas and json and holds 100 MiB of numpy data; timed, each
// to the first cell of the new kernel(s) returning (`a.shape`): kernel.fork({ count: 1 }),
// kernel.fork({ count: 8 }), checkpoint(dir, { keepRunning: true }), Sandbox.fromCheckpoint(dir)
// + restoreKernel(dir), and beside them a fresh Sandbox and kernel that rebuild the same state by
// running the same cell. A fork's memory is its python's VmRSS, read in the fork.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, median, percentile, writeSection, requireBuilt, builtProfile } = require('./common');

const die = dieFor('bench:live');
const N = positiveInt(process.env.BENCH_N, 20, 'BENCH_N', die);
const KN = positiveInt(process.env.BENCH_KN, 5, 'BENCH_KN', die);
const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const STATE_CELL = 'import numpy as np, pandas as pd, json\na = np.random.default_rng(1).random((100 << 20) // 8)\nframe = pd.DataFrame({"x": range(1000)})';

/** The kernel-state timings (see the header), in ms, and a fork's RSS in MiB. */
async function kernelState(Sandbox) {
  const t = { kfork1: [], kfork8: [], ckpt: [], restore: [], rebuild: [], rss: [] };
  const first = async (k) => {
    const r = await k.runCode('a.shape');
    const text = r.results[0] && r.results[0].text;
    if (r.error || r.fault || text !== '(13107200,)') die(`a kernel lost its state: ${JSON.stringify(r.error || r.fault || text)}`);
  };
  const sb = await new Sandbox({ image: SCI, memoryMb: 2048 }).open();
  const dirs = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-ckpt-'));
  try {
    const k = await sb.kernel({ timeoutS: 300 });
    const made = await k.runCode(STATE_CELL);
    if (made.error || made.fault) die(`the state cell failed: ${JSON.stringify(made.error || made.fault)}`);
    for (let i = 0; i < KN; i++) {
      for (const [count, key] of [[1, 'kfork1'], [8, 'kfork8']]) {
        const [ms, forks] = await timed(async () => {
          const made = await k.fork({ count });
          await Promise.all(made.map(first));
          return made;
        });
        t[key].push(ms);
        if (count === 1) {
          const rss = await forks[0].runCode('print(int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]) // 1024)');
          t.rss.push(Number(rss.stdout));
        }
        for (const f of forks) await f.close();
      }
      const dir = path.join(dirs, `c${i}`);
      t.ckpt.push((await timed(() => k.checkpoint(dir, { keepRunning: true })))[0]);
      const [rms, back] = await timed(async () => {
        const b = await Sandbox.fromCheckpoint(dir, { memoryMb: 2048 });
        await first(await b.restoreKernel(dir));
        return b;
      });
      t.restore.push(rms);
      await back.close();
      fs.rmSync(dir, { recursive: true, force: true });
      const [bms, fresh] = await timed(async () => {
        const f = await new Sandbox({ image: SCI, memoryMb: 2048 }).open();
        const fk = await f.kernel({ timeoutS: 300 });
        await fk.runCode(STATE_CELL);
        await first(fk);
        return f;
      });
      t.rebuild.push(bms);
      await fresh.close();
    }
  } finally {
    await sb.close();
    fs.rmSync(dirs, { recursive: true, force: true });
  }
  return t;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function timed(fn) {
  await sleep(100);
  const t0 = process.hrtime.bigint();
  const v = await fn();
  return [Number(process.hrtime.bigint() - t0) / 1e6, v];
}

async function main() {
  if (!fs.existsSync(path.join(ROOTFS, 'usr/bin/python3'))) die(`test rootfs not found at ${ROOTFS}; build it with scripts/build-test-rootfs.sh`);
  requireBuilt(REPO, KERN, die);
  const profile = builtProfile();
  const { Sandbox } = require(REPO);
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-live-'));
  for (let i = 0; i < 1000; i++) fs.writeFileSync(path.join(ws, `f${i}`), Buffer.alloc(10 << 10, i % 251));
  const opts = { image: ROOTFS };
  const sb = await new Sandbox({ ...opts, workspace: ws }).open();
  const t = { first: [], resume1: [], steady: [], fork1: [], open1: [], cp: [], fork8: [], open8: [] };
  try {
    for (let i = 0; i < N; i++) {
      const k = await sb.kernel();
      const filled = await k.runCode('b = bytearray(b"x" * (100 << 20))\nlen(b)');
      if (filled.error || filled.fault) die(`filling the kernel failed: ${JSON.stringify(filled.error || filled.fault)}`);
      t.first.push((await timed(() => k.pause()))[0]);
      t.resume1.push((await timed(() => k.resume()))[0]);
      t.steady.push((await timed(async () => {
        await k.pause();
        await k.resume();
      }))[0]);
      const kept = await k.runCode('print(len(b), b[-1])');
      if (kept.stdout !== `${100 << 20} 120\n`) die(`the kernel lost its data: ${kept.stdout} ${kept.stderr}`);
      await k.close();
      for (const [count, forkKey, openKey] of [[1, 'fork1', 'open1'], [8, 'fork8', 'open8']]) {
        const [ms, kids] = await timed(() => sb.fork({ count }));
        t[forkKey].push(ms);
        for (const kid of kids) {
          const n = (await kid.listFiles()).length;
          if (n !== 1000) die(`a fork holds ${n} files, not 1000`);
          await kid.close();
        }
        const [oms, fresh] = await timed(() => Promise.all(Array.from({ length: count }, () => new Sandbox(opts).open())));
        t[openKey].push(oms);
        for (const f of fresh) await f.close();
      }
      // The same tree copied by `cp -a`: what this filesystem makes a copy cost.
      const dst = `${ws}-cp`;
      t.cp.push((await timed(async () => execFileSync('cp', ['-a', ws, dst])))[0]);
      fs.rmSync(dst, { recursive: true, force: true });
    }
  } finally {
    await sb.close();
    fs.rmSync(ws, { recursive: true, force: true });
  }
  const haveSci = fs.existsSync(path.join(SCI, '.kern-test-rootfs'));
  if (haveSci) Object.assign(t, await kernelState(Sandbox));
  const s = (k) => {
    if (!t[k]) return 'n/a';
    const v = [...t[k]].sort((a, b) => a - b);
    return `${median(v).toFixed(1)} (p90 ${percentile(v, 0.9).toFixed(1)})`;
  };
  const cg = fs.existsSync('/sys/fs/cgroup/cgroup.controllers') ? 'cgroup v2' : 'cgroup v1';
  const start = `<!-- bench-live-${profile.key}:start -->`;
  const end = `<!-- bench-live-${profile.key}:end -->`;
  const block = [
    start,
    '<!-- Generated by bench/live.js (`npm run bench:live`); everything between these markers is overwritten. -->',
    `## Live state: pause and fork (${profile.label})`,
    '',
    `- Host: ${os.cpus().length} x ${os.cpus()[0] && os.cpus()[0].model}, Linux ${os.release()}, ${cg}, ${process.getuid() === 0 ? 'root' : 'unprivileged'}; load average ${os.loadavg()[0].toFixed(1)} at the end; ${new Date().toISOString().slice(0, 10)}`,
    `- N = ${N}, medians in ms (p90), 100 ms pause before each step; \`${path.relative(REPO, __filename)}\` says how`,
    '- Reproduce: `npm run build && npm run bench:live` (or `BENCH_N=50 npm run bench:live`)',
    '',
    '| step | ms | goal (issue 33) |',
    '|---|---:|---|',
    `| first \`pause()\` of a kernel holding 100 MiB | ${s('first')} | |`,
    `| its \`resume()\` | ${s('resume1')} | |`,
    `| \`pause()\` + \`resume()\`, later | ${s('steady')} | <= 10 |`,
    `| \`fork({ count: 1 })\`, 1,000 files (10 MiB) | ${s('fork1')} | |`,
    `| opening 1 fresh Sandbox (beside it) | ${s('open1')} | |`,
    `| \`cp -a\` of the same workspace (beside it) | ${s('cp')} | |`,
    `| \`fork({ count: 8 })\` | ${s('fork8')} | |`,
    `| opening 8 fresh Sandboxes (beside it) | ${s('open8')} | |`,
    '',
    haveSci ? `A python kernel holding 100 MiB of numpy data, numpy and pandas imported; N = ${KN}; to the new kernels' first cell:` : `(Kernel state: no test image with numpy at ${SCI}; build it with scripts/build-test-rootfs-sci.sh.)`,
    '',
    '| step | ms | goal (issue 33) |',
    '|---|---:|---|',
    `| \`kernel.fork({ count: 1 })\` | ${s('kfork1')} | <= 100 |`,
    `| \`kernel.fork({ count: 8 })\` | ${s('kfork8')} | <= 400 |`,
    `| \`checkpoint(dir, { keepRunning: true })\` | ${s('ckpt')} | <= 300 |`,
    `| \`Sandbox.fromCheckpoint(dir)\` + \`restoreKernel(dir)\` | ${s('restore')} | <= 150 |`,
    `| a fresh Sandbox and kernel rebuilding the state (beside them) | ${s('rebuild')} | |`,
    `| a fork's memory (its python's RSS, MiB) | ${s('rss')} | |`,
    '',
    'A fork is a fresh process: its state arrives as data (pickle protocol 5, the arrays out of',
    'band), so it holds its own copy of the 100 MiB, and re-imports the modules the state names.',
    '',
    'On cgroup v1 the first pause of a box moves its processes into a freezer leaf (each move waits',
    'for an RCU grace period); on cgroup v2 the box is born in its own leaf and every pause is the',
    'steady one. A fork is the open() of a Sandbox plus the workspace copy (reflinked where the',
    'filesystem can; here ext4 copies the bytes).',
    end,
  ].join('\n');
  writeSection(OUT, start, end, block);
  console.log(block);
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
