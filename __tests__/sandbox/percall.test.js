'use strict';
// rootless: yes
// Per-call options beyond the spec (issue 19, ADDITIONS in index.d.ts): a call's own `env`,
// `cwd`, `stdin` and `signal`, and the result's `signal`, `stdoutTruncated` and
// `stderrTruncated`, through the public API, in python, bash and node. Root and rootless alike.

const { opts, sharedSandbox, makeTempDir, uniqueName, hostProcessesMatching, waitFor } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const sb = sharedSandbox({ env: { FROM_SANDBOX: 'sb', BOTH: 'sandbox' } });

// Each language prints FROM_SANDBOX, BOTH, ONLY_CALL and its cwd, one per line.
const PRINT_ENV_AND_CWD = {
  python: 'import os\nfor k in ("FROM_SANDBOX", "BOTH", "ONLY_CALL"): print(os.environ.get(k, "-"))\nprint(os.getcwd())',
  bash: 'for k in FROM_SANDBOX BOTH ONLY_CALL; do echo "${!k:--}"; done; pwd -P',
  node: 'for (const k of ["FROM_SANDBOX", "BOTH", "ONLY_CALL"]) console.log(process.env[k] ?? "-"); console.log(process.cwd())',
};

describe('per-call env and cwd', () => {
  beforeAll(async () => {
    await sb.writeFile('sub/dir/marker.txt', 'here');
  });

  test.each(Object.keys(PRINT_ENV_AND_CWD))('%s: a call\'s env goes over the Sandbox\'s, its cwd is workspace-relative', async (language) => {
    const r = await sb.runCode(PRINT_ENV_AND_CWD[language], {
      language,
      env: { BOTH: 'call', ONLY_CALL: 'yes' },
      cwd: 'sub/dir',
    });
    expect(r.fault).toBeNull();
    expect(r.stdout).toBe('sb\ncall\nyes\n/workspace/sub/dir\n');
    // Only that call: the next one is back to the Sandbox's env and the workspace.
    const plain = await sb.runCode(PRINT_ENV_AND_CWD[language], { language });
    expect(plain.stdout).toBe('sb\nsandbox\n-\n/workspace\n');
  });

  test('run(): env and cwd, an absolute cwd under the workspace, `..` inside it', async () => {
    const r = await sb.run(['sh', '-c', 'echo "$ONLY_CALL"; cat marker.txt; echo; pwd'], {
      env: { ONLY_CALL: 'argv-free' },
      cwd: '/workspace/sub/x/../dir',
    });
    expect(r.stdout).toBe('argv-free\nhere\n/workspace/sub/dir\n');
    // The value is in the environment, not on any argv the box can list.
    const ps = await sb.run(['sh', '-c', 'cat /proc/[0-9]*/cmdline | tr "\\0" " "'], { env: { SECRET_TOKEN: 'tok-8f3a' } });
    expect(ps.stdout).not.toContain('tok-8f3a');
  });

  test('python imports from its cwd', async () => {
    await sb.writeFile('pkg/helper_mod.py', 'VALUE = 42\n');
    const r = await sb.runCode('import helper_mod\nprint(helper_mod.VALUE)', { cwd: 'pkg' });
    expect(r.stdout).toBe('42\n');
  });

  test('bad env entries are SandboxErrors that name the rule', async () => {
    await expect(sb.run(['true'], { env: { 'A=B': 'x' } })).rejects.toThrow(/option `env`: "A=B" is not a valid variable/);
    await expect(sb.run(['true'], { env: { A: 1 } })).rejects.toThrow(/option `env`: the value of "A" must be a string/);
    await expect(sb.run(['true'], { env: 'A=1' })).rejects.toThrow(SandboxError);
  });

  test.each([
    ['..', /leads out of the workspace through `..`/],
    ['a/../../etc', /leads out of the workspace through `..`/],
    ['', /option `cwd` is empty/],
  ])('cwd %j is refused before any box starts', async (cwd, why) => {
    const e = await sb.run(['true'], { cwd }).catch((x) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect(e.message).toMatch(why);
  });

  test('an absolute cwd names any directory of the box, in the box\'s own tree', async () => {
    // /etc here is the image's, not the host's: the image's os-release, not the host's file.
    const r = await sb.run(['sh', '-c', 'pwd; cat os-release | head -1'], { cwd: '/etc' });
    expect(r.exitCode).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe('/etc');
    expect(r.stdout).toContain('Debian');
    const py = await sb.runCode('import os\nprint(os.getcwd())\nopen("here.txt", "w").write("x")', { cwd: '/tmp/../tmp/.' });
    expect(py.stdout).toBe('/tmp\n');
    // The box's /tmp is its own scratch: nothing of the call's reached the workspace.
    expect(py.files.map((f) => f.path)).not.toContain('here.txt');
    const root = await sb.run(['pwd'], { cwd: '/..' });
    expect(root.stdout).toBe('/\n');
    const missing = await sb.run(['true'], { cwd: '/no/such/dir' }).catch((x) => x);
    expect(missing).toBeInstanceOf(SandboxError);
    expect(missing.code).toBe('ERR_INVALID_OPTION');
    expect(missing.message).toMatch(/option `cwd`: "\/no\/such\/dir" does not exist in the box/);
    const file = await sb.run(['true'], { cwd: '/etc/hostname' }).catch((x) => x);
    expect(file).toBeInstanceOf(SandboxError);
    expect(file.message).toMatch(/"\/etc\/hostname" is not a directory in the box/);
  });

  test('a cwd missing in the box, a file, or a symlink out of the workspace is a SandboxError from the box', async () => {
    const missing = await sb.runCode('print(1)', { cwd: 'no/such/dir' }).catch((x) => x);
    expect(missing).toBeInstanceOf(SandboxError);
    expect(missing.message).toMatch(/option `cwd`: "no\/such\/dir" does not exist in the box's workspace/);
    const file = await sb.run(['true'], { cwd: 'sub/dir/marker.txt' }).catch((x) => x);
    expect(file).toBeInstanceOf(SandboxError);
    expect(file.message).toMatch(/is not a directory/);
    // A box plants a symlink to its /etc; a later call asked to start there is refused.
    const planted = await sb.run(['ln', '-sfn', '/etc', 'out-link']);
    expect(planted.exitCode).toBe(0);
    const escaped = await sb.run(['pwd'], { cwd: 'out-link' }).catch((x) => x);
    expect(escaped).toBeInstanceOf(SandboxError);
    expect(escaped.message).toMatch(/"out-link" leads to \/etc, outside the workspace/);
  });
});

// Each language echoes its stdin, byte for byte, and says how many bytes it read.
const ECHO_STDIN = {
  python: 'import sys\ndata = sys.stdin.buffer.read()\nsys.stdout.buffer.write(data)\nprint(len(data))',
  bash: 'data=$(cat; echo .); data=${data%.}; printf %s "$data"; printf "%s\\n" "$(printf %s "$data" | wc -c)"',
  node: 'const d = require("fs").readFileSync(0); process.stdout.write(d); console.log(d.length)',
};

describe('per-call stdin', () => {
  test.each(Object.keys(ECHO_STDIN))('%s reads the call\'s stdin, then end-of-file', async (language) => {
    const r = await sb.runCode(ECHO_STDIN[language], { language, stdin: 'line one\nline two\n' });
    expect(r.fault).toBeNull();
    expect(r.stdout).toBe('line one\nline two\n18\n');
  });

  test('run(): a Buffer larger than a pipe holds arrives whole; without stdin it is /dev/null', async () => {
    const big = Buffer.alloc(3 << 20, 'abcdefgh');
    const r = await sb.run(['sh', '-c', 'wc -c; readlink /proc/self/fd/0 | cut -c1-5'], { stdin: big });
    expect(r.stdout).toBe(`${big.length}\npipe:\n`);
    const none = await sb.run(['sh', '-c', 'wc -c; readlink /proc/self/fd/0 | cut -c1-5']);
    expect(none.stdout).toMatch(/^0\n/);
    expect(none.stdout).not.toContain('pipe:');
  });

  test('a workload that exits without reading its stdin just ends', async () => {
    const r = await sb.run(['true'], { stdin: Buffer.alloc(4 << 20) });
    expect(r.exitCode).toBe(0);
    expect(r.fault).toBeNull();
  });

  test('stdin over 16 MiB, or of another type, is a SandboxError', async () => {
    await expect(sb.run(['true'], { stdin: Buffer.alloc((16 << 20) + 1) })).rejects.toThrow(/option `stdin` is 16777217 bytes; a call.s stdin may hold at most 16777216 bytes \(16 MiB\)/);
    await expect(sb.run(['true'], { stdin: 42 })).rejects.toThrow(/option `stdin` must be a string or a Buffer/);
  });
});

/** Starts `start(signal, onStdout)` (a call that prints "up" once its processes run, each
 * with `marker` in its cmdline), aborts it once "up" came and the host sees them, and returns
 * the rejection and the host processes with the marker right after it. */
async function abortOnceUp(marker, start, reason) {
  const ac = new AbortController();
  let up;
  const isUp = new Promise((resolve) => (up = resolve));
  // "up" and its newline may come in two writes (python's print with an unbuffered stdout): the
  // abort waits for the whole line, or the newline is (rightly) never written.
  let seen = '';
  const call = start(ac.signal, (chunk) => {
    seen += chunk.toString();
    if (seen.includes('up\n')) up();
  });
  const settled = call.then(
    (r) => ({ resolved: r }),
    (e) => ({ rejected: e }),
  );
  await isUp;
  // The marked processes were started before "up" was printed; waited for all the same (a
  // bounded wait, not a timing assertion: a test that finds none still fails below).
  await waitFor(() => hostProcessesMatching(marker).length > 0);
  const before = hostProcessesMatching(marker);
  if (reason === undefined) ac.abort();
  else ac.abort(reason);
  const outcome = await settled;
  return { outcome, before, after: hostProcessesMatching(marker) };
}

describe('per-call signal', () => {
  test('run(): abort during `sleep 30` ends the box and everything in it, then rejects with an AbortError', async () => {
    const marker = uniqueName('percallabort');
    // Forks of the shell keep its cmdline, marker and all; `done-<marker>` appears only if
    // the sleep ran out, which an abort must prevent (the timeout, past the sleep, lets the
    // file appear when the abort kills nothing).
    const script = `(while :; do sleep 1; done) & (sleep 30; touch done-${marker}) & echo up; wait`;
    const { outcome, before, after } = await abortOnceUp(marker, (signal, onStdout) =>
      sb.run(['sh', '-c', script, marker], { signal, onStdout, timeoutS: 40 }),
    );
    expect(before.length).toBeGreaterThanOrEqual(3);
    expect(outcome.rejected).toBeInstanceOf(DOMException);
    expect(outcome.rejected.name).toBe('AbortError');
    expect(after).toEqual([]);
    expect((await sb.listFiles()).map((f) => f.path)).not.toContain(`done-${marker}`);
  });

  test.each([
    // `sleep 30; :`, not `sleep 30`: a shell execs a -c script's last command in its own place,
    // and the marker (its $0) would vanish from the process list before the scan, or not.
    ['python', (m) => `import subprocess, time\np = subprocess.Popen(["sh", "-c", "sleep 30; :", "${m}"])\nprint("up", flush=True)\ntime.sleep(30)`],
    ['bash', (m) => `bash -c 'sleep 30; :' ${m} & echo up; wait`],
    ['node', (m) => `require("child_process").spawn("sh", ["-c", "sleep 30; :", "${m}"], { stdio: "inherit" }); console.log("up")`],
  ])('%s runCode: aborted with a reason of its own, it rejects with that reason once the box is gone', async (language, code) => {
    const marker = uniqueName('percallabort');
    const reason = new Error(`stop ${language}`);
    const { outcome, before, after } = await abortOnceUp(marker, (signal, onStdout) =>
      sb.runCode(code(marker), { language, signal, onStdout }), reason);
    expect(before.length).toBeGreaterThanOrEqual(1);
    expect(outcome.rejected).toBe(reason);
    expect(after).toEqual([]);
  });

  test('an already-aborted signal rejects with its reason and starts no box', async () => {
    const name = uniqueName('percallnever');
    const e = await sb.run(['touch', name], { signal: AbortSignal.abort() }).catch((x) => x);
    expect(e).toBeInstanceOf(DOMException);
    expect(e.name).toBe('AbortError');
    const reason = new Error('never started');
    await expect(sb.runCode(`open("${name}", "w")`, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    // A call after them has come and gone; neither of them ever wrote.
    await sb.run(['true']);
    expect((await sb.listFiles()).map((f) => f.path)).not.toContain(name);
  });

  test('a signal that is never aborted changes nothing; one aborted after the call is ignored', async () => {
    const ac = new AbortController();
    const r = await sb.run(['echo', 'fine'], { signal: ac.signal });
    expect(r.stdout).toBe('fine\n');
    ac.abort();
    const again = await sb.runCode('print(2)', { signal: new AbortController().signal });
    expect(again.stdout).toBe('2\n');
  });

  test('a signal that is not an AbortSignal is a SandboxError', async () => {
    await expect(sb.run(['true'], { signal: { aborted: false } })).rejects.toThrow(/option `signal` must be an AbortSignal/);
  });

  test('onAbort: "resolve": the aborted call resolves with what it made until the abort, its box gone', async () => {
    const marker = uniqueName('percallkeep');
    const script = `echo before-abort; echo err-before >&2; (sleep 30; touch done-${marker}) & echo up; wait; echo after-abort`;
    const { outcome, before, after } = await abortOnceUp(marker, (signal, onStdout) =>
      sb.run(['sh', '-c', script, marker], { signal, onStdout, onAbort: 'resolve', timeoutS: 40 }),
    );
    expect(before.length).toBeGreaterThanOrEqual(1);
    const r = outcome.resolved;
    expect(r).toBeDefined();
    expect({ stdout: r.stdout, codeStderr: r.codeStderr, success: r.success, fault: r.fault }).toEqual({
      stdout: 'before-abort\nup\n',
      codeStderr: 'err-before\n',
      success: false,
      fault: { type: 'killed', message: 'the call was aborted; its box and everything in it were ended' },
    });
    expect(after).toEqual([]);
    expect((await sb.listFiles()).map((f) => f.path)).not.toContain(`done-${marker}`);
  });

  test('onAbort: "resolve" in runCode keeps the streamed output; a call aborted before it starts still rejects', async () => {
    const marker = uniqueName('percallkeepcode');
    const { outcome, after } = await abortOnceUp(marker, (signal, onStdout) =>
      sb.runCode(`import subprocess, time\np = subprocess.Popen(["sh", "-c", "sleep 30; :", "${marker}"])\nprint("partial", flush=True)\nprint("up", flush=True)\ntime.sleep(30)\nprint("never")`, { signal, onStdout, onAbort: 'resolve' }),
    );
    expect(outcome.resolved.stdout).toBe('partial\nup\n');
    expect(outcome.resolved.fault.type).toBe('killed');
    expect(after).toEqual([]);
    const reason = new Error('never started');
    await expect(sb.run(['true'], { signal: AbortSignal.abort(reason), onAbort: 'resolve' })).rejects.toBe(reason);
    await expect(sb.run(['true'], { onAbort: 'keep' })).rejects.toThrow(/option `onAbort` takes "reject".*or "resolve"/);
  });
});

describe('result.signal', () => {
  test.each([
    ['bash', 'kill -9 $$', 'SIGKILL', 137],
    ['python', 'import os, signal\nos.kill(os.getpid(), signal.SIGTERM)', 'SIGTERM', 143],
    ['node', 'process.kill(process.pid, "SIGHUP")', 'SIGHUP', 129],
  ])('%s killed by a signal says which', async (language, code, signal, exitCode) => {
    const r = await sb.runCode(code, { language });
    expect(r.signal).toBe(signal);
    expect(r.exitCode).toBe(exitCode);
    expect(r.fault).toBeNull();
  });

  test('an exit code of 137 is not a signal; a clean exit has none', async () => {
    const r = await sb.run(['sh', '-c', 'exit 137']);
    expect(r.exitCode).toBe(137);
    expect(r.signal).toBeNull();
    expect((await sb.run(['true'])).signal).toBeNull();
  });

  test('a box ended at its timeout was ended with SIGKILL', async () => {
    const r = await sb.run(['sleep', '30'], { timeoutS: 0.5 });
    expect(r.fault && r.fault.type).toBe('timeout');
    expect(r.signal).toBe('SIGKILL');
  });
});

describe('stdoutTruncated and stderrTruncated', () => {
  test('each says which stream hit maxOutputBytes; truncated is either', async () => {
    const s = await new Sandbox(opts({ maxOutputBytes: 1000 })).open();
    try {
      const out = await s.runCode('import sys\nsys.stdout.write("o" * 5000)\nsys.stderr.write("e" * 10)');
      expect([out.stdoutTruncated, out.stderrTruncated, out.truncated]).toEqual([true, false, true]);
      expect(out.stdout.length).toBe(1000);
      const err = await s.run(['sh', '-c', 'head -c 5000 /dev/zero >&2; echo small']);
      expect([err.stdoutTruncated, err.stderrTruncated, err.truncated]).toEqual([false, true, true]);
      const neither = await s.run(['echo', 'small']);
      expect([neither.stdoutTruncated, neither.stderrTruncated, neither.truncated]).toEqual([false, false, false]);
    } finally {
      await s.close();
    }
  });
});

describe('per-call env, cwd and stdin with prewarm', () => {
  test('a python call with env, cwd or stdin runs with them (not in a prewarmed box started without them)', async () => {
    const s = await new Sandbox(opts({ prewarm: 1 })).open();
    try {
      await s.writeFile('w/x.txt', '');
      const r = await s.runCode('import os\nprint(os.environ.get("PER_CALL"), os.getcwd())', { env: { PER_CALL: 'p' }, cwd: 'w' });
      expect(r.stdout).toBe('p /workspace/w\n');
      const plain = await s.runCode('import os\nprint(os.environ.get("PER_CALL"), os.getcwd())');
      expect(plain.stdout).toBe('None /workspace\n');
      const fed = await s.runCode('import sys\nprint(sys.stdin.read())', { stdin: 'fed' });
      expect(fed.stdout).toBe('fed\n');
    } finally {
      await s.close();
    }
  });
});

describe('per-call options in a resident box (persist)', () => {
  test('a call into a resident box takes env, cwd and stdin too', async () => {
    const s = await new Sandbox(opts({ persist: true, name: uniqueName('percall'), workspace: makeTempDir() })).open();
    try {
      await s.writeFile('in/here.txt', '');
      const r = await s.run(['sh', '-c', 'echo "$PER_CALL $(pwd)"; cat'], { env: { PER_CALL: 'resident' }, cwd: 'in', stdin: 'fed\n' });
      expect(r.fault).toBeNull();
      expect(r.stdout).toBe('resident /workspace/in\nfed\n');
      const missing = await s.run(['true'], { cwd: 'nowhere' }).catch((x) => x);
      expect(missing).toBeInstanceOf(SandboxError);
      expect(missing.message).toMatch(/"nowhere" does not exist in the box's workspace/);
    } finally {
      await s.destroy();
      await s.close();
    }
  });
});
