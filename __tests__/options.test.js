'use strict';
// Option validation: what this release refuses, what is a programmer mistake, and the error classes.

const { ROOTFS, requireRootfs, opts, expectSandboxError, openAndClose, expectOk, sharedSandbox } = require('./helpers');

const kern = require('..');
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
