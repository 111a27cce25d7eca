'use strict';
// rootless: no — runs rootless in the cgroup-v2 guest (scripts/test-cgv2.sh)
// Session lifecycle: open/close, withSandbox, workspaces, one-shot runCode, file tracking, process
// exit, and what happens when the runtime process dies mid-call.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const {
  requireRootfs,
  opts,
  uniqueName,
  hostProcessesMatching,
  procStat,
  waitFor,
  makeTempDir,
  findFileNamed,
  expectSandboxError,
  summary,
  expectOk,
} = require('../helpers');

const kern = require('../..');
const { Sandbox, SandboxError, withSandbox } = kern;

beforeAll(() => requireRootfs());

/** Writes a uniquely named file in the box workspace and returns the host dir that holds it. */
async function locateTempWorkspace(s) {
  const name = uniqueName('wsprobe');
  expectOk(await s.run(['sh', '-c', `printf probe > ${name}`]));
  const hits = findFileNamed(os.tmpdir(), name, 3);
  if (hits.length !== 1) throw new Error(`temp workspace not found under ${os.tmpdir()} (hits: ${JSON.stringify(hits)})`);
  return path.dirname(hits[0]);
}

describe('withSandbox', () => {
  test('withSandbox(opts, fn) opens, passes the sandbox, returns fn\'s value, then closes', async () => {
    let inner;
    const value = await withSandbox(opts(), async (s) => {
      inner = s;
      expect(s).toBeInstanceOf(Sandbox);
      const r = await s.runCode('print("inside")');
      expectOk(r);
      return r.stdout;
    });
    expect(value).toBe('inside\n');
    await expectSandboxError(() => inner.run(['true']), SandboxError);
  });

  test('withSandbox(fn) uses the defaults, whose registry image is refused: SandboxError, fn not called', async () => {
    let called = false;
    await expectSandboxError(
      () =>
        withSandbox(async () => {
          called = true;
        }),
      SandboxError,
      /image/
    );
    expect(called).toBe(false);
  });

  test('the temp workspace is deleted even when fn throws, and fn\'s error propagates', async () => {
    let wsDir = null;
    const boom = new Error('fn failed on purpose');
    await expect(
      withSandbox(opts(), async (s) => {
        wsDir = await locateTempWorkspace(s);
        throw boom;
      })
    ).rejects.toBe(boom);
    expect(wsDir).not.toBeNull();
    expect(fs.existsSync(wsDir)).toBe(false);
  });
});

describe('workspaces', () => {
  test('a temp workspace is created at open() and deleted at close()', async () => {
    const s = await new Sandbox(opts()).open();
    let wsDir;
    try {
      wsDir = await locateTempWorkspace(s);
    } finally {
      await s.close();
    }
    expect(fs.existsSync(wsDir)).toBe(false);
  });

  test('a user workspace is kept after close, with the box\'s files in it', async () => {
    const ws = makeTempDir('kern-life-ws-');
    try {
      const s = await new Sandbox(opts({ workspace: ws })).open();
      expectOk(await s.run(['sh', '-c', 'mkdir -p out && printf result > out/r.txt']));
      await s.close();
      expect(fs.readFileSync(path.join(ws, 'out', 'r.txt'), 'utf8')).toBe('result');
      // a second session on the same workspace sees it
      const s2 = await new Sandbox(opts({ workspace: ws })).open();
      const r = await s2.run(['cat', 'out/r.txt']);
      await s2.close();
      expect(r.stdout).toBe('result');
      expect(fs.existsSync(ws)).toBe(true);
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });
});

describe('open/close', () => {
  test('open() resolves to the sandbox itself', async () => {
    const s = new Sandbox(opts());
    expect(await s.open()).toBe(s);
    await s.close();
  });

  test('calls after close() throw SandboxError; close() is idempotent', async () => {
    const s = await new Sandbox(opts()).open();
    expectOk(await s.run(['true']));
    await s.close();
    await s.close();
    await expectSandboxError(() => s.run(['true']), SandboxError, /clos/i);
    await expectSandboxError(() => s.runCode('print(1)'), SandboxError, /clos/i);
  });

  // What is under test is that every call gets its box and succeeds, not how fast: each call
  // has a deadline well past what 100 boxes sharing one slow CPU need (the cgroup-v2 guest has
  // one vCPU; rootless there, 28 of 100 calls ran past the default 30 s on a busy host).
  test('100 concurrent calls in one sandbox all succeed', async () => {
    await withSandbox(opts(), async (s) => {
      const rs = await Promise.all(
        Array.from({ length: 100 }, (_, i) => s.runCode(`import os\nprint(${i}, os.getpid() < 10)`, { timeoutS: 240 }))
      );
      const bad = rs.map((r, i) => [i, r]).filter(([i, r]) => !r.success || r.stdout !== `${i} True\n`);
      expect(bad.map(([i, r]) => ({ i, ...summary(r) }))).toEqual([]);
    });
  }, 300000);

  test('concurrent calls in one sandbox each get their own box', async () => {
    await withSandbox(opts(), async (s) => {
      const rs = await Promise.all([0, 1, 2, 3].map((i) => s.runCode(`import os\nprint(${i}, os.getpid() < 10)`)));
      rs.forEach((r, i) => {
        expectOk(r);
        expect(r.stdout).toBe(`${i} True\n`);
      });
    });
  });
});

describe('open({ signal })', () => {
  test('an abort during setup ends its box, rejects with the reason, leaves nothing; open() again works', async () => {
    const ws = makeTempDir('kern-open-abort-');
    const marker = uniqueName('openabort');
    const ctl = new AbortController();
    const reason = new Error('enough waiting');
    let saw = '';
    // The first setup says it started and sleeps; the next one (same options) finds its mark.
    const setup = `if [ -e /workspace/.deps/seen ]; then echo again; else touch /workspace/.deps/seen; echo started; exec sh -c 'sleep 100; : ${marker}'; fi`;
    const s = new Sandbox(opts({
      workspace: ws,
      setup,
      onStdout: (c) => {
        saw += c.toString();
        if (saw.includes('started')) ctl.abort(reason);
      },
    }));
    const e = await s.open({ signal: ctl.signal }).catch((x) => x);
    expect(e).toBe(reason);
    expect(saw).toContain('started');
    // The setup box is gone by the time open() rejects: not later.
    expect(hostProcessesMatching(marker)).toEqual([]);
    // Not open: a call says so; the caller's workspace is kept.
    await expectSandboxError(() => s.run(['true']), SandboxError, /not open/);
    expect(fs.existsSync(path.join(ws, '.deps', 'seen'))).toBe(true);
    // open() again, unaborted, completes.
    await s.open();
    try {
      expect(saw).toContain('again');
      expect((await s.run(['true'])).exitCode).toBe(0);
    } finally {
      await s.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  }, 60000);

  test('an aborted signal starts nothing; a bad one is a SandboxError', async () => {
    const ws = makeTempDir('kern-open-aborted-');
    const s = new Sandbox(opts({ workspace: ws, setup: 'touch /workspace/.deps/ran' }));
    const reason = new Error('already');
    await expect(s.open({ signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(fs.existsSync(path.join(ws, '.deps', 'ran'))).toBe(false);
    await expectSandboxError(() => s.open({ signal: 'soon' }), SandboxError, /must be an AbortSignal/);
    await expectSandboxError(() => s.open({ timeoutS: 1 }), SandboxError, /unknown open\(\) option `timeoutS`/);
    await s.open({ signal: new AbortController().signal });
    try {
      expect(fs.existsSync(path.join(ws, '.deps', 'ran'))).toBe(true);
    } finally {
      await s.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });
});

describe('close() while a call runs', () => {
  test('ends the running box, resolves the call with a killed fault, then deletes the temp workspace', async () => {
    const s = await new Sandbox(opts({ timeoutS: 60 })).open();
    const ws = await locateTempWorkspace(s);
    const marker = uniqueName('closing');
    let started;
    const ready = new Promise((r) => (started = r));
    const call = s.run(['sh', '-c', `echo ready; sleep 100; : ${marker}`], {
      onStdout: (c) => c.toString().includes('ready') && started(),
    });
    await ready;
    expect(hostProcessesMatching(marker)).not.toEqual([]);
    await s.close();
    const r = await call;
    expect(r.fault).toMatchObject({ type: 'killed' });
    expect(r.fault.message).toMatch(/close/);
    // Nothing of the box survives close(), and its workspace is gone.
    expect(hostProcessesMatching(marker)).toEqual([]);
    expect(fs.existsSync(ws)).toBe(false);
  });
});

describe('two close() calls at once', () => {
  test('neither returns before the running box is ended and the workspace deleted', async () => {
    const s = await new Sandbox(opts({ timeoutS: 60 })).open();
    const ws = await locateTempWorkspace(s);
    let started;
    const ready = new Promise((r) => (started = r));
    const call = s.run(['sh', '-c', 'echo ready; sleep 100'], {
      onStdout: (c) => c.toString().includes('ready') && started(),
    });
    await ready;
    const states = [];
    await Promise.all(
      [s.close(), s.close()].map((p) => p.then(() => states.push(fs.existsSync(ws))))
    );
    expect(states).toEqual([false, false]);
    expect((await call).fault).toMatchObject({ type: 'killed' });
  });
});

describe('one-shot runCode', () => {
  test('runs and leaves no workspace behind', async () => {
    const name = uniqueName('oneshot');
    const r = await kern.runCode(`open("${name}", "w").write("x")\nprint("done")`, opts());
    expectOk(r);
    expect(r.stdout).toBe('done\n');
    expect(findFileNamed(os.tmpdir(), name, 3)).toEqual([]);
  });

  test('honours language and limits', async () => {
    const r = await kern.runCode('sleep 100', opts({ language: 'sh', timeoutS: 1 }));
    expect(summary(r)).toMatchObject({ fault: { type: 'timeout' } });
  });
});

describe('result.files', () => {
  const byPath = (files) => [...files].sort((a, b) => a.path.localeCompare(b.path));

  test('lists created, then modified files with sizes; untouched and deleted files are not listed', async () => {
    await withSandbox(opts(), async (s) => {
      const r1 = await s.run(['sh', '-c', 'mkdir sub && printf hello > a.txt']);
      expectOk(r1);
      expect(byPath(r1.files)).toEqual([expect.objectContaining({ path: 'a.txt', size: 5, change: 'created' })]);

      const r2 = await s.run(['sh', '-c', 'printf 0123456789 > a.txt && printf xy > sub/b.txt']);
      expect(byPath(r2.files)).toEqual([
        expect.objectContaining({ path: 'a.txt', size: 10, change: 'modified' }),
        expect.objectContaining({ path: 'sub/b.txt', size: 2, change: 'created' }),
      ]);

      const r3 = await s.run(['cat', 'a.txt', 'sub/b.txt']);
      expect(r3.files).toEqual([]);

      const r4 = await s.run(['sh', '-c', 'printf 9876543210 > a.txt']); // same size, new content
      expect(byPath(r4.files)).toEqual([expect.objectContaining({ path: 'a.txt', size: 10, change: 'modified' })]);

      const r5 = await s.run(['rm', 'a.txt']);
      expectOk(r5);
      expect(r5.files).toEqual([]);
    });
  });

  test('trackFiles:false -> files is always []', async () => {
    await withSandbox(opts({ trackFiles: false }), async (s) => {
      const r = await s.run(['sh', '-c', 'printf hello > a.txt']);
      expectOk(r);
      expect(r.files).toEqual([]);
    });
  });
});

describe('module constants', () => {
  test('version is a semver string matching package.json', () => {
    expect(kern.version).toMatch(/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/);
    expect(kern.version).toBe(require('../../package.json').version);
  });

  test('DEFAULT_TMPFS_MB is 64', () => {
    expect(kern.DEFAULT_TMPFS_MB).toBe(64);
  });
});

describe('the host process', () => {
  const pkg = require.resolve('../..');
  const image = opts().image;

  function runNode(body) {
    const script = `const k = require(${JSON.stringify(pkg)});\n(async () => {\n${body}\n})().catch((e) => { console.error('FAILED', e); process.exitCode = 2; });`;
    return spawnSync(process.execPath, ['-e', script], { timeout: 60000, encoding: 'utf8' });
  }

  test('a script using withSandbox + streaming exits on its own', () => {
    const p = runNode(`
      const seen = [];
      const r = await k.withSandbox({ image: ${JSON.stringify(image)}, onStderr: () => {} }, (s) =>
        s.run(['echo', 'streamed'], { onStdout: (c) => seen.push(c) }));
      console.log(JSON.stringify({ seen: Buffer.concat(seen).toString(), stdout: r.stdout }));
    `);
    expect({ status: p.status, signal: p.signal, stderr: p.stderr }).toMatchObject({ status: 0, signal: null });
    expect(JSON.parse(p.stdout.trim())).toEqual({ seen: 'streamed\n', stdout: 'streamed\n' });
  });

  test('a script that forgets close() on a sandbox with session callbacks still exits', () => {
    const name = uniqueName('leftws');
    const p = runNode(`
      const s = await new k.Sandbox({ image: ${JSON.stringify(image)}, onStdout: () => {}, onStderr: () => {} }).open();
      const r = await s.run(['sh', '-c', 'printf x > ${name}; echo x']);
      console.log(r.stdout.trim());
    `);
    // the unclosed session's temp workspace is ours to clean up
    for (const f of findFileNamed(os.tmpdir(), name, 3)) fs.rmSync(path.dirname(f), { recursive: true, force: true });
    expect({ status: p.status, signal: p.signal, stderr: p.stderr }).toMatchObject({ status: 0, signal: null });
    expect(p.stdout.trim()).toBe('x');
  });
});

describe('runtime killed mid-call', () => {
  /** The outermost `kern` processes below this process (the runtime, not the box's PID 1 it forked). */
  function runtimeProcesses() {
    const stats = fs
      .readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .map((d) => procStat(Number(d)))
      .filter(Boolean);
    const byPid = new Map(stats.map((s) => [s.pid, s]));
    const descends = (s) => {
      for (let p = s.ppid, n = 0; p > 1 && n < 50; p = (byPid.get(p) || { ppid: 0 }).ppid, n++) {
        if (p === process.pid) return true;
      }
      return false;
    };
    return stats
      .filter((s) => s.comm === 'kern' && descends(s))
      .filter((s) => !(byPid.get(s.ppid) && byPid.get(s.ppid).comm === 'kern'))
      .map((s) => s.pid);
  }

  test('SIGKILL of the kern runtime -> killed/startup_failed fault, workspace bytes kept, box gone', async () => {
    const ws = makeTempDir('kern-kill-ws-');
    const marker = uniqueName('killme');
    let killed = [];
    try {
      await withSandbox(opts({ workspace: ws }), async (s) => {
        const r = await s.run(['sh', '-c', `printf before > pre.txt; echo ready; sleep 100; : ${marker}`], {
          timeoutS: 60,
          onStdout: (c) => {
            if (killed.length || !c.toString().includes('ready')) return;
            killed = runtimeProcesses();
            for (const pid of killed) process.kill(pid, 'SIGKILL');
          },
        });
        expect(killed.length).toBeGreaterThan(0);
        expect(r.fault).not.toBeNull();
        expect(['killed', 'startup_failed']).toContain(r.fault.type);
        expect(r.success).toBe(false);
        expect(fs.readFileSync(path.join(ws, 'pre.txt'), 'utf8')).toBe('before');
        // the box must not outlive its runtime
        const gone = await waitFor(() => hostProcessesMatching(marker).length === 0, 10000);
        expect(gone ? [] : hostProcessesMatching(marker)).toEqual([]);
        // and the session is still usable
        expectOk(await s.run(['true']));
      });
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });
});
