#!/usr/bin/env node
// Warm-path benchmarks: a python runCode served by the prewarm pool, and a cell on a warm kernel,
// side by side with a cold runCode (a fresh box and a fresh interpreter per call), plus what an idle
// prewarmed slot costs in memory. One run, one machine, medians over N iterations.
//
//   npm run bench:warm                  # N = 50
//   BENCH_N=200 npm run bench:warm      # more iterations, tighter numbers
//
// Needs: `npm run build` (./kern and the addon) and the test rootfs (scripts/build-test-rootfs.sh;
// KERN_TEST_ROOTFS overrides its location). Writes its section between the bench-warm markers of
// BENCHMARKS.md (appended at the end when absent; nothing outside the markers is touched) and prints
// it. Measurements only: nothing here passes or fails on a number; the goals are stated next to
// what was measured.
//
// Method:
// - Every timed call runs from just before the call to its awaited completion, with
//   process.hrtime.bigint(), and every result is checked (no fault, exit 0, and for `runCode('1')`
//   a first result whose text is "1"); a call that fails stops its case, it never counts as fast.
// - Each case has a Sandbox of its own, opened once before timing (opening is not timed), each with
//   a workspace of its own in a scratch directory, so the prewarm pools can be told apart on the host.
// - Cases run interleaved round-robin (one iteration of every case, then the next), so slow drift
//   on the machine affects all alike. Every iteration of every case starts after a 150 ms pause
//   outside the timing: the previous case's background work (a pool refilling, a box torn down) is
//   over by then, and every case starts from the same idle state, as a call after a model's think
//   time does. (A first kernel cell after a pause measured 2-6x slower than cells in a row here, so
//   without the pause a case's numbers would depend on its neighbour.)
//   BENCH_WARMUP warm-up iterations of every case run first, are not counted, and check that the
//   case succeeds; a case that does not is reported instead of timed.
//   cold: `runCode('1')` on a Sandbox without prewarm (a new box, a new interpreter per call).
//   prewarmed, pool refilled: `runCode('1')` on a Sandbox with `prewarm: 4`, one call per
//   iteration; before the pause its pool is inspected on the host (idle drivers counted), so the
//   report can say whether each call really found a full pool.
//   prewarmed, back-to-back: on another `prewarm: 4` Sandbox, one iteration is a burst of
//   2 x prewarm calls with nothing in between, each call timed on its own; the first `prewarm` of a
//   burst can find a booted slot, the rest take slots started during the burst. Same inspection.
//   kernel: `k.runCode('pass')` and `k.runCode('1')` on one `sb.kernel()` of a fourth Sandbox, 10
//   cells in a row per iteration: the first after the pause, each other directly after the last.
// - Idle-slot memory: a `prewarm: 4` Sandbox is opened with nothing else open, left alone for 1 s,
//   and its slots are found on the host: processes whose /proc/PID/cmdline contains `_kern_driver`
//   (the python driver), whose parent is the box's PID 1, whose parent is the kern monitor, whose
//   parent is this process, and whose /workspace is that Sandbox's. VmRSS (/proc/PID/status) of
//   python, PID 1 and kern are summed per slot; Pss (smaps_rollup) is given alongside, since RSS
//   counts pages the slots share once per slot. Measured again on the same Sandbox after the run.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, percentile, median, writeSection, requireBuilt, sh, readText, readProcs, otherWork, closeOnExit } = require('./common');

const die = dieFor('bench-warm');
const parsePositiveInt = (value, dflt, name) => positiveInt(value, dflt, name, die);

const N = parsePositiveInt(process.env.BENCH_N, 50, 'BENCH_N');
const WARMUP = parsePositiveInt(process.env.BENCH_WARMUP, 5, 'BENCH_WARMUP');
const START = '<!-- bench-warm:start -->';
const END = '<!-- bench-warm:end -->';

const PREWARM = 4;
const BURST = 2 * PREWARM;
const PAUSE_MS = 150;
const KERNEL_RUN = 10;
const SETTLE_MS = 1000;
const DRIVER_MARK = '_kern_driver';

// Goals from the issue, compared against in the report (never enforced).
const GOAL_SPEEDUP = 3; // prewarmed at least 3x faster than cold
const GOAL_PREWARM_MS = 1; // prewarmed runCode end to end
const GOAL_KERNEL_MS = 0.2; // kernel cell round trip
const GOAL_SLOT_MIB = 12; // idle slot RSS

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (msg) => process.stderr.write(`bench-warm: ${msg}\n`);
const oneLine = (s) => String(s).replace(/\s+/g, ' ').trim();
const now = () => process.hrtime.bigint();
const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

// ---- preconditions ----------------------------------------------------------------------------

function checkPrerequisites() {
  if (!fs.existsSync(path.join(ROOTFS, 'usr/bin/python3'))) {
    die(`test rootfs not found at ${ROOTFS} (needs usr/bin/python3).\n` +
      '       Build it with: bash scripts/build-test-rootfs.sh   (or set KERN_TEST_ROOTFS)');
  }
  return requireBuilt(REPO, KERN, die);
}

// ---- result checks ----------------------------------------------------------------------------

function describeFailure(r) {
  const why = r.fault ? `fault ${r.fault.type}: ${r.fault.message}` : `exit ${r.exitCode}`;
  const err = r.stderr ? ` | stderr: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}` : '';
  return oneLine(why + err);
}

/** Throws unless `r` is a clean result; with `text`, also unless its first result's text is that. */
function check(r, text) {
  if (r.fault || r.exitCode !== 0) throw new Error(describeFailure(r));
  if (text !== undefined) {
    const got = r.results && r.results[0] ? r.results[0].text : undefined;
    if (got !== text) throw new Error(`expected a result with text ${JSON.stringify(text)}, got ${JSON.stringify(got)}`);
  }
  return r;
}

// ---- the host's view of the boxes (/proc) -------------------------------------------------------

/** The host-side root of whatever is mounted at /workspace in pid's mount namespace. */
function workspaceRoot(pid) {
  const info = readText(`/proc/${pid}/mountinfo`);
  if (!info) return null;
  for (const line of info.split('\n')) {
    const f = line.split(' ');
    if (f[4] === '/workspace') return f[3].replace(/\\040/g, ' ');
  }
  return null;
}

/** Whether the driver is idle: asleep in a read on its channel socket. Without a wchan (kernels
 * that hide it) a sleeping driver counts as idle. */
function isIdle(pid, state) {
  if (state !== 'S') return false;
  const w = (readText(`/proc/${pid}/wchan`) || '').trim();
  return w === '' || w === '0' || /unix_stream|sk_wait|wait_for_more|read/.test(w);
}

/**
 * The prewarmed slots of the Sandbox whose workspace directory is named `wsName`: python drivers
 * (cmdline holds DRIVER_MARK) below that Sandbox's boxes. A slot is the chain kern monitor (a child
 * of this process) -> the box's PID 1 -> python.
 */
function findSlots(wsName, procs = readProcs()) {
  const slots = [];
  for (const [pid, p] of procs) {
    const pid1 = procs.get(p.ppid);
    if (!pid1) continue;
    const mon = procs.get(pid1.ppid);
    if (!mon || mon.ppid !== process.pid) continue;
    const cmd = readText(`/proc/${pid}/cmdline`);
    if (!cmd || !cmd.includes(DRIVER_MARK)) continue;
    const root = workspaceRoot(pid);
    if (!root || path.basename(root) !== wsName) continue;
    slots.push({ python: pid, pid1: p.ppid, kern: pid1.ppid, idle: isIdle(pid, p.state) });
  }
  return slots;
}

/** kB fields of one process: VmRSS, RssAnon, RssFile from status; Pss from smaps_rollup. */
function memOf(pid) {
  const status = readText(`/proc/${pid}/status`) || '';
  const field = (text, name) => {
    const m = text.match(new RegExp(`^${name}:\\s*(\\d+) kB`, 'm'));
    return m ? Number(m[1]) : NaN;
  };
  const rollup = readText(`/proc/${pid}/smaps_rollup`) || '';
  return { rss: field(status, 'VmRSS'), anon: field(status, 'RssAnon'), file: field(status, 'RssFile'), pss: field(rollup, 'Pss') };
}

/** Memory of every slot of a Sandbox, plus its idle kern spares (children of this process with no
 * children of their own that are not a slot's monitor); only meaningful while it is the only one open. */
function measureSlots(wsName, spares) {
  const procs = readProcs();
  const slots = findSlots(wsName, procs);
  const per = slots.map((s) => {
    const py = memOf(s.python);
    const p1 = memOf(s.pid1);
    const k = memOf(s.kern);
    return {
      idle: s.idle,
      pyRss: py.rss,
      pyAnon: py.anon,
      pyFile: py.file,
      pid1Rss: p1.rss,
      kernRss: k.rss,
      slotRss: py.rss + p1.rss + k.rss,
      slotPss: py.pss + p1.pss + k.pss,
      pyPss: py.pss,
    };
  });
  let spareRss = [];
  if (spares) {
    const monitors = new Set(slots.map((s) => s.kern));
    const hasChild = new Set([...procs.values()].map((p) => p.ppid));
    for (const [pid, p] of procs) {
      if (p.ppid !== process.pid || monitors.has(pid) || hasChild.has(pid)) continue;
      if (!/kern/.test(p.comm)) continue;
      spareRss.push(memOf(pid).rss);
    }
  }
  return { slots: per, spareRss };
}

const { sample: sampleOthers, note: othersNote } = otherWork();

// ---- main -------------------------------------------------------------------------------------

const { opened, closeAll } = closeOnExit(log); // Sandboxes and kernels to close, in reverse order

async function main() {
  const { Sandbox } = checkPrerequisites();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-warm-'));
  const tag = path.basename(scratch);
  const wsName = (which) => `${tag}-${which}`;
  async function openSandbox(which, opts = {}) {
    const ws = path.join(scratch, wsName(which));
    fs.mkdirSync(ws);
    const sb = new Sandbox({ image: ROOTFS, workspace: ws, ...opts });
    await sb.open();
    opened.push(sb);
    return sb;
  }

  try {
    return await run(openSandbox, wsName);
  } finally {
    await closeAll();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

async function run(openSandbox, wsName) {
  // ---- idle-slot memory, with nothing else open ----
  const sbRefill = await openSandbox('refill', { prewarm: PREWARM });
  await sleep(SETTLE_MS);
  const memOpen = measureSlots(wsName('refill'), true);
  log(`after open + ${SETTLE_MS} ms: ${memOpen.slots.length} slot(s) found, ${memOpen.slots.filter((s) => s.idle).length} idle`);

  const sbCold = await openSandbox('cold');
  const sbBurst = await openSandbox('burst', { prewarm: PREWARM });
  const sbKernel = await openSandbox('kernel');
  const kernel = await sbKernel.kernel();
  opened.push(kernel);
  sampleOthers();

  /** Idle slots of a pool right now (outside any timing). */
  const idleSlots = (which) => findSlots(wsName(which)).filter((s) => s.idle).length;

  // A case's `before` runs ahead of the pause that precedes it (untimed); its `fn` makes the timed
  // calls and returns one time per call, by position; `rows` says which positions each table row
  // summarises.
  /** @type {{key: string, before?: () => void, fn: () => Promise<number[]>, rows: {name: string, from: number, to: number}[], pos: number[][], error?: string}[]} */
  const cases = [];
  const add = (key, fn, rows, before) => cases.push({ key, fn, rows, before, pos: [] });
  const timed = async (call, text) => {
    const t0 = now();
    const r = await call();
    const ms = msSince(t0);
    check(r, text);
    return ms;
  };

  add('cold', async () => [await timed(() => sbCold.runCode('1'), '1')],
    [{ name: "cold: `sb.runCode('1')`, no prewarm", from: 0, to: 1 }]);

  // Nothing takes a slot between the inspection and the call, so an idle slot seen here is still
  // there (and idle) when the call comes.
  const refill = { fullBefore: 0, calls: 0 };
  add('refill', async () => [await timed(() => sbRefill.runCode('1'), '1')],
    [{ name: `prewarmed: \`sb.runCode('1')\`, prewarm ${PREWARM}, pool refilled between calls`, from: 0, to: 1 }],
    () => {
      refill.calls++;
      if (idleSlots('refill') === PREWARM) refill.fullBefore++;
    });

  const burst = { fullBefore: 0, calls: 0 };
  add('burst', async () => {
    const times = [];
    for (let i = 0; i < BURST; i++) times.push(await timed(() => sbBurst.runCode('1'), '1'));
    return times;
  }, [
    { name: `prewarmed, back-to-back: bursts of ${BURST} \`sb.runCode('1')\`, prewarm ${PREWARM}`, from: 0, to: BURST },
    { name: `… of which calls 1–${PREWARM} of each burst`, from: 0, to: PREWARM },
    { name: `… of which calls ${PREWARM + 1}–${BURST} of each burst`, from: PREWARM, to: BURST },
  ], () => {
    burst.calls++;
    if (idleSlots('burst') === PREWARM) burst.fullBefore++;
  });

  // KERNEL_RUN cells in a row per iteration: the first after the pause, the others each directly
  // after the one before.
  const kernelCase = (key, code, text) => add(key, async () => {
    const times = [];
    for (let i = 0; i < KERNEL_RUN; i++) times.push(await timed(() => kernel.runCode(code), text));
    return times;
  }, [
    { name: `kernel: \`k.runCode('${code}')\`, first cell after the ${PAUSE_MS} ms pause`, from: 0, to: 1 },
    { name: `kernel: \`k.runCode('${code}')\`, cells 2–${KERNEL_RUN} of ${KERNEL_RUN} in a row`, from: 1, to: KERNEL_RUN },
  ]);
  kernelCase('kpass', 'pass');
  kernelCase('kone', '1', '1');

  const once = async (c) => {
    if (c.before) c.before();
    await sleep(PAUSE_MS);
    return c.fn();
  };

  // Warm-up doubles as a correctness check: a case that fails is reported, not timed. The pool
  // inspections are reset afterwards so that they describe the timed calls only.
  for (let w = 0; w < WARMUP; w++) {
    for (const c of cases) {
      if (c.error) continue;
      try {
        await once(c);
      } catch (e) {
        c.error = oneLine(e.message || e).slice(0, 300);
      }
    }
  }
  refill.fullBefore = refill.calls = 0;
  burst.fullBefore = burst.calls = 0;
  sampleOthers();

  log(`${WARMUP} warm-up + ${N} timed iterations of ${cases.filter((c) => !c.error).length} cases`);
  for (let i = 0; i < N; i++) {
    for (const c of cases) {
      if (c.error) continue;
      try {
        const ts = await once(c);
        ts.forEach((t, j) => (c.pos[j] ||= []).push(t));
      } catch (e) {
        c.error = `failed on iteration ${i + 1}: ${oneLine(e.message || e).slice(0, 300)}`;
      }
    }
    sampleOthers();
    if ((i + 1) % 10 === 0 || i + 1 === N) log(`${i + 1}/${N}`);
  }

  // ---- idle-slot memory again, on the same pool after the run ----
  await sleep(SETTLE_MS);
  const memAfter = measureSlots(wsName('refill'), false);
  sampleOthers();

  return report(cases, burst, refill, memOpen, memAfter);
}

// ---- report -----------------------------------------------------------------------------------

function report(cases, burst, refill, memOpen, memAfter) {
  const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '—');
  const stats = (times) => {
    const s = [...times].sort((a, b) => a - b);
    return { n: s.length, median: median(s), p90: percentile(s, 0.9), min: s[0], max: s[s.length - 1] };
  };
  const byKey = Object.fromEntries(cases.map((c) => [c.key, c]));
  for (const c of cases) for (const r of c.rows) Object.assign(r, stats(c.pos.slice(r.from, r.to).flat()));
  const have = (r) => !!(r && r.n && Number.isFinite(r.median));
  const cold = have(byKey.cold.rows[0]) ? byKey.cold.rows[0] : null;
  const vsCold = (m) => (cold && Number.isFinite(m) ? `${(m / cold.median).toFixed(3)}×` : '—');
  const fasterThanCold = (m) => (cold && Number.isFinite(m) && m > 0 ? `${(cold.median / m).toFixed(1)}×` : '—');

  const esc = (s) => s.replace(/\|/g, '\\|');
  const rows = [];
  for (const c of cases) {
    for (const [i, r] of c.rows.entries()) {
      const first = i === 0;
      if (c.error && !r.n) {
        if (first) rows.push(`| ${r.name} | failed: ${esc(c.error)} | — | — | — | — | — |`);
        continue;
      }
      const flag = c.error && first ? ` (stopped: ${esc(c.error)})` : '';
      const d = r.median < 1 ? 3 : 2;
      rows.push(`| ${r.name}${flag} | ${r.n} | ${fmt(r.median, d)} | ${fmt(r.p90, d)} | ${fmt(r.min, d)}–${fmt(r.max, d)} | ${vsCold(r.median)} | ${fasterThanCold(r.median)} |`);
    }
  }

  // Memory table: per-slot medians (min–max), in MiB.
  const mib = (kb) => kb / 1024;
  const memCell = (m, key) => {
    if (!m.slots.length) return 'no slot found';
    const v = m.slots.map((s) => mib(s[key])).filter(Number.isFinite).sort((a, b) => a - b);
    if (!v.length) return '—';
    return `${fmt(median(v))} (${fmt(v[0])}–${fmt(v[v.length - 1])})`;
  };
  const memRows = [
    ['python driver, VmRSS', 'pyRss'],
    ['… of which anonymous (RssAnon)', 'pyAnon'],
    ['… of which file-backed (RssFile)', 'pyFile'],
    ["box's PID 1 (`kern`), VmRSS", 'pid1Rss'],
    ['kern monitor, VmRSS', 'kernRss'],
    ['**whole slot (kern + PID 1 + python), VmRSS**', 'slotRss'],
    ['python driver, Pss', 'pyPss'],
    ['whole slot, Pss', 'slotPss'],
  ].map(([label, key]) => `| ${label} | ${memCell(memOpen, key)} | ${memCell(memAfter, key)} |`);
  const slotRssMedian = memOpen.slots.length ? median(memOpen.slots.map((s) => mib(s.slotRss)).sort((a, b) => a - b)) : NaN;
  const pyRssMedian = memOpen.slots.length ? median(memOpen.slots.map((s) => mib(s.pyRss)).sort((a, b) => a - b)) : NaN;
  const slotPssMedian = memOpen.slots.length ? median(memOpen.slots.map((s) => mib(s.slotPss)).sort((a, b) => a - b)) : NaN;
  const spares = memOpen.spareRss;

  // Goals.
  const r = byKey.refill.rows[0];
  const [b, bFirst, bRest] = byKey.burst.rows;
  const [kpIdle, kpNext] = byKey.kpass.rows;
  const [k1Idle, k1Next] = byKey.kone.rows;
  const met = (ok) => (ok === null ? 'not measured' : ok ? 'met' : '**not met**');
  const speedup = have(r) && cold ? cold.median / r.median : NaN;
  const speedupB = have(b) && cold ? cold.median / b.median : NaN;
  const kernelMet = (k) => met(have(k) ? k.median <= GOAL_KERNEL_MS : null);
  const goals = [
    `| prewarmed ≥ ${GOAL_SPEEDUP}× faster than cold | pool refilled: ${fmt(speedup, 1)}× (${fmt(r.median)} vs ${fmt(cold ? cold.median : NaN)} ms); back-to-back: ${fmt(speedupB, 1)}× (${fmt(b.median)} ms) | ${met(Number.isFinite(speedup) ? speedup >= GOAL_SPEEDUP : null)} (pool refilled); ${met(Number.isFinite(speedupB) ? speedupB >= GOAL_SPEEDUP : null)} (back-to-back) |`,
    `| prewarmed runCode ≤ ${GOAL_PREWARM_MS} ms end to end | ${fmt(r.median)} ms median (pool refilled), ${fmt(r.min)} ms fastest | ${met(have(r) ? r.median <= GOAL_PREWARM_MS : null)} |`,
    `| kernel cell round trip ≤ ${GOAL_KERNEL_MS} ms | \`pass\`: ${fmt(kpIdle.median, 3)} ms median as the first cell after a pause, ${fmt(kpNext.median, 3)} ms for cells 2–${KERNEL_RUN} in a row | ${kernelMet(kpIdle)} (first after a pause); ${kernelMet(kpNext)} (in a row) |`,
    `| idle slot RSS ≤ ${GOAL_SLOT_MIB} MiB | whole slot ${fmt(slotRssMedian)} MiB, python alone ${fmt(pyRssMedian)} MiB (VmRSS, median over ${memOpen.slots.length} slots) | ${met(Number.isFinite(slotRssMedian) ? slotRssMedian <= GOAL_SLOT_MIB : null)} (whole slot); ${met(Number.isFinite(pyRssMedian) ? pyRssMedian <= GOAL_SLOT_MIB : null)} (python alone) |`,
  ];

  // Reading, generated from this run's numbers.
  const reading = [];
  if (cold && have(r)) {
    reading.push(`- A prewarmed \`runCode('1')\` took ${fmt(r.median)} ms against ${fmt(cold.median)} ms cold (${vsCold(r.median)} of cold, ${fmt(speedup, 1)}× faster) when the pool had time to refill; the pool held ${PREWARM} idle drivers before ${refill.fullBefore} of ${refill.calls} timed calls.`);
  }
  if (cold && have(bFirst) && have(bRest)) {
    const cmp = bRest.median > bFirst.median * 1.1 ? 'slower than' : bRest.median < bFirst.median / 1.1 ? 'faster than' : 'about the same as';
    reading.push(`- Back-to-back, a burst's first ${PREWARM} calls took ${fmt(bFirst.median)} ms (median) and the next ${BURST - PREWARM} ${fmt(bRest.median)} ms (${cmp} the first ${PREWARM}), against ${fmt(cold.median)} ms cold and ${fmt(r.median)} ms for a single call on a refilled pool. A slot taken is replaced at once, in the background, so later calls of a burst share the CPUs with the refills and, after the ${PREWARM}th, take a slot started during the burst, booted or not.`);
  }
  if (cold && have(kpIdle) && have(kpNext)) {
    reading.push(`- A kernel cell took ${fmt(kpNext.median, 3)} ms (\`pass\`) and ${fmt(k1Next.median, 3)} ms (\`1\`) in a run of cells, but ${fmt(kpIdle.median, 3)} ms and ${fmt(k1Idle.median, 3)} ms as the first cell after a ${PAUSE_MS} ms pause (${fmt(kpIdle.median / kpNext.median, 1)}× for \`pass\`); either way ${vsCold(kpIdle.median)} of a cold call or less.`);
  }
  if (memOpen.slots.length) {
    reading.push(`- An idle slot holds ${fmt(slotRssMedian)} MiB RSS (${fmt(pyRssMedian)} MiB of it the python driver); counting shared pages once per sharer (Pss) it is ${fmt(slotPssMedian)} MiB. With \`prewarm: ${PREWARM}\` that is about ${fmt(slotRssMedian * PREWARM, 0)} MiB RSS kept for the session.`);
  }

  const cpu = (readText('/proc/cpuinfo') || '').match(/^model name\s*:\s*(.*)$/m)?.[1] || os.cpus()[0]?.model || 'unknown';
  const cgroup = fs.existsSync('/sys/fs/cgroup/cgroup.controllers') ? 'v2' :
    fs.existsSync('/sys/fs/cgroup/unified') ? 'v1 (hybrid)' : 'v1';
  const user = os.userInfo();
  let pkgVersion = '?';
  try {
    pkgVersion = require(path.join(REPO, 'package.json')).version;
  } catch {}
  const pyVersion = sh(path.join(ROOTFS, 'usr/bin/python3'), ['-c', 'import platform;print(platform.python_version())']) || '?';

  const memNotes = [];
  if (memOpen.slots.length !== PREWARM) memNotes.push(`- Note: ${memOpen.slots.length} slot(s) found after open, ${PREWARM} expected`);
  const notIdle = memOpen.slots.filter((s) => !s.idle).length;
  if (notIdle) memNotes.push(`- Note: ${notIdle} slot(s) were not idle when measured after open`);
  if (spares.length) {
    const s = [...spares].sort((a, b2) => a - b2).map(mib);
    memNotes.push(`- Besides its slots, an open Sandbox keeps ${spares.length} spare \`kern\` process(es) ready for its next box (${fmt(median(s))} MiB VmRSS each, median); they belong to the Sandbox, not to a slot, and are not counted above.`);
  }

  const lines = [
    START,
    '<!-- Generated by bench/warm.js (`npm run bench:warm`); everything between these markers is overwritten. -->',
    '',
    '## Warm paths: the prewarm pool and the kernel',
    '',
    `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`,
    `- Kernel: ${sh('uname', ['-r']) || os.release()}; cgroup ${cgroup}; ${os.cpus().length} CPU(s): ${cpu.trim()}; ${Math.round(os.totalmem() / 2 ** 30)} GiB RAM`,
    `- Node ${process.version}; kern-sandbox ${pkgVersion}; running as ${user.uid === 0 ? 'root' : `uid ${user.uid} (rootless)`}`,
    `- Rootfs: \`${ROOTFS}\` (Debian bookworm, python ${pyVersion}); default limits and options otherwise`,
    '- Reproduce: `npm run build && npm run bench:warm` (or `BENCH_N=200 npm run bench:warm` for tighter numbers)',
    `- Note: ${othersNote()}`,
    '',
    'Method:',
    '',
    `- N = ${N} timed iterations per case after ${WARMUP} warm-ups (not counted; each warm-up also checks that the case succeeds), cases interleaved round-robin. Times in ms, from just before the call to its awaited completion (\`process.hrtime.bigint()\`); every result is checked: no fault, exit 0, and for \`runCode('1')\` a first result whose text is \`1\`.`,
    `- Each case has its own Sandbox (and workspace), opened before timing; opening is not timed. Every iteration of every case starts after a ${PAUSE_MS} ms pause outside the timing, so background work of the case before it (a pool refilling, a box being torn down) is over, and every case starts from the same idle state (as a call does after a model's think time); consecutive iterations of one case are thus at least ${cases.length} × ${PAUSE_MS} ms apart.`,
    `- Cold: no prewarm, so each call starts a new box and a new interpreter.`,
    `- Prewarmed, pool refilled: \`prewarm: ${PREWARM}\`, one call per iteration. Before the pause the pool is inspected on the host (nothing takes a slot between then and the call): it held ${PREWARM} idle drivers before ${refill.fullBefore} of ${refill.calls} timed calls.`,
    `- Prewarmed, back-to-back: another \`prewarm: ${PREWARM}\` Sandbox; each iteration is a burst of ${BURST} calls with nothing in between, each timed on its own (so ${BURST} × N samples); the pool held ${PREWARM} idle drivers before ${burst.fullBefore} of ${burst.calls} bursts.`,
    `- Kernel: one \`sb.kernel()\` (started, and its first cell run, during the warm-ups); each iteration times ${KERNEL_RUN} cells in a row, the first right after the pause, each of the others directly after the one before.`,
    `- Idle-slot memory: a \`prewarm: ${PREWARM}\` Sandbox opened with nothing else open and left alone for ${SETTLE_MS / 1000} s; its slots found on the host (python processes whose cmdline contains \`${DRIVER_MARK}\`, child of the box's PID 1, child of the kern monitor, child of this process, with that Sandbox's \`/workspace\`), VmRSS from \`/proc/PID/status\` and Pss from \`/proc/PID/smaps_rollup\` summed per slot. Measured again on the same pool after the run (after another ${SETTLE_MS / 1000} s, other Sandboxes still open). "Idle": the driver is asleep in a read on its channel (\`/proc/PID/wchan\`).`,
    '- "vs cold" is median / cold median; "faster than cold" its inverse. No number here passes or fails anything; the goals below are from the issue.',
    '',
    '### Latency (ms)',
    '',
    '| case | samples | median ms | p90 ms | min–max ms | vs cold | faster than cold |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    `### Idle prewarmed slot, memory per slot (MiB, median over slots, min–max)`,
    '',
    `| process | after open + ${SETTLE_MS / 1000} s (${memOpen.slots.length} slots) | after the run (${memAfter.slots.length} slots) |`,
    '| --- | ---: | ---: |',
    ...memRows,
    '',
    ...(memNotes.length ? [...memNotes, ''] : []),
    '### Goals (from the issue)',
    '',
    '| goal | measured | |',
    '| --- | --- | --- |',
    ...goals,
    '',
    '### Reading (generated from this run\'s numbers)',
    '',
    ...reading,
    '',
    END,
  ];
  const block = lines.join('\n');
  writeSection(OUT, START, END, block);
  console.log(block);
  console.log(`\nbench-warm: wrote ${path.relative(process.cwd(), OUT) || OUT}`);
  if (cases.some((c) => c.error)) console.error('bench-warm: some cases failed (see the table); the other numbers are still valid');
}

main().catch(async (e) => {
  console.error('bench-warm: ' + (e && e.stack ? e.stack : e));
  await closeAll();
  process.exit(1);
});
