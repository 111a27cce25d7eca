'use strict';
// rootless: yes
// A runtime the Sandbox kept ready and that is killed from outside (an OOM killer, a careless
// `pkill kern`) just as a call takes it fails no call: a kern that dies before it says it took
// the box spec did nothing with it, and the call runs once, in a fresh kern. On every route that
// takes a ready runtime: a command, a zygote cell, a process, a kernel.
//
// The race is made certain rather than hoped for: the ready runtimes are stopped (SIGSTOP: still
// alive to the Sandbox), the call is started, and they are killed only once the spec sits unread
// in one's control socket (its fd 0, whose queue `ss` shows).

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { Sandbox } = require('../..');
const helpers = require('../helpers');

const { opts, childrenNamed, isAlive, makeTempDir } = helpers;

beforeAll(() => helpers.requireRootfs());

let others = new Set();
beforeEach(() => {
  others = new Set(childrenNamed('kern'));
});
/** The test's Sandbox's ready runtimes: `kern` children of this process with no box yet. */
const ready = () => helpers.readyKerns(others);

/** Bytes waiting unread in `pid`'s control socket (its fd 0), or 0. */
function unread(pid) {
  let inode;
  try {
    inode = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/0`))[1];
  } catch {
    return 0;
  }
  for (const line of execFileSync('ss', ['-xn'], { encoding: 'utf8' }).split('\n')) {
    const cols = line.trim().split(/\s+/);
    if (cols[5] === inode) return Number(cols[2]);
  }
  return 0;
}

/**
 * Stops the Sandbox's ready runtimes, starts `call`, waits until one of them has the call's spec
 * unread, then kills them all; gives what `call` resolved to and the pid that had the spec.
 */
async function killTheTakenSpare(call) {
  // Rootless on cgroup v2 a spare starts as `systemd-run --scope` and is a kern only once that
  // has made its scope: one still named systemd-run is in the Sandbox's spares (maybe the oldest,
  // the one a call takes) but not in ready(). Stopping the ready ones then would leave the
  // spare the call takes running, and the race would not happen.
  const placing = () => childrenNamed('systemd-run').some(isAlive);
  expect(await helpers.waitFor(() => ready().length > 0 && !placing(), 30000, 50)).toBe(true);
  const stopped = ready();
  for (const pid of stopped) process.kill(pid, 'SIGSTOP');
  const killAll = () => {
    for (const pid of stopped) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  let pending;
  try {
    pending = call();
    let taken;
    const got = await helpers.waitFor(() => (taken = stopped.find((pid) => unread(pid) > 0)) !== undefined, 30000, 20);
    expect({ aSpareGotTheSpec: got }).toEqual({ aSpareGotTheSpec: true });
    killAll();
    return { taken, result: await pending };
  } finally {
    killAll();
  }
}

let sb;
let ws;
beforeEach(() => {
  ws = makeTempDir('kern-spare-killed-');
});
afterEach(async () => {
  if (sb) await sb.close();
  sb = undefined;
  fs.rmSync(ws, { recursive: true, force: true });
});

/** The workspace's log: one line per time the call's code ran. */
const runs = () => fs.readFileSync(path.join(ws, 'ran.log'), 'utf8').split('\n').filter(Boolean);

test('a command runs once, in a fresh runtime, when its ready one is killed as it takes it', async () => {
  sb = await new Sandbox(opts({ workspace: ws })).open();
  await sb.run(['true']);
  const { taken, result } = await killTheTakenSpare(() => sb.run(['sh', '-c', 'echo once >> ran.log; echo ok']));
  expect({ exitCode: result.exitCode, fault: result.fault, stdout: result.stdout }).toEqual({ exitCode: 0, fault: null, stdout: 'ok\n' });
  expect(runs()).toEqual(['once']);
  expect(isAlive(taken)).toBe(false);
  // the Sandbox goes on as before
  expect((await sb.run(['echo', 'after'])).stdout).toBe('after\n');
});

test('a zygote cell runs once when the ready fork\'s runtime is killed as it takes it', async () => {
  sb = await new Sandbox(opts({ workspace: ws, zygote: true })).open();
  await sb.runCode('1', { language: 'python' });
  const { result } = await killTheTakenSpare(() =>
    sb.runCode('open("ran.log", "a").write("once\\n")\nprint(6 * 7)', { language: 'python' })
  );
  expect({ exitCode: result.exitCode, fault: result.fault, error: result.error, stdout: result.stdout }).toEqual({
    exitCode: 0,
    fault: null,
    error: null,
    stdout: '42\n',
  });
  expect(runs()).toEqual(['once']);
  expect((await sb.runCode('print("after")', { language: 'python' })).stdout).toBe('after\n');
});

test('a process runs once, its stdin and pid intact, when its ready runtime is killed as it takes it', async () => {
  sb = await new Sandbox(opts({ workspace: ws })).open();
  await sb.run(['true']);
  const { result: proc } = await killTheTakenSpare(() =>
    sb.spawn(['sh', '-c', 'echo once >> ran.log; read line; echo "got $line"'])
  );
  expect(proc.pid).toBeGreaterThan(0);
  await proc.write('hello\n');
  await proc.end();
  const r = await proc.wait();
  expect({ exitCode: r.exitCode, fault: r.fault, stdout: r.stdout }).toEqual({ exitCode: 0, fault: null, stdout: 'got hello\n' });
  expect(runs()).toEqual(['once']);
});

test('a kernel starts, and keeps its state, when its ready runtime is killed as it takes it', async () => {
  sb = await new Sandbox(opts({ workspace: ws })).open();
  await sb.run(['true']);
  const { result: kernel } = await killTheTakenSpare(() => sb.kernel({ onTimeout: 'interrupt' }));
  try {
    const a = await kernel.runCode('open("ran.log", "a").write("once\\n")\nx = 41');
    expect({ error: a.error, fault: a.fault }).toEqual({ error: null, fault: null });
    expect((await kernel.runCode('print(x + 1)')).stdout).toBe('42\n');
    // A cell past its timeout is interrupted through the box's runtime (found by its pid): the
    // fresh one's, or the cell would not stop and the kernel would be torn down.
    const slow = await kernel.runCode('import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print("interrupted")', { timeoutS: 2 });
    expect(slow.stdout).toBe('interrupted\n');
    expect((await kernel.runCode('print(x)')).stdout).toBe('41\n');
  } finally {
    await kernel.close();
  }
  expect(runs()).toEqual(['once']);
});
