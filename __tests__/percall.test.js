'use strict';
// rootless: yes
// Per-call options beyond the spec (issue 19, ADDITIONS in index.d.ts): a call's own `env`,
// `cwd` and `stdin`, through the public API, in python, bash and node. Root and rootless alike.

const { opts, sharedSandbox, makeTempDir, uniqueName } = require('./helpers');
const { Sandbox, SandboxError } = require('..');

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
    ['/etc', /"\/etc" is outside the workspace/],
    ['', /option `cwd` is empty/],
  ])('cwd %j is refused before any box starts', async (cwd, why) => {
    const e = await sb.run(['true'], { cwd }).catch((x) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect(e.message).toMatch(why);
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
