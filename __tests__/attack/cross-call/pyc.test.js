'use strict';
// rootless: yes
// Attack suite, the shared pyc cache (`pycCache`): one Sandbox's workspace is poisoned with
// modules the cache builder might import (py_compile, compileall, shutil, re, sitecustomize, a
// fake os and encodings, .pth files, and the same under .deps and the user site). Each one, if it
// ever runs in the builder, forges the cached bytecode of common stdlib modules when the builder
// exits: the forged code creates a file in whatever is mounted at /mnt. Then ANOTHER Sandbox, with
// its own workspace and a host directory mounted rw at /mnt, imports those modules from the cache.
// The host checks: no forged code ran there (the /mnt dir stays empty), no planted module ran in
// the builder (it would leave a `ran-*` file in the poisoned workspace), and the published cache
// is read-only on the host (files 0444, directories 0555).

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, tempDirs, summary, waitFor, unseal } = require('../../helpers');
const { hostGuard } = require('../host');
const { Sandbox } = require('../../..');

const realEnv = require('vm').runInThisContext('process').env;
const { temp, removeAll } = tempDirs();

// Stdlib modules the victim imports; each forged one creates /mnt/pwned-<module>.
const VICTIMS = ['json/__init__', 'base64', 'decimal', 'email/parser', 'http/client', 'shlex', 'textwrap'];

// What a planted module does: registers the forger (once), leaves a mark in its cwd, and, when
// it stands in for a real module, becomes that module so the builder goes on normally.
const FORGE = `
import sys as _s
def _kern_forge():
    import os, builtins, importlib._bootstrap_external as be
    tag = _s.implementation.cache_tag
    for v in ${JSON.stringify(VICTIMS)}:
        src = '/usr/lib/python3.11/' + v + '.py'
        try:
            text = open(src, 'rb').read()
            st = os.stat(src)
        except OSError:
            continue
        inject = b"open('/mnt/pwned-' + __name__, 'w').close()\\n"
        code = builtins.compile(inject + text, src, 'exec')
        data = be._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)
        d, name = os.path.split(src)
        pyc = name[:-3] + '.' + tag + '.pyc'
        # Every place a cache might be read from: under the prefix, the mount, its lib/.
        for top in {_s.pycache_prefix or '/.kern-pyc', '/.kern-pyc', '/.kern-pyc/lib'}:
            try:
                os.makedirs(top + d, exist_ok=True)
                open(top + d + '/' + pyc, 'wb').write(data)
            except OSError:
                pass
if not getattr(_s, '_kern_armed', False):
    _s._kern_armed = True
    import atexit
    atexit.register(_kern_forge)
try:
    open('ran-' + __name__.replace('/', '_'), 'w').close()
except OSError:
    pass
`;

const BECOME_REAL = `
_me = __name__
_s.path[:] = [p for p in _s.path if p not in ('', '.') and not p.startswith('/workspace')]
del _s.modules[_me]
try:
    import importlib as _i
    _real = _i.import_module(_me)
    _s.modules[_me] = _real
    globals().update({k: v for k, v in vars(_real).items() if not k.startswith('__')})
except ImportError:
    pass
`;

const PLACES = ['', '.deps/python/', '.deps/pyuser/lib/python3.11/site-packages/', '.local/lib/python3.11/site-packages/'];

function plant(ws, places = PLACES) {
  const write = (rel, text) => {
    fs.mkdirSync(path.dirname(path.join(ws, rel)), { recursive: true });
    fs.writeFileSync(path.join(ws, rel), text);
  };
  const module = FORGE + BECOME_REAL;
  const pth = `import builtins; exec(${JSON.stringify(FORGE)})\n`;
  for (const dir of places) {
    for (const m of ['py_compile', 'compileall', 'shutil', 're', 'sitecustomize', 'usercustomize', 'os']) {
      write(`${dir}${m}.py`, module);
    }
    write(`${dir}encodings/__init__.py`, module);
    write(`${dir}kern-evil.pth`, pth);
  }
}

let guard;
let home;
let saved;

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  // A store of our own, so the cache is built here, from the poisoned session.
  home = temp('kern-atk-pyc-home-');
  saved = realEnv.KERN_HOME;
  realEnv.KERN_HOME = home;
});

afterAll(() => {
  if (saved === undefined) delete realEnv.KERN_HOME;
  else realEnv.KERN_HOME = saved;
  if (guard) guard.cleanup();
  if (home) unseal(home);
  removeAll();
});

/** Every entry under `dir` (no symlinks followed): [relative path, lstat]. */
function tree(dir, rel = '') {
  const out = [];
  for (const name of fs.readdirSync(path.join(dir, rel))) {
    const r = path.join(rel, name);
    const st = fs.lstatSync(path.join(dir, r));
    out.push([r, st]);
    if (st.isDirectory()) out.push(...tree(dir, r));
  }
  return out;
}

test('the payload works where it is meant to: run by python, its forged bytecode runs at the next import', async () => {
  // The control: a Sandbox without the cache that imports the planted py_compile itself, with a
  // writable prefix of its own. Without this, "nothing ran" below could be a payload that never works.
  const ws = temp('kern-atk-pyc-ctl-');
  const mnt = temp('kern-atk-pyc-ctl-mnt-');
  // The workspace root only: a fake `encodings` on PYTHONPATH (.deps) would stop python itself.
  plant(ws, ['']);
  const sb = await new Sandbox(opts({ workspace: ws, pycCache: false, mounts: { [mnt]: ['/mnt', 'rw'] } })).open();
  try {
    const env = 'PYTHONPYCACHEPREFIX=/tmp/pfx';
    const r = await sb.run(['sh', '-c', `${env} python3 -c 'import py_compile' && cd / && ${env} python3 -c 'import json, base64'`]);
    expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
    expect(r.stderr).not.toMatch(/Traceback|Error/);
  } finally {
    await sb.close();
  }
  expect(fs.existsSync(path.join(ws, 'ran-py_compile'))).toBe(true);
  expect(fs.readdirSync(mnt).sort()).toEqual(['pwned-base64', 'pwned-json']);
  guard.assertUntouched();
}, 60_000);

test('a poisoned workspace cannot change what another Sandbox imports from the cache', async () => {
  const poisoned = temp('kern-atk-pyc-ws-a-');
  plant(poisoned);
  const a = await new Sandbox(opts({ workspace: poisoned })).open();
  let built;
  try {
    // The builder starts at A's open(); wait for the published cache.
    built = await waitFor(() => {
      const top = path.join(home, 'pyc');
      if (!fs.existsSync(top)) return null;
      for (const key of fs.readdirSync(top)) {
        for (const name of fs.readdirSync(path.join(top, key))) {
          const p = path.join(top, key, name);
          if (/^(ready|sealed-\d+)$/.test(name) && fs.lstatSync(p).isDirectory()) return p;
        }
      }
      return null;
    }, 180_000, 250);
    expect(built).toBeTruthy();
  } finally {
    await a.close();
  }
  // No planted module ran in the builder: none left its mark in the poisoned workspace.
  expect(fs.readdirSync(poisoned).filter((n) => n.startsWith('ran-'))).toEqual([]);

  const mnt = temp('kern-atk-pyc-mnt-');
  const ws = temp('kern-atk-pyc-ws-b-');
  const b = await new Sandbox(opts({ workspace: ws, mounts: { [mnt]: ['/mnt', 'rw'] } })).open();
  try {
    const imports = VICTIMS.map((v) => v.replace(/\/__init__$/, '').replace(/\//g, '.'));
    const r = await b.runCode(
      `import sys, ${imports.join(', ')}\n` +
        'print(json.__cached__)\n' +
        'print(json.dumps({"ok": 1}))'
    );
    expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
    const [cached, out] = r.stdout.trim().split('\n');
    // B really imported from the cache (else this proves nothing).
    expect(cached).toMatch(/^\/\.kern-pyc\//);
    expect(out).toBe('{"ok": 1}');
    // The same through a plain `python3` (not the driver), and a child of it.
    const p = await b.run(['sh', '-c', `cd /tmp && python3 -c 'import ${imports.join(', ')}; import subprocess; subprocess.run(["python3", "-c", "import json"])'`]);
    expect(summary(p)).toMatchObject({ exitCode: 0, fault: null });
    // The cache is read-only in the box.
    const w = await b.run(['sh', '-c', 'touch /.kern-pyc/x 2>&1; echo; touch /.kern-pyc/lib/x 2>&1']);
    expect(w.stdout).toMatch(/Read-only file system[\s\S]*Read-only file system/);
  } finally {
    await b.close();
  }
  // The host side: no forged code ran in B, nothing ran in B's workspace either.
  expect(fs.readdirSync(mnt)).toEqual([]);
  expect(fs.readdirSync(ws).filter((n) => n.startsWith('ran-'))).toEqual([]);
  // The published cache is read-only on the host, and holds only files and directories.
  const entries = tree(built);
  expect(entries.length).toBeGreaterThan(100);
  const bad = entries.filter(([, st]) => (st.isDirectory() ? (st.mode & 0o7777) !== 0o555 : !st.isFile() || (st.mode & 0o7777) !== 0o444));
  expect(bad.map(([r, st]) => `${r} ${(st.mode & 0o7777).toString(8)}`)).toEqual([]);
  expect(fs.statSync(built).mode & 0o7777).toBe(0o555);
  // No build leftovers next to it.
  expect(fs.readdirSync(path.dirname(built)).filter((n) => /^(build|ws|tmp)/.test(n))).toEqual([]);
  guard.assertUntouched();
}, 240_000);
