'use strict';
// rootless: yes
// A kernel cell's own `env` (ADDITION in index.d.ts, `Kernel.runCode`): set over the kernel's
// env for that cell and the processes it starts, restored after it (a variable the cell changed
// or deleted itself keeps the change), bad input refused before the cell runs with a call's
// `env` wording, and a Jupyter kernel refusing it before the cell.

const fs = require('fs');
const path = require('path');
const { SandboxError } = require('../..');
const { withKernel, expectSandboxError } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const hasIpykernel = () => fs.existsSync(path.join(SCI, 'usr/share/jupyter/kernels/python3/kernel.json'))
  || fs.existsSync(path.join(SCI, 'usr/local/share/jupyter/kernels/python3/kernel.json'));

// The Sandbox's env, the kernel's over it, the cell's over both.
const SB = { env: { FROM_SB: 'sb', OVER_SB: 'sb' } };
const KOPTS = { env: { FROM_K: 'k', OVER_K: 'k' } };
const CELL = { NEW_C: 'new', OVER_SB: 'cell-sb', OVER_K: 'cell-k', WITH_EQ: 'a=b c' };
const NAMES = ['FROM_SB', 'OVER_SB', 'FROM_K', 'OVER_K', 'NEW_C', 'WITH_EQ'];

// `env` output as an object (values with newlines do not occur here).
const parseEnv = (text) => Object.fromEntries(text.split('\n').filter((l) => l.includes('=')).map((l) => {
  const i = l.indexOf('=');
  return [l.slice(0, i), l.slice(i + 1)];
}));
const pick = (o) => Object.fromEntries(NAMES.map((n) => [n, o[n] === undefined ? null : o[n]]));

const SEEN = { FROM_SB: 'sb', OVER_SB: 'cell-sb', FROM_K: 'k', OVER_K: 'cell-k', NEW_C: 'new', WITH_EQ: 'a=b c' };
const BEFORE = { FROM_SB: 'sb', OVER_SB: 'sb', FROM_K: 'k', OVER_K: 'k', NEW_C: null, WITH_EQ: null };

const KINDS = {
  python: {
    kopts: KOPTS,
    // The cell's own view and a subprocess's, as JSON on stdout.
    both: 'import json, os, subprocess\n'
      + `names = ${JSON.stringify(NAMES)}\n`
      + 'sub = subprocess.run(["env"], capture_output=True, text=True).stdout\n'
      + 'print(json.dumps({"own": {n: os.environ.get(n) for n in names}, "sub": sub}))',
    own: `import json, os\nprint(json.dumps({n: os.environ.get(n) for n in ${JSON.stringify(NAMES)}}))`,
    // Changes OVER_K, deletes OVER_SB, leaves NEW_C as the cell env set it.
    mutate: 'import os\nos.environ["OVER_K"] = "mine"\ndel os.environ["OVER_SB"]',
    setState: 'state = 1',
    state: 'print(state)',
  },
  node: {
    kopts: { ...KOPTS, language: 'node' },
    both: `const names = ${JSON.stringify(NAMES)};\n`
      + 'const sub = require("child_process").execSync("env").toString();\n'
      + 'console.log(JSON.stringify({ own: Object.fromEntries(names.map((n) => [n, process.env[n] ?? null])), sub }));',
    own: `console.log(JSON.stringify(Object.fromEntries(${JSON.stringify(NAMES)}.map((n) => [n, process.env[n] ?? null]))));`,
    mutate: 'process.env.OVER_K = "mine"; delete process.env.OVER_SB;',
    setState: 'var state = 1;',
    state: 'console.log(state)',
  },
};

describe.each(Object.keys(KINDS))('a %s kernel cell\'s env', (kind) => {
  const K = KINDS[kind];

  test('is seen by the cell and its subprocesses, then restored; the next cell runs without it', async () => {
    await withKernel(SB, K.kopts, async (k) => {
      const before = await k.runCode(K.own);
      expect(before.exitCode).toBe(0);
      expect(JSON.parse(before.stdout)).toEqual(BEFORE);

      const r = await k.runCode(K.both, { env: CELL });
      expect(r.stderr).toBe('');
      const { own, sub } = JSON.parse(r.stdout);
      expect(own).toEqual(SEEN);
      expect(pick(parseEnv(sub))).toEqual(SEEN);

      const after = await k.runCode(K.both);
      const back = JSON.parse(after.stdout);
      expect(back.own).toEqual(BEFORE);
      expect(pick(parseEnv(back.sub))).toEqual(BEFORE);
    });
  });

  test('a variable the cell changed or deleted itself keeps the cell\'s change', async () => {
    await withKernel(SB, K.kopts, async (k) => {
      const r = await k.runCode(K.mutate, { env: CELL });
      expect(r.exitCode).toBe(0);
      const after = JSON.parse((await k.runCode(K.own)).stdout);
      // OVER_K: the cell's own value; OVER_SB: deleted by the cell; the others as before.
      expect(after).toEqual({ ...BEFORE, OVER_K: 'mine', OVER_SB: null });
    });
  });

  test('bad input is refused before the cell runs, with a call\'s env wording, and the kernel goes on', async () => {
    await withKernel(SB, K.kopts, async (k) => {
      expect((await k.runCode(K.setState)).exitCode).toBe(0);
      const bad = [
        ['x', /^option `env` must be an object of string values, got the string "x"/],
        [['A=1'], /^option `env` must be an object of string values/],
        [{ A: 1 }, /^option `env`: the value of "A" must be a string, got 1/],
        [{ 'A=B': '1' }, /^option `env`: "A=B" is not a valid variable/],
        [{ '': '1' }, /^option `env`: "" is not a valid variable/],
        [{ A: 'a\0b' }, /^option `env`: "A" is not a valid variable/],
      ];
      for (const [env, re] of bad) {
        // The cell would end the state it checks if it ran.
        const e = await expectSandboxError(() => k.runCode(kind === 'python' ? 'state = 2' : 'state = 2;', { env }), SandboxError, re);
        expect(e.code).toBe('ERR_INVALID_OPTION');
      }
      const r = await k.runCode(K.state);
      expect(r.stdout).toBe('1\n');
      expect(JSON.parse((await k.runCode(K.own)).stdout)).toEqual(BEFORE);
    });
  });
});

(hasIpykernel() ? test : test.skip)('a Jupyter kernel refuses a cell env before the cell, and goes on', async () => {
  await withKernel({ image: SCI }, { jupyter: 'python3', env: { JK: 'k' } }, async (k) => {
    expect((await k.runCode('state = 1')).exitCode).toBe(0);
    const e = await expectSandboxError(() => k.runCode('state = 2', { env: { JK: 'cell' } }), SandboxError,
      /^per-cell option `env` is not taken by a Jupyter kernel \("python3"\): give the variables to the kernel as it starts, sandbox\.kernel\(\{ jupyter: "python3", env \}\)/);
    expect(e.code).toBe('ERR_INVALID_OPTION');
    // Bad input gets the call's wording first.
    await expectSandboxError(() => k.runCode('state = 3', { env: { 'A=B': '1' } }), SandboxError, /^option `env`: "A=B" is not a valid variable/);
    // An empty env sets nothing, and is taken.
    const r = await k.runCode('import os\nprint(state, os.environ["JK"])', { env: {} });
    expect(r.stdout).toBe('1 k\n');
  });
});
