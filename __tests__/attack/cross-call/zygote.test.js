'use strict';
// rootless: yes
// Attack suite, the zygote (issue 21, `zygote: true`): a hostile python cell in a box forked from
// the Sandbox's zygote tries to reach past its own call: the zygote, the call's PID 1 (which holds
// every capability of the call's user namespace), other calls running beside it or after it, the
// host. Each probe runs the same code in a fresh box of the same options, and the zygote's box
// must refuse what the fresh box refuses. Then the host is checked untouched, on the host.

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, capsEnforced, uniqueName, hostProcessesMatching, ourDescendant, waitFor, isAlive, makeTempDir, treeRoots, expectRefusedBeforeAnyBox } = require('../../helpers');
const { hostGuard, runJson, PY_PRELUDE } = require('../host');
const { Sandbox, SandboxError } = require('../../..');

let guard;
let z; // the Sandbox with a zygote
let zws; // its workspace, where the host writes a call's go files
let fresh; // the same options, fresh boxes

/** Python that waits (bounded at 60 s) for the go file `name` the host writes in z's workspace. */
const awaitGo = (name) => `for _ in range(1200):\n    if os.path.exists("/workspace/${name}"): break\n    time.sleep(0.05)`;
const go = (name) => fs.writeFileSync(path.join(zws, name), '');

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  zws = makeTempDir('kern-zyg-ws-');
  z = await new Sandbox(opts({ zygote: true, workspace: zws })).open();
  fresh = await new Sandbox(opts()).open();
});

afterAll(async () => {
  if (z) await z.close();
  if (zws) fs.rmSync(zws, { recursive: true, force: true });
  if (fresh) await fresh.close();
  if (guard) {
    await guard.assertNoLeaks();
    guard.cleanup();
  }
});

/** The host pids of this process's zygotes (their argv holds the zygote's source; the side
 * Jest's, beside this one, are not this process's descendants), forks aside (a fork that ended
 * between the scan and the read of its parent is not a zygote). */
function zygotePids() {
  return treeRoots(hostProcessesMatching('def _kern_zygote(').map((p) => p.pid).filter(ourDescendant)).sort();
}

test('out of the posture: nested user namespaces, unmounting the call\'s /proc or /tmp (the zygote\'s are under them), open_tree, setns, mount, sysctls: refused as in a fresh box', async () => {
  const code =
    PY_PRELUDE +
    [
      'o = {}',
      'o["unshare_user"] = sc(272, 0x10000000)',
      'o["unshare_mnt"] = sc(272, 0x00020000)',
      // Under the call's /proc, /tmp, /dev/shm, /dev/pts lie the zygote box's (its /proc unmasked).
      'for t in ("/proc", "/tmp", "/dev/shm", "/dev/pts", "/proc/sys", "/proc/kcore"):',
      '    o["umount " + t] = sc(166, t.encode(), 2)',
      'o["open_tree /proc"] = sc(428, -100, b"/proc", 1 | 0x8000)',
      'o["mount tmpfs"] = sc(165, b"none", b"/mnt", b"tmpfs", 0, 0)',
      'o["remount / rw"] = sc(165, b"none", b"/", 0, 0x20 | 0x1000, 0)',
      'for n in ("mnt", "user", "pid", "net", "cgroup"):',
      '    o["setns " + n] = try_(lambda n=n: sc(308, os.open("/proc/1/ns/" + n, os.O_RDONLY), 0))',
      'o["sysctl"] = try_(lambda: open("/proc/sys/kernel/hostname", "w").write("x"))',
      'o["max_userns"] = try_(lambda: open("/proc/sys/user/max_user_namespaces", "w").write("9"))',
      'o["sysrq"] = try_(lambda: open("/proc/sysrq-trigger", "w").write("h"))',
      'o["setuid"] = "ok" if sc(105, 1000) == "ok" else "refused"',
      'print(json.dumps(o))',
    ].join('\n');
  const { j } = await runJson(z, code);
  const { j: f } = await runJson(fresh, code);
  expect(j).toEqual(f);
  for (const [k, v] of Object.entries(j)) expect([k, v]).not.toEqual([k, expect.stringMatching(/^ok/)]);
  guard.assertUntouched();
});

test('the zygote\'s own box: its /proc masked as a call\'s; the unmasked one the kernel needs is out of every call\'s reach', async () => {
  // On the host: the zygote's mounts (as it sees them) mask what a call's /proc masks.
  const others = zygotePids();
  const sb = await new Sandbox(opts({ zygote: true })).open();
  try {
    const mine = zygotePids().filter((p) => !others.includes(p));
    expect(mine).toHaveLength(1);
    const mounts = fs.readFileSync(`/proc/${mine[0]}/mountinfo`, 'utf8').split('\n').filter(Boolean).map((l) => l.split(' ')[4]);
    const inCall = JSON.parse((await sb.runCode('import json\nprint(json.dumps([l.split()[4] for l in open("/proc/self/mountinfo") if l.split()[4].startswith("/proc/")]))')).stdout);
    expect(inCall).toEqual(expect.arrayContaining(['/proc/sys', '/proc/keys']));
    expect(mounts).toEqual(expect.arrayContaining(inCall));
  } finally {
    await sb.close();
  }
  // In a call: the unmasked /proc's directory can't be entered, listed or opened up again.
  const { j } = await runJson(
    z,
    PY_PRELUDE +
      [
        'o = {}',
        'o["list"] = try_(lambda: os.listdir("/.kern-proc"))',
        'o["enter"] = try_(lambda: os.listdir("/.kern-proc/p/1"))',
        'o["kcore"] = try_(lambda: open("/.kern-proc/p/kcore", "rb").read(1))',
        'o["chmod"] = try_(lambda: os.chmod("/.kern-proc", 0o755))',
        'o["umount"] = sc(166, b"/.kern-proc/p", 2)',
        'o["open_tree"] = sc(428, -100, b"/.kern-proc/p", 1 | 0x8000)',
        'print(json.dumps(o))',
      ].join('\n'),
  );
  for (const [k, v] of Object.entries(j)) expect([k, v]).not.toEqual([k, expect.stringMatching(/^ok/)]);
  guard.assertUntouched();
});

test('the call\'s PID 1 (it holds the call namespace\'s capabilities): not traced, its memory, fds, root and environ not read, its signals dropped', async () => {
  const code =
    PY_PRELUDE +
    [
      'import signal, time',
      'o = {}',
      'o["ptrace attach"] = sc(101, 16, 1, 0, 0)',
      'o["ptrace seize"] = sc(101, 0x4206, 1, 0, 0)',
      'buf = ctypes.create_string_buffer(64)',
      'iov = struct.pack("PN", ctypes.addressof(buf), 64)',
      'o["process_vm_readv"] = sc(310, 1, iov, 1, iov, 1, 0)',
      'for f in ("mem", "environ", "root/", "cwd/", "fd/0", "fd/3", "maps", "auxv", "stack", "syscall"):',
      '    o[f] = try_(lambda f=f: os.listdir("/proc/1/" + f) if f.endswith("/") else (os.readlink("/proc/1/" + f) if f.startswith("fd/") else open("/proc/1/" + f, "rb").read(1)))',
      'for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGSTOP):',
      '    os.kill(1, s)',
      'time.sleep(0.3)',
      'o["pid1 state"] = [l.split()[1] for l in open("/proc/1/status") if l.startswith("State:")][0]',
      'print(json.dumps(o))',
    ].join('\n');
  const { r, j } = await runJson(z, code);
  const { j: f } = await runJson(fresh, code);
  expect(r.fault).toBeNull();
  // Refused in both, not always with the same errno: the call's PID 1's /proc files belong to
  // the call's uid (PID 1 is a fork of the zygote, whose root is the call's), a fresh box's
  // PID 1's to no uid of the box; EPERM then comes where a fresh box says EACCES.
  const refused = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, v.startsWith('ok') ? v : 'refused']));
  expect(refused(j)).toEqual(refused(f));
  expect(j['pid1 state']).toBe('S');
  for (const k of ['ptrace attach', 'ptrace seize', 'process_vm_readv', 'mem', 'environ', 'root/', 'cwd/', 'fd/0', 'fd/3', 'maps', 'auxv', 'stack', 'syscall']) {
    expect([k, j[k]]).not.toEqual([k, expect.stringMatching(/^ok/)]);
  }
  // The call still ends as its workload does, and the zygote still serves.
  expect((await z.runCode('6 * 7')).results[0].text).toBe('42');
  guard.assertUntouched();
});

test('no mapping shared writable with the zygote; memory a call writes is not in the next call at the same address', async () => {
  const first = await runJson(
    z,
    PY_PRELUDE +
      [
        'shared = [l.split()[5] if len(l.split()) > 5 else "anon" for l in open("/proc/self/maps") if l.split()[1][1] == "w" and l.split()[1][3] == "s"]',
        // A marker at a known address, and the middle of the heap (the fork's copy of the zygote's) overwritten.
        'b = ctypes.create_string_buffer(b"K" * 64)',
        'addr = ctypes.addressof(b)',
        'ctypes.memmove(addr, b"kern-zygote-marker-" + str(os.getpid()).encode(), 20)',
        'heap = [l.split()[0] for l in open("/proc/self/maps") if l.rstrip().endswith("[heap]")]',
        'lo, hi = (int(x, 16) for x in heap[0].split("-"))',
        'ctypes.memset(lo + (hi - lo) // 2, 0x5a, 4096)',
        'print(json.dumps({"shared": shared, "addr": addr, "mid": lo + (hi - lo) // 2}))',
      ].join('\n'),
  );
  expect(first.j.shared).toEqual([]);
  const next = await runJson(
    z,
    PY_PRELUDE +
      [
        `addr, mid = ${first.j.addr}, ${first.j.mid}`,
        'def peek(a, n):',
        '    m = [l.split()[0] for l in open("/proc/self/maps")]',
        '    if not any(int(x.split("-")[0], 16) <= a < int(x.split("-")[1], 16) for x in m): return "unmapped"',
        '    return ctypes.string_at(a, n).hex()',
        'print(json.dumps({"marker": peek(addr, 20), "mid": peek(mid, 4096)}))',
      ].join('\n'),
  );
  expect(next.j.marker).not.toContain(Buffer.from('kern-zygote-marker').toString('hex'));
  expect(next.j.mid).not.toBe('5a'.repeat(4096));
});

test('nothing of one call is in a call running beside it or after it: /tmp, /dev/shm, sysv IPC, POSIX mqueues, abstract sockets, the user keyring', async () => {
  const token = uniqueName('zyg');
  let planting;
  const inPlace = new Promise((res) => (planting = res));
  const plant = z.runCode(
    PY_PRELUDE +
      [
        'import os, time, sysconfig',
        `t = "${token}"`,
        'open("/tmp/" + t, "w").write(t)',
        'open("/dev/shm/" + t, "w").write(t)',
        // sysv: a segment and a queue under a fixed key.
        'libc.shmget.restype = ctypes.c_int',
        'shm = libc.shmget(0x6b65726e, 4096, 0o1666)',
        'mq = libc.msgget(0x6b65726e, 0o1666)',
        // POSIX mqueue (IPC namespace), an abstract socket (network namespace).
        'rt = ctypes.CDLL("librt.so.1", use_errno=True)',
        'pmq = rt.mq_open(("/" + t).encode(), 0o100 | 2, 0o666, None)',
        's = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)',
        's.bind("\\0" + t)',
        's.listen(8)',
        // A key in the user keyring and in the session keyring.
        'libc.syscall.restype = ctypes.c_long',
        'uk = libc.syscall(248, b"user", t.encode(), t.encode(), len(t), ctypes.c_long(-4))',
        'print(json.dumps({"shm": shm, "mq": mq, "pmq": pmq, "uk": uk}), flush=True)',
        awaitGo(`${token}-go`),
      ].join('\n'),
    { onStdout: () => planting() },
  );
  const look = PY_PRELUDE +
    [
      `t = "${token}"`,
      'o = {}',
      'o["tmp"] = os.path.exists("/tmp/" + t)',
      'o["shm"] = os.path.exists("/dev/shm/" + t)',
      'o["sysv shm"] = libc.shmget(0x6b65726e, 0, 0) >= 0',
      'o["sysv msg"] = libc.msgget(0x6b65726e, 0) >= 0',
      'rt = ctypes.CDLL("librt.so.1", use_errno=True)',
      'o["posix mq"] = rt.mq_open(("/" + t).encode(), 2) >= 0',
      'c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)',
      'o["abstract"] = try_(lambda: c.connect("\\0" + t))',
      'o["user key"] = libc.syscall(ctypes.c_long(249), b"user", t.encode(), None, ctypes.c_long(0)) >= 0',
      'print(json.dumps(o))',
    ].join('\n');
  // Beside it: the planting call waits with everything in place (it printed its ids); a planting
  // call that ended before that fails below instead of leaving the test waiting.
  await Promise.race([inPlace, plant]);
  const beside = await runJson(z, look);
  go(`${token}-go`);
  const planted = await plant;
  const p = JSON.parse(planted.stdout.trim().split('\n')[0]);
  // The planting worked in its own call, so its absence elsewhere means something.
  expect(p.shm).toBeGreaterThanOrEqual(0);
  expect(p.mq).toBeGreaterThanOrEqual(0);
  expect(p.pmq).toBeGreaterThanOrEqual(0);
  expect(p.uk).toBeGreaterThan(0);
  const after = await runJson(z, look);
  const none = { tmp: false, shm: false, 'sysv shm': false, 'sysv msg': false, 'posix mq': false, abstract: 'ECONNREFUSED', 'user key': false };
  expect(beside.j).toEqual(none);
  expect(after.j).toEqual(none);
});

test('a call that exits leaving a daemon behind: the daemon dies with the call, on the host', async () => {
  const token = uniqueName('zygd');
  let seen = 0;
  let asked = false;
  const r = await z.runCode(
    [
      'import os, subprocess, time',
      `subprocess.Popen(["sh", "-c", "sleep 300; : ${token}"], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)`,
      'time.sleep(0.2)',
      'print("left", flush=True)',
      awaitGo(`${token}-go`),
    ].join('\n'),
    // While the call runs, the host sees the daemon (so its absence after means something).
    // Looked at once: an unbuffered print is two writes, and a look at the second may come
    // after the go file let the call end.
    {
      onStdout: () => {
        if (asked) return;
        asked = true;
        seen = hostProcessesMatching(token).length;
        go(`${token}-go`);
      },
    },
  );
  expect(r.stdout).toBe('left\n');
  expect(r.fault).toBeNull();
  expect(seen).toBeGreaterThan(0);
  expect(await waitFor(() => hostProcessesMatching(token).length === 0, 10000)).toBe(true);
  guard.assertUntouched();
});

test('SIGINT in a cell is a KeyboardInterrupt the cell may catch, as in a fresh box (the call\'s PID 1 drops SIGINT, its workload must not)', async () => {
  const code = [
    'import os, signal, time',
    'try:',
    '    os.kill(os.getpid(), signal.SIGINT)',
    '    time.sleep(2)',
    '    print("not interrupted")',
    'except KeyboardInterrupt:',
    '    print("caught")',
  ].join('\n');
  const a = await z.runCode(code);
  const b = await fresh.runCode(code);
  expect(b.stdout).toBe('caught\n');
  expect({ stdout: a.stdout, exitCode: a.exitCode, fault: a.fault }).toEqual({ stdout: b.stdout, exitCode: b.exitCode, fault: b.fault });
});

test('output caps and a flood on the channel: as a fresh box\'s, and the zygote still serves', async () => {
  const code = 'import os, sys\nsys.stdout.write("x" * (1 << 20))\nsys.stdout.flush()\nos.write(3, b"\\xff" * 65536)\nprint("end")';
  const zc = await new Sandbox(opts({ zygote: true, maxOutputBytes: 4096 })).open();
  const fc = await new Sandbox(opts({ maxOutputBytes: 4096 })).open();
  try {
    const a = await zc.runCode(code);
    const b = await fc.runCode(code);
    const shape = (r) => ({ len: r.stdout.length, truncated: r.truncated, stdoutTruncated: r.stdoutTruncated, fault: r.fault && r.fault.type, exitCode: r.exitCode });
    expect(shape(a)).toEqual(shape(b));
    expect(a.truncated).toBe(true);
    expect(a.stdout.length).toBeLessThanOrEqual(4096);
    expect((await zc.runCode('1 + 1')).results[0].text).toBe('2');
  } finally {
    await zc.close();
    await fc.close();
  }
});

(capsEnforced ? test : test.skip)('a fork bomb meets its call\'s own pids cap: the zygote and the next call are unharmed', async () => {
  const others = zygotePids();
  const sb = await new Sandbox(opts({ zygote: true, pids: 32 })).open();
  try {
    const mine = zygotePids().filter((p) => !others.includes(p));
    expect(mine).toHaveLength(1);
    const r = await sb.runCode(
      [
        'import os, time',
        'n = 0',
        'try:',
        '    for _ in range(1000):',
        '        if os.fork() == 0:',
        '            time.sleep(30)',
        '            os._exit(0)',
        '        n += 1',
        'except OSError as e:',
        '    print("stopped", n, e.strerror, flush=True)',
        'os._exit(0)',
      ].join('\n'),
      { timeoutS: 20 },
    );
    const m = /^stopped (\d+) /.exec(r.stdout);
    expect(m).not.toBeNull();
    expect(Number(m[1])).toBeLessThan(32);
    expect(isAlive(mine[0])).toBe(true);
    const next = await sb.runCode('import os\nprint(len([os.fork() == 0 and os._exit(0) for _ in range(8)]))');
    expect(next.stdout).toBe('8\n');
  } finally {
    await sb.close();
  }
  guard.assertUntouched();
});

test('a call that takes every process its pids cap allows starves no other call of the Sandbox, and the zygote lives on (rootless: RLIMIT_NPROC)', async () => {
  const others = zygotePids();
  const sb = await new Sandbox(opts({ zygote: true, pids: 32 })).open();
  try {
    const mine = zygotePids().filter((p) => !others.includes(p));
    expect(mine).toHaveLength(1);
    let held;
    const holding = new Promise((res) => {
      held = res;
    });
    const hog = sb.runCode(
      [
        'import os, time',
        'n = 0',
        'try:',
        '    for _ in range(1000):',
        '        if os.fork() == 0:',
        '            time.sleep(8)',
        '            os._exit(0)',
        '        n += 1',
        'except OSError:',
        '    pass',
        'print("holding", n, flush=True)',
        'time.sleep(6)',
      ].join('\n'),
      { onStdout: (b) => String(b).includes('holding') && held() },
    );
    await holding;
    // Beside it, a call of the same Sandbox forks as any call may.
    const other = await sb.runCode('import os\nfor _ in range(8):\n    p = os.fork()\n    if p == 0:\n        os._exit(0)\n    os.waitpid(p, 0)\nprint("forked 8")');
    expect({ stdout: other.stdout, fault: other.fault, exitCode: other.exitCode }).toEqual({ stdout: 'forked 8\n', fault: null, exitCode: 0 });
    const h = await hog;
    expect({ fault: h.fault, exitCode: h.exitCode }).toEqual({ fault: null, exitCode: 0 });
    expect(h.stdout).toMatch(/^holding \d+\n$/);
    expect(isAlive(mine[0])).toBe(true);
    expect((await sb.runCode('1 + 1')).results[0].text).toBe('2');
  } finally {
    await sb.close();
  }
  guard.assertUntouched();
});

test('modules planted in the workspace (the zygote\'s cwd, first on its sys.path) are never imported by the zygote, its forks or the call\'s PID 1', async () => {
  const sb = await new Sandbox(opts({ zygote: true })).open();
  try {
    // Every stdlib module the zygote has not imported, as a file in the workspace that leaves a
    // mark when imported (the zygote's box has the workspace read-write, as every call's).
    const planted = await sb.runCode(
      [
        'import sys',
        'names = [n for n in sys.stdlib_module_names if n not in sys.modules]',
        'for n in names:',
        '    open(n + ".py", "w").write("import os as _o\\nopen(\\"/workspace/kern-imported-%s-\\" + str(_o.getpid()), \\"w\\").close()\\n" % n)',
        'print(len(names))',
      ].join('\n'),
    );
    expect(Number(planted.stdout)).toBeGreaterThan(100);
    const marks = 'import os\nprint(sorted(f.split("-")[2] for f in os.listdir("/workspace") if f.startswith("kern-imported-")))';
    // Calls fork, spares are made (the zygote forks, its forks run their plans, PID 1 reaps).
    for (let i = 0; i < 3; i++) expect((await sb.runCode(marks)).stdout).toBe('[]\n');
    // The plant works: a cell that imports one runs it.
    expect((await sb.runCode(`import ${'telnetlib'}\n` + marks)).stdout).toBe("['telnetlib']\n");
  } finally {
    await sb.close();
  }
  guard.assertUntouched();
});

// Planted BEFORE open(): a reused workspace (`workspace:`, as a named or resident box's is) an
// earlier box filled, and the Sandbox's `env` pointing python at it. Nothing of it may run in the
// zygote's box (the template every later call is forked from): not at its start, not when it
// forks. What a fresh box's python would run in each call (a user site's .pth, the sitecustomize
// first on PYTHONPATH) runs in each call, in the call's own box, as there. Each planted piece
// writes a marker named after itself in the workspace, holding the user namespace's uid map it
// ran under: a call's is `0 0 1` (its own namespace, made by the zygote's fork), anything else
// is the zygote's box (or, for a shell, says "sh").
describe('planted before open()', () => {
  const PAYLOAD = (id) =>
    [
      'import os as _o',
      '_m = "?"',
      'try:',
      '    _m = " ".join(open("/proc/self/uid_map").read().split())',
      'except Exception:',
      '    pass',
      `open("/workspace/kern-ran-${id}-%d-%s" % (_o.getpid(), _o.urandom(4).hex()), "w").write(_m)`,
      '',
    ].join('\n');

  /** The markers in `ws`, each {id, where}; `where` is "call" or what else it ran under. */
  const markers = (ws) =>
    fs
      .readdirSync(ws)
      .filter((f) => f.startsWith('kern-ran-'))
      .map((f) => {
        const parts = f.slice('kern-ran-'.length).split('-');
        const text = fs.readFileSync(path.join(ws, f), 'utf8');
        return { id: parts.slice(0, -2).join('-'), where: text === '0 0 1' ? 'call' : text || '?', file: f };
      });
  const clear = (ws) => markers(ws).forEach((m) => fs.rmSync(path.join(ws, m.file), { force: true }));

  // Which modules the zygote loads (a call's sys.modules holds them: it is a fork) and every
  // name python's stdlib has: asked of python, not listed here.
  let names;
  beforeAll(async () => {
    const r = await z.runCode('import sys, json\nprint(json.dumps(sorted({n.split(".")[0] for n in sys.modules} | set(sys.stdlib_module_names))))');
    names = JSON.parse(r.stdout);
    const loaded = JSON.parse((await z.runCode('import sys, json\nprint(json.dumps([n for n, m in sys.modules.items() if getattr(m, "__file__", None)]))')).stdout);
    // The derivation works: the zygote's own imports are among them (it forks with ctypes).
    expect(loaded).toContain('ctypes');
    expect(names.length).toBeGreaterThan(200);
  });

  /** Python for the planting box: `plant(path, id)` writes the payload as a module file, `pyc`
   * as bytecode (stamped with `source`'s mtime and size, as python checks it). */
  const planter = (body) =>
    [
      'import importlib.util, json, marshal, os, sys',
      `NAMES = json.loads(${JSON.stringify(JSON.stringify(names))})`,
      'def payload(i):',
      `    return ${JSON.stringify(PAYLOAD('@ID@'))}.replace("@ID@", i)`,
      'def plant(path, i):',
      '    os.makedirs(os.path.dirname(path), exist_ok=True)',
      '    open(path, "w").write(payload(i))',
      'def pyc(path, i, source=None):',
      '    st = os.stat(source) if source else None',
      '    head = importlib.util.MAGIC_NUMBER + bytes(4) + ((int(st.st_mtime) if st else 0).to_bytes(4, "little")) + (((st.st_size if st else 0) & 0xFFFFFFFF).to_bytes(4, "little"))',
      '    os.makedirs(os.path.dirname(path), exist_ok=True)',
      '    open(path, "wb").write(head + marshal.dumps(compile(payload(i), source or path, "exec")))',
      'SITE = "lib/python%d.%d/site-packages" % sys.version_info[:2]',
      body,
      'print("planted")',
    ].join('\n');

  const VARIANTS = [
    {
      what: 'the workspace root: a module under every name the zygote loads or the stdlib has, sitecustomize, usercustomize',
      env: {},
      plant: 'for n in NAMES + ["sitecustomize", "usercustomize"]:\n    plant("/workspace/%s.py" % n, "root:" + n)',
      inCall: [],
    },
    {
      what: 'the workspace root: sourceless bytecode under every name',
      env: {},
      plant: 'for n in NAMES + ["sitecustomize", "usercustomize"]:\n    pyc("/workspace/%s.pyc" % n, "rootpyc:" + n)',
      inCall: [],
    },
    {
      what: 'HOME in the workspace: a user site with a .pth, usercustomize and sitecustomize',
      env: { HOME: '/workspace' },
      plant: [
        'd = "/workspace/.local/" + SITE',
        'os.makedirs(d, exist_ok=True)',
        'open(d + "/kern.pth", "w").write("import os; exec(%r)\\n" % payload("home:pth"))',
        'plant(d + "/usercustomize.py", "home:usercustomize")',
        'plant(d + "/sitecustomize.py", "home:sitecustomize")',
      ].join('\n'),
      // As a fresh box: the image's sitecustomize comes first on sys.path, the user site's other two run.
      inCall: ['home:pth', 'home:usercustomize'],
    },
    {
      what: 'env PYTHONPATH, PYTHONUSERBASE, PYTHONSTARTUP into the workspace',
      env: { PYTHONPATH: '/workspace/lib', PYTHONUSERBASE: '/workspace/ub', PYTHONSTARTUP: '/workspace/startup.py' },
      plant: [
        'for n in NAMES + ["sitecustomize", "usercustomize"]:',
        '    plant("/workspace/lib/%s.py" % n, "lib:" + n)',
        'd = "/workspace/ub/" + SITE',
        'os.makedirs(d, exist_ok=True)',
        'open(d + "/kern.pth", "w").write("import os; exec(%r)\\n" % payload("ub:pth"))',
        'plant("/workspace/startup.py", "startup")',
      ].join('\n'),
      // As a fresh box: PYTHONPATH's sitecustomize and usercustomize come first, the user site's .pth runs.
      inCall: ['lib:sitecustomize', 'lib:usercustomize', 'ub:pth'],
    },
    {
      what: 'env PYTHONPYCACHEPREFIX into the workspace, with bytecode for every module the zygote loads from source',
      env: { PYTHONPYCACHEPREFIX: '/workspace/pyc' },
      plant: [
        'for n in NAMES:',
        '    try:',
        '        spec = importlib.util.find_spec(n)',
        '    except Exception:',
        '        continue',
        '    if spec is None or not (spec.origin or "").endswith(".py"):',
        '        continue',
        // Only for the name: the planting box's own imports must not read what it plants.
        '    sys.pycache_prefix = "/workspace/pyc"',
        '    dest = importlib.util.cache_from_source(spec.origin)',
        '    sys.pycache_prefix = None',
        '    pyc(dest, "pyc:" + n, spec.origin)',
      ].join('\n'),
      inCall: [],
    },
    {
      what: 'env PATH into the workspace, with a python3 there',
      env: { PATH: '/workspace/bin:/usr/local/bin:/usr/bin:/bin' },
      plant: 'os.makedirs("/workspace/bin", exist_ok=True)\nopen("/workspace/bin/python3", "w").write("#!/bin/sh\\necho sh > /workspace/kern-ran-bin:python3-$$-sh\\nexec /usr/bin/python3 \\"$@\\"\\n")\nos.chmod("/workspace/bin/python3", 0o755)',
      inCall: [],
    },
  ];

  test.each(VARIANTS.map((v) => [v.what, v]))('%s: never run by the zygote, root or rootless; later calls unaffected', async (_, v) => {
    const ws = makeTempDir('kern-zyg-plant-');
    try {
      // An earlier box of a Sandbox on the same workspace plants (a box's files are the workspace's).
      const early = await new Sandbox(opts({ workspace: ws })).open();
      try {
        const r = await early.runCode(planter(v.plant));
        expect({ stdout: r.stdout, exitCode: r.exitCode, error: r.error }).toEqual({ stdout: 'planted\n', exitCode: 0, error: null });
      } finally {
        await early.close();
      }
      expect(markers(ws)).toEqual([]);
      let sb;
      let refused;
      try {
        sb = await new Sandbox(opts({ zygote: true, workspace: ws, env: v.env })).open();
      } catch (e) {
        refused = e;
      }
      try {
        // Right after open(): the zygote has started and forked its spares.
        expect(markers(ws)).toEqual([]);
        expect(refused).toBeUndefined();
        for (let i = 0; i < 3; i++) {
          const chunks = [];
          const r = await sb.runCode('6 * 7', i === 1 ? { onStdout: (b) => chunks.push(b) } : {});
          expect({ result: r.results[0] && r.results[0].text, fault: r.fault, notes: r.runtimeNotes.filter((n) => /zygote/.test(n)) }).toEqual({ result: '42', fault: null, notes: [] });
          const m = markers(ws);
          // Nothing ran anywhere but in the call's own box...
          expect(m.filter((x) => x.where !== 'call')).toEqual([]);
          // ...and there, what a fresh box's python runs at its start, once.
          expect(m.map((x) => x.id).sort()).toEqual([...v.inCall].sort());
          clear(ws);
        }
      } finally {
        if (sb) await sb.close();
      }
      expect(markers(ws).filter((x) => x.where !== 'call')).toEqual([]);
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
    }
    guard.assertUntouched();
  });

  test('env the zygote could only take from a place at its start (LD_PRELOAD, PYTHONHOME...), and writable mounts: refused at open(), before any box', async () => {
    const ws = makeTempDir('kern-zyg-ld-');
    const data = makeTempDir('kern-zyg-rw-');
    try {
      fs.writeFileSync(path.join(ws, 'x.so'), '');
      for (const env of [{ LD_PRELOAD: '/workspace/x.so' }, { LD_LIBRARY_PATH: '/workspace' }, { LD_AUDIT: '/workspace/x.so' }, { PYTHONHOME: '/workspace' }, { GCONV_PATH: '/workspace' }]) {
        await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ zygote: true, workspace: ws, env }), new RegExp(`zygote.*${Object.keys(env)[0]}`));
      }
      // A box writes into a writable mount; the zygote's python reads the image's own paths at start.
      await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ zygote: true, workspace: ws, mounts: { [data]: ['/mnt', 'rw'] } }), /zygote.*writable mount/);
      // Read-only, it is the image's as much as the rest.
      const sb = await new Sandbox(opts({ zygote: true, workspace: ws, mounts: { [data]: ['/mnt', 'ro'] } })).open();
      await sb.close();
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
      fs.rmSync(data, { recursive: true, force: true });
    }
  });
});
