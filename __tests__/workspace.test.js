'use strict';
// rootless: yes
// The workspace across calls: `workspaceMaxBytes` (a cooperative cap checked between calls) and
// `pycCache` (the image's compiled stdlib, built once per image in the background).

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, tempDirs, expectSandboxError, summary, waitFor, unseal } = require('./helpers');
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
      expect(second.fault.message).toMatch(/29\d(\.\d)? KiB/); // what is there (du-style, ~293 KiB)
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
    unseal(home);
  });

  // The published cache appears within the build's time after the first open().
  const built = () =>
    waitFor(() => fs.existsSync(path.join(home, 'pyc')) && fs.readdirSync(path.join(home, 'pyc')).some((k) => fs.readdirSync(path.join(home, 'pyc', k)).some((n) => /^(ready|sealed-\d+)$/.test(n))), 180_000, 250);

  const PROBE =
    'import sys, json, decimal, email.parser, http.client, importlib.util\n' +
    'print(json.dumps({"prefix": sys.pycache_prefix, "d": str(decimal.Decimal(1) / 7), "path": [p for p in sys.path if "kern" in p]}))\n' +
    'print(json.__cached__)';

  test('on: built once in the background, then mounted read-only; the stdlib is read from it', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      // The first calls may run before the cache is ready; it appears within the build's time.
      expect(await built()).toBeTruthy();
      const r = await sb.runCode(PROBE);
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
      const [line, cached] = r.stdout.trim().split('\n');
      // No prefix, and nothing of kern's on sys.path: only the image's own modules are mapped.
      expect(JSON.parse(line)).toMatchObject({ prefix: null, path: [] });
      // The stdlib's bytecode came from the mounted cache.
      expect(cached).toBe('/.kern-pyc/lib/usr/lib/python3.11/json/__init__.cpython-311.pyc');
      const check = await sb.run(['sh', '-c', `test -f ${cached} && echo present; touch /.kern-pyc/x`]);
      expect(check.stdout).toBe('present\n');
      expect(check.stderr).toMatch(/Read-only file system/);
      // Workspace modules compile as without the cache: their bytecode goes to __pycache__.
      await sb.writeFile('mymod.py', 'X = 42\n');
      const imp = await sb.runCode('import mymod; print(mymod.X, mymod.__cached__)');
      expect(imp.stdout).toBe('42 /workspace/__pycache__/mymod.cpython-311.pyc\n');
      expect((await sb.listFiles('__pycache__')).map((f) => f.path)).toEqual(['__pycache__/mymod.cpython-311.pyc']);
    } finally {
      await sb.close();
    }
  }, 240_000);

  test('explicit compilation works as without the cache: py_compile, compileall, PyZipFile', async () => {
    // With the cache mounted (the failing case was its read-only prefix).
    const sb = await new Sandbox(opts()).open();
    try {
      expect(await built()).toBeTruthy();
      await sb.writeFile('pkg/__init__.py', 'Y = 1\n');
      await sb.writeFile('pkg/sub/__init__.py', '');
      await sb.writeFile('pkg/sub/mod.py', 'Z = 2\n');
      const r = await sb.runCode(
        [
          'import compileall, importlib.util, json, os, py_compile, sys, zipfile',
          "open('/tmp/m.py', 'w').write('A = 1\\n')",
          "out = {'tmp': py_compile.compile('/tmp/m.py', doraise=True)}",
          "out['ws'] = py_compile.compile('/workspace/pkg/__init__.py', doraise=True)",
          "out['dir'] = compileall.compile_dir('/workspace/pkg', quiet=1, force=True)",
          "out['file'] = compileall.compile_file('/workspace/pkg/sub/mod.py', quiet=1, force=True)",
          "with zipfile.PyZipFile('/tmp/p.zip', 'w') as z:",
          "    z.writepy('/workspace/pkg')",
          "    out['zip'] = sorted(z.namelist())",
          "out['exists'] = [os.path.isfile(p) for p in (out['tmp'], out['ws'])]",
          'print(json.dumps(out))',
        ].join('\n')
      );
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
      expect(r.stderr).not.toMatch(/Traceback|Error/);
      expect(JSON.parse(r.stdout)).toEqual({
        tmp: '/tmp/__pycache__/m.cpython-311.pyc',
        ws: '/workspace/pkg/__pycache__/__init__.cpython-311.pyc',
        dir: true,
        file: true,
        zip: ['pkg/__init__.pyc', 'pkg/sub/__init__.pyc', 'pkg/sub/mod.pyc'],
        exists: [true, true],
      });
      expect((await sb.run(['sh', '-c', 'echo $PYTHONPATH'])).stdout).toBe('/.kern-pyc/hook\n');
    } finally {
      await sb.close();
    }
  }, 240_000);

  test('on and off give the same results; off sets nothing', async () => {
    const on = await new Sandbox(opts()).open();
    const off = await new Sandbox(opts({ pycCache: false })).open();
    try {
      expect(await built()).toBeTruthy();
      const a = await on.runCode(PROBE);
      const b = await off.runCode(PROBE);
      expect(JSON.parse(a.stdout.split('\n')[0])).toEqual(JSON.parse(b.stdout.split('\n')[0]));
      expect(b.stdout.split('\n')[1]).toBe('/usr/lib/python3.11/json/__pycache__/__init__.cpython-311.pyc');
      const env = await off.run(['sh', '-c', 'echo "[$PYTHONPATH]"; ls -d /.kern-pyc 2>&1 || true']);
      expect(env.stdout).toMatch(/^\[\]\n.*No such file/);
      // The image's own sitecustomize still runs with the cache (Debian's, here).
      const site = 'import sys; print(sys.modules["sitecustomize"].__file__)';
      expect((await on.runCode(site)).stdout).toBe((await off.runCode(site)).stdout);
    } finally {
      await on.close();
      await off.close();
    }
  }, 240_000);

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
