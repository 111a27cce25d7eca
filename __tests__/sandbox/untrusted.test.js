'use strict';
// rootless: yes
// `securityProfile: "untrusted"`: a seccomp allowlist on top of the standard posture. Ordinary
// Python, Node and bash work keeps working; `clone3`, `io_uring_*`, x32 and unknown syscalls
// answer ENOSYS (libc falls back); the escape syscalls fail with EPERM and the result carries
// an `escape_blocked` fault naming each one; a foreign architecture's syscall kills the process.
// Each probe also runs without the profile, so a test fails if the filter stops filtering.

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, makeCanaryFile, expectSandboxError } = require('../helpers');
const { Sandbox, SandboxError, withSandbox } = require('../..');

const X64 = process.arch === 'x64';
const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

beforeAll(() => requireRootfs());

const untrusted = (extra = {}) => opts({ securityProfile: 'untrusted', ...extra });

// Python prelude: `sc(nr, *args)` makes a raw syscall and returns 0 or the errno.
const SC = [
  'import ctypes, json, os',
  'libc = ctypes.CDLL(None, use_errno=True)',
  'libc.syscall.restype = ctypes.c_long',
  'def sc(nr, *a):',
  '    ctypes.set_errno(0)',
  '    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])',
  '    return ctypes.get_errno() if r == -1 else 0',
].join('\n');

// x86_64 numbers; each call has arguments that make it fail harmlessly wherever it is reachable
// (a NULL pointer, a bad fd), so "reachable" and "blocked" are told apart by errno alone.
const ESCAPES = {
  ptrace: [101, 16, 999999, 0, 0], // PTRACE_ATTACH to a pid that does not exist
  mount: [165, 0, 0, 0, 0, 0],
  bpf: [321, 0, 0, 0],
  keyctl: [250, 0, 0, 0, 0, 0],
  add_key: [248, 0, 0, 0, 0, -1],
  perf_event_open: [298, 0, 0, -1, -1, 0],
  userfaultfd: [323, 0xffff],
  kexec_load: [246, 0, 0, 0, 0],
  init_module: [175, 0, 0, 0],
  open_by_handle_at: [304, -1, 0, 0],
  setns: [308, -1, 0],
  pivot_root: [155, 0, 0],
  umount2: [166, 0, 0],
  chroot: [161, 0],
};

function escapeProbe() {
  const calls = Object.entries(ESCAPES)
    .map(([name, [nr, ...args]]) => `out[${JSON.stringify(name)}] = sc(${[nr, ...args].join(', ')})`)
    .join('\n');
  return `${SC}\nout = {}\n${calls}\nprint(json.dumps(out))`;
}

(X64 ? describe : describe.skip)('escape syscalls (x86_64 numbers)', () => {
  test('each fails with EPERM, and the fault names every one of them', async () => {
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(escapeProbe()));
    expect(r.exitCode).toBe(0);
    const out = JSON.parse(r.stdout);
    for (const name of Object.keys(ESCAPES)) expect([name, out[name]]).toEqual([name, 1]);
    expect(r.fault).toEqual({ type: 'escape_blocked', message: expect.any(String) });
    for (const name of Object.keys(ESCAPES)) expect(r.fault.message).toMatch(new RegExp(`\\b${name}\\b`));
  });

  test('without the profile the same probe raises no fault and reaches the kernel', async () => {
    const r = await withSandbox(opts(), (sb) => sb.runCode(escapeProbe()));
    expect(r.fault).toBeNull();
    const out = JSON.parse(r.stdout);
    // The filter, not the kernel, answered EPERM above: unfiltered these reach the kernel's own
    // checks (a bad fd, no such process, a NULL pointer).
    expect([out.setns, out.ptrace, out.add_key]).toEqual([9, 3, 14]);
  });

  test('clone3, io_uring, x32 and unknown syscalls answer ENOSYS, and are not reported', async () => {
    const code = `${SC}
print(json.dumps({"clone3": sc(435, 0, 0), "io_uring_setup": sc(425, 1, 0),
  "io_uring_enter": sc(426, -1, 0, 0, 0, 0), "x32_getpid": sc(0x40000000 | 39), "nr_1000": sc(1000)}))`;
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(code));
    expect(JSON.parse(r.stdout)).toEqual({ clone3: 38, io_uring_setup: 38, io_uring_enter: 38, x32_getpid: 38, nr_1000: 38 });
    expect(r.fault).toBeNull();
    const plain = await withSandbox(opts(), (sb) => sb.runCode(code));
    // Unfiltered, clone3 with a NULL argument is EFAULT/EINVAL, never ENOSYS on this kernel.
    expect(JSON.parse(plain.stdout).clone3).not.toBe(38);
  });

  test('namespace flags, terminal injection and AF_ALG are caught on otherwise allowed syscalls', async () => {
    const code = `${SC}
import socket
out = {}
out["unshare_user"] = sc(272, 0x10000000)
out["unshare_files"] = sc(272, 0x400)
out["clone_newns"] = sc(56, 0x20000 | 17, 0, 0, 0, 0)
# TIOCSTI with junk in the upper 32 bits: the kernel reads only the low 32.
out["tiocsti"] = sc(16, 0, (0x7fff << 32) | 0x5412, 0)
out["tioclinux"] = sc(16, 0, 0x541C, 0)
try:
    socket.socket(38, socket.SOCK_SEQPACKET, 0); out["af_alg"] = 0
except OSError as e:
    out["af_alg"] = e.errno
print(json.dumps(out))`;
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(code));
    expect(JSON.parse(r.stdout)).toEqual({ unshare_user: 1, unshare_files: 0, clone_newns: 1, tiocsti: 1, tioclinux: 1, af_alg: 1 });
    for (const name of ['unshare with namespace flags', 'clone with namespace flags', 'ioctl\\(TIOCSTI\\)', 'ioctl\\(TIOCLINUX\\)', 'socket\\(AF_ALG\\)']) {
      expect(r.fault.message).toMatch(new RegExp(name));
    }
  });

  test('a 32-bit int 0x80 syscall kills the process, reported as escape_blocked', async () => {
    // mov eax, 20 (i386 getpid); int 0x80; ret — run from an executable page.
    const code = `import ctypes, mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("alive", f() != 0, flush=True)`;
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(code));
    expect(r.stdout).not.toMatch(/alive/);
    expect(r.fault).toEqual({ type: 'escape_blocked', message: expect.stringMatching(/foreign architecture/) });
    const plain = await withSandbox(opts(), (sb) => sb.runCode(code));
    expect(plain.fault).toBeNull();
  });

  test('children are filtered too, and ten thousand attempts neither stall the box nor flood the fault', async () => {
    const code = `${SC}
import subprocess, sys
if os.fork() == 0:
    os._exit(sc(101, 16, 999999, 0, 0))
_, st = os.wait()
n = sum(1 for _ in range(10000) if sc(321, 0, 0, 0) == 1)
print(os.waitstatus_to_exitcode(st), n)`;
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(code));
    expect(r.stdout.trim()).toBe('1 10000');
    expect(r.fault.type).toBe('escape_blocked');
    expect(r.fault.message.match(/\bbpf\b/g)).toHaveLength(1);
    expect(r.fault.message).toMatch(/\bptrace\b/);
  });
  test('the workload cannot silence the reporter: after kill -9 of everything it can reach, escapes are still named', async () => {
    const code = `${SC}
import signal
try:
    os.kill(-1, signal.SIGKILL)  # every process of the box but PID 1 and this one
except ProcessLookupError:
    pass
try:
    os.kill(1, signal.SIGKILL)   # PID 1 ignores signals from inside its namespace
except OSError:
    pass
print(sc(250, 0, 0, 0, 0, 0))`;
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(code));
    expect(r.stdout.trim()).toBe('1');
    expect(r.fault).toEqual({ type: 'escape_blocked', message: expect.stringMatching(/\bkeyctl\b/) });
  });
});

describe('ordinary work runs unchanged', () => {
  test('python: threads, subprocess, sockets on lo, files, hashlib, multiprocessing', async () => {
    const code = `import threading, subprocess, socket, hashlib, multiprocessing, tempfile, os
t = threading.Thread(target=lambda: None); t.start(); t.join()
sub = subprocess.run(["sh", "-c", "echo sub"], capture_output=True, text=True).stdout.strip()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); c.sendall(b"ping"); got = a.recv(4)
with tempfile.NamedTemporaryFile(dir=".") as f: f.write(b"x"); f.flush(); size = os.path.getsize(f.name)
with multiprocessing.Pool(2) as p: sq = p.map(abs, [-1, -2])
print(sub, got.decode(), size, hashlib.sha256(b"").hexdigest()[:8], sq)`;
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(code));
    expect(r.fault).toBeNull();
    expect(r.stdout.trim()).toBe('sub ping 1 e3b0c442 [1, 2]');
  });

  test('node: worker thread, child process, fs, a local server (libuv probes io_uring: ENOSYS, not death)', async () => {
    const js = `const cp = require('child_process'), net = require('net'), fs = require('fs');
const { Worker } = require('worker_threads');
new Worker('require("worker_threads").parentPort.postMessage(6*7)', { eval: true }).on('message', (n) => {
  fs.writeFileSync('n.txt', String(n));
  const srv = net.createServer((s) => s.end('pong')).listen(0, '127.0.0.1', () => {
    net.connect(srv.address().port, '127.0.0.1').on('data', (d) => {
      console.log(fs.readFileSync('n.txt', 'utf8'), cp.execSync('echo child').toString().trim(), d.toString());
      srv.close();
    });
  });
});`;
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(js, { language: 'node' }));
    expect(r.fault).toBeNull();
    expect(r.stdout.trim()).toBe('42 child pong');
  });

  test('bash: pipelines, substitution, background jobs, mktemp, text tools', async () => {
    const sh = 'x=$(echo abc | tr a-z A-Z); sleep 0.1 & wait; f=$(mktemp); printf "b\\na\\n" | sort > "$f"; echo "$x $(wc -l < "$f") $(head -1 "$f")"; awk "BEGIN{print 6*7}"';
    const r = await withSandbox(untrusted(), (sb) => sb.runCode(sh, { language: 'bash' }));
    expect(r.fault).toBeNull();
    expect(r.stdout).toBe('ABC 2 a\n42\n');
  });

  test('rich results: a matplotlib chart comes back as PNG under the profile', async () => {
    if (!fs.existsSync(path.join(SCI, '.kern-test-rootfs'))) {
      throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
    }
    const code = 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n6 * 7';
    const r = await withSandbox(untrusted({ image: SCI }), (sb) => sb.runCode(code));
    expect(r.fault).toBeNull();
    expect(r.results.some((x) => x.png)).toBe(true);
    expect(r.results.some((x) => x.text === '42')).toBe(true);
  });

  test('setup, run() and a kernel all run under the profile', async () => {
    const canary = makeCanaryFile();
    const sb = await new Sandbox(untrusted({ setup: 'echo ready > /workspace/.deps-marker' })).open();
    try {
      const r = await sb.run(['sh', '-c', 'cat .deps-marker; cat /proc/self/status | grep ^Seccomp:']);
      expect(r.stdout).toBe('ready\nSeccomp:\t2\n');
      const k = await sb.kernel();
      try {
        const cell = await k.runCode(`${SC}\nprint(sc(165, 0, 0, 0, 0, 0))`);
        if (X64) expect(cell.stdout.trim()).toBe('1');
      } finally {
        await k.close();
      }
    } finally {
      await sb.close();
    }
    expect(canary.intact()).toBe(true);
    canary.remove();
  });
});

test('bad combinations are SandboxErrors that say what to do', async () => {
  for (const [o, re] of [
    [{ securityProfile: 'strict' }, /"untrusted"/],
    [{ securityProfile: 42 }, /securityProfile/],
    [{ securityProfile: 'untrusted', capDrop: [] }, /capDrop/],
    [{ securityProfile: 'untrusted', capDrop: ['NET_RAW'] }, /capDrop/],
  ]) {
    const sb = new Sandbox(opts(o));
    await expectSandboxError(() => sb.open(), SandboxError, re);
    await sb.close();
  }
  // The profile with capDrop ["ALL"] is what the profile does anyway: accepted.
  const sb = await new Sandbox(untrusted({ capDrop: ['ALL'] })).open();
  await sb.close();
});
