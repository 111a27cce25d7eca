'use strict';
// rootless: yes
// Core behaviour. CI runs this file twice: as root and as an unprivileged user. Every test must pass
// in both; it branches on `capsEnforced` only where the behaviour legitimately differs (an enforced cgroup
// cap vs a best-effort rlimit with a runtime note).

const fs = require('fs');
const os = require('os');
const path = require('path');
const {
  ROOTFS,
  capsEnforced,
  opts,
  uniqueName,
  makeTempDir,
  findFileNamed,
  summary,
  expectOk,
  sharedSandbox,
} = require('../helpers');

const kern = require('../..');
const { Sandbox, ExecutionResult } = kern;

const sb = sharedSandbox();

describe('languages', () => {
  test.each([
    ['python', 'import sys\nprint("py", sys.version_info[0])\n', /^py 3\n$/],
    // ${BASH_VERSINFO[0]} is a "Bad substitution" in dash: this proves bash really ran bash.
    ['bash', 'echo "bash ${BASH_VERSINFO[0]}"\n', /^bash \d+\n$/],
    // ...and this proves `sh` is the POSIX shell, not bash under another name.
    ['sh', 'echo sh\n[ -z "$BASH_VERSION" ] && echo notbash\n', /^sh\nnotbash\n$/],
    ['node', 'console.log("node", typeof process.versions.node, 6 * 7)\n', /^node string 42\n$/],
  ])('runCode %s runs that interpreter', async (language, code, want) => {
    const r = await sb.runCode(code, { language });
    expectOk(r);
    expect(r).toBeInstanceOf(ExecutionResult);
    expect(r.stdout).toMatch(want);
    expect(r.codeStderr).toBe('');
    expect(typeof r.durationMs).toBe('number');
    expect(r.durationMs).toBeGreaterThanOrEqual(0);
    expect(Array.isArray(r.results)).toBe(true);
    expect(r.truncated).toBe(false);
  });

  test('python is the default language', async () => {
    const r = await sb.runCode('print(6 * 7)');
    expectOk(r);
    expect(r.stdout).toBe('42\n');
  });

  test('stdout and stderr are captured separately', async () => {
    const r = await sb.runCode('echo out; echo err >&2; echo out2', { language: 'sh' });
    expectOk(r);
    expect(r.stdout).toBe('out\nout2\n');
    expect(r.codeStderr).toBe('err\n');
    expect(r.stderr).toContain('err\n');
  });
});

describe('run(argv)', () => {
  test('argv is passed verbatim: spaces, $HOME, globs and substitutions are not shell-interpreted', async () => {
    const args = ['a b  c', '$HOME', '*', '$(id)', ';ls', '"q"', ''];
    const r = await sb.run(['printf', '%s|', ...args]);
    expectOk(r);
    expect(r.stdout).toBe(args.map((a) => `${a}|`).join(''));
  });

  test('exit 3 -> exitCode 3, no fault, success false', async () => {
    const r = await sb.run(['sh', '-c', 'echo before; exit 3']);
    expect(summary(r)).toMatchObject({ exitCode: 3, fault: null, stdout: 'before\n' });
    expect(r.success).toBe(false);
  });

  test('python sys.exit(7) -> exitCode 7, no fault', async () => {
    const r = await sb.runCode('import sys\nsys.exit(7)');
    expect(summary(r)).toMatchObject({ exitCode: 7, fault: null });
    expect(r.success).toBe(false);
  });

  test('python exception -> exitCode 1, traceback in codeStderr, no fault', async () => {
    const marker = uniqueName('boom');
    const r = await sb.runCode(`print("before", flush=True)\nraise ValueError("${marker}")\n`);
    expect(summary(r)).toMatchObject({ exitCode: 1, fault: null, stdout: 'before\n' });
    expect(r.success).toBe(false);
    expect(r.codeStderr).toMatch(/Traceback \(most recent call last\)/);
    expect(r.codeStderr).toContain(`ValueError: ${marker}`);
  });

  test.each([['/nonexistent/bin'], ['no-such-prog-kern-test']])(
    'missing binary %s -> exec_failed fault naming it',
    async (bin) => {
      const r = await sb.run([bin, '--flag']);
      expect(r.fault).not.toBeNull();
      expect(r.fault.type).toBe('exec_failed');
      expect(r.fault.message).toContain(bin);
      expect(r.success).toBe(false);
    }
  );
});

describe('missing interpreter in the image', () => {
  // A rootfs directory with the usual mount points and no binaries at all.
  let bare;
  let bareSb;
  beforeAll(async () => {
    bare = makeTempDir('kern-bare-rootfs-');
    fs.chmodSync(bare, 0o755);
    for (const d of ['proc', 'dev', 'sys', 'tmp', 'etc', 'usr/bin', 'run', 'workspace']) {
      fs.mkdirSync(path.join(bare, d), { recursive: true });
    }
    fs.symlinkSync('usr/bin', path.join(bare, 'bin'));
    bareSb = await new Sandbox({ image: bare }).open();
  });
  afterAll(async () => {
    if (bareSb) await bareSb.close();
    fs.rmSync(bare, { recursive: true, force: true });
  });

  test.each([
    ['bash', /bash/],
    ['python', /python/],
    ['node', /node/],
  ])('runCode %s on an image without it -> exec_failed naming it', async (language, name) => {
    const r = await bareSb.runCode('echo hi', { language });
    expect(r.fault).not.toBeNull();
    expect(r.fault.type).toBe('exec_failed');
    expect(r.fault.message).toMatch(name);
    expect(r.success).toBe(false);
  });
});

describe('deadlines', () => {
  test('per-call timeoutS: sleep 100 with timeoutS 1 -> timeout fault', async () => {
    const r = await sb.run(['sleep', '100'], { timeoutS: 1 });
    expect(r.fault).not.toBeNull();
    expect(r.fault.type).toBe('timeout');
    expect(typeof r.fault.message).toBe('string');
    expect(r.success).toBe(false);
  });

  // 5 s, not 1: python must start and print before the deadline, and in the one-vCPU
  // cgroup-v2 guest on a busy host that once took longer than a second.
  test('session timeoutS applies to every call', async () => {
    const s = await new Sandbox(opts({ timeoutS: 5 })).open();
    try {
      const r = await s.runCode('import time\nprint("go", flush=True)\ntime.sleep(100)\n');
      expect(r.fault && r.fault.type).toBe('timeout');
      expect(r.stdout).toBe('go\n');
    } finally {
      await s.close();
    }
  });

  test('the sandbox is usable after a timeout', async () => {
    await sb.run(['sleep', '100'], { timeoutS: 1 });
    expectOk(await sb.run(['true']));
  });
});

describe('memory cap', () => {
  test('400 MB allocation under memoryMb 64 does not succeed (oom fault, or MemoryError + note when best-effort)', async () => {
    const s = await new Sandbox(opts({ memoryMb: 64 })).open();
    try {
      const r = await s.runCode(
        'b = b"x" * (400 * 1024 * 1024)\nprint("ALLOCATED", len(b))\n',
        { timeoutS: 60 }
      );
      expect(r.stdout).not.toContain('ALLOCATED');
      expect(r.success).toBe(false);
      if (capsEnforced || r.fault) {
        // As root (or rootless with a delegated cgroup, see capsEnforced) the cgroup cap must be
        // enforced; rootless otherwise it may be.
        expect(summary(r)).toMatchObject({ fault: { type: 'oom' } });
        expect(r.fault.message.length).toBeGreaterThan(10);
      } else {
        // Best effort: an rlimit stops the allocation and kern says the cap was downgraded.
        expect(summary(r)).toMatchObject({ exitCode: 1, fault: null });
        expect(r.codeStderr).toMatch(/MemoryError/);
        expect(r.runtimeNotes.join('\n')).toMatch(/memory/);
      }
    } finally {
      await s.close();
    }
  });

  test('a modest allocation under the default cap succeeds', async () => {
    const r = await sb.runCode('b = b"x" * (50 * 1024 * 1024)\nprint(len(b))\n');
    expectOk(r);
    expect(r.stdout).toBe(`${50 * 1024 * 1024}\n`);
  });
});

describe('signals', () => {
  test('the workload starts with default signal dispositions (SIGPIPE ends a writer, as in a shell)', async () => {
    const r = await sb.runCode('yes | head -c1 >/dev/null; echo "${PIPESTATUS[@]}"; grep SigIgn /proc/self/status', {
      language: 'bash',
    });
    expectOk(r);
    expect(r.stdout).toMatch(/^141 0\n/);
    expect(r.stdout).toMatch(/SigIgn:\s+0{16}/);
  });
});

describe('task cap', () => {
  test('pids 32 stops a process that forks without end (cgroup, or RLIMIT_NPROC when best-effort)', async () => {
    const s = await new Sandbox(opts({ pids: 32 })).open();
    try {
      const r = await s.runCode(
        [
          'import os, time',
          'n = 0',
          'for _ in range(200):',
          '    try:',
          '        pid = os.fork()',
          '    except OSError:',
          '        break',
          // Children live past the loop however slow it is (a child that ended would free its slot).
          '    if pid == 0:',
          '        time.sleep(60)',
          '        os._exit(0)',
          '    n += 1',
          'print("forked", n)',
        ].join('\n'),
        { timeoutS: 30 }
      );
      expect(r.fault).toBeNull();
      const forked = Number((r.stdout.match(/^forked (\d+)$/m) || [])[1]);
      // The box's PID 1 and python itself are two of the 32 tasks.
      expect(forked).toBeGreaterThan(0);
      expect(forked).toBeLessThanOrEqual(30);
    } finally {
      await s.close();
    }
  });
});

describe('workspace and box state', () => {
  test('cwd is /workspace; files persist across calls, /tmp does not', async () => {
    const name = uniqueName('f');
    const r1 = await sb.runCode(
      `import os\nprint(os.getcwd())\nopen("${name}", "w").write("kept")\nopen("/tmp/${name}", "w").write("gone")\n`
    );
    expectOk(r1);
    expect(r1.stdout).toBe('/workspace\n');
    const r2 = await sb.runCode(
      `import os\nprint(open("/workspace/${name}").read())\nprint(os.path.exists("/tmp/${name}"))\n`
    );
    expectOk(r2);
    expect(r2.stdout).toBe('kept\nFalse\n');
  });

  test('env option reaches the workload', async () => {
    const s = await new Sandbox(opts({ env: { KERN_T_A: 'a value with spaces', KERN_T_B: '$HOME;x' } })).open();
    try {
      const r = await s.run(['sh', '-c', 'printf "%s|%s" "$KERN_T_A" "$KERN_T_B"']);
      expectOk(r);
      expect(r.stdout).toBe('a value with spaces|$HOME;x');
    } finally {
      await s.close();
    }
  });

  test('user-provided workspace: host files are visible in the box and box files on the host', async () => {
    const ws = makeTempDir('kern-core-ws-');
    fs.writeFileSync(path.join(ws, 'from-host.txt'), 'hello from host');
    const s = await new Sandbox(opts({ workspace: ws })).open();
    try {
      const r = await s.run(['sh', '-c', 'cat from-host.txt; printf box > from-box.txt']);
      expectOk(r);
      expect(r.stdout).toBe('hello from host');
      expect(fs.readFileSync(path.join(ws, 'from-box.txt'), 'utf8')).toBe('box');
    } finally {
      await s.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
  });
});

describe('temp workspace cleanup', () => {
  test('the temp workspace is private to the caller (no group/other access)', async () => {
    const s = await new Sandbox(opts()).open();
    try {
      const name = uniqueName('wsmode');
      expectOk(await s.run(['sh', '-c', `printf x > ${name}`]));
      const hits = findFileNamed(os.tmpdir(), name, 3);
      expect(hits.length).toBe(1);
      const st = fs.statSync(path.dirname(hits[0]));
      expect((st.mode & 0o777).toString(8)).toBe('700');
      expect(st.uid).toBe(process.getuid());
    } finally {
      await s.close();
    }
  });

  test('close() deletes the temp workspace even when the box left read-only dirs in it', async () => {
    const s = await new Sandbox(opts()).open();
    const name = uniqueName('wsprobe');
    let wsDir = null;
    try {
      expectOk(
        await s.run(['sh', '-c', `printf probe > ${name} && mkdir -p ro/deeper && echo x > ro/deeper/f && chmod 0500 ro/deeper ro`])
      );
      const hits = findFileNamed(os.tmpdir(), name, 3);
      expect(hits.length).toBe(1); // the temp workspace lives under os.tmpdir()
      wsDir = path.dirname(hits[0]);
      expect(fs.existsSync(path.join(wsDir, 'ro', 'deeper', 'f'))).toBe(true);
    } finally {
      await s.close();
    }
    expect(fs.existsSync(wsDir)).toBe(false);
  });
});

describe('isolation posture (both root and rootless)', () => {
  test('no capabilities, no_new_privs, hostname kern', async () => {
    const r = await sb.run(['cat', '/proc/self/status', '/proc/sys/kernel/hostname']);
    expectOk(r);
    for (const cap of ['CapEff', 'CapPrm', 'CapBnd', 'CapAmb']) {
      expect(r.stdout).toMatch(new RegExp(`^${cap}:\\s+0{16}$`, 'm'));
    }
    expect(r.stdout).toMatch(/^NoNewPrivs:\s+1$/m);
    expect(r.stdout.trim().split('\n').pop()).toBe('kern');
  });

  test('root filesystem is read-only; /workspace and /tmp are writable', async () => {
    const name = uniqueName('ro');
    const r = await sb.run([
      'sh',
      '-c',
      `touch /usr/${name} 2>/dev/null && echo usr-writable; ` +
        `touch /tmp/${name} && echo tmp-ok; touch /workspace/${name} && echo ws-ok`,
    ]);
    expectOk(r);
    expect(r.stdout).toBe('tmp-ok\nws-ok\n');
    expect(fs.existsSync(path.join(ROOTFS, 'usr', name))).toBe(false);
  });

  test('network namespace has only lo and no route out', async () => {
    const r = await sb.runCode(
      [
        'import socket',
        'print(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))',
        's = socket.socket()',
        's.settimeout(3)',
        'try:',
        '    s.connect(("1.1.1.1", 80)); print("CONNECTED")',
        'except OSError as e:',
        '    print("blocked")',
      ].join('\n')
    );
    expectOk(r);
    expect(r.stdout).toBe("['lo']\nblocked\n");
  });
});

describe('one-shot', () => {
  test('module-level runCode runs in a throwaway session', async () => {
    const r = await kern.runCode('echo one-shot', opts({ language: 'bash' }));
    expectOk(r);
    expect(r.stdout).toBe('one-shot\n');
  });
});
