'use strict';
// rootless: yes
// kernel.fork() and checkpoints of a kernel holding numpy data (issue 33), on the test image
// with numpy and Jupyter kernels (scripts/build-test-rootfs-sci.sh): arrays travel out of band,
// arrive equal and writable; a node kernel's state too; a Jupyter kernel is refused with why.

const fs = require('fs');
const path = require('path');
const { Sandbox, SandboxError } = require('../..');
const { opts, makeTempDir, expectSandboxError, cellStdout: py } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
beforeAll(() => {
  if (!fs.existsSync(`${SCI}/.kern-test-rootfs`)) {
    throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
  }
});

/** `fn(kernel)` on the kernel of the checkpoint in `dir`, restored in a Sandbox made from it
 * (`sbOpts` beside the checkpoint's image); then the Sandbox and the checkpoint go. */
async function restored(dir, sbOpts, fn) {
  const back = await Sandbox.fromCheckpoint(dir, sbOpts);
  try {
    await fn(await back.restoreKernel(dir));
  } finally {
    await back.close();
  }
  fs.rmSync(path.dirname(dir), { recursive: true, force: true });
}

const SETUP = [
  'import numpy as np, pandas as pd',
  'rng = np.random.default_rng(7)',
  'a = rng.random((100 << 20) // 8)',
  'view = a[::2]',
  'frame = pd.DataFrame({"x": np.arange(5), "y": list("abcde")})',
  'digest = float(a.sum())',
].join('\n');
const CHECK = 'print(a.nbytes, float(a.sum()) == digest, a.flags.writeable, np.array_equal(view, a[::2]), frame.y.tolist(), np.__name__)';
const CHECKED = "104857600 True True True ['a', 'b', 'c', 'd', 'e'] numpy\n";

test('100 MiB of numpy data, a view of it and a DataFrame arrive equal and writable in forks and restores', async () => {
  const sb = await new Sandbox(opts({ image: SCI, memoryMb: 1024 })).open();
  const forks = [];
  try {
    const k = await sb.kernel({ timeoutS: 120 });
    await py(k, SETUP);
    expect(await py(k, CHECK)).toBe(CHECKED);
    forks.push(...await k.fork({ count: 2 }));
    for (const f of forks) expect(await py(f, CHECK)).toBe(CHECKED);
    // As pickle carries them: a view arrives as an array of its own (docs/reference.md).
    expect(await py(forks[0], 'print(np.shares_memory(view, a))')).toBe('False\n');
    // Writes stay in the fork that made them; the global generator differs per fork.
    await py(forks[0], 'a[0] = -1.0');
    const draws = await Promise.all([k, ...forks].map((x) => py(x, 'print(a[0] == -1.0, np.random.random())')));
    expect(draws.map((d) => d.split(' ')[0])).toEqual(['False', 'True', 'False']);
    expect(new Set(draws.map((d) => d.split(' ')[1])).size).toBe(3);
    const dir = path.join(makeTempDir('kern-ckpt-sci-'), 'ck');
    await k.checkpoint(dir, { keepRunning: true });
    await restored(dir, { memoryMb: 1024 }, async (r) => expect(await py(r, CHECK)).toBe(CHECKED));
  } finally {
    await Promise.all(forks.map((f) => f.close().catch(() => {})));
    await sb.close();
  }
});

test('a node kernel forks and checkpoints: values, functions, classes and modules; what a clone would change is named', async () => {
  const sb = await new Sandbox(opts({ image: SCI })).open();
  const forks = [];
  try {
    const k = await sb.kernel({ language: 'node' });
    const setup = [
      "import path from 'node:path';",
      "import * as P from 'node:path';",
      "const fs = require('fs');",
      "fs.writeFileSync('mod.mjs', 'export const v = 7;');",
      "import * as M from './mod.mjs';",
      'let n = 41;',
      "const data = { list: [1, 2, 3], m: new Map([['a', 1]]), when: new Date(0), buf: Buffer.from('hi'), big: 10n };",
      'class Point { constructor(x, y) { this.x = x; this.y = y; } norm() { return Math.hypot(this.x, this.y); } }',
      'function sq(v) { return v * v; }',
      "var g = 'global var';",
      'const arrow = (z) => sq(z) + n;',
      'const p = new Point(3, 4);',
      'function counter() { let c = 0; return () => ++c; }',
      'const tick = counter();',
      "const sym = Symbol('s');",
      "fs.mkdirSync('sub', { recursive: true }); process.chdir('sub');",
    ].join('\n');
    const made = await k.runCode(setup);
    expect(made.error).toBeNull();
    const check = "JSON.stringify([n + 1, data.list, data.m.get('a'), data.when.getTime(), data.buf.toString(), String(data.big), new Point(6, 8).norm(), sq(3), g, arrow(2), typeof fs.readFileSync, path.join('a', 'b'), process.cwd(), P.sep, M.v])";
    const want = JSON.stringify([42, [1, 2, 3], 1, 0, 'hi', '10', 10, 9, 'global var', 45, 'function', 'a/b', '/workspace/sub', '/', 7]);
    forks.push(...await k.fork({ count: 2 }));
    for (const f of forks) {
      expect(f.notCarried.map((l) => l.name).sort()).toEqual(['p', 'sym', 'tick']);
      const r = await f.runCode(check);
      expect(r.error).toBeNull();
      expect(JSON.parse(r.results[0].text.replace(/^'|'$/g, ''))).toEqual(JSON.parse(want));
    }
    const reasons = Object.fromEntries(forks[0].notCarried.map((l) => [l.name, l.reason]));
    expect(reasons.p).toMatch(/instance of Point/);
    expect(reasons.tick).toMatch(/closes over local variables/);
    // Math.random is each fork's own.
    const draws = await Promise.all([k, ...forks].map(async (x) => (await x.runCode('Math.random()')).results[0].text));
    expect(new Set(draws).size).toBe(3);
    const dir = path.join(makeTempDir('kern-ckpt-sci-'), 'ck');
    await k.checkpoint(dir);
    await restored(dir, {}, async (r) => {
      const got = await r.runCode(check);
      expect(JSON.parse(got.results[0].text.replace(/^'|'$/g, ''))).toEqual(JSON.parse(want));
    });
  } finally {
    await Promise.all(forks.map((f) => f.close().catch(() => {})));
    await sb.close();
  }
});

test('a Jupyter kernel is refused with why, and runs on', async () => {
  const sb = await new Sandbox(opts({ image: SCI })).open();
  try {
    const jup = await sb.kernel({ jupyter: 'python3' });
    await expectSandboxError(() => jup.fork({ count: 2 }), SandboxError, /not available for a Jupyter kernel .*its state lives in the image's own kernel process/);
    const dir = path.join(makeTempDir('kern-ckpt-sci-'), 'ck');
    await expectSandboxError(() => jup.checkpoint(dir), SandboxError, /not available for a Jupyter kernel/);
    expect(fs.existsSync(dir)).toBe(false);
    fs.rmSync(path.dirname(dir), { recursive: true, force: true });
    expect((await jup.runCode('print(3)')).stdout).toBe('3\n');
    await jup.close();
  } finally {
    await sb.close();
  }
});
