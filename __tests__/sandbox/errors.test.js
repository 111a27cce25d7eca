'use strict';
// rootless: yes
// ADDITION (issue 20): `SandboxError.code`. Every public method's bad input, and every state and
// host mistake the package throws, carries a code from the `SandboxErrorCode` union that
// index.d.ts declares (read from the file here, so the two can't drift apart); the messages are
// unchanged. And `await using` (Symbol.asyncDispose) closes a Sandbox and a Kernel, compiled by
// the repo's TypeScript and run on this Node.

const fs = require('fs');
const path = require('path');
const ts = require('typescript');
const { ROOTFS, requireRootfs, opts, tempDirs } = require('../helpers');
const kern = require('../..');

const { Sandbox, SandboxError, MountRefused, withSandbox, runCode } = kern;

/** The union `SandboxErrorCode` as index.d.ts declares it. */
function declaredCodes() {
  const dts = fs.readFileSync(path.join(__dirname, '..', '..', 'index.d.ts'), 'utf8');
  const m = /export type SandboxErrorCode =([^;]*);/.exec(dts);
  if (!m) throw new Error('index.d.ts declares no SandboxErrorCode');
  return [...m[1].matchAll(/"(ERR_[A-Z_]+)"/g)].map((x) => x[1]);
}
const CODES = declaredCodes();

/** The error `fn` throws or rejects with (a failure when it succeeds). */
async function errorOf(fn) {
  try {
    await fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected an error, got success');
}

/** `fn` fails with a SandboxError whose code is `code` (one of the union). */
async function expectCode(fn, code, pattern) {
  const e = await errorOf(fn);
  expect(e).toBeInstanceOf(SandboxError);
  expect(CODES).toContain(e.code);
  expect({ code: e.code, message: e.message }).toEqual({ code, message: expect.stringMatching(pattern || /./) });
  return e;
}

const { temp, removeAll } = tempDirs();
let sb;

beforeAll(async () => {
  requireRootfs();
  sb = await new Sandbox(opts({ workspace: temp('kern-errors-ws-') })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  removeAll();
});

test('the union holds the codes the runtime uses, and nothing of the old catch-all', () => {
  expect(CODES).toEqual(expect.arrayContaining(['ERR_INVALID_OPTION', 'ERR_MOUNT_REFUSED', 'ERR_NOT_OPEN', 'ERR_CLOSED',
    'ERR_FILE', 'ERR_IMAGE', 'ERR_SETUP_FAILED', 'ERR_ISOLATION_UNAVAILABLE', 'ERR_HOST_UNSUPPORTED', 'ERR_RUNTIME', 'ERR_INTERNAL']));
  expect(CODES).not.toContain('ERR_SANDBOX');
  // A SandboxError made by hand is a bad argument unless told otherwise.
  expect(new SandboxError('x').code).toBe('ERR_INVALID_OPTION');
  expect(new MountRefused('x').code).toBe('ERR_MOUNT_REFUSED');
});

describe('every public method: bad input is ERR_INVALID_OPTION, thrown before any box', () => {
  const cases = [
    ['new Sandbox (not an object)', () => new Sandbox(3)],
    ['new Sandbox (unknown option, native check)', async () => new Sandbox(opts({ memoryMbb: 1 })).open()],
    ['new Sandbox (bad egressAllow, native early check)', () => new Sandbox(opts({ egressAllow: 'x' }))],
    ['new Sandbox (requireIsolation, unknown control)', () => new Sandbox(opts({ requireIsolation: ['apparmor'] }))],
    ['new Sandbox (a function as an option)', () => new Sandbox(opts({ env: { A: () => 1 } }))],
    ['runCode', () => sb.runCode(42)],
    ['runCode (language)', () => sb.runCode('1', { language: 'ruby' })],
    ['run', () => sb.run('ls -la')],
    ['run (per-call option)', () => sb.run(['true'], { nope: 1 })],
    ['run (timeoutS, native check)', () => sb.run(['true'], { timeoutS: -1 })],
    ['readFile (maxBytes)', () => sb.readFile('a', { maxBytes: -1 })],
    ['readFile (offset)', () => sb.readFile('a', { offset: 1.5 })],
    ['writeFile', () => sb.writeFile('a', 42)],
    ['listFiles', () => sb.listFiles(3)],
    ['destroy (persist without a name)', () => new Sandbox(opts({ persist: true })).destroy()],
    ['snapshot', () => sb.snapshot('')],
    ['restore', () => sb.restore('')],
    ['kernel', () => sb.kernel({ jupiter: 'python3' })],
    ['spawn', () => sb.spawn('sleep 1')],
    ['terminal', () => sb.terminal({ cols: 'wide' })],
    ['createReadStream', () => sb.createReadStream('a', { offset: -1 })],
    ['createWriteStream', () => sb.createWriteStream(7)],
    ['withSandbox', () => withSandbox(opts())],
    ['runCode (one-shot)', () => runCode('1', opts({ memoryMb: 'lots' }))],
  ];
  test.each(cases)('%s', async (_name, fn) => {
    await expectCode(fn, 'ERR_INVALID_OPTION');
  });

  test('a kernel cell, a process and a terminal: bad input', async () => {
    const k = await sb.kernel();
    try {
      await expectCode(() => k.runCode(1), 'ERR_INVALID_OPTION', /takes the code as a string/);
    } finally {
      await k.close();
    }
    const p = await sb.spawn(['sleep', '30']);
    await expectCode(() => p.connect(0), 'ERR_INVALID_OPTION', /1 to 65535/);
    await expectCode(() => p.kill(9), 'ERR_INVALID_OPTION', /signal is a name/);
    await expectCode(() => p.kill('SIGNOPE'), 'ERR_INVALID_OPTION');
    await p.kill('SIGKILL');
    await p.wait();
    // Ended: its stdin has nobody to read it.
    await expectCode(() => p.write('x'), 'ERR_CLOSED');
    const t = await sb.terminal({ argv: ['sleep', '30'] });
    await expectCode(() => t.resize(0, 24), 'ERR_INVALID_OPTION');
    await expectCode(() => t.onData(3), 'ERR_INVALID_OPTION');
    await t.kill('SIGKILL');
    await t.wait();
  });
});

describe('files: a path refused or missing is ERR_FILE, with the message it had', () => {
  test.each([
    ['readFile, missing', () => sb.readFile('missing.txt'), /no such file or directory in the workspace/],
    ['readFile, ..', () => sb.readFile('../etc/passwd'), /'\.\.' component/],
    ['readFile, absolute', () => sb.readFile('/etc/passwd'), /is absolute/],
    ['readFile range, missing', () => sb.readFile('missing.txt', { offset: 1 }), /no such file/],
    ['writeFile, ..', () => sb.writeFile('a/../../x', 'x'), /'\.\.' component/],
    ['listFiles, ..', () => sb.listFiles('..'), /'\.\.' component/],
  ])('%s', async (_name, fn, pattern) => {
    await expectCode(fn, 'ERR_FILE', pattern);
  });

  test('a directory and a symlink: ERR_FILE (also through the streams)', async () => {
    const r = await sb.run(['sh', '-c', 'mkdir -p d && ln -sf /etc/passwd link']);
    expect(r.exitCode).toBe(0);
    await expectCode(() => sb.readFile('d'), 'ERR_FILE', /is a directory/);
    await expectCode(() => sb.readFile('link'), 'ERR_FILE', /never follows a symlink/);
    const streamErr = (s) => new Promise((resolve) => {
      s.on('error', resolve);
      s.resume();
    });
    const e = await streamErr(sb.createReadStream('link'));
    expect({ code: e.code, cls: e instanceof SandboxError }).toEqual({ code: 'ERR_FILE', cls: true });
  });
});

describe('state: ERR_NOT_OPEN, ERR_CLOSED', () => {
  test('before open() and after close()', async () => {
    const s = new Sandbox(opts());
    await expectCode(() => s.run(['true']), 'ERR_NOT_OPEN', /not open; call `await sandbox.open\(\)` first/);
    await expectCode(() => s.readFile('a'), 'ERR_NOT_OPEN');
    await expectCode(() => s.kernel(), 'ERR_NOT_OPEN');
    expect(() => s.snapshot('/tmp/x.tgz')).toThrow(expect.objectContaining({ code: 'ERR_NOT_OPEN' }));
    await s.open();
    const k = await s.kernel();
    await s.close();
    await expectCode(() => s.run(['true']), 'ERR_CLOSED', /closed/);
    await expectCode(() => s.open(), 'ERR_CLOSED', /create a new Sandbox/);
    await expectCode(() => k.runCode('1'), 'ERR_CLOSED', /torn down|closed/);
  });

  test('a kernel closed, then used', async () => {
    const k = await sb.kernel();
    await k.close();
    await expectCode(() => k.runCode('1'), 'ERR_CLOSED', /this kernel was torn down/);
  });
});

describe('the rest of the list', () => {
  test('a refused mount: MountRefused with ERR_MOUNT_REFUSED', async () => {
    const e = await expectCode(() => new Sandbox(opts({ mounts: { '/etc': '/mnt/etc' } })).open(), 'ERR_MOUNT_REFUSED');
    expect(e).toBeInstanceOf(MountRefused);
  });

  test('an image that does not exist: ERR_IMAGE', async () => {
    // A registry on a loopback port nobody listens on: unreachable, with no network needed.
    await expectCode(() => new Sandbox({ image: '127.0.0.1:9/nobody/none:1' }).open(), 'ERR_IMAGE', /127\.0\.0\.1:9/);
  });

  test('a failing setup: ERR_SETUP_FAILED with exitCode and stderrTail', async () => {
    const e = await expectCode(() => new Sandbox(opts({ setup: 'echo why >&2; exit 3' })).open(), 'ERR_SETUP_FAILED');
    expect({ exitCode: e.exitCode, tail: e.stderrTail }).toEqual({ exitCode: 3, tail: expect.stringContaining('why') });
  });

  test('a missing kern runtime: ERR_RUNTIME', async () => {
    const saved = process.env.KERN_BIN;
    process.env.KERN_BIN = path.join(temp('kern-errors-nokern-'), 'kern');
    try {
      await expectCode(() => new Sandbox(opts()).open(), 'ERR_RUNTIME', /the kern runtime is missing/);
    } finally {
      if (saved === undefined) delete process.env.KERN_BIN;
      else process.env.KERN_BIN = saved;
    }
  });

  test('requireIsolation refused on this host: ERR_ISOLATION_UNAVAILABLE', async () => {
    // The default posture has no untrusted seccomp profile, on any host.
    await expectCode(() => new Sandbox(opts({ requireIsolation: ['seccomp'] })).open(), 'ERR_ISOLATION_UNAVAILABLE', /seccomp/);
  });
});

describe('await using (Symbol.asyncDispose), compiled by the repo\'s TypeScript', () => {
  test('the method is at Symbol.asyncDispose, which on this Node is the registered nodejs.asyncDispose', () => {
    const key = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');
    expect(typeof Sandbox.prototype[key]).toBe('function');
    expect(typeof kern.Kernel.prototype[key]).toBe('function');
  });

  test('leaving the block closes the kernel, then the Sandbox (even when the block throws)', async () => {
    const src = `
      export async function main(Sandbox: any, o: any, seen: any) {
        try {
          await using sb = await new Sandbox(o).open();
          seen.sb = sb;
          await using k = await sb.kernel();
          seen.k = k;
          seen.cell = (await k.runCode('6 * 7')).results[0].text;
          throw new Error('the block failed');
        } catch (e: any) {
          seen.thrown = e.message;
        }
      }`;
    const out = ts.transpileModule(src, { compilerOptions: { target: ts.ScriptTarget.ES2020, module: ts.ModuleKind.CommonJS } });
    const mod = { exports: {} };
    new Function('module', 'exports', 'require', out.outputText)(mod, mod.exports, require);
    const seen = {};
    await mod.exports.main(Sandbox, opts(), seen);
    expect({ cell: seen.cell, thrown: seen.thrown }).toEqual({ cell: '42', thrown: 'the block failed' });
    await expectCode(() => seen.k.runCode('1'), 'ERR_CLOSED', /torn down/);
    await expectCode(() => seen.sb.run(['true']), 'ERR_CLOSED');
  });
});

test('the image path used here exists (so ERR_IMAGE above is the registry, not the path)', () => {
  expect(fs.existsSync(ROOTFS)).toBe(true);
});
