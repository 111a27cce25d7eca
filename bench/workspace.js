#!/usr/bin/env node
// Workspace benchmarks: what `pycCache` saves on a python start, and what `trackFiles` costs on a
// workspace of 10,000 files. One run, one machine, medians over N iterations, cases side by side.
//
//   npm run bench:workspace             # N = 30
//   BENCH_N=100 npm run bench:workspace
//
// Needs: `npm run build` and the test rootfs (scripts/build-test-rootfs.sh; KERN_TEST_ROOTFS
// overrides it). Writes its section between the bench-workspace markers of BENCHMARKS.md and prints
// it. Measurements only: nothing passes or fails on a number.
//
// Method:
// - pycCache: on two images: the test rootfs as debootstrap made it (Debian compiles its stdlib
//   at install, so it ships a .pyc for every module), and a copy of it with every __pycache__
//   removed, as the official python:* images are (they delete theirs to save space). For each, one
//   Sandbox with `pycCache: false` and one with the default (true), with a KERN_HOME of their own so
//   the caches are built from nothing; the time from open() to the cache being ready is reported.
//   Then, interleaved round-robin, each case times `runCode(SNIPPET)` (common stdlib imports) and
//   `runCode('pass')`, each checked to succeed and print what it should.
// - trackFiles: a workspace of 10,000 files in 100 directories, made on the host; one Sandbox with
//   `trackFiles: true` (the default) and one with false, each timing `run(['true'])`, interleaved.
//   The difference is the two walks (before and after) a tracked call makes.
'use strict';

const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, median, percentile, writeSection, requireBuilt } = require('./common');

const die = dieFor('bench-workspace');
const N = positiveInt(process.env.BENCH_N, 30, 'BENCH_N', die);
const WARMUP = positiveInt(process.env.BENCH_WARMUP, 3, 'BENCH_WARMUP', die);
const START = '<!-- bench-workspace:start -->';
const END = '<!-- bench-workspace:end -->';
const SNIPPET = 'import json, decimal, email.parser, http.client, urllib.request, csv, datetime, argparse, logging\nprint("ok")';

if (!fs.existsSync(path.join(ROOTFS, '.kern-test-rootfs'))) die(`no test rootfs at ${ROOTFS}: run scripts/build-test-rootfs.sh`);
const { Sandbox } = requireBuilt(REPO, KERN, die);

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const fmt = (x) => (x < 10 ? x.toFixed(2) : x.toFixed(1));

async function timed(fn, check) {
  const t0 = process.hrtime.bigint();
  const r = await fn();
  const t = ms(t0);
  if (!check(r)) die(`a call failed: ${JSON.stringify({ exitCode: r.exitCode, fault: r.fault, stdout: r.stdout, stderr: r.stderr.slice(0, 500) })}`);
  return t;
}

async function roundRobin(cases) {
  for (let i = 0; i < WARMUP; i++) for (const c of cases) await timed(c.fn, c.check);
  for (const c of cases) c.times = [];
  for (let i = 0; i < N; i++) {
    for (const c of cases) {
      await new Promise((r) => setTimeout(r, 50));
      c.times.push(await timed(c.fn, c.check));
    }
  }
  for (const c of cases) c.times.sort((a, b) => a - b);
}

function stdlibPycShare() {
  const lib = path.join(ROOTFS, 'usr/lib/python3.11');
  let py = 0;
  let pyc = 0;
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory() && !['test', 'tests', '__pycache__', 'idlelib', 'tkinter'].includes(e.name)) walk(p);
      else if (e.isFile() && e.name.endsWith('.py')) {
        py++;
        if (fs.existsSync(path.join(d, '__pycache__', e.name.replace(/\.py$/, '.cpython-311.pyc')))) pyc++;
      }
    }
  };
  walk(lib);
  return { py, pyc };
}

async function main() {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-ws-'));
  const kernHome = path.join(scratch, 'home');
  process.env.KERN_HOME = kernHome;
  try {
    // pycCache
    const ok = (r) => r.exitCode === 0 && r.fault === null;
    const stripped = path.join(scratch, 'rootfs-nopyc');
    execFileSync('cp', ['-a', ROOTFS, stripped]);
    execFileSync('find', [stripped, '-depth', '-name', '__pycache__', '-type', 'd', '-exec', 'rm', '-rf', '{}', '+']);
    const pycDir = path.join(kernHome, 'pyc');
    const readyCount = () => (fs.existsSync(pycDir) ? fs.readdirSync(pycDir).filter((k) => fs.existsSync(path.join(pycDir, k, 'ready'))).length : 0);
    const images = [
      ['as debootstrap made it', ROOTFS],
      ['__pycache__ removed (like python:*)', stripped],
    ];
    const pycCases = [];
    const sandboxes = [];
    const buildMs = [];
    for (const [label, image] of images) {
      const off = await new Sandbox({ image, pycCache: false }).open();
      const before = readyCount();
      const t0 = process.hrtime.bigint();
      const on = await new Sandbox({ image }).open();
      while (readyCount() === before) {
        if (ms(t0) > 300_000) die('the pyc cache was not ready after 300 s');
        await new Promise((r) => setTimeout(r, 20));
      }
      buildMs.push(`${label}: ${(ms(t0) / 1000).toFixed(1)} s`);
      sandboxes.push(off, on);
      for (const [what, code, check] of [
        ['imports', SNIPPET, (r) => ok(r) && r.stdout === 'ok\n'],
        ["'pass'", 'pass', ok],
      ]) {
        pycCases.push({ name: `${label}: runCode(${what}), pycCache: false`, fn: () => off.runCode(code), check });
        pycCases.push({ name: `${label}: runCode(${what}), pycCache: true`, fn: () => on.runCode(code), check });
      }
    }
    await roundRobin(pycCases);
    for (const sb of sandboxes) await sb.close();

    // trackFiles
    const ws = [path.join(scratch, 'ws-track'), path.join(scratch, 'ws-notrack')];
    for (const w of ws) {
      for (let d = 0; d < 100; d++) {
        const dir = path.join(w, `d${d}`);
        fs.mkdirSync(dir, { recursive: true });
        for (let f = 0; f < 100; f++) fs.writeFileSync(path.join(dir, `f${f}.txt`), 'x');
      }
    }
    const tracked = await new Sandbox({ image: ROOTFS, workspace: ws[0] }).open();
    const untracked = await new Sandbox({ image: ROOTFS, workspace: ws[1], trackFiles: false }).open();
    const trackCases = [
      { name: "run(['true']), 10,000 files, trackFiles: true", fn: () => tracked.run(['true']), check: (r) => ok(r) && r.files.length === 0 },
      { name: "run(['true']), 10,000 files, trackFiles: false", fn: () => untracked.run(['true']), check: ok },
    ];
    await roundRobin(trackCases);
    await tracked.close();
    await untracked.close();

    const share = stdlibPycShare();
    const row = (c, base) => `| ${c.name} | ${fmt(median(c.times))} | ${fmt(percentile(c.times, 0.9))} | ${fmt(c.times[0])}–${fmt(c.times[c.times.length - 1])} | ${base ? (median(c.times) / median(base.times)).toFixed(2) + '×' : '1.00×'} |`;
    const lines = [
      START,
      '<!-- Generated by bench/workspace.js (`npm run bench:workspace`); everything between these markers is overwritten. -->',
      '',
      '## Workspace: pycCache and trackFiles',
      '',
      `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`,
      `- Machine: ${os.cpus().length} CPU(s), ${Math.round(os.totalmem() / 2 ** 30)} GiB; running as ${process.getuid() === 0 ? 'root' : 'uid ' + process.getuid()}; Node ${process.version}`,
      `- Images: the test rootfs (Debian bookworm, python 3.11), where ${share.pyc} of ${share.py} stdlib modules ship a .pyc, and a copy with every \`__pycache__\` removed`,
      `- Reproduce: \`npm run build && npm run bench:workspace\` (BENCH_N, default 30; BENCH_WARMUP, default 3)`,
      `- N = ${N} per case, after ${WARMUP} untimed warm-ups; cases interleaved round-robin with a 50 ms pause before each call; times in ms from the call to its awaited result.`,
      '',
      `pycCache: building the cache in the background took, from open(): ${buildMs.join('; ')} (once per image; later sessions find it). The snippet: \`${SNIPPET.split('\n')[0]}\`.`,
      '',
      '| case | median ms | p90 ms | min–max ms | vs pycCache: false |',
      '| --- | ---: | ---: | ---: | ---: |',
      ...pycCases.map((c, i) => (i % 2 ? row(c, pycCases[i - 1]) : row(c))),
      '',
      `trackFiles on a 10,000-file workspace: each tracked call walks it twice (before and after); the difference of the medians is ${fmt(median(trackCases[0].times) - median(trackCases[1].times))} ms, O(N) in the files.`,
      '',
      '| case | median ms | p90 ms | min–max ms | vs trackFiles: false |',
      '| --- | ---: | ---: | ---: | ---: |',
      row(trackCases[1]),
      row(trackCases[0], trackCases[1]),
      '',
      END,
    ];
    const block = lines.join('\n');
    writeSection(OUT, START, END, block);
    console.log(block);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
