'use strict';
// rootless: yes
// Attack suite, signals: the box tries to signal host processes (by host pid, by process group,
// kill(-1), pidfds) and its own PID 1. The PID namespace is the defence: host pids do not exist in
// the box, and PID 1 ignores what it has no handler for.

const { requireRootfs, opts, isAlive, uniqueName, hostProcessesMatching, waitFor, startHostCanaryProcess } = require('../../helpers');
const { hostGuard, runJson, PY_PRELUDE } = require('../host');
const { Sandbox } = require('../../..');

let guard;
let sb;
let other; // a second Sandbox, whose box must survive the first one's kill(-1)

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  sb = await new Sandbox(opts()).open();
  other = await new Sandbox(opts()).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  if (other) await other.close();
  if (guard) guard.cleanup();
});

test('SIGKILL to a host process by its host pid: kill, tgkill, rt_sigqueueinfo, pidfd_open and kill(-pgid) all ESRCH', async () => {
  const targets = { canary: guard.proc.pid, jest: process.pid, parent: process.ppid };
  const { j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        `targets = ${JSON.stringify(targets)}`,
        'out = {}',
        'for k, p in targets.items():',
        '    out[k] = {',
        '        "kill": try_(lambda: os.kill(p, 9)),',
        '        "killpg": try_(lambda: os.killpg(p, 9)),',
        '        "tgkill": sc(234, p, p, 9),',
        '        "sigqueue": sc(129, p, 9, ctypes.create_string_buffer(128)),',
        '        "pidfd_open": sc(434, p, 0),',
        '        "proc": os.path.exists(f"/proc/{p}/cmdline") and open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")[:80]}',
        'print(json.dumps(out))',
      ].join('\n')
  );
  for (const k of Object.keys(targets)) {
    const r = j[k];
    // The pid may happen to exist inside the box (small numbers): then it is a box process, not the host's.
    if (r.proc) {
      expect(r.proc).not.toMatch(/node|jest|sleep 600/);
      continue;
    }
    expect({ [k]: r }).toEqual({ [k]: { kill: 'ESRCH', killpg: 'ESRCH', tgkill: 'ESRCH', sigqueue: expect.stringMatching(/^(ESRCH|EPERM)$/), pidfd_open: 'ESRCH', proc: false } });
  }
  expect(isAlive(guard.proc.pid)).toBe(true);
  guard.assertUntouched();
});

test('kill every pid 2..32768 from the box: only box processes die; host processes and another Sandbox\'s box survive', async () => {
  const marker = uniqueName('otherbox');
  const hostVictim = startHostCanaryProcess(uniqueName('victim'), 120);
  try {
    let seen = false;
    const otherCall = other.run(['sh', '-c', `echo up; sleep 4; echo survived # ${marker}`], {
      timeoutS: 60,
      onStdout: (c) => {
        if (c.toString().includes('up')) seen = true;
      },
    });
    expect(await waitFor(() => seen, 20000)).toBe(true);
    const { j } = await runJson(
      sb,
      PY_PRELUDE +
        [
          'import subprocess, signal',
          'kids = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]',
          'me = os.getpid()',
          'hit = []',
          'for p in range(2, 32769):',
          '    if p == me: continue',
          '    try: os.kill(p, signal.SIGKILL); hit.append(p)',
          '    except OSError: pass',
          'print(json.dumps({"hit": hit, "kids": [k.pid for k in kids], "reaped": [k.wait() for k in kids]}))',
        ].join('\n')
    );
    // What it could kill were exactly its own children (the box holds nothing else killable).
    expect(j.hit.sort()).toEqual(j.kids.sort());
    expect(j.reaped).toEqual([-9, -9, -9]);
    const o = await otherCall;
    expect({ stdout: o.stdout, fault: o.fault, exitCode: o.exitCode }).toEqual({ stdout: 'up\nsurvived\n', fault: null, exitCode: 0 });
    expect(isAlive(hostVictim.pid)).toBe(true);
    expect(hostProcessesMatching(marker)).toEqual([]);
  } finally {
    hostVictim.kill();
  }
  guard.assertUntouched();
});

test('kill(-1, SIGKILL) ends only the box\'s own processes; the host canary lives', async () => {
  const r = await sb.run(['sh', '-c', 'sleep 60 & a=$!; sleep 60 & b=$!; kill -9 -1; wait $a; echo "a=$?"; wait $b; echo "b=$?"']);
  // kill(-1) spares the caller and PID 1 (Linux semantics): everything else in the box is gone.
  expect({ exitCode: r.exitCode, stdout: r.stdout, fault: r.fault }).toEqual({ exitCode: 0, stdout: 'a=137\nb=137\n', fault: null });
  expect(isAlive(guard.proc.pid)).toBe(true);
  const next = await sb.run(['echo', 'next']);
  expect(next.stdout).toBe('next\n');
  guard.assertUntouched();
});

test('SIGKILL, SIGTERM, SIGSTOP, SIGINT and SIGHUP to the box\'s PID 1 are ignored: the workload carries on', async () => {
  const { r, j } = await runJson(
    sb,
    PY_PRELUDE +
      [
        'import signal, time',
        'sent = {}',
        'for s in ["SIGTERM", "SIGINT", "SIGHUP", "SIGSTOP", "SIGKILL"]:',
        '    sent[s] = try_(lambda: os.kill(1, getattr(signal, s)))',
        '    time.sleep(0.1)',
        'state = open("/proc/1/stat").read().rsplit(")", 1)[1].split()[0]',
        'print(json.dumps({"sent": sent, "pid1_state": state, "ppid": os.getppid()}))',
      ].join('\n')
  );
  // Delivery is permitted (same uid in the box) — the point is that PID 1 shrugs them off.
  expect(j.sent).toEqual({ SIGTERM: 'ok', SIGINT: 'ok', SIGHUP: 'ok', SIGSTOP: 'ok', SIGKILL: 'ok' });
  expect(j.pid1_state).toMatch(/^[SR]$/);
  expect(j.ppid).toBe(1);
  expect({ exitCode: r.exitCode, fault: r.fault }).toEqual({ exitCode: 0, fault: null });
  guard.assertUntouched();
});

describe.each([
  ['the default profile', {}],
  ['securityProfile "untrusted" (PID 1 also answers the seccomp listener)', { securityProfile: 'untrusted' }],
])('a storm of every signal at PID 1 under %s', (_, extra) => {
  test('PID 1 lives through it and reports the workload\'s own exit, with no fault', async () => {
    // Every signal number (real-time ones too) as fast as the box can send them, while
    // children exit in droves (SIGCHLD). PID 1 used to catch signals with handlers, which
    // nested on a small alternate stack until it overflowed: PID 1 died of SIGSEGV.
    const code = [
      'import os, signal, time',
      'sigs = [s for s in range(1, 65) if s not in (signal.SIGKILL, signal.SIGSTOP, 32, 33)]',
      'n, kids, t0 = 0, 0, time.time()',
      'while time.time() - t0 < 2:',
      '    for s in sigs:',
      '        try:',
      '            os.kill(1, s); n += 1',
      '        except OSError:',
      '            pass',
      '    for _ in range(4):',
      // Rootless on cgroup v1 the pids cap is RLIMIT_NPROC, which counts every process of the
      // user (other boxes too): a fork may be refused there, which is not what this tests.
      '        try:',
      '            pid = os.fork()',
      '        except BlockingIOError:',
      '            break',
      '        if pid == 0:',
      '            os._exit(0)',
      '        kids += 1',
      '    while True:',
      '        try:',
      '            if os.waitpid(-1, os.WNOHANG)[0] == 0: break',
      '        except ChildProcessError:',
      '            break',
      'print("sent", n, "forked", kids, flush=True)',
      'raise SystemExit(7)',
    ].join('\n');
    const s = await new Sandbox(opts(extra)).open();
    try {
      for (let i = 0; i < 3; i++) {
        const r = await s.runCode(code, { timeoutS: 60 });
        expect({ exitCode: r.exitCode, fault: r.fault }).toEqual({ exitCode: 7, fault: null });
        const m = /^sent (\d+) forked (\d+)\n$/.exec(r.stdout);
        expect(m).not.toBeNull();
        expect(Number(m[1])).toBeGreaterThan(1000);
      }
      // The Sandbox goes on as before.
      expect((await s.runCode('print("alive")')).stdout).toBe('alive\n');
    } finally {
      await s.close();
    }
    guard.assertUntouched();
  }, 180000);
});

test('kill(0, SIGKILL) (own process group) ends the workload only; the sandbox and host carry on', async () => {
  const r = await sb.run(['sh', '-c', 'kill -9 0; echo unreachable']);
  expect({ exitCode: r.exitCode, stdout: r.stdout }).toEqual({ exitCode: 137, stdout: '' });
  expect((await sb.runCode('print("alive")')).stdout).toBe('alive\n');
  expect(isAlive(guard.proc.pid)).toBe(true);
  guard.assertUntouched();
});

test('after every attack: no process, cgroup or mount left behind on the host', async () => {
  await sb.close();
  await other.close();
  sb = null;
  other = null;
  await guard.assertNoLeaks();
  guard.assertUntouched();
});
