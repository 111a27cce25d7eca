#!/usr/bin/env node
// Cell overhead of the Jupyter kernels (`sb.kernel({ jupyter })`: ipykernel, IRkernel) side by side
// with our driver kernel (`sb.kernel()`), in ONE run on one machine: kernel start + first cell, the
// round trip of trivial cells, and a matplotlib figure cell. Medians and p90 over N rounds.
//
//   npm run bench:jupyter                    # N = 30 rounds, 10 timed cells per batch
//   BENCH_N=60 npm run bench:jupyter         # more rounds, tighter numbers (about twice as long)
//
// Needs the built package (./kern and the addon: `npm run build`) and the scientific test rootfs
// with the kernelspecs `python3` and `ir` (scripts/build-test-rootfs-sci.sh; KERN_TEST_ROOTFS_SCI
// overrides its location, as in the tests). Writes its section between the bench-jupyter markers of
// BENCHMARKS.md (appended at the end when absent; nothing outside the markers is touched) and
// prints it. Measurements only: nothing passes or fails on a number; but every cell's result is
// checked, and any failure aborts the run (a benchmark of failing cells is worthless).
//
// Method:
// - One Sandbox per kernel kind (driver, ipykernel, IRkernel) on the same image and options,
//   opened before timing (not timed). In it, opened before timing too: a kernel for the trivial
//   cells and, for the two python kinds, a kernel for the figure cell, whose warm-up cell imports
//   matplotlib.pyplot (so the figure kernel's import never weighs on the trivial cells).
// - Every timed call runs from just before the call to its awaited completion
//   (process.hrtime.bigint()) and its result is checked: exit code 0, no fault, and the expected
//   output (no result for `pass`, a result whose text is `1` / `[1] 1` for `1`, stdout `x` for
//   `print("x")`, a PNG for the figure). A failure anywhere aborts the run.
// - A round is, in order: start (per kind: `sb.kernel()` + its first cell, timed together; then
//   `close()`, timed on its own), trivial cells (per kind and cell: one untimed cell, then CELLS
//   timed cells in a row), figure (per python kind: one timed figure cell). Within each step the
//   kinds alternate: their order rotates by one every round, so each kind goes first equally often
//   and drift on the machine hits all alike. Every step starts after a PAUSE_MS pause outside the
//   timing (a closed kernel's teardown, a spare box being refilled, are over by then).
// - BENCH_WARMUP warm-up rounds run first (not counted; they check every case, too).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, dieFor, parsePositiveInt: positiveInt, percentile, median, writeSection, requireBuilt, sh, readText, otherWork, closeOnExit } = require('./common');

const die = dieFor('bench:jupyter');
const N = positiveInt(process.env.BENCH_N, 30, 'BENCH_N', die);
const WARMUP = positiveInt(process.env.BENCH_WARMUP, 2, 'BENCH_WARMUP', die);
const CELLS = positiveInt(process.env.BENCH_CELLS, 10, 'BENCH_CELLS', die);
const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const START = '<!-- bench-jupyter:start -->';
const END = '<!-- bench-jupyter:end -->';
const PAUSE_MS = 100;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (msg) => process.stderr.write(`bench:jupyter: ${msg}\n`);
const oneLine = (s) => String(s).replace(/\s+/g, ' ').trim();
const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

const FIGURE_IMPORT = 'import matplotlib.pyplot as plt';
const FIGURE_CELL = 'plt.plot([1, 2]); plt.show()';

// The kinds compared; `cells` maps a row of the table to the kind's cell for it and what that
// cell must give back (stdout, and the text of its one result; no result when `text` is null).
const KINDS = [
  {
    key: 'driver', label: 'driver kernel', opts: undefined, first: 'pass', figure: true,
    cells: {
      pass: { code: 'pass', stdout: '', text: null },
      one: { code: '1', stdout: '', text: '1' },
      print: { code: 'print("x")', stdout: 'x\n', text: null },
    },
  },
  {
    key: 'ipykernel', label: 'ipykernel (`python3`)', opts: { jupyter: 'python3' }, first: 'pass', figure: true,
    cells: {
      pass: { code: 'pass', stdout: '', text: null },
      one: { code: '1', stdout: '', text: '1' },
      print: { code: 'print("x")', stdout: 'x\n', text: null },
    },
  },
  {
    key: 'irkernel', label: 'IRkernel (`ir`)', opts: { jupyter: 'ir' }, first: 'invisible(NULL)', figure: false,
    cells: {
      pass: { code: 'invisible(NULL)', stdout: '', text: null },
      one: { code: '1', stdout: '', text: '[1] 1' },
      print: { code: 'print("x")', stdout: '[1] "x"\n', text: null },
    },
  },
];
const CELL_ROWS = [
  ['pass', 'nothing: `pass` (R: `invisible(NULL)`)'],
  ['one', 'an expression with a result: `1`'],
  ['print', 'output: `print("x")`'],
];

// ---- result checks ----------------------------------------------------------------------------

function describeFailure(r) {
  const why = r.fault ? `fault ${r.fault.type}: ${r.fault.message}` : `exit ${r.exitCode}`;
  const err = r.stderr ? ` | stderr: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}` : '';
  return oneLine(why + err);
}

/** Throws unless `r` is a clean result that gave `want` (stdout, the text of its one result or no
 * result at all, a PNG); `what` names the call in the message. */
function check(r, want, what) {
  if (r.fault || r.exitCode !== 0) throw new Error(`${what}: ${describeFailure(r)}`);
  if (!want) return r;
  if (want.stdout !== undefined && r.stdout !== want.stdout) {
    throw new Error(`${what}: expected stdout ${JSON.stringify(want.stdout)}, got ${JSON.stringify(r.stdout)}`);
  }
  if (want.text !== undefined) {
    const got = r.results.map((x) => x.text);
    const expected = want.text === null ? [] : [want.text];
    if (JSON.stringify(got) !== JSON.stringify(expected)) {
      throw new Error(`${what}: expected results ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
    }
  }
  if (want.png) {
    const png = r.results.length === 1 ? r.results[0].png : null;
    if (!png || png.subarray(1, 4).toString() !== 'PNG') {
      throw new Error(`${what}: expected one result with a PNG, got formats ${JSON.stringify(r.results.map((x) => x.formats()))}`);
    }
  }
  return r;
}

// ---- other work on the machine ----------------------------------------------------------------

const { sample: sampleOthers, note: othersNote } = otherWork();

// ---- main -------------------------------------------------------------------------------------

const { opened, closeAll } = closeOnExit(log); // Sandboxes and kernels to close, in reverse order

/** Sizes and mtimes of `kern` and the addon: a rebuild during the run changes them. */
function buildStamp() {
  const files = [KERN, ...fs.readdirSync(path.join(REPO, 'js')).filter((f) => f.endsWith('.node')).map((f) => path.join(REPO, 'js', f))];
  return files.map((f) => {
    try {
      const st = fs.statSync(f);
      return `${f}:${st.size}:${st.mtimeMs}`;
    } catch {
      return `${f}:-`;
    }
  }).join(' ');
}

/** The kinds' order in round `i`: rotated by one every round. */
const rotated = (list, i) => list.map((_, j) => list[(i + j) % list.length]);

async function main() {
  for (const k of ['python3', 'ir']) {
    if (!fs.existsSync(path.join(SCI, 'usr/share/jupyter/kernels', k, 'kernel.json'))) {
      die(`no kernelspec \`${k}\` in the rootfs at ${SCI} (usr/share/jupyter/kernels/${k}/kernel.json).\n` +
        '       Build it with: bash scripts/build-test-rootfs-sci.sh   (or set KERN_TEST_ROOTFS_SCI)');
    }
  }
  const { Sandbox } = requireBuilt(REPO, KERN, die);
  const builtAtStart = buildStamp();
  const t0 = Date.now();

  // Per kind: its Sandbox, a kernel for the trivial cells and (python) one for the figure cell.
  for (const kind of KINDS) {
    kind.sb = await new Sandbox({ image: SCI }).open();
    opened.push(kind.sb);
    kind.cellKernel = await kind.sb.kernel(kind.opts);
    opened.push(kind.cellKernel);
    check(await kind.cellKernel.runCode(kind.first), { stdout: '', text: null }, `${kind.key}: first cell`);
    if (kind.figure) {
      kind.figKernel = await kind.sb.kernel(kind.opts);
      opened.push(kind.figKernel);
      check(await kind.figKernel.runCode(FIGURE_IMPORT), { stdout: '', text: null }, `${kind.key}: ${FIGURE_IMPORT}`);
    }
    kind.t = { start: [], open: [], close: [], figure: [], pass: [], one: [], print: [] };
  }
  sampleOthers();

  const timed = async (call, want, what) => {
    const t = process.hrtime.bigint();
    const r = await call();
    const ms = msSince(t);
    check(r, want, what);
    return ms;
  };

  // The steps of one round; each returns its times by series name, for one kind.
  const startStep = async (kind) => {
    const t = process.hrtime.bigint();
    const k = await kind.sb.kernel(kind.opts);
    const open = msSince(t);
    let r;
    try {
      r = await k.runCode(kind.first);
    } catch (e) {
      await k.close().catch(() => {});
      throw e;
    }
    const start = msSince(t);
    const c = process.hrtime.bigint();
    await k.close();
    const close = msSince(c);
    check(r, { stdout: '', text: null }, `${kind.key}: kernel start + \`${kind.first}\``);
    return { start: [start], open: [open], close: [close] };
  };
  const cellStep = (row) => async (kind) => {
    const cell = kind.cells[row];
    const what = `${kind.key}: \`${cell.code}\``;
    check(await kind.cellKernel.runCode(cell.code), cell, what); // untimed: the kernel was idle
    const times = [];
    for (let i = 0; i < CELLS; i++) times.push(await timed(() => kind.cellKernel.runCode(cell.code), cell, what));
    return { [row]: times };
  };
  const figureStep = async (kind) => ({
    figure: [await timed(() => kind.figKernel.runCode(FIGURE_CELL), { stdout: '', png: true }, `${kind.key}: \`${FIGURE_CELL}\``)],
  });
  const steps = [
    [startStep, KINDS],
    ...CELL_ROWS.map(([row]) => [cellStep(row), KINDS]),
    [figureStep, KINDS.filter((k) => k.figure)],
  ];

  const round = async (i, record) => {
    for (const [step, kinds] of steps) {
      for (const kind of rotated(kinds, i)) {
        await sleep(PAUSE_MS);
        const got = await step(kind);
        if (record) for (const [series, ts] of Object.entries(got)) kind.t[series].push(...ts);
      }
    }
  };

  log(`${WARMUP} warm-up + ${N} timed rounds (${CELLS} cells per batch), image ${SCI}`);
  for (let i = 0; i < WARMUP; i++) await round(i, false);
  sampleOthers();
  for (let i = 0; i < N; i++) {
    await round(WARMUP + i, true);
    sampleOthers();
    if ((i + 1) % 5 === 0 || i + 1 === N) log(`${i + 1}/${N} (${Math.round((Date.now() - t0) / 1000)} s)`);
  }
  await closeAll();
  const rebuilt = buildStamp() !== builtAtStart;
  if (rebuilt) log('warning: `kern` or the addon was rebuilt during the run; its numbers mix two builds');
  report(Math.round((Date.now() - t0) / 1000), rebuilt);
}

// ---- report -----------------------------------------------------------------------------------

function report(wallS, rebuilt) {
  const stats = (times) => {
    const s = [...times].sort((a, b) => a - b);
    return { n: s.length, median: median(s), p90: percentile(s, 0.9) };
  };
  const fmt = (x) => (!Number.isFinite(x) ? '—' : x < 1 ? x.toFixed(3) : x < 100 ? x.toFixed(2) : x.toFixed(0));
  const cell = (s) => (s && s.n ? `${fmt(s.median)} (p90 ${fmt(s.p90)})` : '—');
  const ratio = (s, base) => (s && s.n && base && base.n ? `${(s.median / base.median).toFixed(1)}×` : '—');
  const [drv, ipy, ir] = KINDS;
  for (const kind of KINDS) kind.s = Object.fromEntries(Object.entries(kind.t).map(([k, v]) => [k, stats(v)]));

  const row = (label, series, n) => {
    const [d, p, r] = [drv.s[series], ipy.s[series], ir.s[series]];
    return `| ${label} | ${n} | ${cell(d)} | ${cell(p)} | ${cell(r)} | ${ratio(p, d)} | ${ratio(r, d)} |`;
  };
  const rows = [
    row('kernel start + first cell (`pass`; R: `invisible(NULL)`)', 'start', N),
    row('… of which `sb.kernel()` returned', 'open', N),
    row('`k.close()` (after the start row, not in it)', 'close', N),
    ...CELL_ROWS.map(([series, label]) => row(`cell round trip, ${label}`, series, N * CELLS)),
    row(`figure cell: \`${FIGURE_CELL}\` (after \`${FIGURE_IMPORT}\`)`, 'figure', N),
  ];

  const reading = [];
  const [d1, p1, r1] = [drv.s.one, ipy.s.one, ir.s.one];
  reading.push(`- A trivial cell costs ${fmt(p1.median)} ms on ipykernel and ${fmt(r1.median)} ms on IRkernel against ${fmt(d1.median)} ms on the driver kernel (\`1\`, medians: ${ratio(p1, d1)} and ${ratio(r1, d1)}). ` +
    'A Jupyter cell is an `execute_request` over ZeroMQ (`ipc://` sockets into the box) answered by at least four signed messages on two sockets (`status: busy`, `execute_input`, any output and `status: idle` on IOPub, `execute_reply` on shell; the cell is done when both the reply and the idle status are in), ' +
    'and IPython runs each cell through its input transformers, compilation, execution counter and history, display hook and pre/post-execute events (IRkernel does the same in R: evaluate, repr, jsonlite, digest for the HMAC); ' +
    "the driver kernel gets the cell as one frame on the box's channel socket, `exec`s it and answers with one frame (its output comes on the box's stdout/stderr, split per cell by a marker).");
  const slow = (kind) => kind.t.start.filter((t) => t > 1.5 * Math.min(...kind.t.start)).length;
  const [slowPy, slowR] = [slow(ipy), slow(ir)];
  reading.push(`- Starting a kernel and running its first cell took ${fmt(ipy.s.start.median)} ms for ipykernel and ${fmt(ir.s.start.median)} ms for IRkernel against ${fmt(drv.s.start.median)} ms for the driver. ` +
    "Most of it is the kernel's own start-up (importing ipykernel and IPython takes about 0.55–0.65 s and loading R with IRkernel about 0.5–0.55 s in this image, timed apart with `sb.run`), which `sb.kernel()` waits out (it returns once the kernel answers `kernel_info_request`), while the driver's `sb.kernel()` returns at once and its first cell waits for the interpreter." +
    (slowPy + slowR ? ` ${slowPy} of ${N} ipykernel and ${slowR} of ${N} IRkernel starts took over 1.5× the fastest of their kind (which moves the p90): kern connects once the kernel has bound its five sockets (it polls for them every 5 ms; connecting earlier met the ZeroMQ client's exponential reconnect back-off, which made such starts up to 1.5 s), so what remains is the kernel's own start-up competing for 2 CPUs.` : ''));
  const figRatio = ipy.s.figure.median / drv.s.figure.median;
  reading.push(`- A matplotlib figure cell took ${fmt(ipy.s.figure.median)} ms on ipykernel and ${fmt(drv.s.figure.median)} ms on the driver kernel (${ratio(ipy.s.figure, drv.s.figure)})` +
    (figRatio < 1.5 ? ': drawing and encoding the PNG dominate, and the per-cell overhead is small beside it.' : '.'));

  const cpu = (readText('/proc/cpuinfo') || '').match(/^model name\s*:\s*(.*)$/m)?.[1] || os.cpus()[0]?.model || 'unknown';
  const pyVersion = sh(path.join(SCI, 'usr/bin/python3'), ['-c', 'import platform;print(platform.python_version())']) || '?';
  const block = [
    START,
    '<!-- Generated by bench/jupyter.js (`npm run bench:jupyter`); everything between these markers is overwritten. -->',
    '',
    '## Jupyter kernels vs the driver kernel',
    '',
    `- Host: ${os.cpus().length} x ${cpu.trim()}, Linux ${os.release()}, ${process.getuid() === 0 ? 'root' : 'unprivileged'}; load average ${os.loadavg()[0].toFixed(1)} at the end; ${new Date().toISOString().slice(0, 10)}; ${wallS} s for the whole run`,
    `- Note: ${othersNote()}. With ${os.cpus().length} CPU(s), a kernel's own background threads (ipykernel's IOPub and heartbeat threads, our host-side socket readers) compete with the benchmark and with that other work, so read the ratios rather than the last digit.`,
    ...(rebuilt ? ['- **Warning: `kern` or the addon was rebuilt during this run; its numbers mix two builds. Rerun.**'] : []),
    `- Image: \`${SCI}\` (Debian bookworm, python ${pyVersion}, ipykernel and IRkernel from the image's kernelspecs \`python3\` and \`ir\`); default limits and options otherwise`,
    `- N = ${N} rounds after ${WARMUP} warm-up rounds; per round and kind: one kernel start, ${CELLS} timed cells in a row of each trivial cell (after one untimed cell of it), one figure cell. Kinds interleaved, their order rotated every round; ${PAUSE_MS} ms pause outside the timing before each step. Times in ms from the call to its awaited completion, median (p90); every result checked (exit 0, no fault, the expected stdout/result/PNG), any failure aborts the run`,
    '- Reproduce: `npm run bench:jupyter` (or `BENCH_N=60 npm run bench:jupyter` for tighter numbers); needs `npm run build` and the sci rootfs (`scripts/build-test-rootfs-sci.sh`, `KERN_TEST_ROOTFS_SCI`)',
    '',
    `| measurement | samples per kind | ${drv.label} | ${ipy.label} | ${ir.label} | ipykernel / driver | IRkernel / driver |`,
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    'IRkernel runs R, so its ratios compare it with the driver running the python cell of the same row. The figure row has no R cell.',
    '',
    ...reading,
    '',
    END,
  ].join('\n');
  writeSection(OUT, START, END, block);
  console.log(block);
  console.log(`\nbench:jupyter: wrote ${path.relative(process.cwd(), OUT) || OUT}`);
}

main().catch(async (e) => {
  console.error('bench:jupyter: ' + (e && e.stack ? e.stack : e));
  await closeAll();
  process.exit(1);
});
