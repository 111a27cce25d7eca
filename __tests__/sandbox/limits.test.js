'use strict';
// rootless: no — caps checked as enforced as root; rootless in the cgroup-v2 guest (test-cgv2.sh)
// Resource caps and deadlines. Runs as root in CI: caps are asserted as enforced there; where a cap
// is legitimately best-effort (rootless), the test asserts the runtime note instead. Rootless with
// a delegated cgroup (KERN_TEST_REQUIRE_ENFORCED_CAPS=1, the cgroup-v2 guest) they are asserted
// as enforced too.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const {
  capsEnforced,
  childrenNamed,
  isAlive,
  requireRootfs,
  opts,
  uniqueName,
  hostProcessesMatching,
  waitFor,
  makeTempDir,
  summary,
  expectOk,
  hostCgroupCaps,
  procStat,
} = require('../helpers');

const { Sandbox } = require('../..');

const isRoot = process.getuid() === 0;

const enforcedTest = capsEnforced ? test : test.skip;

beforeAll(() => requireRootfs());

/** Runs fn with an opened sandbox and always closes it. */
async function withOpen(o, fn) {
  const s = await new Sandbox(opts(o)).open();
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

/** A marker split in two so the outer script's cmdline never holds it whole; only the child's does. */
function splitMarker() {
  const m = uniqueName('mk');
  return { a: m.slice(0, 8), b: m.slice(8), whole: m };
}

describe('memory', () => {
  enforcedTest('400 MB allocation under memoryMb 64 -> oom fault; the sandbox stays usable', async () => {
    await withOpen({ memoryMb: 64 }, async (s) => {
      const r = await s.runCode('b = b"x" * (400 * 1024 * 1024)\nprint("ALLOCATED")\n', { timeoutS: 60 });
      expect(summary(r)).toMatchObject({ fault: { type: 'oom' } });
      expect(r.stdout).not.toContain('ALLOCATED');
      expect(r.success).toBe(false);
      expectOk(await s.runCode('print("after")'));
    });
  });

  enforcedTest('100 MB written to a 512m /tmp under memoryMb 64 -> oom fault that names /tmp', async () => {
    await withOpen({ memoryMb: 64, tmpfs: { '/tmp': '512m' } }, async (s) => {
      const r = await s.runCode(
        'chunk = b"x" * (1024 * 1024)\nwith open("/tmp/fill", "wb") as f:\n    for i in range(100):\n        f.write(chunk)\n        f.flush()\nprint("WROTE-ALL")\n',
        { timeoutS: 60 }
      );
      expect(summary(r)).toMatchObject({ fault: { type: 'oom' } });
      expect(r.fault.message).toMatch(/\/tmp/);
      expect(r.stdout).not.toContain('WROTE-ALL');
    });
  });

  // A call into a resident box runs in a call cgroup under the box's. Rootless on cgroup v2 the
  // call's kern once started outside any delegated scope, could not move in, and ran the call
  // uncapped; now it starts in a scope as the box's kern did, and a call that can't be placed is
  // refused rather than run outside the caps.
  enforcedTest('a call into a resident box (persist) is held to the box\'s memory cap: oom fault', async () => {
    const ws = makeTempDir('kern-capres-ws-');
    const s = await new Sandbox(opts({ memoryMb: 64, persist: true, name: uniqueName('capres'), workspace: ws })).open();
    try {
      expectOk(await s.run(['true']));
      const r = await s.runCode('b = b"x" * (400 * 1024 * 1024)\nprint("ALLOCATED")\n', { timeoutS: 60 });
      expect(summary(r)).toMatchObject({ fault: { type: 'oom' } });
      expect(r.stdout).not.toContain('ALLOCATED');
      expect(r.runtimeNotes.filter((n) => /best-effort|outside the box's caps/.test(n))).toEqual([]);
    } finally {
      await s.destroy();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });

  // The same, seen from the host while the call runs (cgroup v2): the call's workload sits in a
  // cgroup that has the box's memory cap on itself or an ancestor, not in the caller's scope.
  const v2 = fs.existsSync('/sys/fs/cgroup/cgroup.controllers');
  (v2 ? enforcedTest : test.skip)('a call into a resident box runs under the box\'s cgroup caps, as the host sees it during the call', async () => {
    const ws = makeTempDir('kern-capres-ws-');
    const marker = uniqueName('rescall');
    const s = await new Sandbox(opts({ memoryMb: 64, persist: true, name: uniqueName('capres'), workspace: ws })).open();
    try {
      expectOk(await s.run(['true']));
      const call = s.run(['sh', '-c', `sleep 30; : ${marker}`], { timeoutS: 60 });
      expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 20000)).toBe(true);
      const workload = hostProcessesMatching(marker)[0].pid;
      const cgroup = fs.readFileSync(`/proc/${workload}/cgroup`, 'utf8').trim().replace(/^0::/, '');
      // memory.max from the workload's cgroup up to the root: the cap must be on that path.
      const caps = [];
      for (let dir = cgroup; dir !== '/' && dir !== ''; dir = path.posix.dirname(dir)) {
        const f = `/sys/fs/cgroup${dir}/memory.max`;
        if (fs.existsSync(f)) caps.push(fs.readFileSync(f, 'utf8').trim());
      }
      const mine = fs.readFileSync('/proc/self/cgroup', 'utf8').trim().replace(/^0::/, '');
      process.kill(workload, 'SIGKILL');
      await call;
      expect(cgroup).not.toBe(mine);
      expect(caps).toContain(String(64 * 1024 * 1024));
    } finally {
      await s.destroy();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });

  // Rootless on cgroup v2 each kern starts in a delegated systemd scope; a kern killed from
  // outside (here the session's waiting spare) once made the library give the scope up for the
  // rest of the process, so every later box fell back to rlimits.
  enforcedTest('a kern killed from outside leaves later boxes capped: oom fault, no best-effort note', async () => {
    await withOpen({ memoryMb: 64 }, async (s) => {
      expectOk(await s.run(['true']));
      expect(await waitFor(() => childrenNamed('kern').length > 0)).toBe(true);
      // The waiting spare, and any kern still tearing the last box down (which may end first).
      const killed = childrenNamed('kern').filter((pid) => {
        try {
          process.kill(pid, 'SIGKILL');
          return true;
        } catch {
          return false;
        }
      });
      expect(killed.length).toBeGreaterThan(0);
      // Dead before the next call, so that call finds its spare gone rather than racing the kill.
      expect(await waitFor(() => killed.every((pid) => !isAlive(pid)))).toBe(true);
      expectOk(await s.run(['true']));
      const r = await s.runCode('b = b"x" * (400 * 1024 * 1024)\nprint("ALLOCATED")\n', { timeoutS: 60 });
      expect(summary(r)).toMatchObject({ fault: { type: 'oom' } });
      expect(r.runtimeNotes.join('\n')).not.toMatch(/best-effort/);
    });
  });

  enforcedTest('caps are really set on the box cgroup (read back from the host)', async () => {
    const ws = makeTempDir('kern-limits-ws-');
    const { a, b, whole } = splitMarker();
    let caps = null;
    let capsErr = null;
    try {
      await withOpen({ workspace: ws, memoryMb: 100, pids: 40, cpus: 0.5 }, async (s) => {
        const r = await s.run(
          ['sh', '-c', `a=${a}; b=${b}; sh -c "while [ ! -e go ]; do sleep 0.1; done; : $a$b" & until pgrep -f "$a$b" >/dev/null; do sleep 0.1; done; echo ready; wait`],
          {
            timeoutS: 60,
            onStdout: (c) => {
              if (!c.toString().includes('ready') || caps) return;
              try {
                const procs = hostProcessesMatching(whole);
                caps = hostCgroupCaps(procs[0].pid);
              } catch (e) {
                capsErr = e;
              }
              fs.writeFileSync(path.join(ws, 'go'), '');
            },
          }
        );
        expectOk(r);
      });
      expect(capsErr).toBeNull();
      expect(caps.memory).toBe(100 * 1024 * 1024);
      expect(['40', '41']).toContain(caps.pids); // N, or N plus kern's own reaper
      expect(caps.cpus).toBeCloseTo(0.5, 2);
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });
});

describe('pids', () => {
  enforcedTest('spawning 100 processes under pids 32 fails part-way', async () => {
    await withOpen({ pids: 32 }, async (s) => {
      const r = await s.runCode(
        'import subprocess\nn = 0\ntry:\n    for i in range(100):\n        subprocess.Popen(["sleep", "30"]); n += 1\nexcept OSError as e:\n    print("refused", type(e).__name__)\nprint("started", n)\n',
        { timeoutS: 60 }
      );
      expect(r.fault).toBeNull();
      expect(r.stdout).toMatch(/^refused \w+\nstarted (\d+)\n$/);
      expect(Number(r.stdout.match(/started (\d+)/)[1])).toBeLessThan(32);
    });
  });

  // Where a cgroup holds the caps (as root; unprivileged on cgroup v2, in the scope systemd
  // delegates), `pids: N` counts exactly the box's own processes from its first one: its init,
  // the workload and what they start, never kern's monitor. On cgroup v2 the init is born in the
  // box's cgroup (clone3 CLONE_INTO_CGROUP) with the monitor outside; elsewhere the monitor
  // enters first and is counted apart. A box started outside its cgroup would start all 30.
  const cgroupCaps = isRoot || fs.existsSync('/sys/fs/cgroup/cgroup.controllers');
  (cgroupCaps ? test : test.skip)('pids 10 admits exactly 10 processes: the init, the workload and 8 more', async () => {
    await withOpen({ pids: 10 }, async (s) => {
      const r = await s.run(
        ['python3', '-c', 'import subprocess\nn = 0\ntry:\n    for i in range(30):\n        subprocess.Popen(["sleep", "30"]); n += 1\nexcept OSError:\n    print("refused")\nprint("started", n)\n'],
        { timeoutS: 60 }
      );
      expect(r.runtimeNotes.filter((n) => /best-effort|not enforced/.test(n))).toEqual([]);
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
      expect(r.stdout).toBe('refused\nstarted 8\n');
    });
  });

  // On cgroup v2 as root, the box is born in its leaf (clone3 CLONE_INTO_CGROUP): seen from the
  // host while it runs, the workload is in the leaf and its kern is not, and the leaf's pids.max
  // is the cap itself (a monitor moved in would be in the leaf, with the cap written as N + 1).
  const bornInLeaf = isRoot && fs.existsSync('/sys/fs/cgroup/cgroup.controllers');
  if (bornInLeaf) test('on cgroup v2 a box is born in its cgroup: kern stays outside, pids.max is the cap itself', async () => {
    const marker = uniqueName('born');
    const cgroupOf = (pid) => fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().replace(/^0::/, '');
    const ppidOf = (pid) => procStat(pid).ppid;
    const commOf = (pid) => procStat(pid).comm;
    await withOpen({ pids: 40 }, async (s) => {
      const call = s.run(['sh', '-c', `sleep 20; : ${marker}`], { timeoutS: 60 });
      expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 20000)).toBe(true);
      const workload = hostProcessesMatching(marker)[0].pid;
      // The box's PID 1 is a clone of kern (comm "kern" too); its monitor is the topmost kern.
      let kern = ppidOf(workload);
      while (kern > 1 && commOf(kern) !== 'kern') kern = ppidOf(kern);
      while (commOf(ppidOf(kern)) === 'kern') kern = ppidOf(kern);
      const seen = { leaf: cgroupOf(workload), kern: cgroupOf(kern), kernComm: commOf(kern) };
      const pidsMax = fs.readFileSync(`/sys/fs/cgroup${seen.leaf}/pids.max`, 'utf8').trim();
      process.kill(workload, 'SIGKILL');
      await call;
      expect(seen.kernComm).toBe('kern');
      expect(seen.leaf).toMatch(/\/box-\d+-\d+$/);
      expect(seen.kern).not.toBe(seen.leaf);
      expect(pidsMax).toBe('40');
    });
  });

  test('a fork bomb under pids 32 ends, stays within the cap, and the next call succeeds', async () => {
    const marker = uniqueName('bomb');
    let maxSeen = 0;
    const poll = setInterval(() => {
      maxSeen = Math.max(maxSeen, hostProcessesMatching(marker).length);
    }, 100);
    await withOpen({ pids: 32, timeoutS: 5 }, async (s) => {
      let r;
      try {
        r = await s.run(['bash', '-c', `bomb() { bomb | bomb & }; bomb; sleep 30 # ${marker}`]);
      } finally {
        clearInterval(poll);
      }
      expect(r).toBeDefined();
      expect(r.success).toBe(false); // it cannot have exited cleanly: it sleeps 30 s under timeoutS 5
      expect(maxSeen).toBeGreaterThan(1); // the bomb really ran (the host scan saw it)
      if (capsEnforced) expect(maxSeen).toBeLessThanOrEqual(32);
      expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10000)).toBe(true);
      expect(spawnSync('true').status).toBe(0); // the host can still fork
      const next = await s.runCode('print("alive")');
      expectOk(next);
      expect(next.stdout).toBe('alive\n');
    });
  });
});

describe('deadlines and process lifetime', () => {
  test('sleep 100 with timeoutS 1 -> timeout fault', async () => {
    await withOpen({}, async (s) => {
      const r = await s.run(['sleep', '100'], { timeoutS: 1 });
      expect(summary(r)).toMatchObject({ fault: { type: 'timeout' } });
      expect(r.success).toBe(false);
    });
  });

  test('a setsid double-forked grandchild does not survive the timeout', async () => {
    const { a, b, whole } = splitMarker();
    let seenDuring = null;
    await withOpen({}, async (s) => {
      const r = await s.run(
        [
          'sh',
          '-c',
          `a=${a}; b=${b}; (setsid sh -c "sleep 1000; : $a$b" >/dev/null 2>&1 &); ` +
            `until pgrep -f "$a$b" >/dev/null; do sleep 0.1; done; echo started; sleep 100`,
        ],
        {
          // Room for the slow guest to start it all and for onStdout to run; sleep 100 still
          // outlasts it.
          timeoutS: 15,
          onStdout: (c) => {
            if (seenDuring === null && c.toString().includes('started')) seenDuring = hostProcessesMatching(whole).length;
          },
        }
      );
      expect(summary(r)).toMatchObject({ fault: { type: 'timeout' }, stdout: 'started\n' });
    });
    expect(seenDuring).toBeGreaterThan(0); // it was alive on the host during the call
    const left = await waitFor(() => hostProcessesMatching(whole).length === 0, 5000);
    expect(left ? [] : hostProcessesMatching(whole)).toEqual([]);
  });

  test('a background child does not hold the call open: exit 0, no timeout, child gone', async () => {
    const { a, b, whole } = splitMarker();
    await withOpen({ timeoutS: 20 }, async (s) => {
      const r = await s.run([
        'sh',
        '-c',
        `a=${a}; b=${b}; sh -c "sleep 1000; : $a$b" & until pgrep -f "$a$b" >/dev/null; do sleep 0.1; done; echo started`,
      ]);
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null, stdout: 'started\n' });
      const left = await waitFor(() => hostProcessesMatching(whole).length === 0, 5000);
      expect(left ? [] : hostProcessesMatching(whole)).toEqual([]);
      // and the sandbox is immediately usable
      expectOk(await s.run(['true']));
    });
  });
});

describe('tmpfs', () => {
  const statvfsMiB = (p) =>
    `import os\nst = os.statvfs("${p}")\nprint(st.f_blocks * st.f_frsize / 1048576)\n` +
    `open("${p}/probe", "w").write("x")\nprint("writable")\n`;

  test('default /tmp is a ~64 MiB writable tmpfs', async () => {
    await withOpen({}, async (s) => {
      const r = await s.runCode(statvfsMiB('/tmp'));
      expectOk(r);
      const [mib, w] = r.stdout.trim().split('\n');
      expect(Number(mib)).toBeGreaterThanOrEqual(60);
      expect(Number(mib)).toBeLessThanOrEqual(70);
      expect(w).toBe('writable');
      const mounts = await s.run(['cat', '/proc/self/mountinfo']);
      expect(mounts.stdout).toMatch(/ \/tmp .* - tmpfs /);
    });
  });

  test('tmpfs {} means no /tmp scratch: /tmp is not writable', async () => {
    await withOpen({ tmpfs: {} }, async (s) => {
      const r = await s.run(['sh', '-c', 'echo x > /tmp/probe 2>/dev/null && echo WROTE; echo end']);
      expect(r.fault).toBeNull();
      expect(r.stdout).toBe('end\n');
    });
  });

  test('tmpfs {"/tmp": "16m"} resizes /tmp', async () => {
    await withOpen({ tmpfs: { '/tmp': '16m' } }, async (s) => {
      const r = await s.runCode(statvfsMiB('/tmp'));
      expectOk(r);
      const mib = Number(r.stdout.split('\n')[0]);
      expect(mib).toBeGreaterThanOrEqual(15);
      expect(mib).toBeLessThanOrEqual(17);
    });
  });

  test.each([[{ '/mnt': '16m' }], [['/mnt']]])('tmpfs %j mounts a writable scratch at /mnt', async (tmpfs) => {
    await withOpen({ tmpfs }, async (s) => {
      const r = await s.runCode(statvfsMiB('/mnt'));
      expectOk(r);
      expect(r.stdout).toMatch(/\nwritable\n$/);
      if (!Array.isArray(tmpfs)) {
        const mib = Number(r.stdout.split('\n')[0]);
        expect(mib).toBeGreaterThanOrEqual(15);
        expect(mib).toBeLessThanOrEqual(17);
      }
    });
  });

  test('scratch written in one call is gone in the next', async () => {
    await withOpen({}, async (s) => {
      expectOk(await s.run(['sh', '-c', 'echo x > /tmp/keep']));
      const r = await s.run(['sh', '-c', 'ls -A /tmp']);
      expectOk(r);
      expect(r.stdout).toBe('');
    });
  });
});

describe('enforceLimits', () => {
  test('enforceLimits:false runs best-effort and says so in a runtime note', async () => {
    await withOpen({ enforceLimits: false }, async (s) => {
      const r = await s.run(['true']);
      expectOk(r);
      expect(r.runtimeNotes.join('\n')).toMatch(/best.effort/i);
      expect(r.codeStderr).toBe('');
    });
  });

  test('enforceLimits:false still stops a 400 MB allocation under memoryMb 64', async () => {
    await withOpen({ enforceLimits: false, memoryMb: 64 }, async (s) => {
      const r = await s.runCode('b = b"x" * (400 * 1024 * 1024)\nprint("ALLOCATED")\n', { timeoutS: 60 });
      expect(r.stdout).not.toContain('ALLOCATED');
      expect(r.success).toBe(false);
      if (!r.fault) {
        expect(r.codeStderr).toMatch(/MemoryError/);
        expect(r.runtimeNotes.join('\n')).toMatch(/memory/);
      }
    });
  });
});
