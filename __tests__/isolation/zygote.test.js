'use strict';
// rootless: yes
// ADDITION (issue 21): `zygote: true`. One python process per Sandbox that never runs a cell
// forks each python cell's box: every call still gets its own namespaces, /proc, /tmp, cgroup
// and the workload posture, and nothing of another call. Through the public API, root and
// rootless.

const fs = require('fs');
const path = require('path');
const { Sandbox, SandboxError } = require('../..');
const { opts, hostProcessesMatching, ourDescendant, capsEnforced, waitFor, expectRefusedBeforeAnyBox, makeTempDir, uniqueName, procStat, treeRoots } = require('../helpers');

/** The host pids of this process's zygotes and their forks (their argv holds the zygote; the
 * side Jest's, beside this one, are not this process's descendants). */
const zygoteTree = () => hostProcessesMatching('def _kern_zygote(').map((p) => p.pid).filter(ourDescendant);

/** A process's parent on the host, -1 once it has ended. */
const ppid = (pid) => (procStat(pid) || { ppid: -1 }).ppid;

/** Zygotes proper: members of the tree whose parent is not one (a fork that ended between the
 * scan and the read of its parent is not one either). */
const zygotes = () => treeRoots(zygoteTree());

const CELLS = [
  'print("out")\n6 * 7',
  'import sys\nprint("err", file=sys.stderr)\nraise KeyError("k")',
  'display(1, 2)\nNone',
  'raise SystemExit(5)',
  'import os\nprint(os.getcwd(), os.getuid(), os.getpid(), sorted(os.listdir("/tmp")))',
  'import socket\nprint(socket.gethostname(), sorted(n for _, n in socket.if_nameindex()))',
  'import os\nos.kill(os.getpid(), 9)',
];

const shape = (r) => ({
  stdout: r.stdout,
  stderr: r.stderr,
  exitCode: r.exitCode,
  fault: r.fault,
  signal: r.signal,
  results: r.results.map((x) => x.data),
  error: r.error && { name: r.error.name, value: r.error.value },
});

// What the kernel says of the workload's posture (Seccomp_filters aside: the zygote's forks
// carry the zygote's set-id filter under their own, the same program twice).
const POSTURE = [
  'import os',
  'st = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)',
  'print({k: st[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp") if k in st})',
  'print(open("/proc/sys/user/max_user_namespaces").read().strip())',
  'print(sorted(p for p in os.listdir("/proc") if p.isdigit()), sorted(os.listdir("/proc/self/fd")))',
  // The compiled-stdlib cache (pycCache) is bound into boxes once built; the zygote's box may
  // have started before it was. The zygote's box keeps an unmasked /proc out of everyone's
  // reach, which the kernel needs to mount each call's own (attack/zygote.test.js).
  'print(sorted(set(l.split()[4] for l in open("/proc/self/mountinfo")) - {"/.kern-pyc", "/.kern-proc/p"}))',
  'print(os.path.getsize("/proc/kcore"), os.stat("/proc/kcore").st_rdev == os.stat("/dev/null").st_rdev)',
  'import resource\nprint(resource.getrlimit(resource.RLIMIT_CORE), resource.getrlimit(resource.RLIMIT_NOFILE))',
  // PID 1 is not the workload's to read or trace, in either kind of box.
  'for f in ("mem", "environ", "maps"):',
  '    try:\n        open("/proc/1/" + f, "rb").read(1)\n        print(f, "read")',
  '    except OSError as e:\n        print(f, type(e).__name__)',
  'print(open("/proc/self/status").read().count("TracerPid:\t0"))',
  'import ctypes',
  'libc = ctypes.CDLL(None, use_errno=True)',
  'print("unshare", libc.unshare(0x10000000), "mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))',
].join('\n');

describe('a Sandbox with a zygote', () => {
  let z;
  let fresh;
  beforeAll(async () => {
    z = await new Sandbox(opts({ zygote: true })).open();
    fresh = await new Sandbox(opts()).open();
  });
  afterAll(async () => {
    await z?.close();
    await fresh?.close();
  });

  test('answers as a fresh box does, posture included', async () => {
    for (const code of [...CELLS, POSTURE]) {
      expect(shape(await z.runCode(code))).toEqual(shape(await fresh.runCode(code)));
    }
  });

  test('calls are forked from one zygote, and each draws its own randomness', async () => {
    const code = [
      'import random, os, uuid',
      'print(hash("kern"), random.random(), os.urandom(16).hex(), uuid.uuid4(), random.SystemRandom().random())',
    ].join('\n');
    const lines = [];
    for (let i = 0; i < 4; i++) {
      const r = await z.runCode(code);
      expect(r.fault).toBeNull();
      // A call the zygote could not serve says so, and why.
      expect(r.runtimeNotes.filter((n) => /zygote/.test(n))).toEqual([]);
      lines.push(r.stdout.trim().split(' '));
    }
    // The string hash secret is fixed when the zygote's python starts: the same in every call
    // it forks, which is how these calls are known to come from one zygote (fresh boxes each
    // draw their own).
    expect(new Set(lines.map((l) => l[0])).size).toBe(1);
    const freshHashes = new Set();
    for (let i = 0; i < 2; i++) freshHashes.add((await fresh.runCode(code)).stdout.split(' ')[0]);
    expect(freshHashes.size).toBe(2);
    // Everything else is drawn anew in each call.
    for (let col = 1; col < 5; col++) {
      expect(new Set(lines.map((l) => l[col])).size).toBe(lines.length);
    }
  });

  test('streaming calls and calls with a signal are forked from the zygote too; run() is not', async () => {
    // The zygote's hash secret is in every call it forks; a fresh box draws its own.
    const plain = (await z.runCode('hash("kern")')).results[0].text;
    const chunks = [];
    const streamed = await z.runCode('print(hash("kern"))', { onStdout: (b) => chunks.push(String(b)) });
    const signalled = await z.runCode('print(hash("kern"))', { signal: new AbortController().signal });
    expect([chunks.join(''), streamed.stdout, signalled.stdout]).toEqual([`${plain}\n`, `${plain}\n`, `${plain}\n`]);
    const ran = await z.run(['python3', '-c', 'print(hash("kern"))']);
    expect(ran.stdout).not.toBe(`${plain}\n`);
  });

  test('nothing of a call reaches the next: variables, modules the zygote imported, /tmp, /dev/shm', async () => {
    const first = await z.runCode([
      'import json, sys',
      'secret = 1',
      'json.kern_left = 2',
      'sys.modules["kern_planted"] = json',
      'open("/tmp/left", "w").write("x")',
      'open("/dev/shm/left", "w").write("x")',
      'print("ok")',
    ].join('\n'));
    expect(first.stdout).toBe('ok\n');
    const next = await z.runCode([
      'import json, os, sys',
      'print("secret" in globals(), hasattr(json, "kern_left"), "kern_planted" in sys.modules,',
      '      os.path.exists("/tmp/left"), os.path.exists("/dev/shm/left"))',
    ].join('\n'));
    expect(next.stdout).toBe('False False False False False\n');
  });

  test('a call sees no other process: not the zygote, not a call running beside it', async () => {
    const slow = z.runCode('import time\ntime.sleep(3)\nprint("slow done")');
    const r = await z.runCode([
      'import os, signal',
      'print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))',
    ].join('\n'));
    expect(r.stdout.split('\n')[0]).toBe('[1, 2]');
    expect((await slow).stdout).toBe('slow done\n');
    // The zygote still serves.
    expect((await z.runCode('6 * 7')).results[0].text).toBe('42');
  });

  test('a call that signals every process it may reaches none: not the zygote, not its PID 1', async () => {
    const before = zygotes();
    const r = await z.runCode('import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError:\n    print("none reachable")');
    expect(r.stdout).toBe('none reachable\n');
    expect(r.exitCode).toBe(0);
    expect(zygotes()).toEqual(before);
    expect((await z.runCode('1 + 1')).results[0].text).toBe('2');
  });

  test('a timeout ends the call and everything it started, not the zygote', async () => {
    // A deadline the slow guest's python meets; the cell sleeps well past it.
    const m = uniqueName('zygto');
    let seen = 0;
    const look = () => (seen = Math.max(seen, hostProcessesMatching(m).length));
    // Looked for on the host when "started" is out (Popen has returned: its child exec'd; sh's
    // fork for sleep shows sh's argv until it execs: one or two), and every 100 ms while the call
    // runs: a loaded host may deliver the chunk late.
    const poll = setInterval(look, 100);
    let r;
    try {
      r = await z.runCode(`import subprocess, time\nsubprocess.Popen(["sh", "-c", "sleep 300; : ${m}"])\nprint("started", flush=True)\ntime.sleep(60)`, {
        timeoutS: 5,
        onStdout: look,
      });
    } finally {
      clearInterval(poll);
    }
    expect(seen).toBeGreaterThan(0);
    expect(r.fault).toMatchObject({ type: 'timeout' });
    expect(r.exitCode).toBe(137);
    expect(r.stdout).toBe('started\n');
    expect(await waitFor(() => hostProcessesMatching(m).length === 0, 10000)).toBe(true);
    expect((await z.runCode('1 + 1')).results[0].text).toBe('2');
  });

  test('streaming, an error result and the files a call touched, as a fresh box', async () => {
    const chunks = [];
    const r = await z.runCode('print("a", flush=True)\nopen("made.txt", "w").write("m")\n1/0', {
      onStdout: (b) => chunks.push(String(b)),
    });
    expect(chunks.join('')).toBe('a\n');
    expect(r.error).toMatchObject({ name: 'ZeroDivisionError' });
    expect(r.files.map((f) => f.path)).toContain('made.txt');
  });

  test('only one zygote per Sandbox, and close() leaves none', async () => {
    const before = zygotes();
    const sb = await new Sandbox(opts({ zygote: true })).open();
    const mine = zygotes().filter((p) => !before.includes(p));
    expect(mine).toHaveLength(1);
    expect((await sb.runCode('1')).exitCode).toBe(0);
    // This zygote and its forks (its spares' too), found by their parents while they live.
    const descends = (p) => {
      for (let q = p, hops = 0; q > 1 && hops < 16; q = ppid(q), hops++) if (q === mine[0]) return true;
      return false;
    };
    const its = zygoteTree().filter(descends);
    expect(its.length).toBeGreaterThan(1);
    await sb.close();
    expect(await waitFor(() => zygoteTree().filter((p) => its.includes(p)).length === 0, 10000)).toBe(true);
    expect(zygotes()).toEqual(before);
  });
});

test('a call\'s interpreter is set up as a fresh box\'s: cwd, sys.path (PYTHONPATH, user site), environment, flags', async () => {
  const ws = makeTempDir('kern-zyg-fresh-');
  fs.mkdirSync(path.join(ws, 'abs'));
  const env = { PYTHONPATH: 'rel::/workspace/abs', HOME: '/workspace', PYTHONDONTWRITEBYTECODE: '1', PYTHONPYCACHEPREFIX: '/tmp/pfx', PYTHONHASHSEED: '7' };
  const zs = await new Sandbox(opts({ zygote: true, workspace: ws, env })).open();
  const fs2 = await new Sandbox(opts({ workspace: ws, env })).open();
  try {
    const code = [
      'import json, os, site, sys',
      'env = dict(os.environ)',
      // The compiled-stdlib cache's hook leads PYTHONPATH once the cache is built (the zygote may have started before).
      'env["PYTHONPATH"] = env.get("PYTHONPATH", "").replace("/.kern-pyc/hook:", "")',
      'print(json.dumps({"cwd": os.getcwd(), "path": sys.path, "env": env, "flags": list(sys.flags), "user": [site.ENABLE_USER_SITE, site.getuserbase(), site.getusersitepackages()],',
      '    "prefix": sys.pycache_prefix, "bytecode": sys.dont_write_bytecode, "exe": sys.executable, "hash": hash("kern")}))',
    ].join('\n');
    // Without a user site, then with one (HOME is the workspace).
    for (const mk of [false, true]) {
      if (mk) await fs2.runCode('import os, site\nos.makedirs(site.getusersitepackages())');
      const a = await zs.runCode(code);
      const b = await fs2.runCode(code);
      expect(a.exitCode).toBe(0);
      expect(JSON.parse(a.stdout)).toEqual(JSON.parse(b.stdout));
      expect(JSON.parse(a.stdout).path.some((p) => p.startsWith('/workspace/.local/'))).toBe(mk);
    }
  } finally {
    await zs.close();
    await fs2.close();
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test('a zygote killed from outside: later calls run in fresh boxes, with the same answers', async () => {
  const before = zygotes();
  const beforeTree = zygoteTree();
  const sb = await new Sandbox(opts({ zygote: true })).open();
  try {
    const mine = zygotes().filter((p) => !before.includes(p));
    expect(mine).toHaveLength(1);
    const first = await sb.runCode('hash("kern")');
    process.kill(mine[0], 'SIGKILL');
    const left = () => zygoteTree().filter((p) => !before.includes(p) && !beforeTree.includes(p));
    expect(await waitFor(() => left().length === 0, 10000)).toBe(true);
    const told = [];
    for (let i = 0; i < 4; i++) {
      const r = await sb.runCode('print("fresh")\nhash("kern")');
      told.push(...r.runtimeNotes.filter((n) => /the Sandbox's zygote has ended/.test(n)));
      expect(r.fault).toBeNull();
      expect(r.stdout).toBe('fresh\n');
      // A fresh box's interpreter draws its own hash secret.
      expect(r.results[0].text).not.toBe(first.results[0].text);
    }
    // Said once, not silently.
    expect(told).toHaveLength(1);
  } finally {
    await sb.close();
  }
});

(capsEnforced ? test : test.skip)('caps hold per call: a call over the memory cap is an OOM fault, the next call runs', async () => {
  const sb = await new Sandbox(opts({ zygote: true, memoryMb: 128 })).open();
  try {
    const r = await sb.runCode('x = bytearray(400 << 20)\nprint("survived")');
    expect(r.fault).toMatchObject({ type: 'oom' });
    expect(r.stdout).toBe('');
    const ok = await sb.runCode('x = bytearray(64 << 20)\nprint("fits")');
    expect(ok.stdout).toBe('fits\n');
  } finally {
    await sb.close();
  }
});

test('options the zygote cannot honour are refused at open(), before any box', async () => {
  for (const extra of [{ network: true }, { securityProfile: 'untrusted' }, { capDrop: ['SETFCAP'] }, { persist: true, name: 'zyg', workspace: makeTempDir() }]) {
    await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ zygote: true, ...extra }), /zygote/);
  }
  await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ zygote: 'yes' }), /zygote/);
});
