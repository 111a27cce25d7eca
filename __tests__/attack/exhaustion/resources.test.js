'use strict';
// rootless: yes
// Attack suite, resource exhaustion: a setsid fork bomb, a node memory bomb, filling /dev/shm and
// a small /tmp, an inode flood, POSIX message queues, output floods (one endless line; endless stderr under a timeout),
// daemons that try to outlive the call, zombies and a thread bomb. Each must end inside the box
// (an errno, a fault, truncation) and leave the host as it was: no process left, host memory sane.
// limits.test covers the plain fork bomb, the python memory bomb and the setsid double fork under
// a timeout; output.test the basic stdout cap; workspace.test the workspace cap.

const fs = require('fs');
const { spawnSync } = require('child_process');
const { requireRootfs, opts, isRoot, uniqueName, hostProcessesMatching, waitFor, makeTempDir } = require('../../helpers');
const { hostGuard, runJson, PY_PRELUDE } = require('../host');
const { Sandbox } = require('../../..');

let guard;
let sb;

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  sb = await new Sandbox(opts({ pids: 64, memoryMb: 256, maxOutputBytes: 1 << 20 })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  if (guard) guard.cleanup();
});

/** A marker split so only the child's cmdline holds it whole (see limits.test). */
function marker() {
  const m = uniqueName('rsrc');
  return { a: m.slice(0, 8), b: m.slice(8), whole: m };
}

test('a setsid fork bomb (every child its own session) is contained and leaves no process on the host', async () => {
  const { a, b, whole } = marker();
  const r = await sb.runCode(
    PY_PRELUDE +
      [
        `tag = "${a}" + "${b}"`,
        'n = 0',
        'for i in range(2000):',
        '    try:',
        '        if os.fork() == 0:',
        '            os.setsid()',
        '            os.execvp("sh", ["sh", "-c", "sleep 300; : " + tag])',
        '        n += 1',
        '    except OSError as e:',
        '        print("refused", ename(e.errno), "after", n); break',
      ].join('\n'),
    { timeoutS: 20 }
  );
  const m = /refused (\w+) after (\d+)/.exec(r.stdout);
  expect(m && m[1]).toBe('EAGAIN');
  if (isRoot) expect(Number(m[2])).toBeLessThan(64); // the pids cap (rootless may fall back to RLIMIT_NPROC)
  expect(await waitFor(() => hostProcessesMatching(whole).length === 0, 10000)).toBe(true);
  expect(spawnSync('true').status).toBe(0);
  guard.assertUntouched();
});

test('a node memory bomb (Buffer.alloc in a loop) is stopped; the host process memory is unaffected', async () => {
  const rss = process.memoryUsage().rss;
  const r = await sb.runCode('const a = []; for (let i = 0; i < 4000; i++) a.push(Buffer.alloc(1 << 20, 1)); console.log("ALLOCATED", a.length);', {
    language: 'node',
    timeoutS: 60,
  });
  expect(r.stdout).not.toContain('ALLOCATED');
  expect(r.success).toBe(false);
  if (isRoot) expect(r.fault && r.fault.type).toBe('oom');
  expect(process.memoryUsage().rss - rss).toBeLessThan(200 * 1024 * 1024);
  expect((await sb.runCode('print("after")')).stdout).toBe('after\n');
  guard.assertUntouched();
});

test('filling /dev/shm (a 64 MiB tmpfs) stops at ENOSPC inside the box', async () => {
  const { j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'chunk = b"x" * (1 << 20); n = 0; err = None',
        'try:',
        '    with open("/dev/shm/fill", "wb") as f:',
        '        for i in range(200):',
        '            f.write(chunk); f.flush(); n += 1',
        'except OSError as e: err = ename(e.errno)',
        'print(json.dumps({"err": err, "mib": n}))',
      ].join('\n'),
    { timeoutS: 60 }
  );
  expect(j.err).toBe('ENOSPC');
  expect(j.mib).toBeLessThanOrEqual(64);
  guard.assertUntouched();
});

test('filling a small /tmp (tmpfs 8m) stops at ENOSPC; the host temp dir gets nothing', async () => {
  const s = await new Sandbox(opts({ tmpfs: { '/tmp': '8m' } })).open();
  try {
    const { j } = await runJson(
      s,
      PY_PRELUDE +
        [
          'chunk = b"x" * (1 << 20); n = 0; err = None',
          'try:',
          `    with open("/tmp/${guard.token}", "wb") as f:`,
          '        for i in range(64):',
          '            f.write(chunk); f.flush(); n += 1',
          'except OSError as e: err = ename(e.errno)',
          'print(json.dumps({"err": err, "mib": n}))',
        ].join('\n')
    );
    expect(j).toEqual({ err: 'ENOSPC', mib: expect.any(Number) });
    expect(j.mib).toBeLessThanOrEqual(8);
  } finally {
    await s.close();
  }
  guard.assertUntouched(); // includes: no file named with the token in the host temp dir
});

test('an inode flood in /tmp stays in the box\'s private tmpfs and is gone for the next call', async () => {
  const { r, j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'import time',
        'n = 0; err = None; t = time.time()',
        'try:',
        '    while n < 40000 and time.time() - t < 8:',
        `        open(f"/tmp/${guard.token}-{n}", "w").close(); n += 1`,
        'except OSError as e: err = ename(e.errno)',
        'print(json.dumps({"n": n, "err": err}))',
      ].join('\n'),
    { timeoutS: 30 }
  );
  expect(r.fault).toBeNull();
  expect(j.n).toBeGreaterThan(1000); // the flood really ran
  const next = await sb.run(['sh', '-c', 'ls -A /tmp | wc -l']);
  expect(next.stdout.trim()).toBe('0');
  guard.assertUntouched();
});

test('one endless line without a newline is truncated at maxOutputBytes; host memory stays bounded', async () => {
  const rss = process.memoryUsage().rss;
  const r = await sb.run(['sh', '-c', 'head -c 300000000 /dev/zero | tr "\\0" a; echo done >&2'], { timeoutS: 60 });
  expect(r.truncated).toBe(true);
  expect(r.stdout.length).toBeLessThanOrEqual(1 << 20);
  expect(r.stdout).toMatch(/^a+$/);
  expect(r.codeStderr).toBe('done\n'); // the writer was drained to the end, not blocked
  expect(process.memoryUsage().rss - rss).toBeLessThan(200 * 1024 * 1024);
  guard.assertUntouched();
});

test('endless stderr under a timeout: the call ends with a timeout fault, stderr capped', async () => {
  const r = await sb.run(['sh', '-c', 'yes attack >&2'], { timeoutS: 2 });
  expect(r.fault && r.fault.type).toBe('timeout');
  expect(r.truncated).toBe(true);
  expect(r.stderr.length).toBeLessThanOrEqual((1 << 20) + 4096); // the cap, plus kern's own note lines
  guard.assertUntouched();
});

test('a daemon (double fork, setsid, SIGTERM/SIGHUP ignored, stdio closed) dies with the call that started it', async () => {
  const { a, b, whole } = marker();
  let during = null;
  const r = await sb.runCode(
    [
      'import os, signal, time, sys',
      `tag = "${a}" + "${b}"`,
      'if os.fork() == 0:',
      '    os.setsid()',
      '    if os.fork() == 0:',
      '        signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN)',
      '        os.chdir("/")',
      '        fd = os.open("/dev/null", os.O_RDWR); [os.dup2(fd, i) for i in (0, 1, 2)]',
      '        os.execvp("sh", ["sh", "-c", "trap \\"\\" TERM HUP; sleep 300; : " + tag])',
      '    os._exit(0)',
      // Waits until the daemon runs, says so, and waits again until the host has looked (the
      // callback writes `seen`): the look is made while the call still runs, not after.
      'def daemon_up():',
      '    for p in filter(str.isdigit, os.listdir("/proc")):',
      '        try:',
      '            if tag.encode() in open(f"/proc/{p}/cmdline", "rb").read(): return True',
      '        except OSError: pass',
      '    return False',
      'for _ in range(300):',
      '    if daemon_up(): break',
      '    time.sleep(0.05)',
      'print("parent exits", flush=True)',
      'for _ in range(300):',
      `    if os.path.exists("seen-${a}"): break`,
      '    time.sleep(0.05)',
    ].join('\n'),
    {
      timeoutS: 40,
      onStdout: (c) => {
        if (during === null && c.toString().includes('parent exits')) {
          during = hostProcessesMatching(whole).length;
          sb.writeFile(`seen-${a}`, '').catch(() => {});
        }
      },
    }
  );
  expect({ exitCode: r.exitCode, fault: r.fault }).toEqual({ exitCode: 0, fault: null });
  expect(during).toBe(1); // it was alive on the host while the call ran
  expect(await waitFor(() => hostProcessesMatching(whole).length === 0, 10000)).toBe(true);
  guard.assertUntouched();
});

test('a grandchild holding stdout open does not keep the call (or its box) alive', async () => {
  const { a, b, whole } = marker();
  const r = await sb.run(['sh', '-c', `a=${a}; b=${b}; (sh -c "sleep 300; : $a$b" &) ; echo started`], { timeoutS: 20 });
  expect({ exitCode: r.exitCode, fault: r.fault, stdout: r.stdout }).toEqual({ exitCode: 0, fault: null, stdout: 'started\n' });
  expect(await waitFor(() => hostProcessesMatching(whole).length === 0, 10000)).toBe(true);
  guard.assertUntouched();
});

test('zombies: 3 calls each leaving 40 unreaped children under pids 64 all succeed (PID 1 reaps)', async () => {
  for (let i = 0; i < 3; i += 1) {
    const r = await sb.runCode(
      // Counted until all 40 have exited (each child's exit is up to the scheduler), within 10 s.
      'import os, time\nkids = [os.fork() or os._exit(0) for _ in range(40)]\nzs = lambda: sum(1 for p in os.listdir("/proc") if p.isdigit() and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] == "Z")\nfor _ in range(200):\n    if zs() >= 40: break\n    time.sleep(0.05)\nprint("zombies", zs())'
    );
    expect({ exitCode: r.exitCode, fault: r.fault, stdout: r.stdout }).toEqual({ exitCode: 0, fault: null, stdout: 'zombies 40\n' });
  }
  guard.assertUntouched();
});

test('a thread bomb is stopped by the pids cap with an error in the box', async () => {
  const { j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'import threading',
        'ev = threading.Event(); n = 0; err = None',
        'try:',
        '    for i in range(5000):',
        '        threading.Thread(target=ev.wait, daemon=True).start(); n += 1',
        'except RuntimeError as e: err = str(e)',
        'ev.set()',
        'print(json.dumps({"n": n, "err": err}))',
      ].join('\n'),
    { timeoutS: 30 }
  );
  expect(j.err).toMatch(/can't start new thread/);
  if (isRoot) expect(j.n).toBeLessThan(64);
  guard.assertUntouched();
});

test('POSIX message queues: a box that opens them until refused leaves the budget of other boxes (this Sandbox\'s and another\'s) alone', async () => {
  // RLIMIT_MSGQUEUE is charged to the host user of every box; unbounded per box, about nine
  // default queues in one took the whole budget and every other box's mq_open failed.
  const ws = makeTempDir();
  fs.chmodSync(ws, 0o777);
  const mq = [
    'import ctypes, errno, os, sys, time',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'def mq_open(name):',
    '    fd = libc.mq_open(name.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)',
    '    return fd if fd >= 0 else -ctypes.get_errno()',
  ];
  const filler = mq.concat([
    'n, err = 0, 0',
    'for i in range(100):',
    '    fd = mq_open(f"/fill{i}")',
    '    if fd < 0:',
    '        err = -fd; break',
    '    n += 1',
    'open("a-full.tmp", "w").write(f"{n} {errno.errorcode.get(err, err)}")',
    'os.rename("a-full.tmp", "a-full")',
    'for _ in range(600):',
    '    if os.path.exists("a-done"): break',
    '    time.sleep(0.1)',
    'print("held", n, errno.errorcode.get(err, err))',
  ]).join('\n');
  const one = mq.concat(['fd = mq_open("/one")', 'print("ok" if fd >= 0 else errno.errorcode[-fd])']).join('\n');
  const a = new Sandbox(opts({ workspace: ws }));
  await a.open();
  const other = new Sandbox(opts({}));
  await other.open();
  try {
    const filling = a.runCode(filler, { timeoutS: 90 });
    expect(await waitFor(() => fs.existsSync(`${ws}/a-full`), 60000)).toBe(true);
    const [n, err] = fs.readFileSync(`${ws}/a-full`, 'utf8').split(' ');
    // The box met its own budget, not a whole host user's: a few queues, then EMFILE.
    expect(err).toBe('EMFILE');
    expect(Number(n)).toBeGreaterThanOrEqual(1);
    const same = await a.runCode(one);
    const another = await other.runCode(one);
    fs.writeFileSync(`${ws}/a-done`, '');
    const held = await filling;
    expect([same.stdout, another.stdout]).toEqual(['ok\n', 'ok\n']);
    expect(held.stdout).toBe(`held ${n} EMFILE\n`);
  } finally {
    fs.writeFileSync(`${ws}/a-done`, '');
    await a.close();
    await other.close();
    fs.rmSync(ws, { recursive: true, force: true });
  }
  guard.assertUntouched();
}, 180000);

test('after every attack: no process, cgroup or mount left behind on the host', async () => {
  await sb.close();
  sb = null;
  await guard.assertNoLeaks();
  guard.assertUntouched();
});
