'use strict';
// rootless: yes
// Unprivileged on cgroup v1 there is no freezer kern may use: there the tests assert the clear
// refusal instead (the cgroup-v2 guest runs them rootless for real).
// pause()/resume() (issue 33, ADDITIONS in index.d.ts) of kernels and `persist` Sandboxes, and
// `kern pause`/`kern resume`: the box is frozen (no CPU, memory kept) until resumed. "Frozen" is
// read on the host: the CPU time of a busy box process stops moving, and the file it appends to
// stops growing, while paused; both move again after resume().

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { Sandbox, SandboxError } = require('../..');
const {
  opts, uniqueName, hostProcessesMatching, waitFor, sleep, expectSandboxError, withKernel,
  makeTempDir, isRoot, capsEnforced,
} = require('../helpers');

const KERN = process.env.KERN_BIN || path.join(__dirname, '..', '..', 'kern');
const v2 = fs.existsSync('/sys/fs/cgroup/cgroup.controllers');
// Where kern has a freezer: root (v1 freezer hierarchy or a v2 leaf), or a delegated v2 leaf.
const canPause = isRoot || (v2 && capsEnforced);

/** user+system CPU ticks of host pid `pid` (null once gone). */
function cpuTicks(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return null;
  }
}

/** The host pid of the one process whose cmdline holds `marker`, once it runs. */
async function hostPid(marker) {
  const found = await waitFor(() => hostProcessesMatching(marker).length > 0, 60000, 20);
  expect(found).toBe(true);
  return hostProcessesMatching(marker)[0].pid;
}

/** What the host sees of a busy box process over `ms` of a pause: whether its CPU time and the
 * file it appends to moved. */
async function movement(pid, file, ms = 600) {
  const t0 = cpuTicks(pid);
  const s0 = fs.statSync(file).size;
  await sleep(ms);
  return { cpu: cpuTicks(pid) !== t0, grew: fs.statSync(file).size !== s0 };
}

// A python loop that burns CPU and appends a line to the file named by its first argument every
// ~10 ms; the second argument is a marker the host finds it by.
const BUSY = [
  'import sys, time',
  'f = open(sys.argv[1], "a")',
  'while True:',
  '    t = time.time()',
  '    while time.time() - t < 0.01: pass',
  '    f.write("x\\n"); f.flush()',
].join('\n');

/** A workspace with busy.py in it. */
function busyWorkspace() {
  const ws = makeTempDir('kern-pause-ws-');
  fs.writeFileSync(path.join(ws, 'busy.py'), BUSY);
  fs.chmodSync(ws, 0o777);
  return ws;
}

// Defined only where they can run: the cgroup-v2 guest counts a skipped test as failed.
if (canPause) describe('pause() and resume()', () => {
  test('a kernel paused mid-cell stops (no CPU, no writes), refuses cells, keeps its state, and its cell\'s timeout stands still', async () => {
    const ws = busyWorkspace();
    await withKernel({ workspace: ws }, {}, async (k) => {
      await k.runCode('x = 41');
      const marker = uniqueName('kpause');
      const file = `busy-${marker}`;
      // The cell runs a busy child for ~1.5 s of its own run time, under a 3 s timeout; it is
      // paused for longer than the timeout in the middle.
      const cell = k.runCode([
        'import subprocess, time',
        `p = subprocess.Popen(["python3", "busy.py", "${file}", "${marker}"])`,
        'time.sleep(1.5)',
        'p.kill()',
        'x += 1',
        'print("cell done")',
      ].join('\n'), { timeoutS: 3 });
      const pid = await hostPid(marker);
      const host = path.join(ws, file);
      await waitFor(() => fs.existsSync(host), 10000, 10);
      await k.pause();
      expect(k.paused).toBe(true);
      // Frozen: checked on the host, twice, across more than the cell's whole timeout.
      for (let i = 0; i < 6; i++) expect(await movement(pid, host)).toEqual({ cpu: false, grew: false });
      await expectSandboxError(() => k.runCode('x'), SandboxError, /paused: call resume\(\) first/);
      // Idempotent.
      await k.pause();
      await k.resume();
      expect(k.paused).toBe(false);
      const r = await cell;
      expect(r.fault).toBeNull();
      expect(r.error).toBeNull();
      expect(r.stdout).toBe('cell done\n');
      expect((await k.runCode('print(x)')).stdout).toBe('42\n');
      await k.resume();
    });
    fs.rmSync(ws, { recursive: true, force: true });
  });

  test('a paused kernel moves again after resume(), and close() while paused ends it with nothing left', async () => {
    const marker = uniqueName('kpauseclose');
    const ws = busyWorkspace();
    const sb = await new Sandbox(opts({ workspace: ws })).open();
    try {
      const k = await sb.kernel();
      await k.runCode(`import subprocess\np = subprocess.Popen(["python3", "busy.py", "f-${marker}", "${marker}"])`);
      const pid = await hostPid(marker);
      const host = path.join(ws, `f-${marker}`);
      await waitFor(() => fs.existsSync(host), 10000, 10);
      await k.pause();
      expect(await movement(pid, host)).toEqual({ cpu: false, grew: false });
      await k.resume();
      expect(await movement(pid, host)).toEqual({ cpu: true, grew: true });
      await k.pause();
      await k.close();
      expect(hostProcessesMatching(marker)).toEqual([]);
      await expectSandboxError(() => k.pause(), SandboxError, /closed or torn down/);
    } finally {
      await sb.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
    expect(hostProcessesMatching(marker)).toEqual([]);
  });

  test('a cell aborted while paused runs again to stop: an interrupted python kernel keeps its state and is not paused after', async () => {
    await withKernel({}, { onTimeout: 'interrupt' }, async (k) => {
      await k.runCode('x = 7');
      const marker = uniqueName('kabortpaused');
      const ac = new AbortController();
      const cell = k.runCode(`import subprocess, time\nsubprocess.Popen(["sh", "-c", "sleep 60", "${marker}"])\ntime.sleep(60)\nx = 8`, { signal: ac.signal, timeoutS: 100 })
        .then((r) => ({ r }), (e) => ({ e }));
      await hostPid(marker);
      await k.pause();
      ac.abort();
      const { r, e } = await cell;
      expect(r).toBeUndefined();
      expect(e.name).toBe('AbortError');
      expect(k.paused).toBe(false);
      expect((await k.runCode('print(x)')).stdout).toBe('7\n');
    });
  });

  // The sci rootfs (ipykernel) is built for the host runs; the cgroup-v2 guest has only the base one.
  const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
  if (fs.existsSync(`${SCI}/.kern-test-rootfs`)) {
    test('a Jupyter kernel pauses too: a paused cell waits, later cells are refused, and it goes on with its state', async () => {
      const ws = busyWorkspace();
      await withKernel({ image: SCI, workspace: ws }, { jupyter: 'python3' }, async (k) => {
        await k.runCode('x = 1');
        const marker = uniqueName('jpause');
        const cell = k.runCode(`import subprocess, time\np = subprocess.Popen(["python3", "busy.py", "f-${marker}", "${marker}"])\ntime.sleep(1)\np.kill()\nx += 1\nprint("jupyter done")`, { timeoutS: 2 });
        const pid = await hostPid(marker);
        const host = path.join(ws, `f-${marker}`);
        await waitFor(() => fs.existsSync(host), 10000, 10);
        await k.pause();
        for (let i = 0; i < 5; i++) expect(await movement(pid, host)).toEqual({ cpu: false, grew: false });
        await expectSandboxError(() => k.runCode('x'), SandboxError, /paused/);
        await k.resume();
        const r = await cell;
        expect({ out: r.stdout, fault: r.fault, error: r.error }).toEqual({ out: 'jupyter done\n', fault: null, error: null });
        expect((await k.runCode('print(x)')).stdout).toBe('2\n');
      });
      fs.rmSync(ws, { recursive: true, force: true });
    });
  }

  test('a persist Sandbox pauses its resident box (a process a call left running too); calls are refused until resume(); kern pause/resume by name', async () => {
    const ws = busyWorkspace();
    const name = uniqueName('pauseres');
    const marker = uniqueName('respause');
    const s = await new Sandbox(opts({ persist: true, name, workspace: ws })).open();
    try {
      const started = await s.run(['sh', '-c', `python3 busy.py f-${marker} ${marker} >/dev/null 2>&1 &`]);
      expect(started.exitCode).toBe(0);
      const pid = await hostPid(marker);
      const host = path.join(ws, `f-${marker}`);
      await waitFor(() => fs.existsSync(host), 10000, 10);
      await s.pause();
      expect(s.paused).toBe(true);
      expect(await movement(pid, host)).toEqual({ cpu: false, grew: false });
      await expectSandboxError(() => s.run(['true']), SandboxError, new RegExp(`resident box ${name} is paused`));
      await s.resume();
      expect(s.paused).toBe(false);
      expect(await movement(pid, host)).toEqual({ cpu: true, grew: true });
      expect((await s.run(['echo', 'ok'])).stdout).toBe('ok\n');

      // The same box by name, from the command line; a call from this Sandbox sees it paused.
      expect(execFileSync(KERN, ['pause', name], { encoding: 'utf8' })).toBe(`paused ${name}\n`);
      expect(await movement(pid, host)).toEqual({ cpu: false, grew: false });
      expect(s.paused).toBe(false); // this Sandbox did not pause it...
      const r = await s.run(['true']);
      // ...but kern refuses a call into a paused box, whoever paused it.
      expect(r.exitCode).not.toBe(0);
      expect(`${r.stderr}${JSON.stringify(r.fault)}`).toMatch(/is paused/);
      expect(execFileSync(KERN, ['resume', name], { encoding: 'utf8' })).toBe(`resumed ${name}\n`);
      expect(await movement(pid, host)).toEqual({ cpu: true, grew: true });

      // destroy() of a paused box ends it and everything in it.
      await s.pause();
    } finally {
      await s.destroy();
      fs.rmSync(ws, { recursive: true, force: true });
    }
    await waitFor(() => hostProcessesMatching(marker).length === 0, 10000, 50);
    expect(hostProcessesMatching(marker)).toEqual([]);
  });
});

describe('pause() refusals', () => {
  test('a Sandbox without persist has nothing to pause, and says what to pause instead', async () => {
    const s = await new Sandbox(opts()).open();
    try {
      await expectSandboxError(() => s.pause(), SandboxError, /for a `persist` Sandbox .* and for kernels/);
      expect(s.paused).toBe(false);
    } finally {
      await s.close();
    }
  });

  if (!canPause) test('where kern has no freezer (unprivileged on cgroup v1) pause() is refused with the fix, and the kernel runs on', async () => {
    await withKernel({}, {}, async (k) => {
      await k.runCode('x = 1');
      await expectSandboxError(() => k.pause(), SandboxError, /can't be paused here: .*run as root/);
      expect(k.paused).toBe(false);
      expect((await k.runCode('print(x)')).stdout).toBe('1\n');
    });
  });
});
