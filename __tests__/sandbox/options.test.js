'use strict';
// rootless: yes
// Option validation: what this release refuses, what is a programmer mistake, and the error classes.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const {
  ROOTFS,
  requireRootfs,
  opts,
  expectSandboxError,
  openAndClose,
  expectOk,
  sharedSandbox,
  markingKern,
  expectRefusedBeforeAnyBox,
} = require('../helpers');

const kern = require('../..');
const { Sandbox, SandboxError, MountRefused, ExecutionResult, Result } = kern;

beforeAll(() => requireRootfs());

/** Asserts that opening a Sandbox with `o` throws a helpful SandboxError matching `re`. */
async function expectRefused(o, re) {
  const err = await expectSandboxError(() => openAndClose(Sandbox, o), SandboxError, re);
  // "says what to do": more than a bare option name
  expect(err.message.length).toBeGreaterThan(25);
  return err;
}

describe('exports and error classes', () => {
  test('the public surface exists', () => {
    for (const name of ['Sandbox', 'withSandbox', 'runCode', 'SandboxError', 'MountRefused', 'ExecutionResult', 'Result']) {
      expect(typeof kern[name]).toBe('function');
    }
    expect(typeof kern.version).toBe('string');
    expect(kern.DEFAULT_TMPFS_MB).toBe(64);
    expect(ExecutionResult).toBeDefined();
    expect(Result).toBeDefined();
  });

  test('SandboxError is an Error; MountRefused is a SandboxError', () => {
    expect(SandboxError.prototype instanceof Error).toBe(true);
    expect(MountRefused.prototype instanceof SandboxError).toBe(true);
    const e = new MountRefused('x');
    expect(e).toBeInstanceOf(SandboxError);
    expect(e).toBeInstanceOf(Error);
    expect(e.message).toBe('x');
  });
});

describe('refused: a SandboxError naming the option', () => {
  test.each([
    // persist needs name and workspace; name and persistTtlS mean nothing without persist.
    ['name', { name: 'box1' }, /name/],
    ['persist', { persist: true }, /persist/],
    ['persistTtlS', { persistTtlS: 60 }, /persistTtlS/],
  ])('%s', async (_label, extra, re) => {
    await expectRefused(opts(extra), re);
  });

  // No registry answers here (the image tests run a real one): open() fails, naming the image.
  test.each([['127.0.0.1:1/test:latest'], ['localhost:1/library/python:3.12-slim']])(
    'an unreachable registry image %s is a SandboxError naming the image',
    async (image) => {
      await expectRefused({ image }, new RegExp(`image ${image.replace(/\./g, "\\.")} .*cannot reach`));
    }
  );

  test.each([['Python:3'], ['python:'], ['a//b'], ['python@sha256:abc']])(
    'a malformed image reference %s is a mistake, not an unbuilt feature',
    async (image) => {
      const e = await expectSandboxError(() => openAndClose(Sandbox, { image }), SandboxError, /not a valid image reference/);
      expect(e.message).not.toMatch(/not built yet/);
    }
  );

  test('omitting image is refused, naming image', async () => {
    await expectRefused({}, /image/);
    await expectSandboxError(() => openAndClose(Sandbox, undefined), SandboxError, /image/);
  });

  test('a refused mount is a MountRefused, which is a SandboxError', async () => {
    const err = await expectRefused(opts({ mounts: { '/etc': '/hostetc' } }), /\/etc/);
    expect(err).toBeInstanceOf(SandboxError);
    expect(err).toBeInstanceOf(MountRefused);
  });

  test('explicit defaults of the refused options are accepted', async () => {
    const s = await new Sandbox(
      opts({
        network: false,
        mounts: {},
        workspaceMaxBytes: null,
        profiles: [],
        securityProfile: null,
        apparmor: null,
        user: null,
        capDrop: ['ALL'],
        requireLimits: false,
        prewarm: 0,
        persist: false,
        memoryMb: 512,
        pids: 256,
        timeoutS: 30,
        trackFiles: true,
        enforceLimits: true,
        env: {},
        tmpfs: { '/tmp': '64m' },
      })
    ).open();
    try {
      expectOk(await s.run(['true']));
    } finally {
      await s.close();
    }
  });

  test.each([
    ['writeFile', (s) => s.writeFile(42, 'x')],
    ['writeFile', (s) => s.writeFile('a.txt', 42)],
    ['readFile', (s) => s.readFile('')],
    ['maxBytes', (s) => s.readFile('a.txt', { maxBytes: -1 })],
    ['maxBytes', (s) => s.readFile('a.txt', { maxBytes: 1.5 })],
    ['readFile', (s) => s.readFile('a.txt', { bogus: 1 })],
    ['listFiles', (s) => s.listFiles(7)],
    ['snapshot', (s) => s.snapshot('')],
    ['restore', (s) => s.restore(5)],
  ])('a bad argument to the file API names it: %s', async (name, call) => {
    const s = await new Sandbox(opts()).open();
    try {
      const err = await expectSandboxError(async () => call(s), SandboxError, new RegExp(name));
      expect(err.message.length).toBeGreaterThan(name.length + 10);
    } finally {
      await s.close();
    }
  });
});

describe('programmer mistakes throw SandboxError', () => {
  test.each([
    ['memoryMB (typo)', { memoryMB: 64 }, /memoryMB/],
    ['timeout (typo)', { timeout: 5 }, /timeout/],
    ['entirely unknown', { frobnicate: true }, /frobnicate/],
  ])('unknown option %s', async (_label, extra, re) => {
    await expectRefused(opts(extra), re);
  });

  test.each([
    ['memoryMb', '512'],
    ['timeoutS', 'soon'],
    ['pids', '256'],
    ['cpus', 'two'],
    ['maxOutputBytes', '1k'],
    ['workspace', 42],
    ['image', 7],
    ['network', 'no'],
    ['enforceLimits', 1],
    ['trackFiles', 'yes'],
    ['env', 'A=1'],
    ['env', { A: 1 }],
    ['tmpfs', 5],
    ['setup', 42],
    ['workspaceMaxBytes', '1m'],
    ['depsReadonly', 'yes'],
    ['pycCache', 1],
    ['mounts', 'a:b'],
    ['egressAllow', 'pypi.org'],
    ['egressAllow', [42]],
    ['onStdout', 'not a function'],
    ['onStderr', 42],
  ])('wrong type: %s = %j', async (key, value) => {
    const o = opts({ [key]: value });
    await expectRefused(o, new RegExp(key));
  });

  test.each([
    ['memoryMb', 0],
    ['memoryMb', -64],
    ['pids', 0],
    ['pids', -1],
    ['timeoutS', 0],
    ['timeoutS', -5],
    ['cpus', 0],
    ['cpus', -1],
    ['maxOutputBytes', -1],
  ])('non-positive limit: %s = %d', async (key, value) => {
    await expectRefused(opts({ [key]: value }), new RegExp(key));
  });

  test('a relative workspace is refused', async () => {
    await expectRefused(opts({ workspace: 'relative/ws' }), /workspace/);
  });

  test('a missing rootfs directory is refused, naming the path', async () => {
    await expectRefused({ image: '/nonexistent/kern-rootfs-xyz' }, /\/nonexistent\/kern-rootfs-xyz/);
  });

  test('a relative image path that is not a registry reference is refused', async () => {
    await expectRefused({ image: './rootfs' }, /image|rootfs/);
  });

  test('network:true together with egressAllow is refused', async () => {
    await expectRefused(opts({ network: true, egressAllow: ['pypi.org'] }), /network|egressAllow/);
  });

  describe('per-call mistakes', () => {
    const sb = sharedSandbox();

    test('run() with a shell string instead of an argv array', async () => {
      await expectSandboxError(() => sb.run('echo hi'), SandboxError, /argv|array/i);
    });

    test('run() with an empty argv', async () => {
      await expectSandboxError(() => sb.run([]), SandboxError);
    });

    test('runCode() with an unknown language names it', async () => {
      await expectSandboxError(() => sb.runCode('puts 1', { language: 'ruby' }), SandboxError, /ruby/);
    });

    test.each([[0], [-1], ['5']])('per-call timeoutS %j', async (t) => {
      await expectSandboxError(() => sb.run(['true'], { timeoutS: t }), SandboxError, /timeoutS/);
    });

    test('per-call onStdout that is not a function', async () => {
      await expectSandboxError(() => sb.run(['true'], { onStdout: 'x' }), SandboxError, /onStdout/);
    });

    test('the sandbox still works after rejected calls', async () => {
      expectOk(await sb.run(['true']));
    });
  });

  test('image path that exists but is a file is refused', async () => {
    await expectRefused({ image: `${ROOTFS}/.kern-test-rootfs` }, /image|director/i);
  });
});

// Bad input (issue 16): every out-of-bounds number is a SandboxError naming the option and its
// bound, before any box (or kern runtime) starts, root and rootless alike.
describe('the kern runtime must be this library\'s', () => {
  // A KERN_BIN left from another checkout or release would pair silently with this addon.
  test('a kern of another version is refused at open(), naming both versions and what to do', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-oldbin-'));
    const fake = path.join(dir, 'kern');
    const ran = path.join(dir, 'ran');
    // Answers --version like an old kern; anything else it would do leaves a file behind.
    fs.writeFileSync(fake, `#!/bin/sh\nif [ "$1" = --version ]; then echo "kern 0.0.1"; exit 0; fi\ntouch ${ran}\n`, { mode: 0o755 });
    const saved = process.env.KERN_BIN;
    process.env.KERN_BIN = fake;
    try {
      const sb = new Sandbox({ image: ROOTFS });
      await expectSandboxError(() => sb.open(), SandboxError, /kern runtime at .*kern-oldbin-.*gave "kern 0\.0\.1".*needs `kern \d+\.\d+\.\d+`.*KERN_BIN/);
      expect(fs.existsSync(ran)).toBe(false);
    } finally {
      if (saved === undefined) delete process.env.KERN_BIN;
      else process.env.KERN_BIN = saved;
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('bounds: a SandboxError naming the option and its bound, before any box', () => {
  const MiB = 1024 * 1024;

  test('the marking kern does see a box start (so the checks below can fail)', async () => {
    const kern = markingKern();
    try {
      const sb = new Sandbox(opts({ memoryMb: 32 }));
      try {
        await sb.open();
        expectOk(await sb.run(['true']));
      } finally {
        await sb.close();
      }
      expect(kern.started()).toBe(true);
    } finally {
      kern.restore();
    }
  });

  test.each([
    ['memoryMb', 1, /`memoryMb` is 1 MiB, below the 32 MiB a box needs/],
    ['memoryMb', 0.5, /`memoryMb` is 512 KiB, below the 32 MiB/],
    ['memoryMb', 31, /`memoryMb` is 31 MiB, below the 32 MiB/],
    ['memoryMb', 1e12, /`memoryMb` is .* over the 16777216 MiB \(16 TiB\).*null/],
    ['cpus', 1e9, /`cpus` is 1000000000, over the 8192 cores/],
    ['cpus', 0.001, /`cpus` is 0.001, below the 0.01 cores/],
    ['pids', 1, /`pids` is 1, below the 8 tasks/],
    ['pids', 1e9, /`pids` is 1000000000, over the 4194304 tasks/],
    ['pids', 2.5, /`pids` must be a positive integer/],
    ['maxOutputBytes', 2 ** 60, /`maxOutputBytes` is 1152921504606847000, over the 268435456 bytes/],
    ['timeoutS', 1e-9, /`timeoutS` is 0.000000001 s; the shortest timeout is 0.01 s/],
    ['timeoutS', 1e9, /`timeoutS` is 1000000000 s; the longest supported timeout is 7 days/],
    ['workspaceMaxBytes', 2 ** 60, /`workspaceMaxBytes` is .*, over the 9007199254740991 bytes/],
    ['workspaceMaxBytes', 0.5, /`workspaceMaxBytes` must be a positive integer/],
    ['tmpfs', { '/tmp': '1e30g' }, /`tmpfs`: size "1e30g" for "\/tmp" is .* over the 16777216 MiB/],
    ['tmpfs', { '/tmp': '1' }, /`tmpfs`: size "1" for "\/tmp" is 1 bytes, below the 4096 bytes/],
    ['user', '70000', /`user` "70000": id 70000 is outside the 65536 ids a box has \(0 to 65535\), root or not/],
    ['user', '0:70000', /`user` "0:70000": id 70000 is outside the 65536 ids/],
    ['prewarm', 65, /`prewarm` is 65; at most 64/],
    ['prewarm', 1.5, /`prewarm` must be a non-negative integer/],
  ])('%s = %j', async (key, value, re) => {
    await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ [key]: value }), re);
  });

  test('NaN and Infinity are refused before they reach the runtime, naming the option', async () => {
    for (const key of ['memoryMb', 'cpus', 'pids', 'timeoutS', 'maxOutputBytes', 'workspaceMaxBytes', 'prewarm']) {
      for (const v of [NaN, Infinity, -Infinity]) {
        await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ [key]: v }), new RegExp(`option.${key} must be a finite number`));
      }
    }
  });

  test('persistTtlS over a year', async () => {
    const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-ttl-'));
    try {
      await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ persist: true, name: `ttl${process.pid}`, workspace: ws, persistTtlS: 1e12 }), /`persistTtlS` is 1000000000000, over the 31536000 seconds \(a year\)/);
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });

  test('the bounds themselves are accepted', async () => {
    const sb = new Sandbox(opts({ memoryMb: 32, cpus: 8192, pids: 8, maxOutputBytes: 256 * MiB, workspaceMaxBytes: Number.MAX_SAFE_INTEGER, user: '65535:65535' }));
    await sb.open();
    try {
      const r = await sb.run(['sh', '-c', 'id -u; id -g']);
      expectOk(r);
      expect(r.stdout).toBe('65535\n65535\n');
    } finally {
      await sb.close();
    }
  });

  test('a per-call or per-cell timeoutS out of bounds is refused, naming it', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      for (const t of [1e-9, 1e9]) {
        await expectSandboxError(() => sb.run(['true'], { timeoutS: t }), SandboxError, /timeoutS.*(shortest|longest)/);
        await expectSandboxError(() => sb.kernel({ timeoutS: t }), SandboxError, /timeoutS.*(shortest|longest)/);
      }
    } finally {
      await sb.close();
    }
  });

  test('kern run bounds --memory, --cpus, --pids-limit, --timeout and --tmpfs the same way', () => {
    const kernBin = process.env.KERN_BIN || path.join(__dirname, '..', '..', 'kern');
    for (const [flags, re] of [
      [['--memory', '1'], /--memory 1 \(MiB\) is 1 MiB, below the 32 MiB/],
      [['--cpus', '1e9'], /--cpus is 1000000000, over the 8192 cores/],
      [['--pids-limit', '1'], /--pids-limit is 1, below the 8 tasks/],
      [['--timeout', '1e-9'], /--timeout must be a number of seconds from 0.01/],
      [['--tmpfs', '/tmp:1e30g'], /--tmpfs \/tmp:1e30g: the size is .* over/],
    ]) {
      let err;
      try {
        execFileSync(kernBin, ['run', '--image', ROOTFS, ...flags, '--', 'sh', '-c', 'echo RAN'], { encoding: 'utf8', stdio: 'pipe' });
      } catch (e) {
        err = e;
      }
      expect(err).toBeDefined();
      expect(err.status).toBe(125);
      expect(err.stdout).not.toMatch(/RAN/);
      expect(err.stderr).toMatch(re);
    }
  });
});

// Issue 16, item 11: an env the kernel cannot exec fails at construction, saying the limit.
describe('env, argv and code: what Linux can exec', () => {
  const KiB = 1024;

  test('one variable over 128 KiB is refused by the constructor, naming env and the limit', () => {
    const kern = markingKern();
    try {
      for (const size of [128 * KiB, 64 * 1024 * KiB]) {
        let err;
        try {
          new Sandbox(opts({ env: { BIG: 'x'.repeat(size) } }));
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(SandboxError);
        expect(err.message).toMatch(/option `env`: "BIG" is .*; Linux caps each environment string at 128 KiB \(MAX_ARG_STRLEN\)/);
      }
      expect(kern.started()).toBe(false);
    } finally {
      kern.restore();
    }
  });

  test('many variables within the string cap but over the exec budget are refused too', () => {
    const env = {};
    for (let i = 0; i < 80; i++) env[`V${i}`] = 'x'.repeat(100 * KiB);
    expect(() => new Sandbox(opts({ env }))).toThrow(/option `env` takes .* at exec; .* may take .* here \(a quarter of the stack rlimit/);
  });

  test('the largest env allowed runs, and its value arrives whole', async () => {
    const value = 'y'.repeat(128 * KiB - 6); // "BIG=" + value + its NUL: within 128 KiB
    const sb = await new Sandbox(opts({ env: { BIG: value } })).open();
    try {
      const r = await sb.run(['sh', '-c', 'printf %s "$BIG" | wc -c']);
      expectOk(r);
      expect(r.stdout.trim()).toBe(String(value.length));
    } finally {
      await sb.close();
    }
  });

  describe('per call', () => {
    const sb = sharedSandbox();

    test('a run() argument over 128 KiB is a SandboxError before the box, not exec_failed', async () => {
      await expectSandboxError(() => sb.run(['echo', 'x'.repeat(128 * KiB)]), SandboxError, /argument 1 of the call is 128 KiB; Linux caps each argument at 128 KiB/);
    });

    test('run() arguments over the exec budget together are a SandboxError', async () => {
      const args = Array.from({ length: 80 }, () => 'x'.repeat(100 * KiB));
      await expectSandboxError(() => sb.run(['true', ...args]), SandboxError, /arguments and environment take .* over the .* Linux allows here/);
    });

    test('runCode code too large for an argument is refused, naming the limit', async () => {
      await expectSandboxError(() => sb.runCode('#'.repeat(128 * KiB), { language: 'bash' }), SandboxError, /128 KiB/);
    });

    test('the sandbox still runs calls afterwards', async () => {
      expectOk(await sb.run(['true']));
    });
  });
});

// TypeScript with exactOptionalPropertyTypes (tsc --init's default) lets a caller pass an option
// on as `undefined` (`{ signal: opts.signal }`): index.d.ts types every optional member
// `| undefined`, so the runtime must take `undefined` as "not given", everywhere.
test('every option given as undefined is taken as not given (Sandbox, runCode, run, spawn, kernel)', async () => {
  const names = ['setup', 'workspace', 'workspaceMaxBytes', 'name', 'persist', 'persistTtlS', 'memoryMb', 'cpus', 'pids',
    'timeoutS', 'network', 'egressAllow', 'secrets', 'mounts', 'tmpfs', 'profiles', 'env', 'maxOutputBytes',
    'requireIsolation', 'capDrop', 'securityProfile', 'onStdout', 'onStderr', 'trackFiles', 'zygote', 'prewarm'];
  const opts = { image: ROOTFS };
  for (const n of names) opts[n] = undefined;
  const sb = await new Sandbox(opts).open();
  try {
    const r = await sb.runCode('print(6 * 7)', { timeoutS: undefined, signal: undefined, env: undefined, cwd: undefined,
      onStdout: undefined, onStderr: undefined, onResult: undefined });
    expect([r.exitCode, r.stdout]).toEqual([0, '42\n']);
    expect((await sb.run(['echo', 'x'], { timeoutS: undefined, env: undefined })).stdout).toBe('x\n');
    const p = await sb.spawn(['true'], { cwd: undefined, env: undefined, signal: undefined, timeoutS: undefined, lineBuffered: undefined });
    expect((await p.wait()).exitCode).toBe(0);
    const k = await sb.kernel({ timeoutS: undefined, language: undefined, cwd: undefined, env: undefined });
    expect((await k.runCode('print(2 + 2)')).stdout).toBe('4\n');
  } finally {
    await sb.close();
  }
});
