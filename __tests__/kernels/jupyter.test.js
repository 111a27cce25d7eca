'use strict';
// rootless: yes
// Jupyter kernels of the image (`kernel({ jupyter })`): IPython (Debian's python3-ipykernel) and
// R (r-cran-irkernel) on the sci test rootfs, driven over ZeroMQ ipc:// sockets, through the
// public API.

const fs = require('fs');
const os = require('os');
const { Sandbox, SandboxError } = require('../..');
const helpers = require('../helpers');

const { opts, expectOk, expectSandboxError, hostProcessesMatching, waitFor, makeTempDir, summary, ROOTFS } = helpers;

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

beforeAll(() => {
  if (!fs.existsSync(`${SCI}/.kern-test-rootfs`)) {
    throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
  }
});

/** The host pids of IPython kernels (every Sandbox's). */
/** This process's IPython kernels (its descendants only: another Jest beside this one, CI's
 * side run, starts kernels of its own). */
const kernelPids = () => hostProcessesMatching('ipykernel_launcher').map((p) => p.pid).filter((pid) => helpers.ourDescendant(pid));

/** The socket directory the kernel `pid` has bound, as its mount table names it. */
const socketDirOf = (pid) => {
  const m = fs.readFileSync(`/proc/${pid}/mountinfo`, 'utf8').match(/\/(kern-jk-[^/\s]+)/);
  return m ? m[1] : undefined;
};

/** The host's socket directories of Jupyter kernels (one per open kernel). */
const socketDirs = () => fs.readdirSync(os.tmpdir()).filter((n) => n.startsWith('kern-jk-'));

/** A Sandbox on the sci rootfs with `sbOpts`, and a kernel of it with `kOpts`. */
const withKernel = (sbOpts, kOpts, fn) => helpers.withKernel({ image: SCI, ...sbOpts }, kOpts, fn);

/** One Sandbox on the sci rootfs and one Jupyter kernel of it for the enclosing describe block,
 * closed after it; calls on the returned handle go to that kernel. */
function sharedKernel(jupyter) {
  let sb = null;
  let kernel = null;
  beforeAll(async () => {
    sb = await new Sandbox(opts({ image: SCI })).open();
    kernel = await sb.kernel({ jupyter });
  });
  afterAll(async () => {
    if (kernel) await kernel.close();
    if (sb) await sb.close();
  });
  return helpers.lateBound(() => kernel, 'sharedKernel');
}

describe('IPython (ipykernel)', () => {
  const k = sharedKernel('python3');

  test('state carries across cells; stdout, stderr and the last expression per cell', async () => {
    const a = await k.runCode('x = 41\nimport sys\nprint("out")\nprint("err", file=sys.stderr)');
    expectOk(a);
    expect(a.stdout).toBe('out\n');
    expect(a.codeStderr).toBe('err\n');
    expect(a.results).toEqual([]);
    const b = await k.runCode('x + 1');
    expectOk(b);
    expect(b.stdout).toBe('');
    expect(b.results.map((r) => r.text)).toEqual(['42']);
  });

  test('display() and a matplotlib figure (inline backend) arrive as results, in order', async () => {
    const r = await k.runCode(
      [
        'from IPython.display import display, HTML',
        'display(HTML("<b>bold</b>"))',
        'import matplotlib.pyplot as plt',
        'plt.plot([1, 3, 2])',
        'plt.show()',
        '"last"',
      ].join('\n')
    );
    expectOk(r);
    expect(r.results.length).toBe(3);
    expect(r.results[0].html).toBe('<b>bold</b>');
    expect(r.results[1].formats()).toContain('image/png');
    expect(r.results[1].png.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
    expect(r.results[1].png.length).toBeGreaterThan(1000);
    expect(r.results[2].text).toBe("'last'");
  });

  test('a figure carries its chart data as the driver\'s do: bar and line charts, titles, units, ticks; no name of ours in the namespace', async () => {
    const r = await k.runCode(
      [
        'import matplotlib.pyplot as plt',
        'fig, ax = plt.subplots()',
        'ax.bar(["a", "b", "c"], [3, 5, 2], label="sales")',
        'ax.set_title("Sales"); ax.set_xlabel("Region"); ax.set_ylabel("Revenue (USD)")',
        'plt.show()',
        'plt.plot([0, 1, 2], [1, 4, 9]); plt.title("Squares")',
        'plt.show()',
        'sorted(n for n in dir() if "kern" in n.lower())',
      ].join('\n')
    );
    expectOk(r);
    const charts = r.results.filter((x) => x.chart).map((x) => x.chart);
    expect(charts.map((c) => [c.type, c.title])).toEqual([['bar', 'Sales'], ['line', 'Squares']]);
    expect(charts[0]).toMatchObject({ xLabel: 'Region', yLabel: 'Revenue (USD)', yUnit: 'USD' });
    expect(charts[0].elements.map((e) => [e.label, e.value, e.group])).toEqual([['a', 3, 'sales'], ['b', 5, 'sales'], ['c', 2, 'sales']]);
    expect(charts[1].elements[0].points).toEqual([[0, 1], [1, 4], [2, 9]]);
    expect(charts[1].xTicks.length).toBeGreaterThan(0);
    // The chart's MIME type is not one of the result's formats; the png still is.
    expect(r.results[0].formats()).toContain('image/png');
    expect(r.results[0].formats().some((f) => f.includes('kern'))).toBe(false);
    expect(r.results[r.results.length - 1].text).toBe('[]');
  });

  test('an inline matplotlib figure whose base64 comes in MIME-style lines is a decoded PNG', async () => {
    const r = await k.runCode(
      [
        'import base64, io',
        'import matplotlib.pyplot as plt',
        'from IPython.display import display',
        'fig = plt.figure(); plt.plot([1, 3, 2]); buf = io.BytesIO(); fig.savefig(buf, format="png"); plt.close(fig)',
        'b64 = base64.encodebytes(buf.getvalue()).decode()',
        'assert "\\n" in b64[:100]',
        'display({"image/png": b64, "text/plain": "fig"}, raw=True)',
      ].join('\n')
    );
    expectOk(r);
    expect(r.runtimeNotes).toEqual([]);
    expect(r.results.length).toBe(1);
    expect(r.results[0].png.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
    expect(r.results[0].png.length).toBeGreaterThan(1000);
  });

  test('a cell keeps at most 10,000 results, with a note', async () => {
    // Paced: IPython's IOPub is a ZeroMQ PUB socket, which drops past 1,000 unsent messages
    // when this host's reader is starved of CPU (CI, beside the other runs: 13 of 10,003 lost);
    // the cap is what this test is about.
    const r = await k.runCode('import time\nfrom IPython.display import display\nfor i in range(10003):\n    display(i)\n    if i % 250 == 249: time.sleep(0.02)', { timeoutS: 120 });
    expectOk(r);
    expect(r.results.length).toBe(10000);
    expect(r.results[9999].text).toBe('9999');
    expect(r.runtimeNotes).toEqual(['note: 3 rich result(s) were dropped: a call keeps at most 10000 results and 128 MiB of them']);
  });

  test('an exception gives its traceback (no colour codes) on stderr and a non-zero exit', async () => {
    const r = await k.runCode('def f():\n    return 1 / 0\nf()');
    expect(r.exitCode).not.toBe(0);
    expect(r.fault).toBeNull();
    expect(r.codeStderr).toMatch(/ZeroDivisionError: division by zero\n$/);
    expect(r.codeStderr).toMatch(/Traceback/);
    expect(r.stderr).not.toContain('\u001b[');
    // The kernel lives on.
    expect((await k.runCode('x')).results[0].text).toBe('41');
  });

  test('IPython itself: !shell commands and magics', async () => {
    const r = await k.runCode('!echo hi from the shell');
    expectOk(r);
    expect(r.stdout.trim()).toBe('hi from the shell');
    const m = await k.runCode('%who_ls');
    expectOk(m);
    expect(m.results[0].text).toMatch(/'x'/);
  });

  test('input() fails at once with a clear error: no stdin is offered', async () => {
    const r = await k.runCode('input("name? ")', { timeoutS: 30 });
    expect(r.fault).toBeNull();
    expect(r.exitCode).not.toBe(0);
    expect(r.codeStderr).toMatch(/StdinNotImplementedError/);
  });

  test('no TCP for the kernel\'s channels: they are ipc:// files in the private directory, and the box has no network', async () => {
    const r = await k.runCode(
      [
        'import json, os, stat',
        'tcp = [l.split()[1:4] for f in ("/proc/net/tcp", "/proc/net/tcp6") for l in open(f).read().splitlines()[1:]]',
        'conn = json.load(open("/.kern-jupyter/connection.json"))',
        'socks = sorted(n for n in os.listdir("/.kern-jupyter") if stat.S_ISSOCK(os.stat("/.kern-jupyter/" + n).st_mode))',
        'nets = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])',
        'print(json.dumps({"tcp": tcp, "transport": conn["transport"], "socks": socks, "net": nets}))',
      ].join('\n')
    );
    expectOk(r);
    const got = JSON.parse(r.stdout);
    expect(got).toMatchObject({ transport: 'ipc', socks: ['k-1', 'k-2', 'k-3', 'k-4', 'k-5'], net: ['lo'] });
    // ipykernel 6 itself opens one loopback listener (its IOPub thread's pipe for the output of
    // forked subprocesses, iostream.py); it lives in the box's own network namespace, which has
    // only `lo`. Nothing else: no channel of ours, nothing on another address.
    for (const [local, remote] of got.tcp) {
      expect(local).toMatch(/^0100007F:/);
      expect(remote).toMatch(/^(00000000:0000|0100007F:[0-9A-F]{4})$/);
    }
    expect(got.tcp.length).toBeLessThanOrEqual(1);
  });

  test('a message with a bad signature is dropped and counted in a runtime note', async () => {
    // The kernel's own session sends on its real IOPub socket; once with its key, once with
    // another. The first must arrive, the second must not.
    const send = (text) =>
      [
        'k = get_ipython().kernel',
        `k.session.send(k.iopub_socket, "stream", {"name": "stdout", "text": ${JSON.stringify(text)}}, parent=k.get_parent("shell"))`,
      ].join('\n');
    const good = await k.runCode(send('SIGNED\n'));
    expectOk(good);
    expect(good.stdout).toBe('SIGNED\n');
    expect(good.runtimeNotes).toEqual([]);
    const forged = await k.runCode(
      ['key = get_ipython().kernel.session.key', 'get_ipython().kernel.session.key = b"not-the-key"', send('FORGED\n'), 'k.session.key = key'].join('\n')
    );
    expectOk(forged);
    expect(forged.stdout).not.toMatch(/FORGED/);
    expect(forged.runtimeNotes.join('\n')).toMatch(/1 message\(s\) on the kernel's sockets had no valid signature and were dropped/);
    // Once reported, not again.
    expect((await k.runCode('1')).runtimeNotes).toEqual([]);
  });

  test('a message of millions of empty ZeroMQ frames (tiny on the wire, huge held) is dropped unparsed with a note; the host stays small', async () => {
    // 3 Mi empty frames: 6 MiB on the wire, far under the 64 MiB cap; held as frames by the
    // ZeroMQ reader, 32 bytes or more each. The kernel's own IOPub socket sends them.
    const vmHwm = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
    fs.writeFileSync('/proc/self/clear_refs', '5');
    const before = vmHwm();
    const r = await k.runCode(
      ['get_ipython().kernel.iopub_socket.send_multipart([b""] * (3 << 20))', 'print("after")'].join('\n'),
      { timeoutS: 120 }
    );
    const grew = vmHwm() - before;
    expectOk(r);
    expect(r.stdout).toBe('after\n');
    expect(r.runtimeNotes.join('\n')).toMatch(/1 message\(s\) of the kernel had more than 1024 ZeroMQ frames and were dropped/);
    // Held whole, the frames took this process up by well over 100 MiB.
    expect(grew).toBeLessThan(48 << 20);
    expect((await k.runCode('5 + 5')).results[0].text).toBe('10');
  }, 180000);

  test('output streams to onStdout while the cell runs', async () => {
    // The cell waits for a file that only the onStdout callback writes: it finishes only if
    // its first line reached the callback while it was running.
    const seen = [];
    const ws = makeTempDir();
    const live = await new Sandbox(opts({
      image: SCI,
      workspace: ws,
      onStdout: (b) => {
        seen.push(b.toString());
        if (b.toString().includes('started')) fs.writeFileSync(`${ws}/go`, '');
      },
    })).open();
    try {
      const lk = await live.kernel({ jupyter: 'python3' });
      const r = await lk.runCode(
        'import os, time, sys\nprint("started", flush=True)\nfor _ in range(400):\n    if os.path.exists("go"): break\n    time.sleep(0.05)\nprint("go seen" if os.path.exists("go") else "no go")',
        { timeoutS: 60 }
      );
      await lk.close();
      expectOk(r);
      expect(r.stdout).toBe('started\ngo seen\n');
      expect(seen.join('')).toBe('started\ngo seen\n');
    } finally {
      await live.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });
});

describe('R (IRkernel)', () => {
  const k = sharedKernel('ir');

  test('state carries across cells', async () => {
    const a = await k.runCode('x <- 41\nprint("hi")');
    expectOk(a);
    expect(a.stdout).toBe('[1] "hi"\n');
    const b = await k.runCode('x + 1');
    expectOk(b);
    expect(b.results[0].text).toBe('[1] 42');
  });

  test('a data.frame arrives with its text, HTML and markdown forms', async () => {
    const r = await k.runCode('data.frame(n = c(1, 2), s = c("a", "b"))');
    expectOk(r);
    expect(r.results.length).toBe(1);
    const df = r.results[0];
    expect(df.formats()).toEqual(expect.arrayContaining(['text/plain', 'text/html', 'text/markdown']));
    expect(df.text).toMatch(/n s\n1 1 a\n2 2 b/);
    expect(df.html).toMatch(/<table/);
    expect(df.markdown).toMatch(/\| n [^|]*\| s [^|]*\|\n\|---\|---\|\n\| 1 \| a \|/);
  });

  test('an error gives a traceback and a non-zero exit; the kernel lives on', async () => {
    const r = await k.runCode('f <- function() stop("boom")\nf()');
    expect(r.exitCode).not.toBe(0);
    expect(r.fault).toBeNull();
    expect(r.codeStderr).toMatch(/Error in f\(\): boom/);
    expect(r.codeStderr).toMatch(/Traceback/);
    expect((await k.runCode('x')).results[0].text).toBe('[1] 41');
  });

  test('readline() asks for input anyway: the cell is interrupted at once with a note, never left waiting', async () => {
    const r = await k.runCode('answer <- readline("name? ")', { timeoutS: 60 });
    expect(r.fault).toBeNull();
    expect(r.exitCode).toBe(1);
    expect(r.runtimeNotes.join('\n')).toMatch(/the cell asked for input \(prompt "name\? "\), which a kernel cell cannot be given; kern interrupted it/);
    expect((await k.runCode('x')).results[0].text).toBe('[1] 41');
  });

  test('IRkernel opens no TCP socket at all: /proc/net/tcp of the box is empty', async () => {
    const r = await k.runCode('cat(length(readLines("/proc/net/tcp")) - 1, length(readLines("/proc/net/tcp6")) - 1, file.exists("/.kern-jupyter/k-1"))');
    expectOk(r);
    expect(r.stdout).toBe('0 0 TRUE');
  });

  test('plot() arrives as a decoded PNG: IRkernel\'s base64 comes in lines, which are ignored as Jupyter clients do', async () => {
    const r = await k.runCode('plot(1:10)');
    expectOk(r);
    expect(r.runtimeNotes).toEqual([]);
    const fig = r.results.find((x) => x.formats().includes('image/png'));
    expect(fig).toBeDefined();
    expect(fig.png.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
    expect(fig.png.length).toBeGreaterThan(1000);
    // Kept without the line breaks, ready for a data: URL.
    expect(fig.data['image/png']).not.toMatch(/\s/);
    expect(Buffer.from(fig.data['image/png'], 'base64').equals(fig.png)).toBe(true);
  });

  test('a cell timeout interrupts R with SIGINT (its kernelspec\'s interrupt mode) and keeps its state', async () => {
    await k.runCode('y <- 7');
    const r = await k.runCode('y <- 1\nwhile (TRUE) {}', { timeoutS: 3 });
    expect(r.fault).toMatchObject({ type: 'timeout' });
    expect(r.fault.message).toMatch(/interrupted it and the kernel kept its state/);
    expect((await k.runCode('y')).results[0].text).toBe('[1] 1');
  });
});

test('a PYTHONSTARTUP of the caller\'s own runs instead of the chart formatter', async () => {
  const sb = await new Sandbox(opts({ image: SCI, env: { PYTHONSTARTUP: '/workspace/startup.py' } })).open();
  try {
    await sb.writeFile('startup.py', 'FROM_STARTUP = "mine"\n');
    const k = await sb.kernel({ jupyter: 'python3' });
    try {
      expect((await k.runCode('FROM_STARTUP')).results[0].text).toBe("'mine'");
      const r = await k.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()');
      expect(r.results[0].formats()).toContain('image/png');
      expect(r.results[0].chart).toBeNull();
    } finally {
      await k.close();
    }
  } finally {
    await sb.close();
  }
});

test('interrupt keeps state: x = 1, a cell that never ends, then x is still 1', async () => {
  await withKernel({}, { jupyter: 'python3' }, async (k) => {
    expectOk(await k.runCode('x = 1'));
    const r = await k.runCode('while True: pass', { timeoutS: 3 });
    // One object, so a failure shows the whole result.
    expect({ ...summary(r), codeStderr: r.codeStderr }).toMatchObject({
      fault: { type: 'timeout', message: expect.stringMatching(/interrupted it and the kernel kept its state/) },
      exitCode: 1,
      codeStderr: expect.stringMatching(/KeyboardInterrupt/),
    });
    const after = await k.runCode('x');
    expectOk(after);
    expect(after.results[0].text).toBe('1');
  });
});

test('onTimeout: "teardown" ends the kernel at a timeout instead of interrupting it', async () => {
  await withKernel({}, { jupyter: 'python3', onTimeout: 'teardown' }, async (k) => {
    expectOk(await k.runCode('x = 1'));
    const r = await k.runCode('import time\nprint("up", flush=True)\ntime.sleep(60)', { timeoutS: 2 });
    expect(r.fault).toMatchObject({ type: 'timeout', message: expect.stringMatching(/kern killed the kernel's box and every process in it \(onTimeout: "teardown"\)/) });
    expect(r.exitCode).toBe(137);
    await expect(k.runCode('x')).rejects.toThrow(/torn down/);
  });
});

test('a cell that ignores the interrupt is torn down with a timeout fault after the grace period', async () => {
  await withKernel({}, { jupyter: 'python3', timeoutS: 3 }, async (k) => {
    const r = await k.runCode('import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass');
    expect(r.fault).toMatchObject({ type: 'timeout' });
    expect(r.fault.message).toMatch(/did not stop within \d+s of an interrupt; kern killed the kernel's box/);
    expect(r.exitCode).toBe(137);
    await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down/, /did not stop/, /jupyter: "python3"/);
  });
});


test('a kernel that died between cells is reported on the next call', async () => {
  const before = kernelPids();
  await withKernel({}, { jupyter: 'python3' }, async (k) => {
    const mine = kernelPids().filter((p) => !before.includes(p));
    expect(mine).toHaveLength(1);
    expectOk(await k.runCode('import os, threading\nthreading.Timer(0.3, os._exit, [3]).start()'));
    // The kernel's process exits on its own after the cell (seen on the host); the next call
    // says so.
    expect(await waitFor(() => !helpers.isAlive(mine[0]), 30000)).toBe(true);
    await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down/, /exited \(code 3\)/);
  });
});

test('a kernel that stops answering its heartbeat is noticed on the next call and torn down', async () => {
  const before = kernelPids();
  await withKernel({}, { jupyter: 'python3' }, async (k) => {
    const mine = kernelPids().filter((p) => !before.includes(p));
    expect(mine).toHaveLength(1);
    // SIGSTOP freezes the whole kernel (its heartbeat thread too) once the cell has finished.
    expectOk(await k.runCode('import os, signal, threading\nthreading.Timer(0.3, os.kill, [os.getpid(), signal.SIGSTOP]).start()'));
    expect(await waitFor(() => (helpers.procStat(mine[0]) || {}).state === 'T', 30000)).toBe(true);
    await expectSandboxError(() => k.runCode('1'), SandboxError, /stopped answering its heartbeat/);
    await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down/);
  });
});

test('a kernel that dies during a cell gives a fault, and later calls say it is gone', async () => {
  await withKernel({}, { jupyter: 'python3' }, async (k) => {
    const r = await k.runCode('import os\nprint("before", flush=True)\nos._exit(5)');
    expect(r.fault).not.toBeNull();
    expect(r.fault.message).toMatch(/exited \(code 5\)/);
    expect(r.exitCode).toBe(137);
    await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down/);
  });
});

test('close() shuts the kernel down cleanly (its exit handlers run), leaving no process or socket directory', async () => {
  const [dirsBefore, pidsBefore] = [socketDirs(), kernelPids()];
  const sb = await new Sandbox(opts({ image: SCI })).open();
  let ours;
  let dir;
  try {
    const k = await sb.kernel({ jupyter: 'python3' });
    ours = kernelPids().filter((p) => !pidsBefore.includes(p));
    expect(ours.length).toBeGreaterThan(0);
    dir = socketDirOf(ours[0]);
    expect(socketDirs().filter((d) => !dirsBefore.includes(d))).toContain(dir);
    expectOk(await k.runCode('import atexit\natexit.register(lambda: open("/workspace/bye.txt", "w").write("clean"))'));
    await k.close();
    // A shutdown_request lets the kernel run its exit handlers; a kill would not.
    expect((await sb.readFile('bye.txt')).toString()).toBe('clean');
    await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down \(it was closed\)/);
    await k.close();
  } finally {
    await sb.close();
  }
  expect(await waitFor(() => kernelPids().every((p) => !ours.includes(p)))).toBe(true);
  expect(socketDirs()).not.toContain(dir);
});

test('closing the Sandbox closes its Jupyter kernels', async () => {
  const sb = await new Sandbox(opts({ image: SCI })).open();
  const k = await sb.kernel({ jupyter: 'ir' });
  expectOk(await k.runCode('1'));
  await sb.close();
  await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down/);
});

test('a kernelspec the image lacks is a SandboxError listing the ones it has', async () => {
  const sb = await new Sandbox(opts({ image: SCI })).open();
  try {
    await expectSandboxError(
      () => sb.kernel({ jupyter: 'julia-1.10' }),
      SandboxError,
      /no Jupyter kernelspec "julia-1.10"/,
      /the kernelspecs there are "ir", "python3"/,
      /\/usr\/share\/jupyter\/kernels/
    );
  } finally {
    await sb.close();
  }
  // The base test image has no Jupyter at all.
  const bare = await new Sandbox(opts({ image: ROOTFS })).open();
  try {
    await expectSandboxError(() => bare.kernel({ jupyter: 'python3' }), SandboxError, /no kernelspecs were found there/);
  } finally {
    await bare.close();
  }
});

test('kernelspecs on JUPYTER_PATH in the workspace: interrupt_mode "message", and a wrapper script whose process group gets the SIGINT; both keep state', async () => {
  const ws = makeTempDir();
  try {
    fs.mkdirSync(`${ws}/jk/kernels/pymsg`, { recursive: true });
    fs.writeFileSync(
      `${ws}/jk/kernels/pymsg/kernel.json`,
      JSON.stringify({
        argv: ['python3', '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
        display_name: 'Python, interrupted by message',
        language: 'python',
        interrupt_mode: 'message',
        env: { KERNEL_FLAVOUR: 'msg:{resource_dir}' },
      })
    );
    // A kernel behind a wrapper script (as conda's kernelspecs do): the interrupt goes to the
    // process group, so it reaches the kernel, not just the shell.
    fs.mkdirSync(`${ws}/jk/kernels/wrapped`, { recursive: true });
    fs.writeFileSync(
      `${ws}/jk/kernels/wrapped/kernel.json`,
      JSON.stringify({ argv: ['sh', '-c', 'python3 -m ipykernel_launcher -f "$0"; exit $?', '{connection_file}'], language: 'python' })
    );
    await withKernel({ workspace: ws, env: { JUPYTER_PATH: '/workspace/jk' } }, { jupyter: 'pymsg' }, async (k) => {
      const env = await k.runCode('import os\nx = 1\nos.environ["KERNEL_FLAVOUR"]');
      expectOk(env);
      expect(env.results[0].text).toBe("'msg:/workspace/jk/kernels/pymsg'");
      // Only an interrupt_request on the control socket can stop this cell (kern sends no
      // signal to a kernel whose kernelspec asks for messages); if none arrived, the kernel
      // would be torn down after the grace period instead.
      const r = await k.runCode('while True: pass', { timeoutS: 3 });
      expect(r.fault).toMatchObject({ type: 'timeout' });
      expect(r.fault.message).toMatch(/interrupted it and the kernel kept its state/);
      expect((await k.runCode('x')).results[0].text).toBe('1');
    });
    await withKernel({ workspace: ws, env: { JUPYTER_PATH: '/workspace/jk' } }, { jupyter: 'wrapped' }, async (k) => {
      expectOk(await k.runCode('x = 1'));
      const r = await k.runCode('while True: pass', { timeoutS: 3 });
      expect(summary(r)).toMatchObject({ fault: { type: 'timeout', message: expect.stringMatching(/interrupted it and the kernel kept its state/) } });
      expect((await k.runCode('x')).results[0].text).toBe('1');
    });
    // The image's kernelspecs and the workspace's are listed together when a name is missing.
    const sb = await new Sandbox(opts({ image: SCI, workspace: ws, env: { JUPYTER_PATH: '/workspace/jk' } })).open();
    try {
      await expectSandboxError(() => sb.kernel({ jupyter: 'nope' }), SandboxError, /"ir", "pymsg", "python3", "wrapped"/, /\/workspace\/jk\/kernels/);
    } finally {
      await sb.close();
    }
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test('a kernel whose socket file is there before it listens (bound, listening 3 s later) is waited for, not given up on', async () => {
  // A kernelspec whose wrapper binds the heartbeat's socket file at once but listens on it only
  // 3 s later (the window between a kernel's bind() and listen(), widened), then relays it to
  // the ipykernel it started on a heartbeat socket of its own.
  const ws = makeTempDir();
  try {
    fs.mkdirSync(`${ws}/jk/kernels/late`, { recursive: true });
    fs.writeFileSync(
      `${ws}/jk/late.py`,
      [
        'import json, os, socket, subprocess, sys, threading, time',
        'info = json.load(open(sys.argv[1]))',
        'path = lambda port: "%s-%d" % (info["ip"], port)',
        'inner = dict(info, hb_port=info["hb_port"] + 100)',
        'json.dump(inner, open("/tmp/inner.json", "w"))',
        'kernel = subprocess.Popen([sys.executable, "-m", "ipykernel_launcher", "-f", "/tmp/inner.json"])',
        'threading.Thread(target=lambda: os._exit(kernel.wait()), daemon=True).start()',
        'hb = socket.socket(socket.AF_UNIX)',
        'hb.bind(path(info["hb_port"]))',
        'open("/workspace/bound", "w").close()',
        'time.sleep(3)',
        'hb.listen()',
        'open("/workspace/listening", "w").close()',
        'def pipe(a, b):',
        '    while (d := a.recv(65536)):',
        '        b.sendall(d)',
        '    b.shutdown(socket.SHUT_WR)',
        'while True:',
        '    ours, _ = hb.accept()',
        '    theirs = socket.socket(socket.AF_UNIX)',
        '    while theirs.connect_ex(path(inner["hb_port"])) != 0:',
        '        time.sleep(0.01)',
        '    for a, b in ((ours, theirs), (theirs, ours)):',
        '        threading.Thread(target=pipe, args=(a, b), daemon=True).start()',
      ].join('\n')
    );
    fs.writeFileSync(
      `${ws}/jk/kernels/late/kernel.json`,
      JSON.stringify({ argv: ['python3', '/workspace/jk/late.py', '{connection_file}'], language: 'python' })
    );
    await withKernel({ workspace: ws, env: { JUPYTER_PATH: '/workspace/jk' } }, { jupyter: 'late' }, async (k) => {
      // The wrapper did hold the file unlistened (else this test would show nothing).
      expect(fs.existsSync(`${ws}/bound`) && fs.existsSync(`${ws}/listening`)).toBe(true);
      // Every cell is preceded by a heartbeat round trip through the late socket.
      expectOk(await k.runCode('x = 6'));
      expect((await k.runCode('x * 7')).results[0].text).toBe('42');
    });
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test('setup: "pip install ipykernel" (from the real PyPI) gives a kernelspec the kernel finds in .deps', async () => {
  // pip's own scratch goes to the workspace: the box's /tmp is too small for the wheels.
  const setup = 'mkdir -p /workspace/.piptmp && TMPDIR=/workspace/.piptmp pip install --quiet ipykernel; rc=$?; rm -rf /workspace/.piptmp; exit $rc';
  await withKernel({ setup }, { jupyter: 'python3' }, async (k) => {
    // The pip-installed ipykernel runs (its kernelspec names "python"; the image has python3).
    const r = await k.runCode('import ipykernel\nipykernel.__file__');
    expectOk(r);
    expect(r.results[0].text).toBe("'/workspace/.deps/python/ipykernel/__init__.py'");
  });
}, 300000);

test('attack: socket names swapped for symlinks to a host socket never get a connection from kern', async () => {
  // The box can write in its socket directory. It replaces every socket with a symlink to a
  // socket on the host, then the kernel exits: ZeroMQ's sockets on our side reconnect by
  // themselves, and had they reconnected by name they would reach the host's socket.
  const dir = makeTempDir();
  const canary = `${dir}/canary.sock`;
  let connections = 0;
  const server = require('net').createServer((c) => {
    connections++;
    c.destroy();
  });
  await new Promise((r) => server.listen(canary, r));
  try {
    await withKernel({}, { jupyter: 'python3' }, async (k) => {
      const r = await k.runCode(
        [
          'import os, threading',
          'for n in ["k-1", "k-2", "k-3", "k-4", "k-5"]:',
          '    os.unlink("/.kern-jupyter/" + n)',
          `    os.symlink(${JSON.stringify(canary)}, "/.kern-jupyter/" + n)`,
          'threading.Timer(0.3, os._exit, [0]).start()',
        ].join('\n')
      );
      expectOk(r);
      // Reconnects are retried from 0.1 s on: 3 s is many attempts.
      await new Promise((res) => setTimeout(res, 3000));
      expect(connections).toBe(0);
      await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down/);
    });
    expect(connections).toBe(0);
  } finally {
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('maxOutputBytes caps a cell\'s output (stream messages and the process\'s own writes alike)', async () => {
  await withKernel({ maxOutputBytes: 1000 }, { jupyter: 'python3' }, async (k) => {
    const r = await k.runCode('print("x" * 200_000)\nimport os\nos.system("head -c 5000 /dev/zero | tr \'\\\\0\' y")');
    expect(r.fault).toBeNull();
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(1000);
    // Under the cap, nothing is marked.
    const small = await k.runCode('print("ok")');
    expect([small.stdout, small.truncated]).toEqual(['ok\n', false]);
  });
});

test('two kernels of one Sandbox at once keep separate state', async () => {
  await withKernel({}, { jupyter: 'python3' }, async (a, sb) => {
    const b = await sb.kernel({ jupyter: 'python3' });
    try {
      expectOk(await a.runCode('v = "a"'));
      expectOk(await b.runCode('v = "b"'));
      const [ra, rb] = await Promise.all([a.runCode('v'), b.runCode('v')]);
      expect([ra.results[0].text, rb.results[0].text]).toEqual(["'a'", "'b'"]);
    } finally {
      await b.close();
    }
  });
});

test('a kernel that exits at start is a SandboxError with its output', async () => {
  const ws = makeTempDir();
  try {
    fs.mkdirSync(`${ws}/jk/kernels/broken`, { recursive: true });
    fs.writeFileSync(
      `${ws}/jk/kernels/broken/kernel.json`,
      JSON.stringify({ argv: ['sh', '-c', 'echo cannot start here >&2; exit 3', '{connection_file}'], language: 'none' })
    );
    fs.mkdirSync(`${ws}/jk/kernels/absent`, { recursive: true });
    fs.writeFileSync(`${ws}/jk/kernels/absent/kernel.json`, JSON.stringify({ argv: ['no-such-kernel-binary', '{connection_file}'] }));
    const sb = await new Sandbox(opts({ image: SCI, workspace: ws, env: { JUPYTER_PATH: '/workspace/jk' } })).open();
    try {
      await expectSandboxError(() => sb.kernel({ jupyter: 'broken' }), SandboxError, /"broken" .* did not start: its process exited with code 3/, /cannot start here/);
      await expectSandboxError(() => sb.kernel({ jupyter: 'absent' }), SandboxError, /did not start/, /no-such-kernel-binary/);
      // The Sandbox is fine afterwards.
      expectOk(await sb.runCode('print(1)'));
    } finally {
      await sb.close();
    }
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test('the kernel runs as the Sandbox\'s user account, its sockets still reachable', async () => {
  await withKernel({ user: 'nobody' }, { jupyter: 'python3' }, async (k) => {
    const r = await k.runCode('import os\nos.getuid(), os.getgid()');
    expectOk(r);
    expect(r.results[0].text).toBe('(65534, 65534)');
  });
});

test('bad kernel() options are refused before anything starts', async () => {
  const sb = await new Sandbox(opts({ image: SCI })).open();
  try {
    await expectSandboxError(() => sb.kernel({ jupyter: 3 }), SandboxError, /kernelspec in the image as a string/);
    await expectSandboxError(() => sb.kernel({ jupyter: '../../etc' }), SandboxError, /takes a kernelspec name/);
    await expectSandboxError(() => sb.kernel({ jupyter: '' }), SandboxError, /takes a kernelspec name/);
    await expectSandboxError(() => sb.kernel({ jupter: 'python3' }), SandboxError, /unknown kernel\(\) option `jupter`/);
  } finally {
    await sb.close();
  }
});

test('the box keeps the Sandbox posture: securityProfile "untrusted" and a memory cap apply to the kernel', async () => {
  await withKernel({ securityProfile: 'untrusted', memoryMb: 512 }, { jupyter: 'python3' }, async (k) => {
    // unshare(CLONE_NEWUSER) is refused by the profile (EPERM); without it, a box's process
    // could make a user namespace of its own.
    const r = await k.runCode('import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.unshare(0x10000000), ctypes.get_errno())');
    expectOk(r);
    expect(r.stdout.trim()).toBe('-1 1');
    const big = await k.runCode('b = bytearray(2 * 1024**3)\nb[::4096] = b"x" * (len(b) // 4096)', { timeoutS: 60 });
    if (process.getuid() === 0) {
      expect(big.fault).toMatchObject({ type: 'oom' });
      await expectSandboxError(() => k.runCode('1'), SandboxError, /was torn down/);
    } else {
      // Unprivileged on cgroup v1 the cap is a best-effort rlimit: the allocation fails instead.
      expect(big.codeStderr).toMatch(/MemoryError/);
    }
  });
});
