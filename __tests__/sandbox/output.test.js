'use strict';
// rootless: no — capture and streaming do not depend on the caller's uid
// Output capture, caps and live streaming.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { opts, uniqueName, sleep, summary, expectOk, sharedSandbox } = require('../helpers');

const { Sandbox, withSandbox } = require('../..');

const sb = sharedSandbox();

describe('capture', () => {
  test('stdout and stderr are captured exactly: unicode, NUL, no trailing newline', async () => {
    const r = await sb.runCode(
      'import sys\nsys.stdout.write("h\\u00e9llo \\u2713 \\u65e5\\u672c\\n\\ttab\\x00nul\\r\\nlast")\nsys.stderr.write("e1\\ne2")\n'
    );
    expectOk(r);
    expect(r.stdout).toBe('h\u00e9llo \u2713 \u65e5\u672c\n\ttab\u0000nul\r\nlast');
    expect(r.codeStderr).toBe('e1\ne2');
    expect(r.truncated).toBe(false);
  });

  test('empty output is the empty string', async () => {
    const r = await sb.run(['true']);
    expectOk(r);
    expect(r.stdout).toBe('');
    expect(r.codeStderr).toBe('');
  });

  test('binary bytes arrive intact through onStdout Buffers', async () => {
    const chunks = [];
    const r = await sb.runCode(
      'const b = Buffer.alloc(1024); for (let i = 0; i < b.length; i++) b[i] = (i * 7) & 255; process.stdout.write(b);',
      { language: 'node', onStdout: (c) => chunks.push(c) }
    );
    expectOk(r);
    expect(chunks.every((c) => Buffer.isBuffer(c))).toBe(true);
    const got = Buffer.concat(chunks);
    const want = Buffer.alloc(1024);
    for (let i = 0; i < want.length; i++) want[i] = (i * 7) & 255;
    expect(got.equals(want)).toBe(true);
  });

  test('a 5 MB stream is captured whole and in order', async () => {
    const r = await sb.runCode('import sys\nfor i in range(100000):\n    sys.stdout.write("%09d%040d\\n" % (i, i))\n');
    expectOk(r);
    expect(r.stdout.length).toBe(100000 * 50);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toBe(`000000000${'0'.repeat(40)}`);
    expect(lines[99999]).toBe(`000099999${'99999'.padStart(40, '0')}`);
    for (let i = 0; i < 100000; i += 997) expect(lines[i].slice(0, 9)).toBe(String(i).padStart(9, '0'));
    expect(r.truncated).toBe(false);
  });
});

describe('maxOutputBytes', () => {
  test('1 MB printed under maxOutputBytes 1000 -> truncated, capped, and the workload was not blocked', async () => {
    const s = await new Sandbox(opts({ maxOutputBytes: 1000 })).open();
    try {
      const r = await s.runCode(
        'import sys\nsys.stdout.write("a" * (1024 * 1024))\nsys.stdout.flush()\nsys.stderr.write("done\\n")\n',
        { timeoutS: 60 }
      );
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
      expect(r.truncated).toBe(true);
      expect(Buffer.byteLength(r.stdout)).toBeLessThanOrEqual(1000);
      expect(r.stdout).toMatch(/^a+$/);
      expect(r.codeStderr).toBe('done\n'); // the stderr stream has its own cap and was not clipped
    } finally {
      await s.close();
    }
  });

  test('output under the cap is not marked truncated', async () => {
    const s = await new Sandbox(opts({ maxOutputBytes: 1000 })).open();
    try {
      const r = await s.run(['sh', '-c', 'printf "%0500d" 0']);
      expectOk(r);
      expect(r.truncated).toBe(false);
      expect(r.stdout).toBe('0'.repeat(500));
    } finally {
      await s.close();
    }
  });

  test('stderr is capped too', async () => {
    const s = await new Sandbox(opts({ maxOutputBytes: 1000 })).open();
    try {
      const r = await s.runCode('import sys\nsys.stderr.write("e" * 200000)\nprint("ok")\n');
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null, stdout: 'ok\n' });
      expect(r.truncated).toBe(true);
      expect(Buffer.byteLength(r.stderr)).toBeLessThanOrEqual(1000);
    } finally {
      await s.close();
    }
  });
});

describe('streaming callbacks', () => {
  test('onStdout/onStderr chunks concatenate to the result and all arrive before the promise resolves', async () => {
    const out = [];
    const err = [];
    const r = await sb.runCode(
      'import sys, time\nfor i in range(50):\n    print("line", i, flush=True)\n    sys.stderr.write("err %d\\n" % i); sys.stderr.flush()\n    time.sleep(0.01)\n',
      { onStdout: (c) => out.push(c), onStderr: (c) => err.push(c) }
    );
    const atResolve = { out: out.length, err: err.length };
    expectOk(r);
    expect(Buffer.concat(out).toString()).toBe(r.stdout);
    const streamedErr = Buffer.concat(err).toString();
    expect(streamedErr.split(/(?<=\n)/).filter((l) => !/^(note|warning): /.test(l)).join('')).toBe(r.codeStderr);
    expect(r.codeStderr).toContain('err 49\n');
    expect(r.stdout.split('\n').length).toBe(51);
    await sleep(300);
    expect({ out: out.length, err: err.length }).toEqual(atResolve); // nothing trickles in afterwards
  });

  test('session callbacks stream every call; a per-call callback overrides them', async () => {
    const session = [];
    const perCall = [];
    const s = await new Sandbox(opts({ onStdout: (c) => session.push(c) })).open();
    try {
      const r1 = await s.run(['echo', 'one']);
      expectOk(r1);
      expect(Buffer.concat(session).toString()).toBe('one\n');
      const r2 = await s.run(['echo', 'two'], { onStdout: (c) => perCall.push(c) });
      expectOk(r2);
      expect(Buffer.concat(perCall).toString()).toBe('two\n');
      expect(Buffer.concat(session).toString()).toBe('one\n');
      const r3 = await s.run(['echo', 'three']);
      expect(r3.stdout).toBe('three\n');
      expect(Buffer.concat(session).toString()).toBe('one\nthree\n'); // the override was for one call only
    } finally {
      await s.close();
    }
  });

  test('a per-call null disables the session callback for that call; output is still captured', async () => {
    const session = [];
    const sessionErr = [];
    const s = await new Sandbox(opts({ onStdout: (c) => session.push(c), onStderr: (c) => sessionErr.push(c) })).open();
    try {
      const r = await s.run(['sh', '-c', 'echo quiet; echo loud >&2'], { onStdout: null, onStderr: null });
      expectOk(r);
      expect(r.stdout).toBe('quiet\n');
      expect(r.codeStderr).toBe('loud\n');
      expect(session).toEqual([]);
      expect(sessionErr).toEqual([]);
    } finally {
      await s.close();
    }
  });

  describe('a slow (async) onStdout holds the box, not host memory', () => {
    const MIB = 1 << 20;
    const vmRss = () => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
    // The box writes `mib` MiB in 64 KiB writes and keeps the count it has written in `written`.
    const writer = (mib) =>
      [
        'import os',
        'fd = os.open("written", os.O_WRONLY | os.O_CREAT, 0o644)',
        'chunk = b"x" * 65536',
        'total = 0',
        `for i in range(${mib} * 16):`,
        '    view = memoryview(chunk)',
        '    while view:',
        '        view = view[os.write(1, view):]',
        '    total += 65536',
        '    if i % 4 == 0:',
        '        os.pwrite(fd, str(total).encode().ljust(20), 0)',
      ].join('\n');

    /** Runs the 96 MiB writer with `slow(chunk)` called for each of the first 8 MiB of chunks,
     * and what was seen: the most chunks in a callback at once, the most the box had written
     * past what was delivered, and the most this process grew past what was delivered. */
    async function slowRun(slow) {
      const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-slow-'));
      const s = await new Sandbox(opts({ workspace: ws, maxOutputBytes: 128 * MIB })).open();
      try {
        const written = () => Number(fs.readFileSync(path.join(ws, 'written'), 'utf8').trim() || 0);
        const base = vmRss();
        let delivered = 0;
        let inFlight = 0;
        const seen = { inFlight: 0, ahead: 0, grew: 0 };
        const r = await s.runCode(writer(96), {
          timeoutS: 120,
          onStdout: (c) => {
            inFlight++;
            seen.inFlight = Math.max(seen.inFlight, inFlight);
            delivered += c.length;
            // The first 8 MiB slowly: the box would write its 96 MiB meanwhile if nothing held it.
            if (delivered >= 8 * MIB) {
              inFlight--;
              return undefined;
            }
            if (fs.existsSync(path.join(ws, 'written'))) seen.ahead = Math.max(seen.ahead, written() - delivered);
            seen.grew = Math.max(seen.grew, vmRss() - base - delivered);
            const p = slow(c);
            if (!p) {
              inFlight--;
              return undefined;
            }
            return p.then(() => {
              inFlight--;
            });
          },
        });
        return { r, seen, delivered };
      } finally {
        await s.close();
        fs.rmSync(ws, { recursive: true, force: true });
      }
    }

    const expectHeld = ({ r, seen, delivered }) => {
      expectOk(r);
      // Held: a pipe and a few queued chunks ahead, not the whole output (unbounded: the box
      // wrote all of it at once, and the host held it twice).
      expect(seen.ahead).toBeLessThan(8 * MIB);
      expect(seen.grew).toBeLessThan(64 * MIB);
      expect(r.truncated).toBe(false);
      expect(r.stdout.length).toBe(96 * MIB);
      expect(delivered).toBe(96 * MIB);
    };

    test('a slow callback: what the box wrote stays near what was delivered, host RSS with it; every byte still arrives', async () => {
      const nap = new Int32Array(new SharedArrayBuffer(4));
      expectHeld(await slowRun(() => void Atomics.wait(nap, 0, 0, 20)));
    }, 180000);

    test('an async callback: its promise is waited for before the next chunk, and the box with it', async () => {
      const got = await slowRun(() => sleep(20));
      expect(got.seen.inFlight).toBe(1);
      expectHeld(got);
    }, 180000);

    test('a box blocked on a full pipe behind a slow callback still meets its timeout', async () => {
      let delivered = 0;
      const r = await sb.runCode('import os\nb = b"y" * 65536\nwhile True:\n    os.write(1, b)', {
        timeoutS: 3,
        onStdout: async (c) => {
          delivered += c.length;
          await sleep(20);
        },
      });
      expect(r.fault && r.fault.type).toBe('timeout');
      expect(r.stdout.length).toBe(delivered);
      expect(delivered).toBeGreaterThan(0);
    }, 120000);
  });

  test('a throwing onStdout neither breaks the call nor crashes the process', () => {
    const pkg = require.resolve('../..');
    const script = `
      const k = require(${JSON.stringify(pkg)});
      (async () => {
        const r = await k.withSandbox({ image: ${JSON.stringify(opts().image)} }, (s) =>
          s.run(['sh', '-c', 'echo first; echo second'], { onStdout: () => { throw new Error('callback boom'); } }));
        console.log(JSON.stringify({ exitCode: r.exitCode, fault: r.fault, stdout: r.stdout }));
      })().catch((e) => { console.log(JSON.stringify({ rejected: String(e && e.message) })); process.exitCode = 2; });
    `;
    const p = spawnSync(process.execPath, ['-e', script], { timeout: 60000, encoding: 'utf8' });
    expect({ status: p.status, signal: p.signal, stderr: p.stderr }).toMatchObject({ status: 0, signal: null });
    const last = p.stdout.trim().split('\n').pop();
    expect(JSON.parse(last)).toEqual({ exitCode: 0, fault: null, stdout: 'first\nsecond\n' });
  });
});

describe('runtime notes vs code stderr', () => {
  // kern's own lines travel to the JS layer as data: a workload line that merely looks like one
  // (`warning: ...`, `note: ...`) stays the code's, and a real kern note is never the code's.
  // enforceLimits: false makes kern's outer process warn before each box starts (its caps are
  // rlimits only): a note from the kern process, not from the session.
  const CAP_WARNING = /^warning: memory cap of 256 MiB is best-effort: enforceLimits is false/;
  const lookalikes = (m) => `warning: x-${m}\nnote: y-${m}\nnot a note: z\n`;
  const printPy = (m) => `import sys\nsys.stderr.write(${JSON.stringify(lookalikes(m))})\n`;
  const printSh = (m) => ['sh', '-c', `printf '%s\\n' "warning: x-${m}" "note: y-${m}" "not a note: z" >&2`];

  /** The workload's look-alike lines are code; `kernNote` is a note and not code; stderr has both. */
  function expectSplit(r, m, kernNote) {
    expectOk(r);
    expect(r.codeStderr).toBe(lookalikes(m));
    expect(r.runtimeNotes.filter((n) => n.includes(m))).toEqual([]);
    expect(r.runtimeNotes.some((n) => kernNote.test(n))).toBe(true);
    expect(r.codeStderr.split('\n').some((l) => kernNote.test(l))).toBe(false);
    const lines = r.stderr.split('\n');
    expect(lines.some((l) => kernNote.test(l))).toBe(true);
    for (const l of lookalikes(m).split('\n').filter(Boolean)) expect(lines).toContain(l);
    // stderr is exactly the notes and the code, each line in one of the two views
    expect(lines.filter(Boolean).length).toBe(r.codeStderr.split('\n').filter(Boolean).length + r.runtimeNotes.length);
  }

  describe('a fresh box', () => {
    const fresh = sharedSandbox({ enforceLimits: false, memoryMb: 256 });
    test('runCode: look-alike lines stay in codeStderr, kern\'s warning is a runtime note; onStderr gets both', async () => {
      const m = uniqueName('n');
      const streamed = [];
      const r = await fresh.runCode(printPy(m), { onStderr: (c) => streamed.push(c) });
      expectSplit(r, m, CAP_WARNING);
      // kern's warning stands before the code's output, as it was written
      expect(r.stderr.indexOf('warning: memory cap')).toBeLessThan(r.stderr.indexOf(`warning: x-${m}`));
      expect(Buffer.concat(streamed).toString()).toBe(r.stderr);
    });
    test('run(): the same', async () => {
      const m = uniqueName('n');
      expectSplit(await fresh.run(printSh(m)), m, CAP_WARNING);
    });
    test('the kernel: the first cell gets kern\'s warning as a note, every cell keeps its look-alikes', async () => {
      const k = await fresh.kernel();
      try {
        const m1 = uniqueName('n');
        expectSplit(await k.runCode(printPy(m1)), m1, CAP_WARNING);
        const m2 = uniqueName('n');
        const r2 = await k.runCode(printPy(m2));
        expectOk(r2);
        expect(r2.codeStderr).toBe(lookalikes(m2));
        expect(r2.runtimeNotes.filter((n) => n.includes(m2) || CAP_WARNING.test(n))).toEqual([]);
      } finally {
        await k.close();
      }
    });
  });

  test('a prewarmed box (the pool): the same', async () => {
    await withSandbox(opts({ enforceLimits: false, memoryMb: 256, prewarm: 1 }), async (s) => {
      const m = uniqueName('n');
      expectSplit(await s.runCode(printPy(m)), m, CAP_WARNING);
    });
  });

  test('a session note (network: true) is a runtime note; the look-alikes are code', async () => {
    await withSandbox(opts({ network: true }), async (s) => {
      const m = uniqueName('n');
      expectSplit(await s.run(printSh(m)), m, /^warning: network: true: this box shared the host's network/);
    });
  });

  test('persist: the resident-box note is a runtime note; the look-alikes are code', async () => {
    const name = uniqueName('notes');
    const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-notes-'));
    const s = await new Sandbox(opts({ persist: true, name, workspace: ws })).open();
    try {
      const m = uniqueName('n');
      expectSplit(await s.runCode(printPy(m)), m, /^note: this call ran in the resident box/);
    } finally {
      await s.destroy().catch(() => {});
      await s.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });
});
