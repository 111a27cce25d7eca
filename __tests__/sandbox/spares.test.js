'use strict';
// rootless: yes
// ADDITION (issue 34): the runtimes a Sandbox keeps ready follow the calls in flight, within
// `spareMemoryMb`, and go back to the minimum when the Sandbox is idle. Counted on the host: a
// ready runtime is a `kern` child of this process with no box under it yet.

const { Sandbox } = require('../..');
const helpers = require('../helpers');

const { opts, childrenNamed, isAlive, sleep, hostProcessesMatching, ourDescendant } = helpers;

/** `kern` children of this process that were there before the test's Sandbox: an earlier
 * suite's of the same Jest worker (a resident box's, one still ending). */
let others = new Set();
beforeEach(() => {
  others = new Set(childrenNamed('kern'));
});
/** This process's `kern` children that wait with no box, but `others`: the ready runtimes of the
 * test's Sandbox. */
const ready = () => helpers.readyKerns(others);

/** Waits for `pred`, polling, bounded at 30 s for a loaded machine. */
const waitFor = (pred) => helpers.waitFor(pred, 30000, 50);

/** `n` calls at once, `rounds` times; every one must succeed. */
async function burst(sb, n, rounds) {
  for (let i = 0; i < rounds; i++) {
    const rs = await Promise.all(Array.from({ length: n }, (_, j) => sb.run(['sh', '-c', `echo ${j}`])));
    rs.forEach((r, j) => {
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toBe(`${j}\n`);
    });
  }
}

let sb;
afterEach(async () => {
  if (!sb) return;
  await sb.close();
  sb = undefined;
  // Every runtime of the Sandbox has ended by the time close() returns: not one left to reap.
  expect(childrenNamed('kern').filter((pid) => !others.has(pid))).toEqual([]);
});

test('calls in flight raise the runtimes kept ready; idle, they go back to two', async () => {
  sb = await new Sandbox(opts()).open();
  expect(await waitFor(() => ready().length === 2)).toBe(true);
  await burst(sb, 12, 3);
  // One call at a time keeps the Sandbox busy while the ready ones are looked at between calls.
  // A runtime kept ready is there at two looks in a row (each call takes one, the oldest); one a
  // call just used, still exiting, at one only. Two were kept before this change, never more:
  // at most one was there at two looks in a row.
  let most = 0;
  let last = ready();
  for (let i = 0; i < 200 && most < 3; i++) {
    expect((await sb.run(['true'])).exitCode).toBe(0);
    const now = ready();
    most = Math.max(most, now.filter((pid) => last.includes(pid)).length);
    last = now;
  }
  expect(most).toBeGreaterThanOrEqual(3);
  const extra = ready();
  // Idle: back to the minimum, and the runtimes let go have exited (none left behind).
  expect(await waitFor(() => ready().length === 2)).toBe(true);
  expect(await waitFor(() => extra.filter((pid) => !ready().includes(pid)).every((pid) => !isAlive(pid)))).toBe(true);
  // A new burst finds them again.
  await burst(sb, 12, 2);
  expect((await sb.run(['true'])).exitCode).toBe(0);
});

test('a zygote keeps more forks ready while cells come at once, and two again when idle', async () => {
  // The zygote's processes: itself, and for each fork kept ready, the box's PID 1 and workload.
  const tree = () => hostProcessesMatching('def _kern_zygote(').map((p) => p.pid).filter(ourDescendant);
  sb = await new Sandbox(opts({ zygote: true })).open();
  const hash = (await sb.runCode('print(hash("x"))')).stdout;
  // Idle, as after open(): the count to come back to.
  let idle = 0;
  expect(await waitFor(() => {
    const n = tree().length;
    const same = n === idle;
    idle = n;
    return same && n > 1;
  })).toBe(true);
  for (let i = 0; i < 3; i++) {
    const rs = await Promise.all(Array.from({ length: 8 }, () => sb.runCode('print(hash("x"))')));
    rs.forEach((r) => expect(r.exitCode).toBe(0));
  }
  // Looked at between cells (one cell's processes may still be exiting: three at most), the
  // forks the burst asked for are there; with two kept, never more than `idle` and those.
  let most = 0;
  for (let i = 0; i < 200 && most < idle + 6; i++) {
    const r = await sb.runCode('print(hash("x"))');
    expect(r.stdout).toBe(hash);
    most = Math.max(most, tree().length);
  }
  expect(most).toBeGreaterThanOrEqual(idle + 6);
  expect(await waitFor(() => tree().length === idle)).toBe(true);
  expect((await sb.runCode('print(hash("x"))')).stdout).toBe(hash);
});

test('spareMemoryMb: 0 keeps the minimum, whatever comes', async () => {
  sb = await new Sandbox(opts({ spareMemoryMb: 0 })).open();
  expect(await waitFor(() => ready().length === 2)).toBe(true);
  await burst(sb, 12, 3);
  // Once the burst's own runtimes have exited, the ready ones are two at every look.
  expect(await waitFor(() => ready().length <= 2)).toBe(true);
  for (let i = 0; i < 20; i++) {
    expect(ready().length).toBeLessThanOrEqual(2);
    await sleep(50);
  }
  expect(await waitFor(() => ready().length === 2)).toBe(true);
});

test('a bad spareMemoryMb is refused before any box starts', async () => {
  const before = ready();
  for (const [v, msg] of [[-1, /non-negative integer/], [1.5, /non-negative integer/], ['64', /non-negative integer/], [4097, /at most 4096 MiB/]]) {
    await expect(new Sandbox(opts({ spareMemoryMb: v })).open()).rejects.toThrow(msg);
  }
  expect(ready()).toEqual(before);
});

test('close() returns once the ready runtimes it let go have exited', async () => {
  sb = await new Sandbox(opts()).open();
  await sb.run(['true']);
  expect(await waitFor(() => ready().length >= 1)).toBe(true);
  const [held] = ready();
  // Stopped, it can't see its lifeline close, nor exit: close() must wait for it.
  process.kill(held, 'SIGSTOP');
  let closed = false;
  const closing = sb.close().then(() => {
    closed = true;
  });
  try {
    await sleep(500);
    expect({ alive: isAlive(held), closed }).toEqual({ alive: true, closed: false });
  } finally {
    process.kill(held, 'SIGCONT');
  }
  await closing;
  sb = undefined;
  expect(childrenNamed('kern').filter((pid) => !others.has(pid))).toEqual([]);
});
