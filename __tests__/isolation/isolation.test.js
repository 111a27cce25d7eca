'use strict';
// rootless: yes
// What the box can see and touch. Every attack test asserts the attack failed AND the host canary
// (file, process, setting) is untouched.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const {
  ROOTFS,
  isRoot,
  requireRootfs,
  opts,
  uniqueName,
  hostProcessesMatching,
  isAlive,
  startHostCanaryProcess,
  makeCanaryFile,
  makeTempDir,
  summary,
  expectOk,
  waitFor,
} = require('../helpers');

const { Sandbox } = require('../..');

let sb; // test rootfs
let hostSb; // image "host"

beforeAll(async () => {
  requireRootfs();
  sb = await new Sandbox(opts()).open();
  hostSb = await new Sandbox({ image: 'host' }).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  if (hostSb) await hostSb.close();
});

describe('host filesystem', () => {
  // systemd makes `/` shared. As root, kern attaches clones of the workspace in the box; a clone
  // left in the host's peer group would carry the box's mounts (`.deps` read-only) back into the
  // caller's namespace, and the next call's workspace mount then fails. The caller runs here in
  // a mount namespace whose `/` is shared, as under systemd. (Unprivileged, `unshare -m` is not
  // allowed, and kern's clones belong to the box's own user namespace.) Registered only as root,
  // not skipped: the cgroup-v2 guest's rootless run counts a skipped test as failed.
  if (isRoot) test("with the caller's / shared (systemd), no box mount reaches the caller and every call works", () => {
    const ws = makeTempDir('kern-shared-root-ws-');
    const script = `
      const { Sandbox } = require(${JSON.stringify(path.join(__dirname, '..', '..'))});
      const { opts } = require(${JSON.stringify(path.join(__dirname, '..', 'helpers'))});
      (async () => {
        const s = await new Sandbox(opts({ workspace: ${JSON.stringify(ws)} })).open();
        const exits = [];
        for (let i = 0; i < 2; i++) exits.push((await s.run(['true'])).exitCode);
        const mountinfo = require('fs').readFileSync('/proc/self/mountinfo', 'utf8');
        const leaked = mountinfo.split('\\n').filter((l) => l.includes(${JSON.stringify(ws)})).length;
        await s.close();
        process.stdout.write(JSON.stringify({ exits, leaked }));
      })();`;
    try {
      const r = spawnSync('unshare', ['-m', '--propagation', 'shared', process.execPath, '-e', script], {
        encoding: 'utf8',
        timeout: 60000,
      });
      expect(r.stderr).toBe('');
      expect(JSON.parse(r.stdout)).toEqual({ exits: [0, 0], leaked: 0 });
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });

  test('a canary file in the host temp dir is invisible in the box /tmp and untouched by box writes', async () => {
    const canary = makeCanaryFile(os.tmpdir());
    try {
      for (const s of [sb, hostSb]) {
        const r = await s.run([
          'sh',
          '-c',
          `ls -a /tmp; cat /tmp/${canary.name} 2>/dev/null && echo SEEN; echo overwritten > /tmp/${canary.name}; echo done`,
        ]);
        expectOk(r);
        expect(r.stdout).not.toContain(canary.name);
        expect(r.stdout).not.toContain('SEEN');
        expect(r.stdout).toMatch(/done\n$/);
        expect(canary.intact()).toBe(true);
      }
    } finally {
      canary.remove();
    }
  });

  test('image "host": /root and /home are absent or empty, shadow files absent', async () => {
    if (isRoot) expect(fs.readdirSync('/root').length).toBeGreaterThan(0); // the host's are not empty
    const r = await hostSb.run([
      'sh',
      '-c',
      'ls -A /root /home 2>/dev/null; for f in /etc/shadow /etc/gshadow /etc/shadow- /etc/gshadow-; do [ -e $f ] && echo "$f present"; done; echo end',
    ]);
    expect(r.fault).toBeNull();
    const lines = r.stdout.split('\n').filter((l) => l && !/^\/(root|home):$/.test(l));
    expect(lines).toEqual(['end']);
  });

  test('image "host": /var and the repo checkout are not exposed', async () => {
    const here = __filename; // exists on the host; must not in the box
    expect(fs.existsSync(here)).toBe(true);
    const r = await hostSb.run([
      'sh',
      '-c',
      `[ -e "${here}" ] && echo REPO; ` +
        'ls -A /var 2>/dev/null | grep -qx log && echo VARLOG; echo end',
    ]);
    expect(r.fault).toBeNull();
    expect(r.stdout).toBe('end\n');
  });

  test('image "host": a usable toolchain (python3 runs)', async () => {
    const r = await hostSb.runCode('import sys; print(sys.version_info[0])');
    expectOk(r);
    expect(r.stdout).toBe('3\n');
  });

  test('the root filesystem is read-only; the host image stays untouched', async () => {
    const name = uniqueName('rofile');
    for (const [s, root] of [
      [sb, ROOTFS],
      [hostSb, '/'],
    ]) {
      const r = await s.run([
        'sh',
        '-c',
        `for d in /usr /etc /bin /; do echo x > $d/${name} 2>/dev/null && echo "wrote $d"; done; ` +
          `echo ok > /tmp/${name} && echo tmp-ok; echo ok > /workspace/${name} && echo ws-ok`,
      ]);
      expectOk(r);
      expect(r.stdout).toBe('tmp-ok\nws-ok\n');
      for (const d of ['usr', 'etc', 'bin', '']) expect(fs.existsSync(`${root}/${d}/${name}`)).toBe(false);
    }
  });
});


describe('host processes and environment', () => {
  test('a host process is invisible in the box /proc and survives the call', async () => {
    const marker = uniqueName('hostproc');
    const canary = startHostCanaryProcess(marker);
    try {
      // The scan itself works (waited for: the canary's shell may not have exec'd yet).
      expect(await waitFor(() => hostProcessesMatching(marker).length > 0)).toBe(true);
      const r = await sb.runCode(
        'import os\nfor p in os.listdir("/proc"):\n    if p.isdigit():\n' +
          '        try: print(p, open(f"/proc/{p}/cmdline","rb").read().replace(b"\\0", b" ").decode())\n' +
          '        except OSError: pass\n' +
          `print("kill:", __import__("subprocess").run(["kill", "-9", "${canary.pid}"]).returncode)\n`
      );
      expectOk(r);
      expect(r.stdout).not.toContain(marker);
      expect(r.stdout).toMatch(/kill: [1-9]/); // the host pid does not exist in the box's namespace
      const boxPids = r.stdout.split('\n').filter((l) => /^\d+ /.test(l)).map((l) => Number(l.split(' ')[0]));
      expect(boxPids.length).toBeLessThan(10);
      expect(isAlive(canary.pid)).toBe(true);
    } finally {
      canary.kill();
    }
  });

  test('the host environment does not leak into the box', async () => {
    const value = uniqueName('hostenv');
    // Jest gives each test file its own copy of process.env; the real one is what the addon
    // (and kern, which it spawns) inherits.
    const realEnv = require('vm').runInThisContext('process').env;
    realEnv.KERN_CANARY_X = value;
    // The control: a child of this process does see it.
    expect(require('child_process').execFileSync('sh', ['-c', 'echo "$KERN_CANARY_X"']).toString().trim()).toBe(value);
    try {
      const s = await new Sandbox(opts()).open();
      try {
        const r = await s.run(['sh', '-c', 'env; cat /proc/1/environ 2>/dev/null; echo end']);
        expect(r.fault).toBeNull();
        expect(r.stdout).not.toContain(value);
        expect(r.stdout).not.toContain('KERN_CANARY_X');
      } finally {
        await s.close();
      }
    } finally {
      delete realEnv.KERN_CANARY_X;
    }
  });

  test('an env secret reaches the workload but appears in no cmdline (box or host)', async () => {
    const secret = uniqueName('secret');
    const s = await new Sandbox(opts({ env: { KERN_SECRET: secret } })).open();
    let hostSeen = null;
    try {
      const r = await s.run(
        ['sh', '-c', 'test -n "$KERN_SECRET" && echo has-secret; cat /proc/*/cmdline | tr "\\0" " "; echo; echo ready; sleep 1; echo end'],
        {
          onStdout: (c) => {
            if (hostSeen === null && c.toString().includes('ready')) hostSeen = hostProcessesMatching(secret);
          },
        }
      );
      expectOk(r);
      expect(r.stdout).toMatch(/^has-secret\n/);
      expect(r.stdout).not.toContain(secret);
      expect(hostSeen).toEqual([]);
    } finally {
      await s.close();
    }
  });
});

describe('privileges', () => {
  test('all capability sets are empty and no_new_privs is set', async () => {
    const r = await sb.runCode('print(open("/proc/self/status").read())');
    expectOk(r);
    for (const cap of ['CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'CapInh']) {
      expect(r.stdout).toMatch(new RegExp(`^${cap}:\\s+0{16}$`, 'm'));
    }
    expect(r.stdout).toMatch(/^NoNewPrivs:\s+1$/m);
  });

  test('privileged operations fail: mount, sethostname, chroot', async () => {
    const r = await sb.runCode(
      [
        'import ctypes, os, socket',
        'libc = ctypes.CDLL(None, use_errno=True)',
        'print("mount", libc.mount(b"none", b"/mnt", b"tmpfs", 0, None))',
        'print("sethostname", libc.sethostname(b"pwned", 5))',
        'try:\n    os.chroot("/tmp"); print("chroot ok")\nexcept OSError: print("chroot denied")',
        'print(socket.gethostname())',
      ].join('\n')
    );
    expectOk(r);
    expect(r.stdout).toBe('mount -1\nsethostname -1\nchroot denied\nkern\n');
    expect(os.hostname()).not.toBe('pwned');
  });

  test('box root is never host root: the workload runs as an unprivileged host uid', async () => {
    const marker = uniqueName('idmap');
    let hostUid = null;
    // The box waits for the go file the callback writes once it has looked (however late the
    // callback runs).
    const ws = makeTempDir('kern-idmap-ws-');
    const own = await new Sandbox(opts({ workspace: ws })).open();
    let r;
    try {
      r = await own.run(['sh', '-c', `id -u; echo ready; while [ ! -e go ]; do sleep 0.1; done; : ${marker}`], {
        timeoutS: 60,
        onStdout: (c) => {
          if (hostUid !== null || !c.toString().includes('ready')) return;
          const [p] = hostProcessesMatching(marker);
          if (p) hostUid = fs.statSync(`/proc/${p.pid}`).uid;
          fs.writeFileSync(path.join(ws, 'go'), '');
        },
      });
    } finally {
      await own.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
    expectOk(r);
    // Root in the box; on the host, what the host's /proc says the process is.
    expect(r.stdout.split('\n')[0]).toBe('0');
    if (isRoot) {
      // Root maps the box to a range of unprivileged host ids, never to host uid 0.
      expect(hostUid).toBeGreaterThanOrEqual(65536);
    } else {
      expect(hostUid).toBe(process.getuid());
    }
  });

  test('what box root writes in the workspace belongs to the workspace owner on the host', async () => {
    const ws = makeTempDir('kern-owner-ws-');
    const own = await new Sandbox(opts({ workspace: ws })).open();
    try {
      const r = await own.run(['sh', '-c', 'id -u; echo x > made.txt; mkdir made.d; echo y > made.d/inner']);
      expectOk(r);
      expect(r.stdout.trim()).toBe('0');
      const owner = fs.statSync(ws).uid;
      expect(owner).toBe(process.getuid());
      for (const f of ['made.txt', 'made.d', 'made.d/inner']) {
        expect(fs.statSync(path.join(ws, f)).uid).toBe(owner);
      }
    } finally {
      await own.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });

  test('nested user namespaces are refused (no capabilities come back inside one)', async () => {
    const r = await sb.runCode(
      [
        'import ctypes, os',
        'libc = ctypes.CDLL(None, use_errno=True)',
        'CLONE_NEWUSER = 0x10000000',
        'print("unshare", libc.unshare(CLONE_NEWUSER), os.strerror(ctypes.get_errno()))',
        'print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])',
        'print(open("/proc/sys/user/max_user_namespaces").read().strip())',
      ].join('\n')
    );
    expectOk(r);
    const [unshare, capEff] = r.stdout.trim().split('\n');
    // Refused by the limit: the box's one nested namespace (the one that locks its mounts)
    // is all its user namespace may hold.
    expect(unshare).toMatch(/^unshare -1 (No space left on device|Operation not permitted)$/);
    expect(capEff).toBe('0000000000000000');
    // The host's own limit is untouched.
    expect(Number(fs.readFileSync('/proc/sys/user/max_user_namespaces', 'utf8'))).toBeGreaterThan(0);
  });

  test('a file the box tries to make setuid/setgid in the workspace is never set-id on the host', async () => {
    for (const trackFiles of [true, false]) {
      const ws = makeTempDir('kern-suid-ws-');
      const own = await new Sandbox(opts({ workspace: ws, trackFiles, depsReadonly: false })).open();
      try {
        const places = ['planted', 'sub/dir/planted', '.deps/planted', "$(printf 'bad\\377name')/planted"];
        const script = places
          .map((p) => `mkdir -p "$(dirname ${p})" && cp /bin/sh ${p} && { chmod 6755 ${p} 2>/dev/null || echo refused; }`)
          .join(' && ');
        const r = await own.run(['bash', '-c', script]);
        expectOk(r);
        expect(r.stdout.trim().split('\n')).toEqual(places.map(() => 'refused')); // refused at the source (seccomp)...
        const found = [];
        const visit = (dir) => {
          for (const e of fs.readdirSync(dir, { withFileTypes: true, encoding: 'buffer' })) {
            const p = Buffer.concat([Buffer.from(dir), Buffer.from('/'), e.name]);
            if (e.isDirectory()) visit(p);
            else found.push((fs.statSync(p).mode & 0o7777).toString(8));
          }
        };
        visit(Buffer.from(ws));
        expect(found).toEqual(places.map(() => '755')); // ...and never on the host
      } finally {
        await own.close();
        fs.rmSync(ws, { recursive: true, force: true });
      }
    }
  });

  test('PID 1 is the reaper, not the workload, and its /proc/1/exe cannot be read', async () => {
    const r = await sb.run([
      'sh',
      '-c',
      'echo "me $$"; readlink /proc/1/exe && echo EXE-READABLE; cat /proc/1/exe >/dev/null 2>&1 && echo EXE-OPENED; ' +
        'cat /proc/1/environ >/dev/null 2>&1 && echo ENV-OPENED; ' +
        // listing /proc/1/fd only shows numbers; following one of its links is the runc-style escape
        'for f in /proc/1/fd/* /proc/1/cwd /proc/1/root; do readlink "$f" >/dev/null 2>&1 && echo "LINK-READ $f"; done; ' +
        'ls /proc/1/root/ >/dev/null 2>&1 && echo ROOT-LISTED; cat /proc/1/cmdline >/dev/null && echo cmdline-ok; echo end',
    ]);
    expect(r.fault).toBeNull();
    const me = Number((r.stdout.match(/^me (\d+)$/m) || [])[1]);
    expect(me).toBeGreaterThan(1);
    expect(r.stdout).not.toMatch(/EXE-READABLE|EXE-OPENED|ENV-OPENED|LINK-READ|ROOT-LISTED/);
    expect(r.stdout).toMatch(/cmdline-ok\nend\n$/);
  });

  test('the box hostname is "kern" and changing the domainname via /proc/sys fails', async () => {
    const hostDomain = fs.readFileSync('/proc/sys/kernel/domainname', 'utf8');
    const r = await sb.run([
      'sh',
      '-c',
      'cat /proc/sys/kernel/hostname; echo pwned > /proc/sys/kernel/domainname 2>/dev/null && echo WROTE; echo end',
    ]);
    expect(r.fault).toBeNull();
    expect(r.stdout).toBe('kern\nend\n');
    expect(fs.readFileSync('/proc/sys/kernel/domainname', 'utf8')).toBe(hostDomain);
  });
});

describe('network', () => {
  test('only lo in /proc/net/dev', async () => {
    const r = await sb.run(['cat', '/proc/net/dev']);
    expectOk(r);
    const ifaces = r.stdout
      .split('\n')
      .slice(2)
      .filter(Boolean)
      .map((l) => l.split(':')[0].trim());
    expect(ifaces).toEqual(['lo']);
  });

  test('TCP to 1.1.1.1:80 fails and name resolution fails', async () => {
    const r = await sb.runCode(
      [
        'import socket',
        's = socket.socket(); s.settimeout(5)',
        'try:\n    s.connect(("1.1.1.1", 80)); print("CONNECTED")\nexcept OSError as e: print("connect failed")',
        'try:\n    socket.getaddrinfo("deb.debian.org", 80); print("RESOLVED")\nexcept OSError as e: print("resolve failed")',
      ].join('\n'),
      { timeoutS: 60 }
    );
    expectOk(r);
    expect(r.stdout).toBe('connect failed\nresolve failed\n');
  });
});

describe('/proc and /dev', () => {
  test('Docker-masked /proc paths read empty or are denied', async () => {
    // /proc/timer_list is readable with content on this host; in the box it must be masked.
    const paths = ['kcore', 'keys', 'timer_list', 'sched_debug', 'latency_stats', 'timer_stats'];
    const r = await sb.runCode(
      [
        'import os',
        `for p in ${JSON.stringify(paths)}:`,
        '    f = "/proc/" + p',
        '    try:',
        '        with open(f, "rb") as fh: n = len(fh.read(65536))',
        '        print(p, "read", n)',
        '    except OSError as e: print(p, "denied")',
        'for d in ["acpi", "scsi", "asound"]:',
        '    try: print(d, "entries", len(os.listdir("/proc/" + d)))',
        '    except OSError: print(d, "denied")',
      ].join('\n')
    );
    expectOk(r);
    if (isRoot) expect(fs.readFileSync('/proc/timer_list').length).toBeGreaterThan(0); // so masking is what empties it
    for (const line of r.stdout.trim().split('\n')) {
      expect(line).toMatch(/ (read 0|denied|entries 0)$/);
    }
  });

  test('/proc/sys is mounted read-only', async () => {
    const hostDomain = fs.readFileSync('/proc/sys/kernel/domainname', 'utf8');
    // The topmost mount covering /proc/sys (a /proc/sys bind, else /proc itself) must carry "ro".
    const r = await sb.runCode(
      [
        'best = None',
        'for line in open("/proc/self/mountinfo"):',
        '    f = line.split()',
        '    if f[4] == "/proc/sys" or (f[4] == "/proc" and (best is None or best[4] != "/proc/sys")): best = f',
        'print(best[4], "ro" in best[5].split(","))',
        'try:\n    open("/proc/sys/kernel/domainname", "w").write("pwned"); print("WROTE")\nexcept OSError as e: print("denied")',
      ].join('\n')
    );
    expectOk(r);
    expect(r.stdout).toMatch(/^\/proc(\/sys)? True\ndenied\n$/);
    expect(fs.readFileSync('/proc/sys/kernel/domainname', 'utf8')).toBe(hostDomain);
  });

  test('/dev holds only the safe devices', async () => {
    const r = await sb.run(['sh', '-c', 'ls -A /dev; head -c 4 /dev/zero | od -An -tx1; echo x > /dev/null && echo null-ok']);
    expectOk(r);
    const lines = r.stdout.trim().split('\n');
    const entries = lines.slice(0, -2);
    for (const want of ['null', 'zero', 'full', 'random', 'urandom', 'tty', 'pts', 'shm']) expect(entries).toContain(want);
    const allowed = ['null', 'zero', 'full', 'random', 'urandom', 'tty', 'pts', 'shm', 'fd', 'stdin', 'stdout', 'stderr', 'ptmx', 'core', 'mqueue'];
    expect(entries.filter((e) => !allowed.includes(e))).toEqual([]);
    expect(lines.slice(-2)).toEqual([' 00 00 00 00', 'null-ok']);
  });

  test('host block and memory devices cannot be created or opened', async () => {
    const r = await sb.runCode(
      [
        'import os',
        'for name, dev in [("mem", os.makedev(1, 1)), ("sda", os.makedev(8, 0)), ("vda", os.makedev(253, 0))]:',
        '    try: os.mknod("/tmp/" + name, 0o600 | 0o060000, dev); print(name, "MKNOD-OK")',
        '    except OSError: print(name, "mknod denied")',
        'for p in ["/dev/mem", "/dev/kmsg", "/dev/sda", "/dev/vda", "/dev/loop0"]:',
        '    try: open(p, "rb").close(); print(p, "OPENED")',
        '    except OSError: pass',
        'print("end")',
      ].join('\n')
    );
    expectOk(r);
    expect(r.stdout).toBe('mem mknod denied\nsda mknod denied\nvda mknod denied\nend\n');
  });

  test('only fds 0, 1, 2 are open in the workload (plus the one ls opens for the listing)', async () => {
    const r = await sb.run(['ls', '/proc/self/fd']);
    expectOk(r);
    const fds = r.stdout.split(/\s+/).filter(Boolean).map(Number);
    expect(fds.slice(0, 3)).toEqual([0, 1, 2]);
    expect(fds.length).toBeLessThanOrEqual(4);
    expect(fds.every((fd) => fd <= 3)).toBe(true);
  });

  test('python sees no inherited fds above 2: only the driver\'s own channel, closed on exec', async () => {
    const r = await sb.runCode(
      'import os\nfor fd in range(3, 1024):\n    try: os.fstat(fd); print("open", os.readlink(f"/proc/self/fd/{fd}").split(":")[0], os.get_inheritable(fd))\n    except OSError: pass\nprint("end")'
    );
    expectOk(r);
    // The python driver keeps one socket to the host for results; nothing the cell starts gets it.
    expect(summary(r).stdout).toBe('open socket False\nend\n');
    const child = await sb.runCode('import subprocess\nsubprocess.run(["ls", "/proc/self/fd"])');
    expect(child.stdout.split(/\s+/).filter(Boolean).map(Number).every((fd) => fd <= 3)).toBe(true);
  });
});
