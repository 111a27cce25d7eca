'use strict';
// rootless: yes
// Per-call options beyond the spec (issue 19, ADDITIONS in index.d.ts): a call's own `env` and
// `cwd`, through the public API, in python, bash and node. Root and rootless alike.

const { opts, sharedSandbox } = require('./helpers');
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

describe('per-call env and cwd with prewarm', () => {
  test('a python call with env or cwd runs with them (not in a prewarmed box started without them)', async () => {
    const s = await new Sandbox(opts({ prewarm: 1 })).open();
    try {
      await s.writeFile('w/x.txt', '');
      const r = await s.runCode('import os\nprint(os.environ.get("PER_CALL"), os.getcwd())', { env: { PER_CALL: 'p' }, cwd: 'w' });
      expect(r.stdout).toBe('p /workspace/w\n');
      const plain = await s.runCode('import os\nprint(os.environ.get("PER_CALL"), os.getcwd())');
      expect(plain.stdout).toBe('None /workspace\n');
    } finally {
      await s.close();
    }
  });
});
