'use strict';
// rootless: yes
// Checkpoints (issue 33, ADDITIONS in index.d.ts): kernel.checkpoint(dir) and sb.checkpoint(dir)
// write a kernel's state and the workspace to a directory of the host's, sealed with the host's
// key; sb.restoreKernel(dir) and Sandbox.fromCheckpoint(dir) bring them back, in this process or
// a new one. A checkpoint changed in any way, or sealed by another key, is refused before any of
// it is used, and the workspace it was to fill is left empty.

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { Sandbox, SandboxError } = require('../..');
const helpers = require('../helpers');
const { opts, makeCanaryFile, expectSandboxError, uniqueName, requireRootfs, unseal, cellStdout: py } = helpers;

// The directories this file made, removed after it (only these: other files run beside it).
const made = [];
const makeTempDir = (prefix) => {
  const d = helpers.makeTempDir(prefix);
  made.push(d);
  return d;
};

const ROOT = path.join(__dirname, '..', '..');
const STATE = `
import os
class Acc:
    def __init__(self): self.items = []
    def add(self, v):
        self.items.append(v)
        return len(self.items)
acc = Acc(); acc.add('one'); acc.add('two')
blob = bytes(range(256)) * 4096
os.makedirs('notes', exist_ok=True)
open('notes/a.txt', 'w').write('alpha')
os.chdir('notes')
`;
const CHECK = 'print(acc.add("three"), acc.items, len(blob), blob[1000], os.getcwd(), open("a.txt").read())';
const CHECKED = "3 ['one', 'two', 'three'] 1048576 232 /workspace/notes alpha\n";

/** A kernel checkpoint of STATE in a new directory; returns its path. */
async function kernelCheckpoint(extra = {}) {
  const dir = path.join(makeTempDir('kern-ckpt-'), 'ck');
  const sb = await new Sandbox(opts(extra)).open();
  try {
    const k = await sb.kernel();
    await py(k, STATE);
    const written = await k.checkpoint(dir);
    expect(written).toMatchObject({ dir, notCarried: [] });
    expect(written.bytes).toBeGreaterThan(1 << 20);
    // Closed by default: the memory is freed.
    await expectSandboxError(() => k.runCode('1'), SandboxError, /closed|torn down/);
  } finally {
    await sb.close();
  }
  return dir;
}

describe('checkpoints', () => {
  beforeAll(() => requireRootfs());

  test('kernel.checkpoint() then, in a new host process, Sandbox.fromCheckpoint() and restoreKernel() bring the state and files back', async () => {
    const dir = await kernelCheckpoint();
    // The files are the host's alone: 0700 directory, 0600 state and manifest.
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    for (const f of ['state.bin', 'checkpoint.json', 'checkpoint.mac']) {
      expect(fs.statSync(path.join(dir, f)).mode & 0o777).toBe(0o600);
    }
    const script = `
      const { Sandbox } = require(${JSON.stringify(ROOT)});
      (async () => {
        const sb = await Sandbox.fromCheckpoint(${JSON.stringify(dir)});
        const k = await sb.restoreKernel(${JSON.stringify(dir)});
        const r = await k.runCode(${JSON.stringify(CHECK)});
        process.stdout.write(JSON.stringify({ out: r.stdout, err: r.error }));
        await k.close();
        await sb.close();
      })().catch((e) => { console.error(e); process.exit(1); });`;
    const got = JSON.parse(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }));
    expect(got).toEqual({ out: CHECKED, err: null });
    // A checkpoint can be restored again and again.
    const sb = await Sandbox.fromCheckpoint(dir);
    try {
      expect((await sb.readFile('notes/a.txt')).toString()).toBe('alpha');
      const k = await sb.restoreKernel(dir);
      expect(await py(k, CHECK)).toBe(CHECKED);
    } finally {
      await sb.close();
    }
  });

  test('keepRunning: the kernel goes on after its checkpoint; restoreKernel() into an empty Sandbox copies the files too', async () => {
    const dir = path.join(makeTempDir('kern-ckpt-'), 'ck');
    const sb = await new Sandbox(opts()).open();
    const other = await new Sandbox(opts()).open();
    try {
      const k = await sb.kernel();
      await py(k, 'turn = 1\nopen("f", "w").write("v1")');
      await k.checkpoint(dir, { keepRunning: true });
      await py(k, 'turn = 2\nopen("f", "w").write("v2")');
      const back = await other.restoreKernel(dir);
      expect(await py(back, 'print(turn, open("f").read())')).toBe('1 v1\n');
      expect(await py(k, 'print(turn, open("f").read())')).toBe('2 v2\n');
      // Into a workspace that holds files it is refused, and nothing is changed.
      await expectSandboxError(() => sb.restoreKernel(dir), SandboxError, /empty workspace/);
      expect((await sb.readFile('f')).toString()).toBe('v2');
    } finally {
      await sb.close();
      await other.close();
    }
  });

  test('sb.checkpoint() holds the workspace alone: fromCheckpoint() brings it back; restoreKernel() says it has no kernel', async () => {
    const dir = path.join(makeTempDir('kern-ckpt-'), 'ck');
    const sb = await new Sandbox(opts()).open();
    try {
      await sb.run(['sh', '-c', 'mkdir -p d && echo hi > d/f && ln -s d/f l']);
      const w = await sb.checkpoint(dir);
      expect(w).toMatchObject({ dir, notCarried: [] });
    } finally {
      await sb.close();
    }
    const back = await Sandbox.fromCheckpoint(dir);
    try {
      const r = await back.run(['sh', '-c', 'cat d/f; readlink l']);
      expect(r.stdout).toBe('hi\nd/f\n');
      await expectSandboxError(() => back.restoreKernel(dir), SandboxError, /holds no kernel/);
    } finally {
      await back.close();
    }
  });

  test('a checkpoint is refused in the workspace, over files, for persist, and with bad arguments', async () => {
    const ws = makeTempDir('kern-ckpt-ws-');
    const sb = await new Sandbox(opts({ workspace: ws })).open();
    try {
      const k = await sb.kernel();
      await expectSandboxError(() => k.checkpoint(path.join(ws, 'inside')), SandboxError, /inside the Sandbox's workspace/);
      expect(fs.existsSync(path.join(ws, 'inside'))).toBe(false);
      const full = makeTempDir('kern-ckpt-full-');
      fs.writeFileSync(path.join(full, 'keep'), 'mine');
      await expectSandboxError(() => k.checkpoint(full, { keepRunning: true }), SandboxError, /not an empty directory/);
      expect(fs.readdirSync(full)).toEqual(['keep']);
      await expectSandboxError(() => k.checkpoint(''), SandboxError, /is a path/);
      await expectSandboxError(() => k.checkpoint('/tmp/x', { keep: true }), SandboxError, /unknown checkpoint\(\) option `keep`/);
      expect(await py(k, 'print("alive")')).toBe('alive\n');
    } finally {
      await sb.close();
    }
    const p = await new Sandbox(opts({ persist: true, name: uniqueName('ckpt'), workspace: makeTempDir('kern-ckpt-ws-') })).open();
    try {
      await expectSandboxError(() => p.checkpoint(path.join(makeTempDir('kern-ckpt-'), 'ck')), SandboxError, /persist/);
    } finally {
      await p.destroy();
    }
  });

  test('restoring in another image is refused, naming both', async () => {
    const dir = path.join(makeTempDir('kern-ckpt-'), 'ck');
    const sb = await new Sandbox({ image: 'host' }).open();
    try {
      await sb.checkpoint(dir);
    } finally {
      await sb.close();
    }
    const other = await new Sandbox(opts()).open();
    try {
      await expectSandboxError(() => other.restoreKernel(dir), SandboxError, /holds no kernel/);
      const kdir = await kernelCheckpoint();
      const ws = makeTempDir('kern-ckpt-ws-');
      const host = await new Sandbox({ image: 'host', workspace: ws }).open();
      try {
        await expectSandboxError(() => host.restoreKernel(kdir), SandboxError, /was taken in image .* and this Sandbox runs host/);
        expect(fs.readdirSync(ws).filter((n) => n !== '.deps')).toEqual([]);
      } finally {
        await host.close();
      }
    } finally {
      await other.close();
    }
  });
});

describe('tampered checkpoints are refused before any of them is used', () => {
  const cases = {
    'a byte of the state changed': (d) => { const f = path.join(d, 'state.bin'); const b = fs.readFileSync(f); b[b.length >> 1] ^= 1; fs.writeFileSync(f, b); },
    'the state cut short': (d) => { const f = path.join(d, 'state.bin'); fs.truncateSync(f, fs.statSync(f).size - 1); },
    'the manifest edited': (d) => { const f = path.join(d, 'checkpoint.json'); fs.writeFileSync(f, fs.readFileSync(f, 'utf8').replace('"kernSandbox"', '"kernSandbox" ')); },
    'the MAC replaced': (d) => { fs.writeFileSync(path.join(d, 'checkpoint.mac'), '00'.repeat(32)); },
    'the MAC removed': (d) => { fs.rmSync(path.join(d, 'checkpoint.mac')); },
    'a workspace file changed': (d) => { fs.writeFileSync(path.join(d, 'workspace/notes/a.txt'), 'omega'); },
    'a workspace file added': (d) => { fs.writeFileSync(path.join(d, 'workspace/extra'), 'x'); },
    'the state swapped for a symlink': (d) => { const f = path.join(d, 'state.bin'); const real = `${f}.real`; fs.renameSync(f, real); fs.symlinkSync(real, f); },
  };
  for (const [what, tamper] of Object.entries(cases)) {
    test(what, async () => {
      const dir = await kernelCheckpoint();
      tamper(dir);
      await expectSandboxError(() => Sandbox.fromCheckpoint(dir), SandboxError, /is not a checkpoint kern can restore/);
      const ws = makeTempDir('kern-ckpt-ws-');
      const sb = await new Sandbox(opts({ workspace: ws })).open();
      try {
        await expectSandboxError(() => sb.restoreKernel(dir), SandboxError, /is not a checkpoint kern can restore/);
        // Nothing was restored: the workspace is as empty as it was.
        expect(fs.readdirSync(ws).filter((n) => n !== '.deps')).toEqual([]);
      } finally {
        await sb.close();
      }
    });
  }

  test('a .deps planted in a checkpoint\'s workspace is never copied over the Sandbox\'s own', async () => {
    const dir = await kernelCheckpoint();
    fs.mkdirSync(path.join(dir, 'workspace/.deps/bin'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'workspace/.deps/bin/planted'), '#!/bin/sh\necho planted\n', { mode: 0o755 });
    const ws = makeTempDir('kern-ckpt-ws-');
    const sb = await new Sandbox(opts({ workspace: ws })).open();
    try {
      const k = await sb.restoreKernel(dir);
      expect(await py(k, CHECK)).toBe(CHECKED);
      expect(fs.existsSync(path.join(ws, '.deps/bin/planted'))).toBe(false);
    } finally {
      await sb.close();
    }
  });

  test('a checkpoint sealed under another host key is refused', async () => {
    const dir = await kernelCheckpoint();
    const home = makeTempDir('kern-ckpt-home-');
    const script = `
      const { Sandbox } = require(${JSON.stringify(ROOT)});
      Sandbox.fromCheckpoint(${JSON.stringify(dir)}).then(() => console.log('restored'), (e) => console.log(e.message));`;
    const out = execFileSync(process.execPath, ['-e', script], { encoding: 'utf8', env: { ...process.env, KERN_HOME: home } });
    expect(out).toMatch(/its MAC does not match/);
    // The other home made a key of its own, the host's alone.
    expect(fs.statSync(path.join(home, 'checkpoint.key')).mode & 0o777).toBe(0o600);
  });

  test('a box that can write where a checkpoint lives cannot get a forged or redirected one restored', async () => {
    const dir = await kernelCheckpoint();
    const canary = makeCanaryFile();
    // A Sandbox given the checkpoint's directory as a mount (the user's mistake) plants what it
    // can: a symlink to a host file in place of a workspace file, a new file, a new state.
    const planter = await new Sandbox(opts({ mounts: { [dir]: ['/ckpt', 'rw'] } })).open();
    try {
      const r = await planter.run(['sh', '-c', `rm /ckpt/workspace/notes/a.txt && ln -s ${canary.file} /ckpt/workspace/notes/a.txt; echo forged > /ckpt/workspace/planted`]);
      expect(r.exitCode).toBe(0);
    } finally {
      await planter.close();
    }
    const ws = makeTempDir('kern-ckpt-ws-');
    const sb = await new Sandbox(opts({ workspace: ws })).open();
    try {
      await expectSandboxError(() => sb.restoreKernel(dir), SandboxError, /its workspace does not match/);
      expect(fs.readdirSync(ws).filter((n) => n !== '.deps')).toEqual([]);
    } finally {
      await sb.close();
    }
    expect(fs.readFileSync(canary.file, 'utf8')).toBe(canary.body);
  });
});

afterAll(() => {
  for (const d of made) {
    unseal(d);
    fs.rmSync(d, { recursive: true, force: true });
  }
});
