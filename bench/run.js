#!/usr/bin/env node
// Side-by-side start-up benchmarks: bare process vs bubblewrap vs kern (API and CLI) vs podman,
// measured in ONE run on the same machine and the same test rootfs, as medians over N iterations.
//
//   npm run bench                 # N = 50
//   BENCH_N=200 npm run bench     # more iterations, tighter numbers
//   BENCH_TPUT_CALLS=0 npm run bench   # without the throughput series
//
// Needs: `npm run build` (./kern and the addon) and the test rootfs (scripts/build-test-rootfs.sh;
// KERN_TEST_ROOTFS overrides its location). Writes the table between the bench markers of
// BENCHMARKS.md (prose outside the markers is kept) and prints it. Measurements only: nothing here
// passes or fails on a number.
//
// Method: every case is timed the same way, from just before the call to its completion, with
// process.hrtime.bigint(). Spawned cases use child_process.spawn with piped stdout/stderr (drained)
// and resolve on 'close' (process exited and its output fully read) — what any caller that wants
// the output pays. kern API cases time the awaited sb.run()/sb.runCode(), which spawn `kern` the
// same way inside the addon. Cases run sequentially, interleaved round-robin (one iteration of every
// case, then the next), so slow drift on the machine affects all cases alike. A few warm-up
// iterations of every case run first and are not counted; each warm-up also checks that the case
// really succeeds (exit 0, no fault), and a case that does not is reported instead of timed.
//
// Then (issue 21) the warm paths and throughput, and (issue 34) node cells and a 10,000-file
// workspace with and without `trackFiles`; every goal of issue 34 printed beside its bar:
// - Warm rows, in the same round-robin, each after an untimed 150 ms pause (the pool refilled,
//   the previous row's teardown over, as bench/warm.js does): `runCode('1')` on a `prewarm: 4`
//   Sandbox, and a driver-kernel cell `k.runCode('1')`, BENCH_KERNEL_CELLS cells in a row per
//   round after one untimed cell (the first cell after idle time is slower; a harness runs cells
//   back to back).
// - Throughput: BENCH_TPUT_CALLS fresh `run(['/bin/true'])` boxes (half as many python
//   `runCode('pass')` cells) through ONE Sandbox, with 1, 2, 8 and 32 calls in flight, wall time
//   from the first call to the last result; bubblewrap the same way (one `bwrap` process per call
//   from this process) beside it. BENCH_TPUT_REPS repetitions, interleaved; the median is reported.
//   BENCH_TPUT_CALLS=0 skips it.
// - Goals: the figure, the bar, met or not (a report, never a test: nothing fails on a number).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, which, percentile, median, writeSection, requireBuilt, sh, bwrapArgs, timeSpawn, otherWork, builtProfile } = require('./common');

const die = dieFor('bench');
// Other work on the machine disturbs the numbers: sampled between rounds, said in the report.
const { sample: sampleOthers, note: othersNote } = otherWork();
const parsePositiveInt = (value, dflt, name) => positiveInt(value, dflt, name, die);

const N = parsePositiveInt(process.env.BENCH_N, 50, 'BENCH_N');
const WARMUP = parsePositiveInt(process.env.BENCH_WARMUP, 5, 'BENCH_WARMUP');
// The release build's figures and the dev build's each have their own sections (users get the
// release build; the test suite runs the dev build): which build ./kern is picks them.
const BUILD = builtProfile();
const TAG = BUILD.key === 'release' ? ':release' : '';
const START = `<!-- bench${TAG}:start -->`;
const END = `<!-- bench${TAG}:end -->`;
const KERNEL_CELLS = parsePositiveInt(process.env.BENCH_KERNEL_CELLS, 5, 'BENCH_KERNEL_CELLS');
const TPUT_CALLS = process.env.BENCH_TPUT_CALLS === '0' ? 0 : parsePositiveInt(process.env.BENCH_TPUT_CALLS, 160, 'BENCH_TPUT_CALLS');
const TPUT_REPS = parsePositiveInt(process.env.BENCH_TPUT_REPS, 3, 'BENCH_TPUT_REPS');
const TPUT_CONCURRENCY = [1, 2, 8, 32];
const WARM_PAUSE_MS = 150;
const GOALS_START = `<!-- bench-goals${TAG}:start -->`;
const GOALS_END = `<!-- bench-goals${TAG}:end -->`;

// ---- preconditions ----------------------------------------------------------------------------

function checkPrerequisites() {
  if (!fs.existsSync(path.join(ROOTFS, 'usr/bin/python3')) || !fs.existsSync(path.join(ROOTFS, 'bin/true'))) {
    die(`test rootfs not found at ${ROOTFS} (needs usr/bin/python3 and bin/true).\n` +
      '       Build it with: bash scripts/build-test-rootfs.sh   (or set KERN_TEST_ROOTFS)');
  }
  return requireBuilt(REPO, KERN, die);
}

// ---- timing primitives -----------------------------------------------------------------------

// Throws unless `r` is a clean result (and, with `text`, its first result's text is that).
function checkResult(r, text) {
  if (r.fault || r.exitCode !== 0) {
    const why = r.fault ? `fault ${r.fault.type}: ${r.fault.message}` : `exit ${r.exitCode}`;
    throw new Error(`${why}${r.stderr ? ` | stderr: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`);
  }
  if (text !== undefined) {
    const got = r.results && r.results[0] ? r.results[0].text : undefined;
    if (got !== text) throw new Error(`expected a result with text ${JSON.stringify(text)}, got ${JSON.stringify(got)}`);
  }
  return r;
}

async function timeApi(fn, text) {
  const t0 = process.hrtime.bigint();
  const r = await fn();
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  checkResult(r, text);
  return ms;
}

const CLK_TCK = Number(sh('getconf', ['CLK_TCK'])) || 100;

/** CPU ms used so far by this process and every descendant it (or they) reaped: kern, the box's
 * PID 1 and the workload all end reaped by their parent, so a call's whole cost lands here. */
function cpuMsSelfAndReaped() {
  const stat = fs.readFileSync('/proc/self/stat', 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // f[0] is field 3 (state)
  return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / CLK_TCK;
}

/** CPU ms the whole host has been busy so far (user, nice, system, irq, softirq of /proc/stat's
 * `cpu` line, all cores together): what a call costs counted wherever it ran, a process nobody
 * of ours reaped (bubblewrap's box) and the kernel's own work included. The bench runs on an
 * otherwise idle machine; whatever else ran is in it too, for both sides alike. */
function hostBusyMs() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/).slice(1).map(Number);
  return ((f[0] + f[1] + f[2] + f[5] + f[6]) * 1000) / CLK_TCK;
}

/** Calls/s of `calls` calls of `one` with `conc` in flight (a new call starts as one ends), and
 * CPU ms per call: this process and the reaped processes of the calls (`cpuMs`), and the whole
 * host's (`hostCpuMs`), all cores together. */
async function throughput(calls, conc, one) {
  let started = 0;
  const host0 = hostBusyMs();
  const cpu0 = cpuMsSelfAndReaped();
  const t0 = process.hrtime.bigint();
  const worker = async () => {
    while (started < calls) {
      started++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: Math.min(conc, calls) }, worker));
  const rate = calls / (Number(process.hrtime.bigint() - t0) / 1e9);
  return { rate, cpuMs: (cpuMsSelfAndReaped() - cpu0) / calls, hostCpuMs: (hostBusyMs() - host0) / calls };
}

// ---- cases ------------------------------------------------------------------------------------

async function main() {
  const api = checkPrerequisites();
  const { Sandbox } = api;
  const TRUE = ['/bin/true'];
  const PY = ['/usr/bin/python3', '-c', 'pass'];
  const NODE = ['/usr/bin/node', '-e', '0'];
  const hasNode = fs.existsSync(path.join(ROOTFS, 'usr/bin/node'));

  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-'));
  const bwrapWs = fs.mkdtempSync(path.join(scratch, 'bwrap-ws-'));
  const notes = [];

  // bwrap must bind the workspace onto a directory that exists in the read-only rootfs (it cannot
  // create a mount point there). A plain debootstrap rootfs has no /workspace; /mnt is the same
  // kind of empty directory, so the cost is identical.
  const wsTarget = fs.existsSync(path.join(ROOTFS, 'workspace')) ? '/workspace' : '/mnt';
  if (wsTarget !== '/workspace') {
    notes.push(`bubblewrap binds its workspace at \`${wsTarget}\`: the read-only rootfs has no \`/workspace\` and bwrap cannot create a mount point in it.`);
  }

  const bwrap = which('bwrap');
  const podman = which('podman');

  const sandboxes = [];
  async function openSandbox(opts) {
    const sb = await new Sandbox({ image: ROOTFS, ...opts }).open();
    sandboxes.push(sb);
    return sb;
  }

  /** @type {{name: string, group: 'true'|'python', kind: string, fn?: () => Promise<number>, skip?: string, times: number[], error?: string}[]} */
  const cases = [];
  const add = (name, group, kind, fn, skip) => cases.push({ name, group, kind, fn, skip, times: [] });

  add('bare process: `/bin/true`', 'true', 'bare', () => timeSpawn(TRUE));
  add('bare process: `python3 -c pass`', 'python', 'bare', () => timeSpawn(PY));
  add('bubblewrap: `/bin/true`', 'true', 'bwrap', () => timeSpawn(bwrapArgs(ROOTFS, bwrapWs, wsTarget, TRUE)),
    bwrap ? undefined : 'bwrap not installed');
  add('bubblewrap: `python3 -c pass`', 'python', 'bwrap', () => timeSpawn(bwrapArgs(ROOTFS, bwrapWs, wsTarget, PY)),
    bwrap ? undefined : 'bwrap not installed');
  // Issue 34: node cells, beside the image's own node started the same way.
  add('bubblewrap: `node -e 0`', 'node', 'bwrap', () => timeSpawn(bwrapArgs(ROOTFS, bwrapWs, wsTarget, NODE)),
    !bwrap ? 'bwrap not installed' : hasNode ? undefined : 'no node in the rootfs');

  let sbLimits, sbNoLimits;
  const apiCase = (name, group, getSb, call, text) => {
    const c = { name, group, kind: 'kern', times: [] };
    c.fn = async () => {
      const sb = await getSb();
      return timeApi(() => call(sb), text);
    };
    cases.push(c);
    return c;
  };
  const getLimits = async () => sbLimits || (sbLimits = await openSandbox({}));
  const getNoLimits = async () => sbNoLimits || (sbNoLimits = await openSandbox({ enforceLimits: false }));
  const plainTrue = apiCase("kern API: `sb.run(['/bin/true'])`", 'true', getLimits, (sb) => sb.run(TRUE));
  apiCase("kern API: `sb.runCode('pass')` (python)", 'python', getLimits, (sb) => sb.runCode('pass', { language: 'python' }));
  // ADDITION (issue 21): a python cell forked from the Sandbox's zygote, in a box of its own.
  let sbZygote;
  const getZygote = async () => sbZygote || (sbZygote = await openSandbox({ zygote: true }));
  apiCase("kern API, `zygote: true`: `sb.runCode('pass')` (python)", 'python', getZygote,
    (sb) => sb.runCode('pass', { language: 'python' }));
  let sbUntrusted;
  const getUntrusted = async () => sbUntrusted || (sbUntrusted = await openSandbox({ securityProfile: 'untrusted' }));
  apiCase("kern API, `securityProfile: 'untrusted'`: `sb.run(['/bin/true'])`", 'true', getUntrusted, (sb) => sb.run(TRUE));
  apiCase("kern API, `securityProfile: 'untrusted'`: `sb.runCode('pass')`", 'python', getUntrusted,
    (sb) => sb.runCode('pass', { language: 'python' }));
  apiCase("kern API, `enforceLimits: false`: `sb.run(['/bin/true'])`", 'true', getNoLimits, (sb) => sb.run(TRUE));
  apiCase("kern API, `enforceLimits: false`: `sb.runCode('pass')`", 'python', getNoLimits,
    (sb) => sb.runCode('pass', { language: 'python' }));
  const nodeCase = apiCase("kern API: `sb.runCode('0', { language: 'node' })`", 'node', getLimits,
    (sb) => sb.runCode('0', { language: 'node' }));
  if (!hasNode) nodeCase.skip = 'no node in the rootfs';

  // Issue 34: what `result.files` costs a call in a workspace of 10,000 files (100 directories of
  // 100), tracked against not tracked, the same command.
  const bigWs = fs.mkdtempSync(path.join(scratch, 'ws10k-'));
  for (let d = 0; d < 100; d++) {
    fs.mkdirSync(path.join(bigWs, `d${d}`));
    for (let f = 0; f < 100; f++) fs.writeFileSync(path.join(bigWs, `d${d}`, `f${f}`), 'x');
  }
  let sbBig, sbBigOff;
  const bigTracked = apiCase("kern API, 10,000-file workspace, `trackFiles: true`: `sb.run(['/bin/true'])`", 'ws', async () =>
    sbBig || (sbBig = await openSandbox({ workspace: bigWs })), (sb) => sb.run(TRUE));
  const bigUntracked = apiCase("kern API, 10,000-file workspace, `trackFiles: false`: `sb.run(['/bin/true'])`", 'ws', async () =>
    sbBigOff || (sbBigOff = await openSandbox({ workspace: bigWs, trackFiles: false })), (sb) => sb.run(TRUE));

  // Warm paths (issue 21's goals): a prewarmed box, and driver-kernel cells in a row.
  let sbWarm, sbKernel, kernel;
  const getWarm = async () => sbWarm || (sbWarm = await openSandbox({ prewarm: 4 }));
  // Each warm row starts after a pause (untimed), as in bench/warm.js: the previous row's
  // background work (a box torn down, the prewarm pool refilling) is over by then.
  const pause = () => new Promise((r) => setTimeout(r, WARM_PAUSE_MS));
  const warmCase = apiCase("kern API, `prewarm: 4`: `sb.runCode('1')` (python)", 'warm', async () => {
    const sb = await getWarm();
    await pause();
    return sb;
  }, (sb) => sb.runCode('1'), '1');
  const kernelCase = { name: `kern API, driver kernel: \`k.runCode('1')\`, ${KERNEL_CELLS} cells in a row per round`, group: 'warm', kind: 'kern', times: [] };
  kernelCase.fn = async () => {
    if (!kernel) {
      sbKernel = await openSandbox({});
      kernel = await sbKernel.kernel();
    }
    await pause();
    checkResult(await kernel.runCode('1'), '1'); // untimed: the first cell after idle time
    const times = [];
    for (let i = 0; i < KERNEL_CELLS; i++) times.push(await timeApi(() => kernel.runCode('1'), '1'));
    return times;
  };
  cases.push(kernelCase);

  // A fixed --workspace, as bwrap gets: without it `kern run` creates and deletes a temporary one.
  const kernWs = fs.mkdtempSync(path.join(scratch, 'kern-ws-'));
  const kernCli = (extra, cmd) => [KERN, 'run', '--image', ROOTFS, '--workspace', kernWs, ...extra, '--', ...cmd];
  add('kern CLI: `kern run -- /bin/true`', 'true', 'kern', () => timeSpawn(kernCli([], TRUE)));
  add('kern CLI: `kern run -- python3 -c pass`', 'python', 'kern', () => timeSpawn(kernCli([], PY)));
  add('kern CLI, `--no-enforce-limits`: `kern run -- /bin/true`', 'true', 'kern',
    () => timeSpawn(kernCli(['--no-enforce-limits'], TRUE)));

  add('podman: `podman run --rootfs` `/bin/true`', 'true', 'podman',
    // Explicit limits: podman's defaults (nofile, nproc) are above this host's hard limits, and
    // runc may not raise them (the container suite passes the same).
    () => timeSpawn([podman, 'run', '--rm', '--network=none', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024', '--rootfs', ROOTFS, ...TRUE]),
    podman ? undefined : 'not installed');

  // Warm-up doubles as a correctness check: a case that fails is reported, not timed.
  for (let w = 0; w < WARMUP; w++) {
    for (const c of cases) {
      if (c.skip || c.error) continue;
      try {
        await c.fn();
      } catch (e) {
        c.error = String(e.message || e).replace(/\s+/g, ' ').slice(0, 300);
      }
    }
  }
  sampleOthers();
  process.stderr.write(`bench: ${WARMUP} warm-up + ${N} timed iterations of ${cases.filter((c) => !c.skip && !c.error).length} cases\n`);
  for (let i = 0; i < N; i++) {
    for (const c of cases) {
      if (c.skip || c.error) continue;
      try {
        c.times.push(...[await c.fn()].flat());
      } catch (e) {
        c.error = `failed on iteration ${i + 1}: ${String(e.message || e).replace(/\s+/g, ' ').slice(0, 300)}`;
      }
    }
    sampleOthers();
    if ((i + 1) % 10 === 0 || i + 1 === N) process.stderr.write(`bench: ${i + 1}/${N}\n`);
  }

  // ---- throughput (issue 21): fresh boxes through one Sandbox, bubblewrap beside it ----
  const tput = [];
  if (TPUT_CALLS) {
    const sb = await getLimits();
    const pyCalls = Math.max(1, Math.floor(TPUT_CALLS / 2));
    const series = [
      { key: 'kern-true', cpu: true, label: "kern API: `sb.run(['/bin/true'])`", calls: TPUT_CALLS, one: async () => checkResult(await sb.run(TRUE)) },
      { key: 'kern-py', cpu: true, label: "kern API: `sb.runCode('pass')` (python)", calls: pyCalls, one: async () => checkResult(await sb.runCode('pass', { language: 'python' })) },
    ];
    // The zygote's forks are the zygote's children, not ours: their CPU time does not reach us.
    const zy = await getZygote();
    series.push({ key: 'kern-zygote-py', label: "kern API, `zygote: true`: `sb.runCode('pass')` (python)", calls: pyCalls, one: async () => checkResult(await zy.runCode('pass', { language: 'python' })) });
    if (bwrap) {
      series.push({ key: 'bwrap-true', label: 'bubblewrap: `/bin/true`', calls: TPUT_CALLS, one: () => timeSpawn(bwrapArgs(ROOTFS, bwrapWs, wsTarget, TRUE)) });
      series.push({ key: 'bwrap-py', label: 'bubblewrap: `python3 -c pass`', calls: pyCalls, one: () => timeSpawn(bwrapArgs(ROOTFS, bwrapWs, wsTarget, PY)) });
    }
    for (const s of series) {
      s.rates = new Map(TPUT_CONCURRENCY.map((c) => [c, []]));
      s.cpuTimes = [];
      s.hostCpuTimes = [];
    }
    for (let rep = 0; rep < TPUT_REPS; rep++) {
      for (const conc of TPUT_CONCURRENCY) {
        for (const s of series) {
          if (s.error) continue;
          try {
            const r = await throughput(s.calls, conc, s.one);
            s.rates.get(conc).push(r.rate);
            s.cpuTimes.push(r.cpuMs);
            // One in flight: the calls' own cost, no queueing.
            if (conc === 1) s.hostCpuTimes.push(r.hostCpuMs);
            sampleOthers();
          } catch (e) {
            s.error = String(e.message || e).replace(/\s+/g, ' ').slice(0, 300);
          }
        }
      }
      process.stderr.write(`bench: throughput ${rep + 1}/${TPUT_REPS}\n`);
    }
    for (const s of series) {
      s.median = new Map([...s.rates].map(([c, r]) => [c, median([...r].sort((a, b) => a - b))]));
      // bwrap's processes do not all end reaped by it (its CPU per `python3 -c pass` came out
      // below a bare python start), so only kern's rows get a CPU figure.
      s.cpuMedian = s.cpu ? median([...s.cpuTimes].sort((a, b) => a - b)) : NaN;
      s.hostCpuMedian = s.hostCpuTimes.length ? median([...s.hostCpuTimes].sort((a, b) => a - b)) : NaN;
      tput.push(s);
    }
  }

  if (kernel) {
    try {
      await kernel.close();
    } catch {}
  }
  for (const sb of sandboxes) {
    try {
      await sb.close();
    } catch {}
  }
  fs.rmSync(scratch, { recursive: true, force: true });

  // ---- report ----
  for (const c of cases) {
    const s = [...c.times].sort((a, b) => a - b);
    c.median = median(s);
    c.p90 = percentile(s, 0.9);
  }
  const ref = (kind, group) => cases.find((c) => c.kind === kind && c.group === group && !c.skip && !c.error && c.times.length);
  const fmt = (x) => (Number.isFinite(x) ? x.toFixed(2) : '—');
  const ratio = (c, r) => (r && r !== c && Number.isFinite(c.median) && c.times.length ? `${(c.median / r.median).toFixed(2)}×` : '—');

  const rows = cases.map((c) => {
    if (c.skip) return `| ${c.name} | ${c.skip} | — | — | — |`;
    if (c.error && !c.times.length) return `| ${c.name} | failed: ${c.error.replace(/\|/g, '\\|')} | — | — | — |`;
    const flag = c.error ? ` (stopped: ${c.error.replace(/\|/g, '\\|')})` : '';
    return `| ${c.name}${flag} | ${fmt(c.median)} | ${fmt(c.p90)} | ${ratio(c, ref('bwrap', c.group))} | ${ratio(c, ref('bare', c.group))} |`;
  });

  const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) || [])[1] || os.cpus()[0]?.model || 'unknown';
  const cgroup = fs.existsSync('/sys/fs/cgroup/cgroup.controllers') ? 'v2' :
    fs.existsSync('/sys/fs/cgroup/unified') ? 'v1 (hybrid)' : 'v1';
  const user = os.userInfo();
  let pkgVersion = '?';
  try {
    pkgVersion = require(path.join(REPO, 'package.json')).version;
  } catch {}

  const profile = BUILD.label;

  const lines = [
    START,
    '<!-- Generated by bench/run.js (`npm run bench`); everything between these markers is overwritten. -->',
    '',
    `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`,
    `- Kernel: ${sh('uname', ['-r']) || os.release()}; cgroup ${cgroup}; ${os.cpus().length} CPU(s): ${cpu.trim()}`,
    `- Node ${process.version}; kern-sandbox ${pkgVersion}, ${profile}; ${sh('bwrap', ['--version']) || 'bubblewrap not installed'}; running as ${user.uid === 0 ? 'root' : `uid ${user.uid} (rootless)`}`,
    `- Rootfs: \`${ROOTFS}\` (Debian bookworm, python ${sh(path.join(ROOTFS, 'usr/bin/python3'), ['-c', 'import platform;print(platform.python_version())']) || '3.11'}); bare cases use the host's \`/usr/bin/python3\``,
    `- N = ${N} timed iterations per case after ${WARMUP} warm-ups, cases interleaved round-robin; times in ms, spawn-to-exit as seen from Node`,
    '- kern CLI rows: `kern run --image ROOTFS --workspace WS [--no-enforce-limits] -- CMD` (default limits: memory 512 MiB, pids 256, timeout 30 s, 64 MiB `/tmp` tmpfs)',
    '- Reproduce: `npm run build && npm run bench` (or `BENCH_N=200 npm run bench` for tighter numbers)',
    '- Isolation in the bubblewrap rows: `bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup-try --die-with-parent --new-session --ro-bind ROOTFS / --proc /proc --dev /dev --tmpfs /tmp --bind WS ' + wsTarget + ' --chdir ' + wsTarget + ' --cap-drop ALL -- CMD`',
    ...notes.map((n) => `- Note: ${n}`),
    `- Note: ${othersNote()}`,
    '',
    '| case | median ms | p90 ms | vs bwrap (same command) | vs bare (same command) |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    END,
  ];
  const block = lines.join('\n');

  // ---- goals (issues 21 and 34): the figure beside its bar ----
  const byName = (c) => (c && !c.skip && c.times.length && Number.isFinite(c.median) ? c : null);
  const kTrue = byName(cases.find((c) => c.name === "kern API: `sb.run(['/bin/true'])`"));
  const kPy = byName(cases.find((c) => c.name === "kern API: `sb.runCode('pass')` (python)"));
  const kZygote = byName(cases.find((c) => c.name === "kern API, `zygote: true`: `sb.runCode('pass')` (python)"));
  const bTrue = byName(ref('bwrap', 'true'));
  const bPy = byName(ref('bwrap', 'python'));
  const goals = [];
  // `met`: true, false, undefined (not measured) or null (a figure beside a goal, no bar).
  const goal = (what, figure, bar, met) => goals.push(`| ${what} | ${figure} | ${bar} | ${met === null ? '—' : met === undefined ? 'not measured' : met ? '**met**' : 'not met'} |`);
  const ratioGoal = (what, k, b, bar) => {
    if (!k || !b) return goal(what, '—', `≤ ${bar}×`, undefined);
    const r = k.median / b.median;
    goal(what, `${r.toFixed(2)}× (${fmt(k.median)} / ${fmt(b.median)} ms)`, `≤ ${bar}×`, r <= bar);
  };
  const msGoal = (what, c, bar) => (c ? goal(what, `${c.median < 1 ? c.median.toFixed(3) : fmt(c.median)} ms`, `≤ ${bar} ms`, c.median <= bar) : goal(what, '—', `≤ ${bar} ms`, undefined));
  // Issue 34's goals (issue 21's, with its rows carried on where they remain).
  ratioGoal("python `runCode('pass')`, the box forked from the Sandbox's zygote (`zygote: true`), vs bubblewrap `python3 -c pass`", kZygote, bPy, 0.5);
  ratioGoal("python `runCode('pass')`, fresh box (no zygote), caps on, vs bubblewrap `python3 -c pass`", kPy, bPy, 1.0);
  ratioGoal("node `runCode('0')`, fresh box, vs bubblewrap `node -e 0`", byName(nodeCase), byName(ref('bwrap', 'node')), 1.0);
  ratioGoal("`run(['/bin/true'])` vs bubblewrap `/bin/true`", kTrue, bTrue, 0.6);
  msGoal("prewarmed `runCode('1')`, end to end", byName(warmCase), 1);
  msGoal("driver-kernel cell `k.runCode('1')`, round trip", byName(kernelCase), 0.1);
  const at8 = (s) => (s && !s.error ? s.median.get(8) : undefined);
  const trueAt8 = at8(tput.find((x) => x.key === 'kern-true'));
  goal("`true` boxes/s, one Sandbox, 8 in flight", Number.isFinite(trueAt8) ? `${trueAt8.toFixed(0)}/s` : '—', '≥ 300/s',
    Number.isFinite(trueAt8) ? trueAt8 >= 300 : undefined);
  const zyS = tput.find((x) => x.key === 'kern-zygote-py');
  const bwPyS = tput.find((x) => x.key === 'bwrap-py');
  const best = (s) => (s && !s.error ? Math.max(...TPUT_CONCURRENCY.map((c) => s.median.get(c)).filter(Number.isFinite)) : NaN);
  goal("python cells/s with the zygote, vs bubblewrap `python3 -c pass` (each at its best concurrency)",
    Number.isFinite(best(zyS)) && Number.isFinite(best(bwPyS)) ? `${(best(zyS) / best(bwPyS)).toFixed(2)}× (${best(zyS).toFixed(0)}/s / ${best(bwPyS).toFixed(0)}/s)` : '—',
    '≥ 2×', Number.isFinite(best(zyS)) && Number.isFinite(best(bwPyS)) ? best(zyS) / best(bwPyS) >= 2 : undefined);
  // The whole host's busy time, one call in flight: bubblewrap's box is nobody's child of ours.
  for (const [k, b, what] of [['kern-true', 'bwrap-true', "`run(['/bin/true'])`"], ['kern-py', 'bwrap-py', "`runCode('pass')` (python) against bubblewrap's `python3 -c pass`"]]) {
    const ks = tput.find((x) => x.key === k);
    const bs = tput.find((x) => x.key === b);
    const kc = ks ? ks.hostCpuMedian : NaN;
    const bc = bs ? bs.hostCpuMedian : NaN;
    const ok = Number.isFinite(kc) && Number.isFinite(bc);
    goal(`CPU per call (user+sys, the whole host, one in flight), ${what}`, ok ? `${(kc / bc).toFixed(2)}× (${fmt(kc)} / ${fmt(bc)} ms)` : '—',
      "≤ 1× bubblewrap's for the same command", ok ? kc <= bc : undefined);
  }
  const bt = byName(bigTracked);
  const bu = byName(bigUntracked);
  const bp = byName(plainTrue);
  // The issue's measure: what 10,000 files cost a call over an empty workspace (watched, the
  // default); and what tracking them costs over not tracking them (kern walks those for set-id).
  goal('10,000-file workspace, extra per call (watched, the default, against an empty workspace)', bt && bp ? `${(bt.median - bp.median).toFixed(2)} ms (${fmt(bt.median)} / ${fmt(bp.median)} ms)` : '—',
    '≤ 1 ms', bt && bp ? bt.median - bp.median <= 1 : undefined);
  goal('10,000-file workspace, `trackFiles` on against off', bt && bu ? `${(bt.median - bu.median).toFixed(2)} ms (${fmt(bt.median)} / ${fmt(bu.median)} ms)` : '—',
    '—', null);

  const ncpu = os.cpus().length;
  const tputRows = tput.map((s) => `| ${s.label}${s.error ? ` (stopped: ${s.error.replace(/\|/g, '\\|')})` : ''} | ${s.calls} | ${TPUT_CONCURRENCY.map((c) => (Number.isFinite(s.median.get(c)) ? s.median.get(c).toFixed(0) : '—')).join(' | ')} | ${fmt(s.cpuMedian)} | ${fmt(s.hostCpuMedian)} | ${Number.isFinite(s.cpuMedian) ? ((ncpu * 1000) / s.cpuMedian).toFixed(0) : '—'} |`);
  const goalLines = [
    GOALS_START,
    '<!-- Generated by bench/run.js (`npm run bench`) from the same run as the table above; everything between these markers is overwritten. -->',
    '',
    `Issue 34's goals, each beside its bar: medians of the run above (same date, machine and build). Reproduce: \`npm run bench\`. A report only: nothing fails on a number.`,
    '',
    '| goal | measured | bar | |',
    '| --- | --- | --- | --- |',
    ...goals,
    '',
    ...(tput.length ? [
      `Throughput, calls/s (median of ${TPUT_REPS} repetition${TPUT_REPS === 1 ? '' : 's'}; wall time from the first call to the last result, a new call started as one ends; kern through one Sandbox with default limits, bubblewrap as one \`bwrap\` process per call from this process). CPU ms per call, reaped: user + system time of this process and of every process it reaped (kern, the box's PID 1, the workload), over all the points, median (not given for bubblewrap: its box's processes are not all reaped by the \`bwrap\` we spawn, so their CPU time does not reach us; nor for the zygote's forks, its children); host: the whole host's busy time (user, nice, system, irq, softirq of /proc/stat) over the points with one call in flight, median, for every series alike; the ceiling is what the CPUs would allow were the calls only the reaped CPU:`,
      '',
      `| series | calls per point | ${TPUT_CONCURRENCY.map((c) => `${c} in flight`).join(' | ')} | CPU ms per call, reaped | CPU ms per call, host | ceiling on ${ncpu} CPUs, calls/s |`,
      `| --- | ---: | ${TPUT_CONCURRENCY.map(() => '---:').join(' | ')} | ---: | ---: | ---: |`,
      ...tputRows,
      '',
    ] : ['Throughput not measured (`BENCH_TPUT_CALLS=0`).', '']),
    GOALS_END,
  ];
  const goalBlock = goalLines.join('\n');

  writeSection(
    OUT,
    START,
    END,
    block,
    '# Benchmarks\n\nStart-up cost of one fresh box, side by side with a bare process and bubblewrap.\n\n'
  );
  writeSection(OUT, GOALS_START, GOALS_END, goalBlock);
  console.log(block);
  console.log('\n' + goalBlock);
  console.log(`\nbench: wrote ${path.relative(process.cwd(), OUT) || OUT}`);

  if (cases.some((c) => c.error) || tput.some((s) => s.error)) {
    console.error('bench: some cases failed (see the table); the other numbers are still valid');
  }
}

main().catch((e) => {
  console.error('bench: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
