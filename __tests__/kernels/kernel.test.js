'use strict';
// rootless: yes
const fs = require('fs');
// The warm kernel: one long-lived box running the python driver, through the public API.

const { Sandbox, SandboxError } = require('../..');
const { notesOf, opts, hostProcessesMatching, ourDescendant, sleep, isRoot, withKernel } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

/** The kernel's python is `python3 -c <driver source>`: its argv holds the driver's name. So does
 * every python runCode's of the side Jest running beside this one: those are not this process's
 * descendants, and a zygote (which holds the driver too) is no kernel. */
const driverProcesses = () => hostProcessesMatching('_kern_driver')
  .filter((p) => !p.cmdline.includes('def _kern_zygote(') && ourDescendant(p.pid));
const driverPids = () => driverProcesses().map((p) => p.pid);

/** Waits until none of `pids` is a driver any more; returns those still there. */
async function gone(pids) {
  const alive = () => driverPids().filter((p) => pids.includes(p));
  for (let i = 0; i < 100 && alive().length; i++) await sleep(20);
  return alive();
}


test('state persists across cells; output and results are per cell', async () => {
  await withKernel({}, {}, async (k) => {
    const a = await k.runCode('x = 41\nprint("first")');
    expect(a.stdout).toBe('first\n');
    expect(a.results).toEqual([]);
    const b = await k.runCode('print("second")\nx + 1');
    expect(b.stdout).toBe('second\n');
    expect(b.results.map((r) => r.text)).toEqual(['42']);
    expect(b.success).toBe(true);
    const c = await k.runCode('import sys\nprint("to err", file=sys.stderr)\nraise ValueError("boom")');
    expect(c.stdout).toBe('');
    expect(c.stderr).toMatch(/^to err\n/);
    expect(c.stderr).toMatch(/ValueError: boom/);
    expect(c.exitCode).toBe(1);
    expect(c.fault).toBeNull();
    // A failed cell leaves the kernel usable, and its state intact.
    expect((await k.runCode('x')).results[0].text).toBe('41');
  });
});

test('a figure is returned once by the cell that drew it, then closed', async () => {
  await withKernel({ image: SCI }, {}, async (k) => {
    const a = await k.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2])\nNone');
    expect(a.results).toHaveLength(1);
    expect(a.results[0].png.subarray(1, 4).toString()).toBe('PNG');
    const b = await k.runCode('len(plt.get_fignums())');
    expect(b.results.map((r) => r.text)).toEqual(['0']);
  });
});

test('cells sent at once run one after the other, in order', async () => {
  await withKernel({}, {}, async (k) => {
    await k.runCode('log = []');
    const cells = [0, 1, 2, 3, 4].map((i) => k.runCode(`import time\ntime.sleep(0.05 * (${4 - i}))\nlog.append(${i})\nprint(${i})`));
    const outs = await Promise.all(cells);
    expect(outs.map((r) => r.stdout)).toEqual(['0\n', '1\n', '2\n', '3\n', '4\n']);
    expect((await k.runCode('log')).results[0].text).toBe('[0, 1, 2, 3, 4]');
  });
});

test('a cell past its timeout tears the kernel down; later calls say why', async () => {
  await withKernel({}, { timeoutS: 30 }, async (k) => {
    await k.runCode('y = 1');
    const r = await k.runCode('import time\nprint("sleeping", flush=True)\ntime.sleep(60)', { timeoutS: 1 });
    expect(r.fault).toMatchObject({ type: 'timeout' });
    expect(r.stdout).toBe('sleeping\n');
    expect(r.success).toBe(false);
    await expect(k.runCode('y')).rejects.toThrow(SandboxError);
    await expect(k.runCode('y')).rejects.toThrow(/torn down.*timeout/);
  });
});

describe('onTimeout: "interrupt" (an addition)', () => {
  test('a python cell past its timeout is interrupted; the kernel keeps its state and its box; so are the cell\'s children', async () => {
    await withKernel({}, { onTimeout: 'interrupt' }, async (k) => {
      await k.runCode('y = 1');
      const pids = driverPids();
      const marker = `kint${process.pid}${Date.now()}`;
      const r = await k.runCode(`import subprocess\ny = 2\nprint("started", flush=True)\nsubprocess.run(["sh", "-c", "sleep 60", "${marker}"])\ny = 3`, { timeoutS: 1 });
      expect(r.fault).toMatchObject({ type: 'timeout', message: expect.stringMatching(/ran past its timeout of 1\.000s; kern interrupted it and the kernel kept its state/) });
      expect(r.stdout).toBe('started\n');
      expect(r.codeStderr).toMatch(/KeyboardInterrupt/);
      // The interrupt is the fault, not an error of the code's.
      expect(r.error).toBeNull();
      expect(r.success).toBe(false);
      // The same box, the same interpreter: y as the cell left it, and its child gone.
      expect(driverPids()).toEqual(pids);
      expect((await k.runCode('y')).results[0].text).toBe('2');
      expect(hostProcessesMatching(marker)).toEqual([]);
    });
  });

  test('a cell that ignores the interrupt is torn down once the grace is over; later calls say why', async () => {
    await withKernel({}, { onTimeout: 'interrupt' }, async (k) => {
      const r = await k.runCode('import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.05)', { timeoutS: 1 });
      expect(r.fault).toMatchObject({ type: 'timeout', message: expect.stringMatching(/did not stop within 5s of an interrupt; kern killed the kernel's box/) });
      expect(r.exitCode).toBe(137);
      await expect(k.runCode('1')).rejects.toThrow(/torn down \(the cell ran past its timeout of 1\.000s and did not stop/);
    });
  });

  test('a cell that catches one KeyboardInterrupt is interrupted again', async () => {
    await withKernel({}, { onTimeout: 'interrupt' }, async (k) => {
      const r = await k.runCode('import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print("caught once", flush=True)\n    time.sleep(60)', { timeoutS: 1 });
      expect(r.stdout).toBe('caught once\n');
      expect(r.fault.message).toMatch(/kept its state/);
      expect((await k.runCode('1 + 1')).results[0].text).toBe('2');
    });
  });

  test('refused for node and typescript kernels, and a value it does not take, before any box', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      const before = driverPids().length;
      await expect(sb.kernel({ language: 'node', onTimeout: 'interrupt' })).rejects.toThrow(/onTimeout: "interrupt" \}\) is for python kernels/);
      await expect(sb.kernel({ language: 'typescript', onTimeout: 'interrupt' })).rejects.toHaveProperty('code', 'ERR_INVALID_OPTION');
      await expect(sb.kernel({ onTimeout: 'pause' })).rejects.toThrow(/takes "teardown" or "interrupt", got "pause"/);
      expect(driverPids().length).toBe(before);
    } finally {
      await sb.close();
    }
  });
});

// The cap is a cgroup only as root here (cgroup v1); unprivileged it is a best-effort rlimit,
// under which the allocation fails with MemoryError instead of the box being killed.
(isRoot ? test : test.skip)('a kernel killed by its memory cap says so on the next call', async () => {
  await withKernel({ memoryMb: 64 }, {}, async (k) => {
    const r = await k.runCode('b = bytearray(200 * 1024 * 1024)\nb[::4096] = b"x" * len(b[::4096])');
    expect(r.fault && r.fault.type).toMatch(/oom|killed/);
    await expect(k.runCode('1')).rejects.toThrow(/torn down/);
  });
});

test('the session callbacks stream each cell as it runs', async () => {
  const seen = [];
  const sb = await new Sandbox(opts({ onStdout: (b) => seen.push(b.toString()) })).open();
  try {
    const k = await sb.kernel();
    await k.runCode('print("a")');
    await k.runCode('print("b")');
    await k.close();
    expect(seen.join('')).toBe('a\nb\n');
  } finally {
    await sb.close();
  }
});

test('a cell\'s own onStdout/onStderr take its output instead of the session\'s; null takes it from both', async () => {
  const session = [];
  const sb = await new Sandbox(opts({ onStdout: (b) => session.push(b.toString()), onStderr: (b) => session.push(`E${b}`) })).open();
  try {
    const k = await sb.kernel();
    const out = [];
    const err = [];
    const r = await k.runCode('import sys\nprint("mine")\nprint("oops", file=sys.stderr)', {
      onStdout: (b) => out.push(b.toString()),
      onStderr: (b) => err.push(b.toString()),
    });
    expect(out.join('')).toBe('mine\n');
    expect(err.join('')).toContain('oops\n');
    expect(r.stdout).toBe('mine\n');
    await k.runCode('print("quiet")', { onStdout: null });
    await k.runCode('print("session")');
    // (Rootless on cgroup v1 a first cell's stderr also has the best-effort caps' warnings.)
    expect(session.filter((c) => !/^E(warning|note):/.test(c)).join('')).toBe('session\n');
    await expect(k.runCode('1', { onStdout: 'no' })).rejects.toThrow(/option `onStdout` must be a function/);
    await k.close();
  } finally {
    await sb.close();
  }
});

test('a short print streams while its cell still runs, not when the cell ends', async () => {
  let cellDone = false;
  let sawUpWhileRunning = null;
  let release;
  const up = new Promise((r) => (release = r));
  const sb = await new Sandbox(opts({
    onStdout: (b) => {
      if (sawUpWhileRunning === null && b.toString().includes('up')) {
        sawUpWhileRunning = !cellDone;
        release();
      }
    },
  })).open();
  try {
    const k = await sb.kernel();
    await sb.writeFile('go', '');
    // The cell waits until the file `go` is gone: the test removes it only once "up" arrived.
    const cell = k.runCode('import os, time\nprint("up", flush=True)\nwhile os.path.exists("go"): time.sleep(0.05)\nprint("done")')
      .then((r) => {
        cellDone = true;
        return r;
      });
    await Promise.race([up, cell]);
    await sb.run(['rm', '-f', 'go']);
    const r = await cell;
    expect(sawUpWhileRunning).toBe(true);
    expect(r.stdout).toBe('up\ndone\n');
    await k.close();
  } finally {
    await sb.close();
  }
});

test('close() ends the box and leaves no process; it is idempotent', async () => {
  const before = driverPids();
  const sb = await new Sandbox(opts()).open();
  try {
    const k = await sb.kernel();
    await k.runCode('1');
    const mine = driverPids().filter((p) => !before.includes(p));
    expect(mine).toHaveLength(1);
    await k.close();
    await k.close();
    expect(await gone(mine)).toEqual([]);
    await expect(k.runCode('1')).rejects.toThrow(/torn down \(it was closed\)/);
  } finally {
    await sb.close();
  }
});

// The box's output queue is bounded (a slow onStdout holds the box, not host memory): nothing
// may wait on it with nobody reading. Each of these hung for ever when close() or a dead cell
// waited for the box's end without reading what the box still wrote.
test('close(), and a cell whose kernel dies, end although the box still floods its output', async () => {
  const flood = ['import sys, threading', 'def spam():', '    while True:',
    '        sys.stdout.write("x" * 65536); sys.stdout.flush()'];
  const before = new Set(driverPids());
  const sb = await new Sandbox(opts()).open();
  try {
    // A thread that floods stdout after its cell returned: no cell reads the box meanwhile.
    const k1 = await sb.kernel();
    await k1.runCode([...flood, 'threading.Thread(target=spam, daemon=True).start()', 'print("started")'].join('\n'));
    await k1.close();
    // A cell that floods and then ends its own process: its end must be told.
    const k2 = await sb.kernel();
    const settled = await k2.runCode(['import os, sys', 'for _ in range(300):', '    sys.stdout.write("y" * 65536)',
      'sys.stdout.flush()', 'os._exit(3)'].join('\n')).then((r) => r, (e) => e);
    expect(settled).not.toBeInstanceOf(Error);
    expect(settled.fault).toEqual({ type: 'killed', message: expect.stringMatching(/exited \(code 3\)/) });
    await k2.close();
  } finally {
    await sb.close();
  }
  // Nothing of either kernel is left on the host.
  expect(await gone(driverPids().filter((p) => !before.has(p)))).toEqual([]);
}, 120000);

test("closing the Sandbox ends its kernels", async () => {
  const before = driverPids();
  const sb = await new Sandbox(opts()).open();
  const k = await sb.kernel();
  await k.runCode('1');
  const mine = driverPids().filter((p) => !before.includes(p));
  expect(mine).toHaveLength(1);
  await sb.close();
  expect(await gone(mine)).toEqual([]);
  await expect(k.runCode('1')).rejects.toThrow(SandboxError);
});

test('bad arguments are SandboxErrors', async () => {
  await withKernel({}, {}, async (k, sb) => {
    await expect(k.runCode(42)).rejects.toThrow(SandboxError);
    await expect(k.runCode('1', { language: 'bash' })).rejects.toThrow(/timeoutS/);
    await expect(sb.kernel({ timeoutS: -1 })).rejects.toThrow(/timeoutS/);
  });
  const { Kernel } = require('../..');
  expect(() => new Kernel()).toThrow(/sandbox\.kernel\(\)/);
});

test('an open kernel (and prewarmed pool) does not keep Node alive, and dies with it', async () => {
  const { spawnSync } = require('child_process');
  const path = require('path');
  const before = driverPids();
  // A temp dir of its own, so its temporary workspace can be watched.
  const tmp = fs.mkdtempSync(path.join(require('os').tmpdir(), 'kern-exit-'));
  const script = `
    const { Sandbox } = require(${JSON.stringify(path.join(__dirname, '..', '..'))});
    (async () => {
      const sb = await new Sandbox(${JSON.stringify(opts({ prewarm: 1 }))}).open();
      const k = await sb.kernel();
      console.log((await k.runCode('1 + 1')).results[0].text);
      console.log(require('fs').readdirSync(${JSON.stringify(tmp)}).filter((n) => n.startsWith('kern-ws-')).length);
    })();`;
  // Nothing is closed: Node must still exit by itself once its work is done.
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60000, env: { ...process.env, TMPDIR: tmp } });
  expect(r.error).toBeUndefined();
  expect(r.status).toBe(0);
  expect(r.stdout).toBe('2\n1\n');
  // The temporary workspace it made went with it.
  expect(fs.readdirSync(tmp).filter((n) => n.startsWith('kern-ws-'))).toEqual([]);
  fs.rmSync(tmp, { recursive: true, force: true });
  // Whatever drivers appeared while it ran are gone with it.
  const since = driverPids().filter((p) => !before.includes(p));
  expect(await gone(since)).toEqual([]);
});

test('a cell keeps at most 10,000 results, with a note; the next cell has its own count', async () => {
  await withKernel({}, {}, async (k) => {
    const r = await k.runCode('for i in range(10002):\n    display(i)');
    expect(r.results).toHaveLength(10000);
    expect(r.results[9999].text).toBe('9999');
    expect(notesOf(r)).toEqual(['note: 2 rich result(s) were dropped: a call keeps at most 10000 results and 128 MiB of them']);
    const next = await k.runCode('display(1)\n2');
    expect(next.results.map((x) => x.text)).toEqual(['1', '2']);
    expect(notesOf(next)).toEqual([]);
  });
});
