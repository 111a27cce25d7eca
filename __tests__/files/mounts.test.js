'use strict';
// rootless: yes
// `mounts`: extra host binds. Every sensitive source is refused with MountRefused before any box
// exists (checked as resolved through symlinks); what is allowed is mounted read-only unless "rw",
// and a read-only mount stays unwritable from the box.

const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { requireRootfs, opts, tempDirs, makeCanaryFile, expectSandboxError, summary, ROOTFS } = require('../helpers');
const { Sandbox, SandboxError, MountRefused } = require('../..');

// Jest gives each test file its own `process.env` copy: the addon reads the real one.
const realEnv = require('vm').runInThisContext('process').env;

const { temp, removeAll } = tempDirs();

beforeAll(() => requireRootfs());

afterAll(() => {
  removeAll();
});

async function refused(mounts, ...patterns) {
  const sb = new Sandbox(opts({ mounts }));
  try {
    return await expectSandboxError(() => sb.open(), MountRefused, ...patterns);
  } finally {
    await sb.close();
  }
}

describe('refused sources', () => {
  test.each([
    ['/', /\//],
    ['/etc', /\/etc/],
    ['/etc/ssl', /\/etc/],
    ['/proc', /\/proc/],
    ['/sys', /\/sys/],
    ['/dev', /\/dev/],
    ['/boot', /\/boot/],
    ['/root', /\/root/],
    ['/run', /\/run/],
    ['/var/run', /\/run/],
    ['/var', /\/var/],
  ])('%s is refused with MountRefused (a SandboxError)', async (src, re) => {
    if (!fs.existsSync(src)) return; // e.g. no /boot in a container: nothing to refuse
    const err = await refused({ [src]: '/data' }, re);
    expect(err).toBeInstanceOf(SandboxError);
    expect(err.code).toBe('ERR_MOUNT_REFUSED');
  });

  describe('the home directory and its credentials', () => {
    let home;
    let saved;
    beforeAll(() => {
      home = temp('kern-fakehome-');
      for (const d of ['.ssh', '.gnupg', '.aws', '.config', '.docker', '.kube', 'project']) {
        fs.mkdirSync(path.join(home, d));
      }
      fs.writeFileSync(path.join(home, '.ssh', 'id_rsa'), 'PRIVATE KEY\n');
      fs.writeFileSync(path.join(home, '.npmrc'), '//registry/:_authToken=x\n');
      fs.symlinkSync(path.join(home, '.ssh'), path.join(home, 'innocent'));
      saved = realEnv.HOME;
      realEnv.HOME = home;
    });
    afterAll(() => {
      realEnv.HOME = saved;
    });

    test.each(['.ssh', '.ssh/id_rsa', '.gnupg', '.aws', '.config', '.docker', '.kube', '.npmrc'])(
      '~/%s is refused',
      async (rel) => {
        await refused({ [path.join(home, rel)]: '/data' });
      }
    );

    test('the home itself and its parent are refused', async () => {
      await refused({ [home]: '/data' }, /home/);
      await refused({ [path.dirname(home)]: '/data' });
    });

    test('a symlink to ~/.ssh is refused as what it resolves to, and so is a path with ..', async () => {
      await refused({ [path.join(home, 'innocent')]: '/data' }, /\.ssh/);
      await refused({ [path.join(home, 'project', '..', '.ssh')]: '/data' });
    });

    test('a project directory inside the home is allowed', async () => {
      const sb = await new Sandbox(opts({ mounts: { [path.join(home, 'project')]: '/data' } })).open();
      try {
        const r = await sb.run(['ls', '-d', '/data']);
        expect(r.exitCode).toBe(0);
      } finally {
        await sb.close();
      }
    });
  });

  test('a directory holding a docker.sock or a D-Bus socket is refused', async () => {
    const dir = temp('kern-sockdir-');
    const deep = path.join(dir, 'a', 'b');
    fs.mkdirSync(deep, { recursive: true });
    const servers = [];
    const listen = (p) =>
      new Promise((resolve, reject) => {
        const s = net.createServer();
        s.on('error', reject);
        s.listen(p, () => resolve(s));
      });
    try {
      servers.push(await listen(path.join(dir, 'docker.sock')));
      await refused({ [dir]: '/data' }, /docker\.sock/);
      const dir2 = temp('kern-sockdir-');
      fs.mkdirSync(path.join(dir2, 'x', 'y'), { recursive: true });
      servers.push(await listen(path.join(dir2, 'x', 'y', 'bus')));
      await refused({ [dir2]: '/data' }, /bus/);
    } finally {
      for (const s of servers) s.close();
    }
  });

  test('relative, missing and special sources are refused', async () => {
    await refused({ 'relative/dir': '/data' }, /relative/);
    await refused({ [path.join(os.tmpdir(), 'kern-no-such-dir-x1')]: '/data' });
  });
});

describe('refused targets', () => {
  test.each([
    ['relative', 'data'],
    ['escaping', '/a/../etc'],
    ['the root', '/'],
    ['under /proc', '/proc/x'],
    ['/dev', '/dev'],
    ['the workspace', '/workspace'],
    ['inside the workspace', '/workspace/sub'],
  ])('%s (%s)', async (_what, target) => {
    const src = temp('kern-src-');
    await refused({ [src]: target });
  });

  test('a target below the top level is never reached through the image\'s symlinks', async () => {
    // Debian's /etc/os-release is a symlink into /usr/lib.
    const file = path.join(temp('kern-src-'), 'f');
    fs.writeFileSync(file, 'x');
    await refused({ [file]: '/etc/os-release' }, /symlink/);
  });

  test('a bad mode or shape is a SandboxError that names the option', async () => {
    const src = temp('kern-src-');
    const sb = new Sandbox(opts({ mounts: { [src]: ['/data', 'rx'] } }));
    await expectSandboxError(() => sb.open(), SandboxError, /ro|rw/);
    await sb.close();
  });

  test('two mounts on one target, or a mount and a tmpfs that overlap, are refused', async () => {
    const a = temp('kern-src-');
    const b = temp('kern-src-');
    let sb = new Sandbox(opts({ mounts: { [a]: '/data', [b]: '/data' } }));
    await expectSandboxError(() => sb.open(), SandboxError, /\/data/);
    await sb.close();
    sb = new Sandbox(opts({ mounts: { [a]: '/tmp' }, tmpfs: { '/tmp': '16m' } }));
    await expectSandboxError(() => sb.open(), SandboxError, /overlap/);
    await sb.close();
  });
});

describe('mounted', () => {
  test('a target the image lacks below the top level is made in the box, never in the image', async () => {
    const src = temp('kern-src-');
    fs.writeFileSync(path.join(src, 'f'), 'host file\n');
    const sb = await new Sandbox(opts({ mounts: { [src]: '/var/kern-not-in-image/x' } })).open();
    try {
      const r = await sb.run(['sh', '-c', 'cat /var/kern-not-in-image/x/f; ls /var | tr "\\n" " "; echo; (touch /var/y) 2>/dev/null || echo ro']);
      expect(summary(r)).toMatchObject({
        exitCode: 0,
        stdout: 'host file\nbackups cache kern-not-in-image lib local lock log mail opt run spool tmp \nro\n',
      });
    } finally {
      await sb.close();
    }
    expect(fs.existsSync(path.join(ROOTFS, 'var/kern-not-in-image'))).toBe(false);
  });

  test('read-only by default: the box reads, cannot write, and the host file is unchanged', async () => {
    const dir = temp('kern-ro-');
    const canary = makeCanaryFile(dir);
    const sb = await new Sandbox(opts({ mounts: { [dir]: '/data' } })).open();
    try {
      const r = await sb.run(['sh', '-c', `cat /data/${canary.name}; echo more >> /data/${canary.name}; touch /data/new`]);
      expect(r.stdout).toBe(canary.body);
      expect(r.stderr).toMatch(/Read-only file system/);
      expect(canary.intact()).toBe(true);
      expect(fs.existsSync(path.join(dir, 'new'))).toBe(false);
    } finally {
      await sb.close();
    }
  });

  test('"rw": what the box writes lands in the host directory, owned by the directory\'s owner', async () => {
    const dir = temp('kern-rw-');
    const sb = await new Sandbox(opts({ mounts: { [dir]: ['/data', 'rw'] } })).open();
    try {
      const r = await sb.run(['sh', '-c', 'echo hello > /data/out.txt && mkdir /data/sub']);
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
      expect(fs.readFileSync(path.join(dir, 'out.txt'), 'utf8')).toBe('hello\n');
      const st = fs.statSync(path.join(dir, 'out.txt'));
      expect(st.uid).toBe(fs.statSync(dir).uid);
      // Nothing is set-id or a device because of the mount.
      expect(st.mode & 0o6000).toBe(0);
    } finally {
      await sb.close();
    }
  });

  test('a single file can be mounted', async () => {
    const file = path.join(temp('kern-file-'), 'config.json');
    fs.writeFileSync(file, '{"k": 1}\n');
    const sb = await new Sandbox(opts({ mounts: { [file]: '/config.json' } })).open();
    try {
      const r = await sb.run(['cat', '/config.json']);
      expect(r.stdout).toBe('{"k": 1}\n');
    } finally {
      await sb.close();
    }
  });

  test('a directory at /tmp replaces the default tmpfs', async () => {
    const dir = temp('kern-tmp-');
    fs.writeFileSync(path.join(dir, 'seen'), 'yes\n');
    const sb = await new Sandbox(opts({ mounts: { [dir]: ['/tmp', 'rw'] } })).open();
    try {
      const r = await sb.run(['sh', '-c', 'cat /tmp/seen; echo x > /tmp/w; grep " /tmp " /proc/mounts']);
      expect(r.stdout).toMatch(/^yes\n/);
      expect(r.stdout).not.toMatch(/ \/tmp tmpfs /);
      expect(fs.existsSync(path.join(dir, 'w'))).toBe(true);
    } finally {
      await sb.close();
    }
  });

  test('a source swapped for a symlink after open() is never mounted', async () => {
    const parent = temp('kern-swap-');
    const dir = path.join(parent, 'src');
    fs.mkdirSync(dir);
    const secret = temp('kern-secret-');
    const canary = makeCanaryFile(secret);
    const sb = await new Sandbox(opts({ mounts: { [dir]: '/data' } })).open();
    try {
      fs.renameSync(dir, path.join(parent, 'old'));
      fs.symlinkSync(secret, dir);
      const r = await sb.run(['sh', '-c', 'ls /data']);
      expect(r.stdout).not.toContain(canary.name);
      expect(r.fault && r.fault.type).toBe('startup_failed');
      expect(r.fault.message).toMatch(/changed after it was checked|symlink|ELOOP|Too many/i);
      expect(canary.intact()).toBe(true);
    } finally {
      await sb.close();
    }
  });
});

test('a file the box makes set-id in a rw mount is not set-id on the host after the call', async () => {
  const dir = temp('kern-rw-');
  const sb = await new Sandbox(opts({ mounts: { [dir]: ['/data', 'rw'] } })).open();
  try {
    await sb.run(['sh', '-c', 'echo x > /data/f; chmod 4755 /data/f']);
    const st = fs.statSync(path.join(dir, 'f'));
    expect(st.mode & 0o4000).toBe(0);
  } finally {
    await sb.close();
  }
});
