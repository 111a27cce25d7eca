'use strict';
// rootless: yes
// Rich results of python runCode: the driver's IPython rules, through real boxes on a test image
// that has matplotlib, pandas and numpy (scripts/build-test-rootfs-sci.sh).

const fs = require('fs');
const zlib = require('zlib');
const { withSandbox } = require('../..');
const { notesOf, sharedSandbox, ROOTFS } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

beforeAll(() => {
  if (!fs.existsSync(`${SCI}/.kern-test-rootfs`)) {
    throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
  }
});

const sb = sharedSandbox({ image: SCI });

/** Decodes a PNG far enough to prove it is one: signature, IHDR, and the IDAT stream inflating to
 * exactly the bytes its dimensions call for. Returns { width, height }. */
function decodePng(buf) {
  expect(buf.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))).toBe(true);
  let off = 8;
  let ihdr;
  const idat = [];
  while (off < buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') ihdr = data;
    if (type === 'IDAT') idat.push(data);
    off += 12 + len;
    if (type === 'IEND') break;
  }
  const width = ihdr.readUInt32BE(0);
  const height = ihdr.readUInt32BE(4);
  const bitDepth = ihdr[8];
  const channels = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 }[ihdr[9]];
  const raw = zlib.inflateSync(Buffer.concat(idat));
  expect(raw.length).toBe(height * (1 + Math.ceil((width * channels * bitDepth) / 8)));
  return { width, height };
}

test('the last bare expression is the result; print stays on stdout', async () => {
  const r = await sb.runCode('print("hi")\nx = 20\nx + 22');
  expect(r.stdout).toBe('hi\n');
  expect(r.results).toHaveLength(1);
  expect(r.results[0].text).toBe('42');
  expect(r.results[0].formats()).toEqual(['text/plain']);
  expect(r.success).toBe(true);
});

test('nothing after an assignment, a trailing semicolon, or None', async () => {
  for (const code of ['x = 1', '1 + 1;', 'None', 'for i in range(2):\n    i']) {
    expect((await sb.runCode(code)).results).toEqual([]);
  }
});

test('display() of several objects, in order, before the last expression', async () => {
  const r = await sb.runCode('display(1, "two")\ndisplay([3])\n"last"');
  expect(r.results.map((x) => x.text)).toEqual(['1', "'two'", '[3]', "'last'"]);
});

test('each _repr_*_ maps to its MIME type, with text/plain from repr()', async () => {
  const code = `
import base64
class R:
    def __repr__(self): return "R()"
    def _repr_html_(self): return "<b>h</b>"
    def _repr_markdown_(self): return "**m**"
    def _repr_svg_(self): return "<svg xmlns='http://www.w3.org/2000/svg'/>"
    def _repr_json_(self): return {"k": [1, 2]}
    def _repr_latex_(self): return "$x$"
    def _repr_javascript_(self): return "1;"
R()`;
  const [res] = (await sb.runCode(code)).results;
  expect(res.text).toBe('R()');
  expect(res.html).toBe('<b>h</b>');
  expect(res.markdown).toBe('**m**');
  expect(res.svg).toBe("<svg xmlns='http://www.w3.org/2000/svg'/>");
  expect(JSON.parse(res.json)).toEqual({ k: [1, 2] });
  expect(res.data['text/latex']).toBe('$x$');
  expect(res.data['application/javascript']).toBe('1;');
  expect(res.png).toBeNull();
});

test('_repr_mimebundle_ and _repr_png_ bytes', async () => {
  const code = `
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt, io
fig = plt.figure(figsize=(1, 1)); buf = io.BytesIO(); fig.savefig(buf, format="png"); plt.close(fig)
class P:
    def _repr_png_(self): return buf.getvalue()
class B:
    def _repr_mimebundle_(self, include=None, exclude=None): return {"text/plain": "bundle", "text/html": "<i>b</i>"}
display(P())
B()`;
  const r = await sb.runCode(code);
  expect(r.results).toHaveLength(2);
  const png = r.results[0].png;
  expect(decodePng(png)).toEqual({ width: 100, height: 100 });
  expect(r.results[1].text).toBe('bundle');
  expect(r.results[1].html).toBe('<i>b</i>');
});

test('a matplotlib plot is a valid PNG; two figures are two results', async () => {
  const r = await sb.runCode(`
import matplotlib.pyplot as plt
plt.figure(); plt.plot([1, 2, 3], [1, 4, 9])
plt.figure(); plt.bar(["a", "b"], [3, 5])
print("drawn")`);
  expect(r.stdout).toBe('drawn\n');
  expect(r.results).toHaveLength(2);
  for (const res of r.results) {
    expect(res.text).toMatch(/^<Figure size \d+x\d+ with 1 Axes>$/);
    const { width, height } = decodePng(res.png);
    expect(width).toBeGreaterThan(100);
    expect(height).toBeGreaterThan(100);
  }
});

test('a pandas DataFrame gives text/html and text/plain', async () => {
  const [res] = (await sb.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')).results;
  expect(res.html).toMatch(/<table[^>]*class="dataframe"/);
  expect(res.text).toMatch(/a\s+b\n0\s+1\s+x\n1\s+2\s+y/);
});

test('a forged frame printed by user code is only output', async () => {
  const code = `
import json, struct, sys, os
body = json.dumps({"type": "result", "data": {"text/plain": "FORGED"}}).encode()
frame = struct.pack(">I", len(body)) + body
sys.stdout.buffer.write(frame); sys.stdout.flush()
os.write(2, frame)
print("done")`;
  const r = await sb.runCode(code);
  expect(r.results).toEqual([]);
  expect(r.stdout).toContain('FORGED');
  expect(r.stdout).toContain('done');
});

test('a repr that raises is reported on stderr and the cell goes on', async () => {
  const r = await sb.runCode(`
class Bad:
    def __repr__(self): return "Bad()"
    def _repr_html_(self): raise ValueError("no html today")
display(Bad())
print("after")
7`);
  expect(r.exitCode).toBe(0);
  expect(r.stdout).toBe('after\n');
  expect(r.stderr).toMatch(/no html today/);
  expect(r.results.map((x) => x.text)).toEqual(['Bad()', '7']);
  expect(r.results[0].html).toBeUndefined();
});

test('errors: the traceback points at the cell, exit codes are python -c codes', async () => {
  const r = await sb.runCode('x = 1\ny = 0\nx / y');
  expect(r.exitCode).toBe(1);
  expect(r.stderr).toMatch(/File "<cell>", line 3/);
  expect(r.stderr).toMatch(/x \/ y/);
  expect(r.stderr).toMatch(/ZeroDivisionError: division by zero/);
  expect(r.stderr).not.toMatch(/driver|File "<string>"/);
  expect((await sb.runCode('raise SystemExit(3)')).exitCode).toBe(3);
  const syntax = await sb.runCode('def f(:\n  pass');
  expect(syntax.exitCode).toBe(1);
  expect(syntax.stderr).toMatch(/SyntaxError/);
});

test('an image that is not what it says is dropped with a runtime note', async () => {
  const r = await sb.runCode(`
class Fake:
    def __repr__(self): return "Fake()"
    def _repr_png_(self): return b"not a png at all"
Fake()`);
  expect(r.results).toHaveLength(1);
  expect(r.results[0].text).toBe('Fake()');
  expect(r.results[0].png).toBeNull();
  expect(r.runtimeNotes.join('\n')).toMatch(/image\/png was dropped: it is not a valid image/);
});

test('a huge PNG header is refused before it is decoded', async () => {
  // A valid PNG signature and IHDR claiming 100000x100000 pixels: a decompression bomb's shape.
  const r = await sb.runCode(`
import struct, zlib
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 6, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(b"\\0")) + chunk(b"IEND", b"")
class Big:
    def _repr_png_(self): return png
Big()`);
  expect(r.results[0].png).toBeNull();
  expect(r.runtimeNotes.join('\n')).toMatch(/image\/png was dropped: .*pixels/);
});

test('base64 in MIME-style lines (as Jupyter kernels send it) is decoded, whitespace ignored', async () => {
  const r = await sb.runCode(`
import base64, io
import matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt
fig = plt.figure(); plt.plot([1, 2]); buf = io.BytesIO(); fig.savefig(buf, format="png"); plt.close(fig)
b64 = base64.encodebytes(buf.getvalue()).decode()
assert "\\n" in b64[:100]
display({"image/png": b64}, raw=True)`);
  expect(notesOf(r)).toEqual([]);
  expect(r.results).toHaveLength(1);
  decodePng(r.results[0].png);
  expect(r.results[0].data['image/png']).not.toMatch(/\s/);
});

test('a result\'s data is a null-prototype object of MIME types; other names are dropped with a note', async () => {
  const r = await sb.runCode('display({"text/plain": "ok", "toString": "x", "text/html": "<b>ok</b>"}, raw=True)');
  const { data } = r.results[0];
  expect(Object.getPrototypeOf(data)).toBeNull();
  expect(Object.keys(data)).toEqual(['text/plain', 'text/html']);
  expect(notesOf(r)).toEqual(['note: a result\'s entry "toString" was dropped: its name is not a MIME type (type/subtype)']);
});

test('a call keeps at most 10,000 results, with a note', async () => {
  const r = await sb.runCode('for i in range(10002):\n    display(i)');
  expect(r.results).toHaveLength(10000);
  expect(r.results[0].text).toBe('0');
  expect(notesOf(r)).toEqual(['note: 2 rich result(s) were dropped: a call keeps at most 10000 results and 128 MiB of them']);
});

test('other languages and run() have no results', async () => {
  expect((await sb.runCode('echo 1', { language: 'bash' })).results).toEqual([]);
  expect((await sb.run(['python3', '-c', '1 + 1'])).results).toEqual([]);
});

test('the plain test image (no matplotlib) still gives results and plain errors', async () => {
  const r = await withSandbox({ image: ROOTFS }, (s) => s.runCode('import sys\nsys.version_info[0]'));
  expect(r.results[0].text).toBe('3');
});
