'use strict';
// The workspace across calls: `workspaceMaxBytes` (a cooperative cap checked between calls) and
// `pycCache` (the image's compiled stdlib, built once per image in the background).

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, tempDirs, expectSandboxError, summary, waitFor } = require('./helpers');
const { Sandbox, SandboxError } = require('..');

const realEnv = require('vm').runInThisContext('process').env;

const { temp, removeAll } = tempDirs();

beforeAll(() => requireRootfs());
afterAll(() => {
  removeAll();
});

describe('workspaceMaxBytes', () => {
  test('the call that crosses the cap completes; the next is refused with workspace_full', async () => {
    const sb = await new Sandbox(opts({ workspaceMaxBytes: 100_000 })).open();
    try {
      const first = await sb.runCode("open('big.bin', 'wb').write(b'x' * 300_000)\nprint('wrote')");
      expect(summary(first)).toMatchObject({ exitCode: 0, fault: null, stdout: 'wrote\n' });

      const second = await sb.run(['sh', '-c', 'touch ran.txt']);
      expect(second.fault && second.fault.type).toBe('workspace_full');
      expect(second.fault.message).toMatch(/29\d\.\d KiB/); // what is there (du-style, ~293 KiB)
      expect(second.fault.message).toMatch(/97\.7 KiB/); // the cap
      expect(second.success).toBe(false);
      expect((await sb.listFiles()).map((f) => f.path)).toEqual(['big.bin']);

      // Python calls and kernel cells are held to it too.
      const py = await sb.runCode('print(1)');
      expect(py.fault && py.fault.type).toBe('workspace_full');
      const k = await sb.kernel();
      try {
        const cell = await k.runCode('print(1)');
        expect(cell.fault && cell.fault.type).toBe('workspace_full');
      } finally {
        await k.close();
      }

      // Emptying the file from the host frees the space: calls run again.
      await sb.writeFile('big.bin', '');
      const third = await sb.run(['sh', '-c', 'touch ran.txt']);
      expect(summary(third)).toMatchObject({ exitCode: 0, fault: null });
    } finally {
      await sb.close();
    }
  });

  test('a workspace already over the cap at open() refuses the first call', async () => {
    const ws = temp('kern-quota-');
    fs.writeFileSync(path.join(ws, 'old.bin'), Buffer.alloc(64 * 1024, 1));
    const sb = await new Sandbox(opts({ workspace: ws, workspaceMaxBytes: 4096, trackFiles: false })).open();
    try {
      const r = await sb.run(['true']);
      expect(r.fault && r.fault.type).toBe('workspace_full');
    } finally {
      await sb.close();
    }
  });

  test('.deps does not count, and the cap must be a positive integer', async () => {
    const ws = temp('kern-quota-');
    fs.mkdirSync(path.join(ws, '.deps'));
    fs.writeFileSync(path.join(ws, '.deps', 'lib.bin'), Buffer.alloc(64 * 1024, 1));
    const sb = await new Sandbox(opts({ workspace: ws, workspaceMaxBytes: 4096 })).open();
    try {
      expect((await sb.run(['true'])).fault).toBeNull();
    } finally {
      await sb.close();
    }
    for (const bad of [0, -1, 1.5, '100']) {
      const b = new Sandbox(opts({ workspaceMaxBytes: bad }));
      await expectSandboxError(() => b.open(), SandboxError, /workspaceMaxBytes/);
      await b.close();
    }
  });
});

describe('pycCache', () => {
  let home;
  let saved;
  beforeAll(() => {
    // A store of our own: the cache is built from scratch here.
    home = temp('kern-pyc-home-');
    saved = realEnv.KERN_HOME;
    realEnv.KERN_HOME = home;
  });
  afterAll(() => {
    if (saved === undefined) delete realEnv.KERN_HOME;
    else realEnv.KERN_HOME = saved;
  });

  const PROBE =
    'import sys, json, decimal, email.parser, http.client, importlib.util\n' +
    'print(json.dumps({"prefix": sys.pycache_prefix, "d": str(decimal.Decimal(1) / 7)}))\n' +
    'print(importlib.util.cache_from_source("/usr/lib/python3.11/json/__init__.py"))';

  test('on: built once in the background, then mounted read-only with PYTHONPYCACHEPREFIX', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      // The first calls may run before the cache is ready; it appears within the build's time.
      let r;
      const ready = await waitFor(() => fs.existsSync(path.join(home, 'pyc')) && fs.readdirSync(path.join(home, 'pyc')).some((k) => fs.existsSync(path.join(home, 'pyc', k, 'ready'))), 180_000, 250);
      expect(ready).toBeTruthy();
      r = await sb.runCode(PROBE);
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
      const [line, cached] = r.stdout.trim().split('\n');
      expect(JSON.parse(line).prefix).toBe('/.kern-pyc');
      // The stdlib's bytecode is in the mounted cache.
      const check = await sb.run(['sh', '-c', `test -f ${cached} && echo present; touch /.kern-pyc/x`]);
      expect(check.stdout).toBe('present\n');
      expect(check.stderr).toMatch(/Read-only file system/);
      // With the prefix, python leaves no __pycache__ in the workspace.
      await sb.writeFile('mymod.py', 'X = 42\n');
      const imp = await sb.runCode('import mymod; print(mymod.X)');
      expect(imp.stdout).toBe('42\n');
      expect((await sb.run(['sh', '-c', 'ls -a /workspace'])).stdout).not.toMatch(/__pycache__/);
    } finally {
      await sb.close();
    }
  }, 240_000);

  test('on and off give the same results; off sets nothing', async () => {
    const on = await new Sandbox(opts()).open();
    const off = await new Sandbox(opts({ pycCache: false })).open();
    try {
      const a = await on.runCode(PROBE);
      const b = await off.runCode(PROBE);
      expect(JSON.parse(a.stdout.split('\n')[0]).d).toBe(JSON.parse(b.stdout.split('\n')[0]).d);
      expect(JSON.parse(b.stdout.split('\n')[0]).prefix).toBeNull();
      const env = await off.run(['sh', '-c', 'echo "[$PYTHONPYCACHEPREFIX]"; ls -d /.kern-pyc 2>&1 || true']);
      expect(env.stdout).toMatch(/^\[\]\n.*No such file/);
    } finally {
      await on.close();
      await off.close();
    }
  });

  test('the host image is left alone: its python keeps its own compiled files, no note', async () => {
    const host = await new Sandbox({ image: 'host' }).open();
    try {
      const r = await host.runCode('import sys; print(sys.pycache_prefix)');
      expect(r.stdout).toBe('None\n');
      expect(r.runtimeNotes.join('\n')).not.toMatch(/pycCache/);
    } finally {
      await host.close();
    }
  });
});
