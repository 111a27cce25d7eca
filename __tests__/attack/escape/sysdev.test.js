'use strict';
// rootless: yes
// Attack suite, /sys, /dev, /proc and the kernel keyring: what the box can see of the host's
// kernel interfaces, and whether it can write any of them (core_pattern, sysrq, uevent_helper,
// cgroupfs release_agent), read kernel memory or logs, or read the host's keys.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { KEEP_ALL_CAPS, ROOTFS, requireRootfs, opts, isRoot, tempDirs } = require('../../helpers');
const { hostGuard, runJson, PY_PRELUDE, REPO } = require('../host');
const { Sandbox } = require('../../..');

const { temp, removeAll } = tempDirs();

let guard;
let sb;
let caps; // capDrop: []

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  sb = await new Sandbox(opts()).open();
  caps = await new Sandbox(opts({ capDrop: KEEP_ALL_CAPS })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  if (caps) await caps.close();
  if (guard) guard.cleanup();
  removeAll();
});

test('/sys is absent or empty (no sysfs), cannot be written, and sysfs cannot be mounted', async () => {
  const { j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'walk = []',
        'for root, dirs, files in os.walk("/sys"): walk += [os.path.join(root, f) for f in files]',
        'out = {"files": walk[:20], "net": os.path.exists("/sys/class/net"), "fw": os.path.exists("/sys/firmware"),',
        '  "uevent": try_(lambda: open("/sys/kernel/uevent_helper", "w").write("/tmp/x")),',
        '  "mkdir": try_(lambda: os.mkdir("/sys/kern-attack")),',
        '  "sysfs": "ok" if libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None) == 0 else ename(ctypes.get_errno())}',
        'print(json.dumps(out))',
      ].join('\n')
  );
  expect(j).toEqual({ files: [], net: false, fw: false, uevent: expect.stringMatching(/^(ENOENT|EROFS)$/), mkdir: expect.stringMatching(/^(ENOENT|EROFS|EACCES|EPERM)$/), sysfs: expect.stringMatching(/^(ENOENT|EPERM)$/) });
  guard.assertUntouched();
});

test('/dev: no block devices, and every char device is one of null/zero/full/random/urandom/tty/ptmx/pts (by number, not name)', async () => {
  const { j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'import stat',
        'out = []',
        'for root, dirs, files in os.walk("/dev"):',
        '    for n in files + dirs:',
        '        p = os.path.join(root, n)',
        '        st = os.lstat(p)',
        '        if stat.S_ISBLK(st.st_mode): out.append([p, "blk", os.major(st.st_rdev), os.minor(st.st_rdev)])',
        '        elif stat.S_ISCHR(st.st_mode): out.append([p, "chr", os.major(st.st_rdev), os.minor(st.st_rdev)])',
        'print(json.dumps({"nodes": out, "absent": [p for p in ["/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/console", "/dev/fuse", "/dev/kvm", "/dev/net/tun", "/dev/vsock", "/dev/loop0", "/dev/vda", "/dev/sda"] if not os.path.exists(p)]}))',
      ].join('\n')
  );
  const allowed = { '/dev/null': [1, 3], '/dev/zero': [1, 5], '/dev/full': [1, 7], '/dev/random': [1, 8], '/dev/urandom': [1, 9], '/dev/tty': [5, 0], '/dev/pts/ptmx': [5, 2] };
  expect(j.nodes.filter((n) => n[1] === 'blk')).toEqual([]);
  for (const [p, , maj, min] of j.nodes) {
    if (p.startsWith('/dev/pts/') && p !== '/dev/pts/ptmx') expect(maj).toBeGreaterThanOrEqual(136);
    else expect({ [p]: [maj, min] }).toEqual({ [p]: allowed[p] });
  }
  expect(j.absent.length).toBe(12);
  guard.assertUntouched();
});

test('masked /proc files are bound to the real null device (1:3), not a symlink an image could swap', async () => {
  const { j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'import stat',
        'out = {}',
        'for n in ["kcore", "keys", "timer_list", "sched_debug", "latency_stats", "timer_stats", "interrupts"]:',
        '    p = "/proc/" + n',
        '    if not os.path.lexists(p): continue',
        '    st = os.lstat(p)',
        '    out[n] = [stat.S_ISLNK(st.st_mode), stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), try_(lambda: open(p, "w").write("x"))]',
        'print(json.dumps(out))',
      ].join('\n')
  );
  expect(Object.keys(j).length).toBeGreaterThanOrEqual(3);
  for (const [n, v] of Object.entries(j)) {
    expect({ [n]: v.slice(0, 4) }).toEqual({ [n]: [false, true, 1, 3] });
  }
  guard.assertUntouched();
});

test('host-code-execution sysctls and triggers cannot be written: core_pattern, modprobe, sysrq, drop_caches, sysrq-trigger', async () => {
  const present = ['kernel/core_pattern', 'kernel/modprobe', 'kernel/sysrq'].filter((f) => fs.existsSync(`/proc/sys/${f}`));
  const hostBefore = present.map((f) => fs.readFileSync(`/proc/sys/${f}`, 'utf8'));
  const { j } = await runJson(
    caps, // even with every capability in the box
    PY_PRELUDE +
      [
        'out = {}',
        'for f, v in [("/proc/sys/kernel/core_pattern", "|/tmp/pwn"), ("/proc/sys/kernel/modprobe", "/tmp/pwn"), ("/proc/sys/kernel/sysrq", "1"), ("/proc/sys/vm/drop_caches", "3"), ("/proc/sysrq-trigger", "h")]:',
        '    if os.path.exists(f): out[f] = try_(lambda: open(f, "w").write(v))',
        'print(json.dumps(out))',
      ].join('\n')
  );
  for (const [f, v] of Object.entries(j)) expect({ [f]: v }).toEqual({ [f]: expect.stringMatching(/^(EROFS|EACCES|EPERM)$/) });
  expect(present.map((f) => fs.readFileSync(`/proc/sys/${f}`, 'utf8'))).toEqual(hostBefore);
  guard.assertUntouched();
});

test('cgroupfs v1 (release_agent route): with every capability in the box, no controller yields a writable release_agent or limit', async () => {
  const { j } = await runJson(
    caps,
    PY_PRELUDE +
      [
        'os.makedirs("/tmp/cg", exist_ok=True)',
        'out = {}',
        'for opt in ["memory", "pids", "cpu", "devices", "none,name=kernatk"]:',
        '    m = "ok" if libc.mount(b"cgroup", b"/tmp/cg", b"cgroup", 0, opt.encode()) == 0 else ename(ctypes.get_errno())',
        '    if m != "ok": out[opt] = m; continue',
        '    # Mounted (the existing hierarchy, seen from the box cgroup namespace): try the escapes.',
        '    out[opt] = {f: try_(lambda: open("/tmp/cg/" + f, "w").write(v)) for f, v in [("release_agent", "/tmp/x"), ("notify_on_release", "1"), ("memory.limit_in_bytes", "-1"), ("pids.max", "max"), ("cgroup.procs", str(os.getpid()))] if os.path.exists("/tmp/cg/" + f)}',
        '    libc.umount2(b"/tmp/cg", 2)',
        'print(json.dumps(out))',
      ].join('\n')
  );
  for (const [k, v] of Object.entries(j)) {
    if (typeof v === 'string') expect({ [k]: v }).toEqual({ [k]: 'EPERM' });
    else for (const [f, w] of Object.entries(v)) if (f !== 'cgroup.procs') expect({ [`${k}/${f}`]: w }).toEqual({ [`${k}/${f}`]: expect.stringMatching(/^(EACCES|EPERM|EROFS)$/) });
  }
  guard.assertUntouched();
});

test('kernel memory and logs: /proc/kallsyms shows no addresses, dmesg is refused', async () => {
  const { j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'addrs = set()',
        'for i, l in enumerate(open("/proc/kallsyms")):',
        '    addrs.add(l.split()[0])',
        '    if i > 2000: break',
        'print(json.dumps({"addrs": sorted(addrs)[:3], "kcore": try_(lambda: len(open("/proc/kcore", "rb").read(64)))}))',
      ].join('\n')
  );
  expect(j.addrs).toEqual(['0000000000000000']);
  expect(j.kcore).toMatch(/^(ok:0|ENOENT)$/); // masked, or absent from this kernel
  if (isRoot) {
    // Control: the host's root does see real addresses, so the zeros are the box's lack of CAP_SYSLOG.
    const host = fs.readFileSync('/proc/kallsyms', 'utf8').split('\n', 200).map((l) => l.split(' ')[0]);
    expect(host.some((a) => a && !/^0+$/.test(a))).toBe(true);
  }
  guard.assertUntouched();
});

test('/proc/self/mountinfo and /proc/self/cgroup name no host secret paths', async () => {
  const r = await sb.run(['sh', '-c', 'cat /proc/self/mountinfo; echo ---; cat /proc/self/cgroup']);
  expect(r.exitCode).toBe(0);
  const [mi] = r.stdout.split('---');
  expect(mi).not.toMatch(/\/\.ssh|\/\.aws|\/\.gnupg|\/\.kube|\/\.docker|docker\.sock|\/run\/user|shadow/);
  // Every mount point is one of the box's own.
  const points = mi.trim().split('\n').map((l) => l.split(' ')[4]);
  for (const p of points) expect(p).toMatch(/^\/(|\.kern-[\w-]+|bin|boot|dev(\/.*)?|etc(\/.*)?|home|lib.*|media|mnt|opt|proc(\/.*)?|root|run|sbin|srv|sys|tmp|usr|var|workspace(\/.*)?)$/);
  guard.assertUntouched();
});

describe('kernel keyrings', () => {
  // A host python process joins a NEW session keyring, puts a secret in it (and one in its user
  // keyring), then execs node, which runs a box that hunts for them. The box inherits kern's
  // session keyring unless kern gives it a fresh one.
  const DRIVER = `
const fs = require('fs');
const { Sandbox } = require(process.argv[2]);
(async () => {
  const extra = JSON.parse(process.argv[6] || '{}');
  const sb = await new Sandbox({ image: process.argv[3], ...extra }).open();
  try {
    const r = await sb.runCode(fs.readFileSync(process.argv[5], 'utf8'));
    fs.writeFileSync(process.argv[4], JSON.stringify({ stdout: r.stdout, stderr: r.stderr, fault: r.fault }));
  } finally {
    if (extra.persist) await sb.destroy();
    await sb.close();
  }
})().catch((e) => { fs.writeFileSync(process.argv[4], JSON.stringify({ error: String(e.stack || e) })); process.exit(1); });
`;
  const HARNESS = `
import ctypes, os, sys, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
node, driver, repo, image, out, pyfile, desc, secret, extra = sys.argv[1:10]
sess = libc.syscall(250, 1, b"kern-attack-session")  # KEYCTL_JOIN_SESSION_KEYRING
k1 = libc.syscall(248, b"user", (desc + "-session").encode(), secret.encode(), len(secret), ctypes.c_long(-3))
k2 = libc.syscall(248, b"user", (desc + "-user").encode(), secret.encode(), len(secret), ctypes.c_long(-4))
with open(out + ".host", "w") as f: f.write(json.dumps({"session": sess, "k1": k1, "k2": k2, "errno": ctypes.get_errno()}))
pid = os.fork()
if pid == 0:
    os.execv(node, [node, driver, repo, image, out, pyfile, extra])
os.waitpid(pid, 0)
for k in (k1, k2):
    if k > 0: libc.syscall(250, 21, ctypes.c_long(k))  # KEYCTL_INVALIDATE
`;
  const BOX = (desc) =>
    PY_PRELUDE +
    [
      'libc.syscall.restype = ctypes.c_long',
      'out = {}',
      'for name, ring in [("session", -3), ("user", -4), ("user-session", -5)]:',
      `    for which in ["${desc}-session", "${desc}-user"]:`,
      '        k = libc.syscall(250, 10, ctypes.c_long(ring), b"user", which.encode(), 0)  # KEYCTL_SEARCH',
      '        if k < 0: out[f"{name}/{which[-4:]}"] = ename(ctypes.get_errno()); continue',
      '        buf = ctypes.create_string_buffer(256)',
      '        n = libc.syscall(250, 11, ctypes.c_long(k), buf, 256)  # KEYCTL_READ',
      '        out[f"{name}/{which[-4:]}"] = "READ:" + buf.raw[:max(n, 0)].decode(errors="replace") if n >= 0 else "found-unreadable:" + ename(ctypes.get_errno())',
      'print(json.dumps(out))',
    ].join('\n');

  let res;
  let resident;
  let secret;
  // One run of the harness: the box's findings, with `extra` Sandbox options.
  const hunt = (dir, desc, extra) => {
    const files = { driver: path.join(dir, 'driver.js'), py: path.join(dir, 'box.py'), out: path.join(dir, `out-${Object.keys(extra).length}.json`) };
    fs.writeFileSync(files.driver, DRIVER);
    fs.writeFileSync(files.py, BOX(desc));
    let py = 'python3';
    if (spawnSync(py, ['-c', '1']).status !== 0) py = '/usr/bin/python3';
    const h = spawnSync(py, ['-c', HARNESS, process.execPath, files.driver, REPO, ROOTFS, files.out, files.py, desc, secret, JSON.stringify(extra)], { encoding: 'utf8', timeout: 120000 });
    if (h.status !== 0) throw new Error(`keyring harness failed: ${h.stderr}`);
    const box = JSON.parse(fs.readFileSync(files.out, 'utf8'));
    if (box.error) throw new Error(box.error);
    return { host: JSON.parse(fs.readFileSync(`${files.out}.host`, 'utf8')), box, j: JSON.parse(box.stdout.trim().split('\n').pop()) };
  };
  beforeAll(() => {
    const dir = temp('kern-atk-keys-');
    const desc = `kernatk-${guard.token}`;
    secret = `keysecret-${guard.token}`;
    res = hunt(dir, desc, {});
    // A resident box's calls are forked from outside the box: they must not carry the caller's
    // session keyring in either.
    const ws = temp('kern-atk-keys-ws-');
    resident = hunt(dir, desc, { persist: true, name: `keys${guard.token}`.replace(/[^A-Za-z0-9]/g, '').slice(0, 40), workspace: ws });
  }, 150000);

  test('control: the host harness really holds both keys', () => {
    expect(res.host.session).toBeGreaterThan(0);
    expect(res.host.k1).toBeGreaterThan(0);
    expect(res.host.k2).toBeGreaterThan(0);
  });

  test("the host user's keyring secret is not reachable from the box", () => {
    for (const [k, v] of Object.entries(res.j)) if (k.endsWith('user')) expect({ [k]: v }).toEqual({ [k]: expect.not.stringContaining(secret) });
    expect(res.j['user/user']).toMatch(/^(ENOKEY|EACCES|EPERM|EKEYREVOKED)$/);
  });

  // Found by this suite: the box used to inherit the caller's session keyring and, as a
  // possessor, read every key in it. The box's PID 1 now joins a new, empty one.
  test("the caller's session keyring secret is not reachable from the box (kern must not hand its session keyring down)", () => {
    for (const [k, v] of Object.entries(res.j)) expect({ [k]: v }).toEqual({ [k]: expect.not.stringContaining(secret) });
    expect(res.j['session/sion']).toMatch(/^(ENOKEY|EACCES|EPERM|EKEYREVOKED)$/);
  });

  test("a resident box's call does not carry the caller's session keyring in", () => {
    expect(resident.host.k1).toBeGreaterThan(0);
    for (const [k, v] of Object.entries(resident.j)) expect({ [k]: v }).toEqual({ [k]: expect.not.stringContaining(secret) });
    expect(resident.j['session/sion']).toMatch(/^(ENOKEY|EACCES|EPERM|EKEYREVOKED)$/);
  });
});

test('after every attack: no process, cgroup or mount left behind on the host', async () => {
  await sb.close();
  await caps.close();
  sb = null;
  caps = null;
  await guard.assertNoLeaks();
  guard.assertUntouched();
});
