'use strict';
// rootless: yes
// The workspace across calls: `workspaceMaxBytes` (a cooperative cap checked between calls) and
// `pycCache` (the image's compiled stdlib, built once per image in the background).

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, tempDirs, expectSandboxError, summary, waitFor, unseal } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

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

describe('temporary workspaces of a process that died', () => {
  const REPO = path.resolve(__dirname, '..', '..');
  // A Node process with a Sandbox on a temporary workspace holding `token`; it says `ready` and
  // lives until its stdin ends (then closes the Sandbox and exits).
  const owner = (token) => `
    const { Sandbox } = require(${JSON.stringify(REPO)});
    (async () => {
      const sb = await new Sandbox(${JSON.stringify(opts())}).open();
      await sb.writeFile(${JSON.stringify(token)}, 'the user\\'s data');
      const r = await sb.run(['cat', ${JSON.stringify(token)}]);
      if (r.stdout !== 'the user\\'s data') throw new Error('the box did not see the file: ' + JSON.stringify(r));
      console.log('ready');
      process.stdin.on('data', () => {});
      process.stdin.on('end', async () => { await sb.close(); process.exit(0); });
    })().catch((e) => { console.error(e && e.stack || e); process.exit(1); });
  `;

  function start(script, env) {
    const child = require('child_process').spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'pipe'], env });
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const ready = new Promise((resolve, reject) => {
      child.stdout.on('data', (d) => {
        out += d;
        if (out.includes('ready')) resolve();
      });
      child.on('exit', (code) => reject(new Error(`the child exited (${code}) before it was ready: ${err}`)));
    });
    const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve({ code, sig })));
    return { child, ready, exited, err: () => err };
  }

  /** The temporary workspaces in `dir` and the one holding `token`. */
  const workspaces = (dir) => fs.readdirSync(dir).filter((n) => n.startsWith('kern-ws-')).sort();
  const holding = (dir, token) => workspaces(dir).find((n) => fs.existsSync(path.join(dir, n, token)));

  test('a SIGKILLed owner\'s workspace (with the user\'s file) is removed at the next open() elsewhere; a live owner\'s is left alone', async () => {
    // A private temp dir (TMPDIR): what other runs on this host make is out of sight.
    const tmp = temp('kern-tmpdir-');
    const env = { ...realEnv, TMPDIR: tmp };
    const dead = start(owner('dead-token'), env);
    const live = start(owner('live-token'), env);
    let next = null;
    try {
      await dead.ready;
      await live.ready;
      const deadWs = holding(tmp, 'dead-token');
      const liveWs = holding(tmp, 'live-token');
      expect(deadWs).toBeTruthy();
      expect(liveWs).toBeTruthy();
      expect(workspaces(tmp)).toEqual([deadWs, liveWs].sort());
      dead.child.kill('SIGKILL');
      expect(await dead.exited).toEqual({ code: null, sig: 'SIGKILL' });
      // Killed: nothing of it ran, so its workspace and the user's file are still there.
      expect(fs.readFileSync(path.join(tmp, deadWs, 'dead-token'), 'utf8')).toBe('the user\'s data');
      // A directory named like one, with no owner record, and one that is a user's symlink.
      fs.mkdirSync(path.join(tmp, 'kern-ws-notours'));
      fs.symlinkSync(path.join(tmp, liveWs), path.join(tmp, 'kern-ws-linkto'));

      // Another process opens a Sandbox: the dead owner's workspace goes, nothing else.
      next = start(owner('next-token'), env);
      await next.ready;
      const nextWs = holding(tmp, 'next-token');
      expect(fs.existsSync(path.join(tmp, deadWs))).toBe(false);
      expect(fs.readdirSync(tmp).filter((n) => n.includes(deadWs.slice('kern-ws-'.length)))).toEqual([]);
      expect(fs.readFileSync(path.join(tmp, liveWs, 'live-token'), 'utf8')).toBe('the user\'s data');
      expect(workspaces(tmp)).toEqual([liveWs, nextWs, 'kern-ws-linkto', 'kern-ws-notours'].sort());
      next.child.stdin.end();
      expect(await next.exited).toEqual({ code: 0, sig: null });
      live.child.stdin.end();
      expect(await live.exited).toEqual({ code: 0, sig: null });
      // Their close() removed their own (and their owner records).
      expect(fs.readdirSync(tmp).sort()).toEqual(['kern-ws-linkto', 'kern-ws-notours']);
    } finally {
      for (const c of [dead, live, next]) if (c && c.child.exitCode === null && c.child.signalCode === null) c.child.kill('SIGKILL');
    }
  }, 120000);
});
