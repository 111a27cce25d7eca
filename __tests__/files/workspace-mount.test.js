'use strict';
// rootless: yes
// `workspaceMount`: where the boxes see the workspace. Files cross at the chosen path both ways,
// everything relative to the workspace follows it (cwd, a call's relative cwd, `.deps`, kernels,
// spawn, zygote and prewarm), a path the image lacks is made without writing into the image
// (its other entries stay visible and read-only, nothing can be written beside the mount), and
// bad values are refused before any box starts.

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, tempDirs, expectSandboxError, summary, ROOTFS } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const { temp, removeAll } = tempDirs();

beforeAll(() => requireRootfs());
afterAll(() => {
  removeAll();
});

/** Runs `script` with sh in `sb`; its stdout, after checking it succeeded. */
async function sh(sb, script, callOpts) {
  const r = await sb.run(['sh', '-c', script], callOpts);
  expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
  return r.stdout;
}

/** A root filesystem of only dash and its loader, with `/home/other/hello.txt` and a symlink
 * `/home/link -> /etc`: an image whose /home has entries of its own (the test rootfs's /home is
 * empty). Copied from the test rootfs, so it works rootless too. */
function homeImage() {
  const root = temp('kern-wsmount-img-');
  const from = (p) => path.join(ROOTFS, p);
  const lib = 'usr/lib/x86_64-linux-gnu';
  fs.mkdirSync(path.join(root, 'usr/bin'), { recursive: true });
  fs.mkdirSync(path.join(root, lib), { recursive: true });
  fs.mkdirSync(path.join(root, 'usr/lib64'), { recursive: true });
  fs.copyFileSync(fs.realpathSync(from('usr/bin/dash')), path.join(root, 'usr/bin/sh'));
  fs.chmodSync(path.join(root, 'usr/bin/sh'), 0o755);
  fs.copyFileSync(fs.realpathSync(from(`${lib}/libc.so.6`)), path.join(root, lib, 'libc.so.6'));
  fs.copyFileSync(
    fs.realpathSync(from('usr/lib64/ld-linux-x86-64.so.2')),
    path.join(root, 'usr/lib64/ld-linux-x86-64.so.2')
  );
  fs.symlinkSync('usr/bin', path.join(root, 'bin'));
  fs.symlinkSync('usr/lib64', path.join(root, 'lib64'));
  fs.mkdirSync(path.join(root, 'etc'));
  fs.mkdirSync(path.join(root, 'home/other'), { recursive: true });
  fs.writeFileSync(path.join(root, 'home/other/hello.txt'), 'hello from the image\n');
  fs.symlinkSync('/etc', path.join(root, 'home/link'));
  fs.writeFileSync(path.join(root, 'home/plain'), 'a file\n');
  return root;
}

describe('workspaceMount: "/home/user" on an image with an empty /home', () => {
  let sb;
  let ws;
  beforeAll(async () => {
    ws = temp('kern-wsmount-');
    sb = await new Sandbox(opts({ workspace: ws, workspaceMount: '/home/user' })).open();
  });
  afterAll(async () => {
    await sb.close();
  });

  test('files cross at the mount both ways, and the mount is the default cwd', async () => {
    expect(await sh(sb, 'pwd; echo from-box > /home/user/x.txt')).toBe('/home/user\n');
    expect(fs.readFileSync(path.join(ws, 'x.txt'), 'utf8')).toBe('from-box\n');
    await sb.writeFile('from-host.txt', 'from-host\n');
    expect(await sh(sb, 'cat /home/user/from-host.txt; cat from-host.txt')).toBe('from-host\nfrom-host\n');
    // The default mount point is the image's again: nothing of the workspace there.
    expect(await sh(sb, 'test -e /workspace && echo there || echo absent')).toBe('absent\n');
    const py = await sb.runCode('import os; print(os.getcwd())');
    expect(summary(py)).toMatchObject({ exitCode: 0, stdout: '/home/user\n' });
  });

  test('a relative cwd resolves under the mount (calls, spawn, terminal), an absolute one inside it too', async () => {
    fs.mkdirSync(path.join(ws, 'sub/dir'), { recursive: true });
    expect(await sh(sb, 'pwd', { cwd: 'sub/dir' })).toBe('/home/user/sub/dir\n');
    expect(await sh(sb, 'pwd', { cwd: '/home/user/sub' })).toBe('/home/user/sub\n');
    const p = await sb.spawn(['sh', '-c', 'pwd'], { cwd: 'sub' });
    const r = await p.wait();
    expect(r.stdout).toBe('/home/user/sub\n');
    const t = await sb.terminal({ argv: ['sh', '-c', 'pwd'], cwd: 'sub/dir' });
    let seen = '';
    for await (const c of t) seen += c;
    expect(seen).toBe('/home/user/sub/dir\r\n');
    expect((await t.wait()).exitCode).toBe(0);
  });

  test('the mount appears owned as /workspace does, and nothing can be written beside it', async () => {
    const here = await sh(sb, "stat -c '%u:%g %a' /home/user; id -u");
    const other = await new Sandbox(opts({ workspace: ws })).open();
    try {
      expect(await sh(other, "stat -c '%u:%g %a' /workspace; id -u")).toBe(here);
    } finally {
      await other.close();
    }
    const r = await sb.run(['sh', '-c', 'echo x > /home/other; echo $?; mkdir /home/user2; echo $?; ls -A /home']);
    expect(r.stdout).toBe('2\n1\nuser\n');
    expect(r.stderr).toMatch(/Read-only file system/);
    expect(fs.readdirSync(ws)).not.toContain('other');
  });

  test('a python kernel starts in the mount, and a kernel cwd resolves under it', async () => {
    fs.mkdirSync(path.join(ws, 'k'), { recursive: true });
    for (const [o, want] of [[{}, '/home/user\n'], [{ cwd: 'k' }, '/home/user/k\n']]) {
      const k = await sb.kernel(o);
      try {
        const c = await k.runCode('import os; print(os.getcwd())');
        expect(summary(c)).toMatchObject({ exitCode: 0, stdout: want });
      } finally {
        await k.close();
      }
    }
  });
});

test('an image directory on the way keeps its entries, read-only, with its symlinks as symlinks', async () => {
  const image = homeImage();
  const ws = temp('kern-wsmount-');
  const sb = await new Sandbox({ image, workspace: ws, workspaceMount: '/home/user', pycCache: false }).open();
  try {
    const r = await sb.run([
      'sh',
      '-c',
      'echo "$PWD"; for f in /home/*; do echo "$f"; done; read l < /home/other/hello.txt; echo "$l"; ' +
        'test -L /home/link && echo link; echo w > in.txt; ' +
        '(echo x > /home/other/hello.txt) 2>/dev/null || echo ro1; (echo x > /home/new) 2>/dev/null || echo ro2',
    ]);
    expect(summary(r)).toMatchObject({
      exitCode: 0,
      stdout:
        '/home/user\n/home/link\n/home/other\n/home/plain\n/home/user\nhello from the image\nlink\nro1\nro2\n',
    });
    expect(fs.readFileSync(path.join(ws, 'in.txt'), 'utf8')).toBe('w\n');
    // The image directory is untouched: no `user` made in it.
    expect(fs.readdirSync(path.join(image, 'home')).sort()).toEqual(['link', 'other', 'plain']);
    expect(fs.readFileSync(path.join(image, 'home/other/hello.txt'), 'utf8')).toBe('hello from the image\n');
  } finally {
    await sb.close();
  }
  // An ancestor that is a symlink or a file in the image is refused at open(), named.
  for (const [mount, re] of [['/home/link/x', /\/home\/link is a symlink/], ['/home/plain/x', /\/home\/plain is not a directory/]]) {
    const bad = new Sandbox({ image, workspace: ws, workspaceMount: mount });
    try {
      const e = await expectSandboxError(() => bad.open(), SandboxError, /workspaceMount/, re);
      expect(e.code).toBe('ERR_INVALID_OPTION');
    } finally {
      await bad.close();
    }
  }
});

test('a mount point with no ancestor in the image, and one in a rich image directory', async () => {
  const ws = temp('kern-wsmount-');
  let sb = await new Sandbox(opts({ workspace: ws, workspaceMount: '/kern-new/a/b' })).open();
  try {
    expect(await sh(sb, 'pwd; echo ok > f')).toBe('/kern-new/a/b\n');
    expect(fs.readFileSync(path.join(ws, 'f'), 'utf8')).toBe('ok\n');
  } finally {
    await sb.close();
  }
  // /var holds directories, files and symlinks (run -> /run) in the test rootfs.
  sb = await new Sandbox(opts({ workspace: ws, workspaceMount: '/var/user' })).open();
  try {
    const out = await sh(
      sb,
      'pwd; ls /var | tr "\\n" " "; echo; readlink /var/run; test -s /var/lib/dpkg/status && echo status; ' +
        '(touch /var/x) 2>/dev/null || echo ro1; (touch /var/lib/x) 2>/dev/null || echo ro2'
    );
    expect(out).toBe(
      '/var/user\nbackups cache lib local lock log mail opt run spool tmp user \n/run\nstatus\nro1\nro2\n'
    );
  } finally {
    await sb.close();
  }
});

test('.deps follows the mount: setup installs there, a later box imports it, read-only', async () => {
  const ws = temp('kern-wsmount-');
  const setup = 'mkdir -p "$PIP_TARGET" && echo "X = 42" > "$PIP_TARGET/wsmod.py" && echo "$PIP_TARGET"';
  const sb = await new Sandbox(opts({ workspace: ws, workspaceMount: '/home/user', setup })).open();
  try {
    expect(fs.readFileSync(path.join(ws, '.deps/python/wsmod.py'), 'utf8')).toBe('X = 42\n');
    const r = await sb.runCode(
      'import os, wsmod\nprint(wsmod.X, wsmod.__file__)\nprint(os.environ["PYTHONPATH"].split(":")[-1])'
    );
    expect(summary(r)).toMatchObject({
      exitCode: 0,
      stdout: '42 /home/user/.deps/python/wsmod.py\n/home/user/.deps/python\n',
    });
    const w = await sb.run(['sh', '-c', 'touch /home/user/.deps/python/planted.py']);
    expect(w.exitCode).not.toBe(0);
    expect(w.stderr).toMatch(/Read-only file system/);
  } finally {
    await sb.close();
  }
});

test('with zygote and prewarm, calls start in the mount', async () => {
  for (const extra of [{ zygote: true }, { prewarm: 1 }]) {
    const ws = temp('kern-wsmount-');
    const sb = await new Sandbox(opts({ workspace: ws, workspaceMount: '/home/user', ...extra })).open();
    try {
      for (let i = 0; i < 2; i++) {
        const r = await sb.runCode(`import os\nopen("n${i}", "w").write("x")\nprint(os.getcwd())`);
        expect(summary(r)).toMatchObject({ exitCode: 0, stdout: '/home/user\n' });
      }
      fs.mkdirSync(path.join(ws, 'sub'));
      const cwd = await sb.runCode('import os; print(os.getcwd())', { cwd: 'sub' });
      expect(summary(cwd)).toMatchObject({ exitCode: 0, stdout: '/home/user/sub\n' });
      expect(fs.readdirSync(ws).filter((f) => f.startsWith('n')).sort()).toEqual(['n0', 'n1']);
    } finally {
      await sb.close();
    }
  }
});

describe('bad values are refused before any box starts', () => {
  test.each([
    ['relative', 'home/user', /not an absolute path/],
    ['the root', '/', /the box's root/],
    ['not normalised', '/home/user/', /not normalised/],
    ['dot-dot', '/home/../user', /not normalised/],
    ['under /proc', '/proc/w', /\/proc/],
    ['/dev', '/dev', /\/dev/],
    ['system files', '/usr/local/w', /\/usr/],
    ['kern\'s own', '/.kern-setup', /kern keeps/],
    ['not a string', 42, /must be an absolute box path/],
  ])('%s (%s): the constructor throws ERR_INVALID_OPTION', async (_what, mount, re) => {
    let err = null;
    try {
      new Sandbox(opts({ workspaceMount: mount }));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect(err.code).toBe('ERR_INVALID_OPTION');
    expect(err.message).toMatch(/workspaceMount/);
    expect(err.message).toMatch(re);
  });

  test('a mount inside the default /tmp scratch, or clashing with tmpfs or mounts: open() refuses', async () => {
    const ws = temp('kern-wsmount-');
    const src = temp('kern-wsmount-src-');
    for (const [extra, re] of [
      [{ workspaceMount: '/tmp/w' }, /scratch tmpfs at "\/tmp"/],
      [{ workspaceMount: '/home/user', tmpfs: { '/home': '8m' } }, /\/home/],
      [{ workspaceMount: '/home/user', mounts: { [src]: '/home' } }, /clashes/],
      [{ workspaceMount: '/home/user', mounts: { [src]: '/home/user/data' } }, /clashes/],
    ]) {
      const sb = new Sandbox(opts({ workspace: ws, ...extra }));
      try {
        const e = await expectSandboxError(() => sb.open(), SandboxError, /workspaceMount/, re);
        expect(e.code).toBe('ERR_INVALID_OPTION');
      } finally {
        await sb.close();
      }
    }
    // open() made nothing: not even the workspace's .deps, which it makes before any box.
    expect(fs.readdirSync(ws)).toEqual([]);
  });
});
