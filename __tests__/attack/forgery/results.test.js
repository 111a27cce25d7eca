'use strict';
// rootless: yes
// Attack suite, results: what a box sends back must reach the host whole or bounded, never as a
// throw or a host memory blow-up, and never as keys that stand in for the host's own methods.
// Output of legal bytes that JSON would escape sixfold (NUL), a million tiny results, results
// over the byte cap on every path (fresh box, prewarmed box, driver kernel), MIME names like
// `hasOwnProperty`, and a Jupyter kernel that floods its IOPub socket while no cell runs.

const fs = require('fs');
const { requireRootfs, opts, sleep, withKernel } = require('../../helpers');
const { hostGuard } = require('../host');
const { Sandbox } = require('../../..');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const MIB = 1 << 20;

let guard;

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
});

afterAll(() => {
  if (guard) guard.cleanup();
});

/** This process's resident memory now, in bytes. */
const rss = () => process.memoryUsage().rss;

/** This process's peak resident memory (VmHWM), in bytes. */
const vmHwm = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;

/** Collects garbage if node runs with --expose-gc (so RSS reflects what is still held). */
const gc = () => {
  if (typeof global.gc === 'function') global.gc();
};

const dropped = (r) => r.runtimeNotes.find((n) => /rich result\(s\) were dropped/.test(n));

test('63 MiB of NUL bytes on stdout and on stderr (each within maxOutputBytes) come back whole, from runCode and a kernel cell', async () => {
  const sb = await new Sandbox(opts()).open();
  try {
    // 63, not 64: stderr also carries kern's own notes (rootless, the best-effort cap warnings),
    // and they count toward the 64 MiB cap of the stream.
    const code = 'import os\nz = bytes(1 << 20)\nfor _ in range(63):\n    os.write(1, z)\n    os.write(2, z)';
    const r = await sb.runCode(code, { timeoutS: 120 });
    expect(r.fault).toBeNull();
    expect(r.truncated).toBe(false);
    expect(r.stdout.length).toBe(63 * MIB);
    expect(Buffer.from(r.stdout, 'latin1').equals(Buffer.alloc(63 * MIB))).toBe(true);
    expect(r.codeStderr.length).toBe(63 * MIB);
    expect(/^\0*$/.test(r.codeStderr)).toBe(true);
    const k = await sb.kernel({ timeoutS: 120 });
    try {
      const c = await k.runCode(code);
      expect(c.fault).toBeNull();
      expect(c.stdout.length).toBe(63 * MIB);
      expect(c.codeStderr.length).toBe(63 * MIB);
    } finally {
      await k.close();
    }
  } finally {
    await sb.close();
  }
  guard.assertUntouched();
});

test('a million tiny display() calls: at most 10,000 results come back, with a note, and the host stays small', async () => {
  const sb = await new Sandbox(opts()).open();
  try {
    gc();
    const before = rss();
    const r = await sb.runCode('for i in range(1000000):\n    display(i)', { timeoutS: 300 });
    expect(r.fault).toBeNull();
    expect(r.results.length).toBe(10000);
    expect(r.results[9999].text).toBe('9999');
    expect(dropped(r)).toMatch(/^note: 990000 rich result\(s\) were dropped: a call keeps at most 10000 results/);
    gc();
    // Unbounded, this held 1.5 GiB.
    expect(rss() - before).toBeLessThan(512 * MIB);
  } finally {
    await sb.close();
  }
  guard.assertUntouched();
}, 600000);

test('results over the 128 MiB cap are dropped with a note on every path: a fresh box, a prewarmed one, the driver kernel', async () => {
  // Five results of 40 MiB each: three fit in 128 MiB.
  const code = 'for i in range(5):\n    display({"text/plain": str(i) * (40 << 20)}, raw=True)';
  const check = (r) => {
    expect(r.fault).toBeNull();
    expect(r.results.map((x) => x.text.length)).toEqual([40 * MIB, 40 * MIB, 40 * MIB]);
    expect(dropped(r)).toMatch(/^note: 2 rich result\(s\) were dropped: .* 128 MiB/);
  };
  const fresh = await new Sandbox(opts({ memoryMb: 1024 })).open();
  try {
    check(await fresh.runCode(code, { timeoutS: 120 }));
    const k = await fresh.kernel({ timeoutS: 120 });
    try {
      check(await k.runCode(code));
      // The kernel lives on, and its next cell starts with its own budget.
      check(await k.runCode(code));
    } finally {
      await k.close();
    }
  } finally {
    await fresh.close();
  }
  const warm = await new Sandbox(opts({ memoryMb: 1024, prewarm: 1 })).open();
  try {
    check(await warm.runCode(code, { timeoutS: 120 }));
  } finally {
    await warm.close();
  }
  guard.assertUntouched();
}, 300000);

test('MIME names a box picks (hasOwnProperty, toString, __proto__) never shadow the host\'s methods', async () => {
  const sb = await new Sandbox(opts()).open();
  try {
    const r = await sb.runCode(
      'display({"text/plain": "ok", "hasOwnProperty": "x", "toString": "y", "valueOf": "z", "__proto__": "p", "constructor": "c"}, raw=True)'
    );
    expect(r.results.length).toBe(1);
    const { data } = r.results[0];
    expect(Object.getPrototypeOf(data)).toBeNull();
    expect(data.hasOwnProperty).toBeUndefined();
    expect(data.toString).toBeUndefined();
    expect(Object.hasOwn(data, 'image/png')).toBe(false);
    expect(r.results[0].formats()).toEqual(['text/plain']);
    expect(r.results[0].text).toBe('ok');
    expect(String(r.results[0].png)).toBe('null');
    expect(r.runtimeNotes.filter((n) => /its name is not a MIME type/.test(n)).length).toBe(5);
    // And no result's data reaches Object.prototype.
    expect({}.x).toBeUndefined();
    expect(Object.prototype.hasOwnProperty.call(Object.prototype, 'x')).toBe(false);
  } finally {
    await sb.close();
  }
  guard.assertUntouched();
});

describe('a Jupyter kernel between cells', () => {
  beforeAll(() => {
    if (!fs.existsSync(`${SCI}/.kern-test-rootfs`)) {
      throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
    }
  });

  test('a thread left publishing signed 8 MiB stream messages while no cell runs: the host does not grow; later cells say what was dropped', async () => {
    await withKernel({ image: SCI, memoryMb: 2048 }, { jupyter: 'python3', timeoutS: 60 }, async (k) => {
      const r = await k.runCode(
        [
          'import threading',
          'kk = get_ipython().kernel',
          'parent = kk.get_parent("shell")',
          'go = threading.Event()',
          'def flood():',
          '    go.wait()',
          '    text = "x" * (8 << 20)',
          '    for i in range(100):',
          '        kk.session.send(kk.iopub_socket, "stream", {"name": "stdout", "text": text}, parent=parent)',
          'threading.Thread(target=flood, daemon=True).start()',
        ].join('\n')
      );
      expect(r.fault).toBeNull();
      // The peak from here on (the host's resident memory high-water mark, reset).
      gc();
      fs.writeFileSync('/proc/self/clear_refs', '5');
      const base = vmHwm();
      let seen = 0;
      const count = (cell) => {
        for (const n of cell.runtimeNotes) {
          const m = /^note: (\d+) output message\(s\) of the kernel \(\d+(\.\d)? [KMG]iB\) came while no cell ran/.exec(n);
          if (m) seen += Number(m[1]);
        }
      };
      // The flood starts from a later cell, as the thread's messages carry the first (ended)
      // cell's header: started in the first cell, one could come before that cell's end, as
      // its own output (a clean-clone run counted 99).
      const started = await k.runCode('go.set()');
      expect(started.fault).toBeNull();
      expect(started.stdout).toBe('');
      count(started);
      // 800 MiB go out while no cell runs; each later cell notes what was dropped since the
      // one before, until all 100 are accounted for (a grace of up to 3 min, not a timing
      // assertion: a loaded machine took over 60 s).
      for (let i = 0; i < 360 && seen < 100; i++) {
        await sleep(500);
        const next = await k.runCode('1 + 1');
        expect(next.results[0].text).toBe('2');
        expect(next.stdout).toBe('');
        count(next);
      }
      expect(seen).toBe(100);
      // Unbounded, the host held all 800 MiB until the next cell.
      expect(vmHwm() - base).toBeLessThan(300 * MIB);
    });
    guard.assertUntouched();
  }, 300000);

  test('a message over 64 MiB is dropped before the host buffers it, with a note; the kernel goes on', async () => {
    await withKernel({ image: SCI, memoryMb: 1024 }, { jupyter: 'python3', timeoutS: 120 }, async (k) => {
      const r = await k.runCode(
        [
          'kk = get_ipython().kernel',
          'kk.session.send(kk.iopub_socket, "stream", {"name": "stdout", "text": "y" * (80 << 20)}, parent=kk.get_parent("shell"))',
          'print("after")',
        ].join('\n')
      );
      expect(r.stdout).toBe('after\n');
      expect(r.runtimeNotes.join('\n')).toMatch(/1 message\(s\) of the kernel were over 64 MiB, or over 1048576 JSON values, and were dropped/);
      expect((await k.runCode('2 + 2')).results[0].text).toBe('4');
    });
    guard.assertUntouched();
  }, 300000);

  test('a message of more than 1,048,576 JSON values (small in bytes, huge parsed) is dropped before it is parsed; the kernel goes on', async () => {
    await withKernel({ image: SCI, memoryMb: 1024 }, { jupyter: 'python3', timeoutS: 120 }, async (k) => {
      // 2 Mi zeros: 4 MiB on the wire, far under the byte cap; parsed, ~40 times that.
      const r = await k.runCode(
        [
          'kk = get_ipython().kernel',
          'kk.session.send(kk.iopub_socket, "display_data", {"data": {"application/json": [0] * (2 << 20)}, "metadata": {}}, parent=kk.get_parent("shell"))',
          'print("after")',
        ].join('\n')
      );
      expect(r.stdout).toBe('after\n');
      expect(r.results).toEqual([]);
      expect(r.runtimeNotes.join('\n')).toMatch(/1 message\(s\) of the kernel were over 64 MiB, or over 1048576 JSON values, and were dropped/);
      expect((await k.runCode('3 + 3')).results[0].text).toBe('6');
    });
    guard.assertUntouched();
  }, 300000);
});
