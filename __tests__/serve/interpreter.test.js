// rootless: yes
'use strict';
// `kern serve`'s code interpreter through the real `@e2b/code-interpreter` SDK: cells with
// streamed stdout, rich results and charts, errors, execution counts, env vars per cell, code
// contexts per language (python, js, ts, r) with their cwd, restart and removal, and a cell the
// client stops waiting for.

const fs = require('fs');
const path = require('path');
const { requireRootfs, uniqueName, waitFor, hostProcessesMatching } = require('../helpers.js');
const { startServe, sdk } = require('./serve-helpers.js');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

let srv;
let id;
beforeAll(async () => {
  requireRootfs();
  if (!fs.existsSync(path.join(SCI, 'usr/bin/python3'))) throw new Error(`the science test image ${SCI} is missing (scripts/build-test-rootfs.sh)`);
  srv = await startServe(['--template', `code-interpreter-v1=${SCI}`]);
  id = await sdk(`return (await CISandbox.create({ timeoutMs: 600000 })).sandboxId;`);
});
afterAll(() => srv && srv.close());

const inSandbox = (body) => sdk(`const sb = await CISandbox.connect('${id}');\n${body}`);

test('a python cell: its last value, stdout as it streams, display() results, the count goes up', async () => {
  const r = await inSandbox(`
    const seen = [];
    const ex = await sb.runCode('import time\\nprint("one", flush=True)\\ntime.sleep(0.3)\\nprint("two")\\nfrom IPython.display import display, HTML\\ndisplay(HTML("<b>hi</b>"))\\n6 * 7', {
      onStdout: (m) => seen.push(['out', m.line, Date.now()]),
      onResult: (res) => seen.push(['result', res.html || res.text, Date.now()]),
    });
    const again = await sb.runCode('x = 1');
    return { text: ex.text, logs: ex.logs, results: ex.results.map((x) => ({ text: x.text, html: x.html, main: x.isMainResult })), count: ex.executionCount, next: again.executionCount, seen, error: ex.error };`);
  expect(r.text).toBe('42');
  expect(r.logs.stdout.join('')).toBe('one\ntwo\n');
  expect(r.results).toEqual([{ html: '<b>hi</b>', text: expect.any(String), main: false }, { text: '42', main: true }]);
  expect(r.error).toBeUndefined();
  expect(r.next).toBe(r.count + 1);
  // "one" reached the client before the cell ended (before its last result).
  const one = r.seen.find((s) => s[0] === 'out' && s[1].includes('one'));
  const last = r.seen.filter((s) => s[0] === 'result').pop();
  expect(one[2]).toBeLessThanOrEqual(last[2]);
});

test('an exception is the execution\'s error, with name, value and traceback; the context lives on', async () => {
  const r = await inSandbox(`
    const ex = await sb.runCode('def f():\\n    raise ValueError("bad value")\\nf()');
    const after = await sb.runCode('"still here"');
    return { error: ex.error, after: after.text };`);
  expect(r.error).toMatchObject({ name: 'ValueError', value: 'bad value' });
  expect(r.error.traceback).toMatch(/raise ValueError/);
  expect(r.after).toBe("'still here'");
});

test('a matplotlib figure is a png result with chart data', async () => {
  const r = await inSandbox(`
    const ex = await sb.runCode('import matplotlib.pyplot as plt\\nplt.plot([1, 2, 3], [4, 5, 6])\\nplt.title("line")\\nplt.show()');
    const fig = ex.results.find((x) => x.png);
    return { png: fig && fig.png.slice(0, 12), chart: fig && fig.chart, error: ex.error };`);
  expect(r.error).toBeUndefined();
  expect(Buffer.from(r.png, 'base64').subarray(1, 4).toString()).toBe('PNG');
  // In E2B's names (snake_case), from the library's chart data.
  expect(r.chart).toMatchObject({ type: 'line', title: 'line', x_label: '', y_label: '', x_scale: 'linear', y_scale: 'linear' });
  expect(r.chart.elements).toEqual([{ label: '', points: [[1, 4], [2, 5], [3, 6]] }]);
  expect(Object.keys(r.chart).filter((k) => /[A-Z]/.test(k))).toEqual([]);
});

test('env vars per cell reach that cell only', async () => {
  const r = await inSandbox(`
    const a = await sb.runCode('import os\\nos.environ.get("CELL_ONLY")', { envs: { CELL_ONLY: 'yes' } });
    const b = await sb.runCode('os.environ.get("CELL_ONLY")');
    return [a.text, b.text];`);
  // (A last value of None shows nothing, as in IPython.)
  expect(r).toEqual(["'yes'", null]);
});

test('contexts: js with its own state and cwd, python contexts apart, list, restart, remove', async () => {
  const r = await inSandbox(`
    const js = await sb.createCodeContext({ language: 'js', cwd: '/tmp' });
    const py = await sb.createCodeContext({ language: 'python' });
    const out = {};
    out.js = (await sb.runCode('const a = 40; a + 2', { context: js })).text;
    out.jsCwd = (await sb.runCode('process.cwd()', { context: js })).text;
    await sb.runCode('v = "py-ctx"', { context: py });
    out.pyOwn = (await sb.runCode('v', { context: py })).text;
    out.pyDefault = (await sb.runCode('"v" in globals()')).text;
    out.listed = (await sb.listCodeContexts()).map((c) => c.id).filter((i) => [js.id, py.id].includes(i)).length;
    await sb.restartCodeContext(py);
    const lost = await sb.runCode('v', { context: py });
    out.afterRestart = lost.error && lost.error.name;
    await sb.removeCodeContext(js);
    try { await sb.runCode('1', { context: js }); out.removed = 'ran'; } catch (e) { out.removed = e.constructor.name; }
    out.ctx = { language: js.language, cwd: js.cwd };
    return out;`);
  expect(r).toEqual({
    js: '42', jsCwd: "'/tmp'", pyOwn: "'py-ctx'", pyDefault: 'False', listed: 2,
    afterRestart: 'NameError', removed: 'NotFoundError', ctx: { language: 'js', cwd: '/tmp' },
  });
});

test('a context whose kernel can\'t start says why in the execution\'s error', async () => {
  // The test image's Node is too old to strip TypeScript types.
  const r = await inSandbox(`
    const ts = await sb.createCodeContext({ language: 'ts' });
    const ex = await sb.runCode('const n: number = 5; n * 2', { context: ts });
    return ex.error;`);
  expect(r).toMatchObject({ name: 'InvalidArgument', value: expect.stringMatching(/needs Node\.js >= 22\.13/) });
});

test('r runs in the image\'s IRkernel; a language the image has no kernel for is a clear error', async () => {
  const r = await inSandbox(`
    const out = {};
    // IRkernel shows a value as a display (not an execute_result), so it is a result, not .text.
    out.r = (await sb.runCode('x <- c(1, 2, 3); sum(x)', { language: 'r' })).results.map((x) => x.text).join();
    const bash = await sb.runCode('echo hi', { language: 'bash' });
    out.bash = bash.error && bash.error.value;
    const cobol = await sb.runCode('1', { language: 'cobol' });
    out.cobol = cobol.error && cobol.error.value;
    return out;`);
  expect(r.r).toBe('[1] 6');
  expect(r.bash).toMatch(/bash/);
  expect(r.bash).toMatch(/kernel/i);
  expect(r.cobol).toMatch(/cobol.*not one kern serve runs/);
});

test('a python cell the client stops waiting for is interrupted; the context keeps its state', async () => {
  const marker = uniqueName('kern-serve-late-cell');
  const r = await inSandbox(`
    await sb.runCode('x = 41');
    let timedOut;
    try { await sb.runCode('import subprocess\\nx = 0\\nsubprocess.run(["sh", "-c", "sleep 300", "${marker}"])', { timeoutMs: 1500 }); } catch (e) { timedOut = e.constructor.name; }
    const next = await sb.runCode('x + 1');
    return { timedOut, next: next.text, stderr: next.logs.stderr.join('') };`);
  // \`x = 0\` ran before the interrupt: the kernel is the same one, its state kept.
  expect(r).toEqual({ timedOut: 'TimeoutError', next: '1', stderr: '' });
  // The cell's child got the interrupt too.
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10000, 50)).toBe(true);
});

test('a js cell the client stops waiting for ends its context, and the next cell starts a new one, saying so', async () => {
  const r = await inSandbox(`
    await sb.runCode('globalThis.y = 1', { language: 'js' });
    let timedOut;
    try { await sb.runCode('while (true) {}', { language: 'js', timeoutMs: 1500 }); } catch (e) { timedOut = e.constructor.name; }
    const next = await sb.runCode('typeof globalThis.y', { language: 'js' });
    return { timedOut, next: next.text, stderr: next.logs.stderr.join('') };`);
  expect(r.timedOut).toBe('TimeoutError');
  expect(r.next).toBe("'undefined'");
  expect(r.stderr).toMatch(/this js context's kernel had ended .*this cell runs in a new one/);
});

test('a DataFrame is E2B\'s data (columns, no index); a PIL image shown is a png; charts carry units, ticks and scales', async () => {
  const r = await inSandbox(`
    const df = await sb.runCode('import pandas as pd\\npd.DataFrame({"n": [1, 2], "s": ["a", "b"]}, index=[10, 20])');
    const img = await sb.runCode('from PIL import Image\\nImage.new("RGB", (4, 4), "blue").show()');
    const ch = await sb.runCode('import matplotlib.pyplot as plt, datetime\\nplt.plot([datetime.date(2024, 1, d) for d in (1, 2)], [3, 4])\\nplt.ylabel("Load (%)")\\nplt.show()');
    const chart = ch.results.find((x) => x.chart).chart;
    return { data: df.results[0].data, html: !!df.results[0].html, png: img.results.map((x) => !!x.png), chart: { x_scale: chart.x_scale, y_unit: chart.y_unit, tick: chart.x_ticks[0], labels: chart.x_tick_labels.length } };`);
  expect(r.data).toEqual({ n: [1, 2], s: ['a', 'b'] });
  expect(r.html).toBe(true);
  expect(r.png).toEqual([true]);
  expect(r.chart).toMatchObject({ x_scale: 'datetime', y_unit: '%', tick: expect.stringMatching(/^2024-01-01T/) });
  expect(r.chart.labels).toBeGreaterThan(0);
});
