'use strict';
// rootless: yes
// The prewarm pool: boxes whose python driver booted before the call, each serving one cell.

const { Sandbox } = require('../..');
const helpers = require('../helpers');

const { notesOf, opts, hostProcessesMatching, ourDescendant } = helpers;

/** Idle or running prewarmed drivers of this file's Sandboxes: their argv holds the driver's
 * name (and so does every python runCode's, of other suites beside this one: those are not
 * this process's descendants). */
const driverPids = () => hostProcessesMatching('_kern_driver')
  // A zygote holds the driver too, and is no pool's.
  .filter((p) => !p.cmdline.includes('def _kern_zygote(') && ourDescendant(p.pid))
  .map((p) => p.pid)
  .sort((a, b) => a - b);
/** Every driver on the host: a leaked one may have lost its parent, and be nobody's descendant. */
const anyDriverPids = () => hostProcessesMatching('_kern_driver').map((p) => p.pid);

/** Waits for `pred` (polled, bounded at 30 s for a loaded machine), or fails naming `what`. */
async function waitFor(pred, what) {
  if (!(await helpers.waitFor(pred, 30000, 20))) throw new Error(`timed out waiting for ${what}`);
}

const CELLS = [
  'print("out")\n6 * 7',
  'import sys\nprint("err", file=sys.stderr)\nraise KeyError("k")',
  'display(1, 2)\nNone',
  'raise SystemExit(5)',
  'import os\nprint(os.getcwd(), os.getuid(), sorted(os.listdir("/tmp")))',
];

const shape = (r) => ({
  stdout: r.stdout,
  stderr: r.stderr,
  exitCode: r.exitCode,
  fault: r.fault,
  results: r.results.map((x) => x.data),
});

test('prewarmed answers are the answers a fresh box gives', async () => {
  const cold = await new Sandbox(opts()).open();
  const warm = await new Sandbox(opts({ prewarm: 2 })).open();
  try {
    for (const code of CELLS) {
      expect(shape(await warm.runCode(code))).toEqual(shape(await cold.runCode(code)));
    }
  } finally {
    await cold.close();
    await warm.close();
  }
});

test('each prewarmed box serves one cell: no variables or /tmp files of the cell before', async () => {
  const sb = await new Sandbox(opts({ prewarm: 2 })).open();
  try {
    await sb.runCode('secret = 1\nopen("/tmp/left-behind", "w").write("x")');
    const r = await sb.runCode('import os\nprint("secret" in globals(), os.path.exists("/tmp/left-behind"))');
    expect(r.stdout).toBe('False False\n');
  } finally {
    await sb.close();
  }
});

test('the pool refills; streaming and other languages take the ordinary path; close() leaves nothing', async () => {
  // Drivers of other sessions (still ending, from earlier tests) are not this pool's.
  const before = driverPids();
  const mine = () => driverPids().filter((p) => !before.includes(p));
  const sb = await new Sandbox(opts({ prewarm: 2 })).open();
  let seen = [];
  try {
    await waitFor(() => mine().length === 2, 'two idle drivers');
    const idle = mine();
    // A streaming call does not take a prewarmed box (it runs its own, which ends with it).
    const chunks = [];
    const s = await sb.runCode('print("streamed")', { onStdout: (b) => chunks.push(b.toString()) });
    expect(s.stdout).toBe('streamed\n');
    expect(chunks.join('')).toBe('streamed\n');
    expect((await sb.runCode('echo sh', { language: 'sh' })).stdout).toBe('sh\n');
    expect(mine()).toEqual(idle);
    // A plain python call does: one of the idle drivers ran it and is gone, and a new one takes
    // its place.
    expect((await sb.runCode('print("warm")')).stdout).toBe('warm\n');
    await waitFor(() => mine().length === 2 && mine().some((p) => !idle.includes(p)), 'the pool to refill');
    expect(idle.filter((p) => mine().includes(p))).toHaveLength(idle.length - 1);
    seen = [...new Set([...idle, ...mine()])];
  } finally {
    await sb.close();
  }
  await waitFor(() => anyDriverPids().every((p) => !seen.includes(p)), 'no driver left after close()');
});

test('a prewarmed call past its timeout is a timeout fault', async () => {
  const before = driverPids();
  const sb = await new Sandbox(opts({ prewarm: 1, timeoutS: 3 })).open();
  try {
    // Prewarmed: its driver is up before the call (a slot still starting would put python's
    // own start on the call's clock).
    await waitFor(() => driverPids().some((p) => !before.includes(p)), 'an idle driver');
    const r = await sb.runCode('import time\nprint("start", flush=True)\ntime.sleep(30)');
    expect(r.fault).toMatchObject({ type: 'timeout' });
    expect(r.exitCode).toBe(137);
    expect(r.stdout).toBe('start\n');
    expect((await sb.runCode('1 + 1')).results[0].text).toBe('2');
  } finally {
    await sb.close();
  }
});

test('prewarm must be a small non-negative integer', async () => {
  for (const bad of [-1, 1.5, 'two', 65]) {
    await expect(new Sandbox(opts({ prewarm: bad })).open()).rejects.toThrow(/prewarm/);
  }
});

test('a prewarmed box keeps at most 10,000 results, with a note, as a fresh box does', async () => {
  const sb = await new Sandbox(opts({ prewarm: 1 })).open();
  try {
    const code = 'for i in range(10002):\n    display(i)';
    const r = await sb.runCode(code);
    expect(r.results).toHaveLength(10000);
    expect(notesOf(r)).toEqual(['note: 2 rich result(s) were dropped: a call keeps at most 10000 results and 128 MiB of them']);
  } finally {
    await sb.close();
  }
});
