#!/usr/bin/env node
// `kern serve` (issue 31) beside the in-process API it is built on, in ONE run on one machine:
// what E2B's SDK pays to reach the same boxes through the server. Medians over N iterations.
//
//   npm run bench:serve                  # N = 20
//   BENCH_N=50 npm run bench:serve
//
// Needs a build (`npm run build` for the release numbers) and the test rootfs
// (scripts/build-test-rootfs.sh; KERN_TEST_ROOTFS). Writes its section between the bench-serve
// markers of BENCHMARKS.md and prints it. Measurements only: nothing passes or fails on a number.
//
// Method: a `kern serve` (js/serve/) runs in this process on a loopback port, and the unmodified
// `e2b` / `@e2b/code-interpreter` SDKs call it from this process too (over HTTP, as from any
// other program). Every case checks what it got (the output, the value), so a broken case stops
// the run. Cases run interleaved round-robin after BENCH_WARMUP untimed rounds, 50 ms apart.
// - create → first command: SDK `Sandbox.create('base')` then `commands.run('echo hi')` (bash -l
//   -c, as the SDK sends it); in-process `new Sandbox(opts).open()` then
//   `sb.run(['/bin/bash', '-l', '-c', 'echo hi'])`. The sandbox is killed/closed untimed.
// - a command on a running sandbox: `commands.run('echo hi')` against
//   `sb.run(['/bin/bash', '-l', '-c', 'echo hi'])`.
// - a cell on a warm python context: `runCode('1 + 1')` (the default context, started untimed)
//   against `kernel.runCode('1 + 1')`.
'use strict';

const os = require('os');
const { REPO, KERN, ROOTFS, OUT, dieFor, parsePositiveInt: positiveInt, percentile, median, writeSection, requireBuilt, otherWork, builtProfile } = require('./common');

const die = dieFor('bench-serve');
const N = positiveInt(process.env.BENCH_N, 20, 'BENCH_N', die);
const WARMUP = positiveInt(process.env.BENCH_WARMUP, 3, 'BENCH_WARMUP', die);
// The release build's figures and the dev build's each have their own section.
const BUILD = builtProfile();
const TAG = BUILD.key === 'release' ? ':release' : '';
const START = `<!-- bench-serve${TAG}:start -->`;
const END = `<!-- bench-serve${TAG}:end -->`;
const KEY = 'bench-serve-key-0123456789abcdef';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => process.hrtime.bigint();
const msSince = (t0) => Number(now() - t0) / 1e6;

async function main() {
  const { Sandbox: KernSandbox } = requireBuilt(REPO, KERN, die);
  const { parseArgs } = require('../js/serve/config.js');
  const { createServe } = require('../js/serve/server.js');
  const { createLogger } = require('../js/serve/log.js');
  const serve = createServe(parseArgs(['--listen', '127.0.0.1:0', '--image', ROOTFS, '--max-sandboxes', '1000'], { KERN_API_KEYS: KEY }), { log: createLogger('error') });
  const addr = await serve.listen();
  const url = `http://127.0.0.1:${addr.port}`;
  Object.assign(process.env, { E2B_API_URL: url, E2B_SANDBOX_URL: url, E2B_API_KEY: KEY });
  const { Sandbox } = require('e2b');
  const CI = require('@e2b/code-interpreter');
  const others = otherWork();
  others.sample();

  const expectOut = (got, want, what) => {
    if (got !== want) die(`${what}: got ${JSON.stringify(got)}, wanted ${JSON.stringify(want)}`);
  };
  const BASH = ['/bin/bash', '-l', '-c', 'echo hi'];
  const warmSdk = await CI.Sandbox.create({ timeoutMs: 3_600_000 });
  expectOut((await warmSdk.runCode('1 + 1')).text, '2', 'sdk warm-up cell');
  const warmLib = await new KernSandbox({ image: ROOTFS }).open();
  const kernel = await warmLib.kernel();
  const cases = {
    'create → first command|SDK through kern serve': async () => {
      const t0 = now();
      const sb = await Sandbox.create('base');
      const r = await sb.commands.run('echo hi');
      const ms = msSince(t0);
      expectOut(r.stdout, 'hi\n', 'sdk first command');
      await sb.kill();
      return ms;
    },
    'create → first command|in-process `Sandbox`': async () => {
      const t0 = now();
      const sb = await new KernSandbox({ image: ROOTFS }).open();
      const r = await sb.run(BASH);
      const ms = msSince(t0);
      expectOut(r.stdout, 'hi\n', 'library first command');
      await sb.close();
      return ms;
    },
    'a command on a running sandbox|SDK through kern serve': async () => {
      const t0 = now();
      const r = await warmSdk.commands.run('echo hi');
      const ms = msSince(t0);
      expectOut(r.stdout, 'hi\n', 'sdk command');
      return ms;
    },
    'a command on a running sandbox|in-process `Sandbox`': async () => {
      const t0 = now();
      const r = await warmLib.run(BASH);
      const ms = msSince(t0);
      expectOut(r.stdout, 'hi\n', 'library command');
      return ms;
    },
    'a cell on a warm python context|SDK through kern serve': async () => {
      const t0 = now();
      const r = await warmSdk.runCode('1 + 1');
      const ms = msSince(t0);
      expectOut(r.text, '2', 'sdk cell');
      return ms;
    },
    'a cell on a warm python context|in-process `Kernel`': async () => {
      const t0 = now();
      const r = await kernel.runCode('1 + 1');
      const ms = msSince(t0);
      expectOut(r.results[0] && r.results[0].text, '2', 'library cell');
      return ms;
    },
  };
  const times = Object.fromEntries(Object.keys(cases).map((k) => [k, []]));
  for (let round = 0; round < WARMUP + N; round++) {
    for (const [name, fn] of Object.entries(cases)) {
      await sleep(50);
      const ms = await fn();
      if (round >= WARMUP) times[name].push(ms);
    }
    others.sample();
  }
  await kernel.close();
  await warmLib.close();
  await warmSdk.kill();
  await serve.close();

  const rows = [];
  for (const [name, t] of Object.entries(times)) {
    const [what, how] = name.split('|');
    t.sort((a, b) => a - b);
    rows.push({ what, how, med: median(t), p90: percentile(t, 0.9) });
  }
  // Each SDK row's ratio is to the in-process row of its group (the row after it).
  const lines = rows.map((r, i) => {
    const ref = r.how.startsWith('SDK') ? rows[i + 1].med : r.med;
    return `| ${r.what} | ${r.how} | ${r.med.toFixed(2)} | ${r.p90.toFixed(2)} | ${(r.med / ref).toFixed(2)}× |`;
  });
  const cpu = os.cpus()[0] ? os.cpus()[0].model : '?';
  const block = [
    START,
    `## \`kern serve\`: the E2B SDK through the server, beside the in-process API, ${BUILD.key} build`,
    '',
    `- Host: ${os.cpus().length} x ${cpu}, Linux ${os.release()}, ${process.getuid() === 0 ? 'root' : 'unprivileged'}; Node ${process.version}; load average ${os.loadavg()[0].toFixed(1)} at the end; ${new Date().toISOString().slice(0, 10)}`,
    `- Note: ${others.note()}`,
    `- N = ${N} per case after ${WARMUP} warm-up rounds, interleaved round-robin, 50 ms apart; times in ms (median, p90); the ratio is to the in-process row of its group`,
    '- Reproduce: `npm run build && npm run bench:serve` (or `BENCH_N=50 npm run bench:serve`); the SDKs are `e2b` and `@e2b/code-interpreter` from npm, in this process, over loopback HTTP',
    '- E2B\'s cloud: 150–450 ms from create to a first command, from a laptop (the issue\'s figure; not measured here)',
    '',
    '| measurement | case | median | p90 | vs in-process |',
    '| --- | --- | ---: | ---: | ---: |',
    ...lines,
    END,
  ].join('\n');
  writeSection(OUT, START, END, block + '\n');
  process.stdout.write(block + '\n');
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
