'use strict';
// rootless: no — no box: the python driver on the host's python3
// The python driver (src/lang/driver.py and its rich part, charts.py and driver_rich.py, put
// together as src/lang/driver.rs does) on the host's python3, without a box: cells go in as frames on fd 3 (a
// socketpair: Node's extra 'pipe'), results come back as frames; stdout and stderr are the
// user's. KERN_TEST_PYTHON picks another interpreter (e.g. one with matplotlib);
// KERN_TEST_DRIVER another whole driver file (to check that a broken driver fails these tests).

const fs = require('fs');
const path = require('path');
const { spawn, spawnSync } = require('child_process');

const LANG = path.join(__dirname, '..', '..', 'src', 'lang');
const DRIVER = process.env.KERN_TEST_DRIVER
  ? fs.readFileSync(process.env.KERN_TEST_DRIVER, 'utf8')
  : `${fs.readFileSync(path.join(LANG, 'driver.py'), 'utf8')}\n_RICH = r'''\n${fs.readFileSync(path.join(LANG, 'charts.py'), 'utf8')}\n${fs.readFileSync(path.join(LANG, 'driver_rich.py'), 'utf8')}'''\n\n_kern_driver(_RICH, globals().get("_kern_zygote"))\n`;
const PYTHON = process.env.KERN_TEST_PYTHON || 'python3';
const WAIT_MS = 30000;

function encodeFrame(obj) {
  const body = Buffer.from(JSON.stringify(obj), 'utf8');
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length);
  return Buffer.concat([head, body]);
}

/** Splits the channel's byte stream into frames; each must be one JSON object. */
class FrameReader {
  constructor() {
    this.buf = Buffer.alloc(0);
  }

  push(chunk) {
    this.buf = Buffer.concat([this.buf, chunk]);
    const out = [];
    while (this.buf.length >= 4) {
      const n = this.buf.readUInt32BE(0);
      if (this.buf.length < 4 + n) break;
      const frame = JSON.parse(this.buf.subarray(4, 4 + n).toString('utf8'));
      if (frame === null || typeof frame !== 'object' || Array.isArray(frame)) {
        throw new Error(`a frame is not a JSON object: ${JSON.stringify(frame)}`);
      }
      out.push(frame);
      this.buf = this.buf.subarray(4 + n);
    }
    return out;
  }
}

/**
 * Starts `python3 -c <prefix + driver>` with the channel on fd 3. `prefix` is python run before
 * the driver (to break something on purpose). Returns a handle: frames, stdout, stderr so far;
 * cell() sends a cell and resolves with its frames up to its done; close() ends the channel
 * and resolves with the exit.
 */
const started = [];

function startDriver({ prefix = '', env = {}, withChannel = true } = {}) {
  const childEnv = { ...process.env };
  delete childEnv.PYTHONUNBUFFERED; // the driver's flushes are under test
  delete childEnv.MPLBACKEND;
  Object.assign(childEnv, env);
  const stdio = withChannel ? ['ignore', 'pipe', 'pipe', 'pipe'] : ['ignore', 'pipe', 'pipe'];
  const child = spawn(PYTHON, ['-c', prefix + DRIVER], { stdio, env: childEnv });
  const d = { child, frames: [], stdout: '', stderr: '', exited: null, listeners: new Set() };
  started.push(d);
  const notify = () => d.listeners.forEach((f) => f());
  child.stdout.on('data', (b) => {
    d.stdout += b.toString('utf8');
    notify();
  });
  child.stderr.on('data', (b) => {
    d.stderr += b.toString('utf8');
    notify();
  });
  const ch = withChannel ? child.stdio[3] : null;
  if (ch) {
    const reader = new FrameReader();
    ch.on('data', (chunk) => {
      d.frames.push(...reader.push(chunk));
      notify();
    });
    ch.on('error', () => {}); // EPIPE once the driver is gone: the exit says what happened
  }
  d.exit = new Promise((resolve) =>
    child.on('close', (code, signal) => {
      d.exited = { code, signal };
      notify();
      resolve(d.exited);
    })
  );

  /** Resolves when pred() holds; rejects if the driver exits first or after WAIT_MS. */
  d.until = (pred, what) =>
    new Promise((resolve, reject) => {
      const check = () => {
        let v;
        try {
          v = pred();
        } catch (e) {
          done();
          reject(e);
          return;
        }
        if (v) {
          done();
          resolve(v);
        } else if (d.exited) {
          done();
          reject(new Error(`driver exited (${JSON.stringify(d.exited)}) before ${what}; stderr:\n${d.stderr}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${what}; stderr:\n${d.stderr}`));
      }, WAIT_MS);
      const done = () => {
        clearTimeout(timer);
        d.listeners.delete(check);
      };
      d.listeners.add(check);
      check();
    });

  d.send = (obj) => ch.write(encodeFrame(obj));
  let nextId = 1;
  d.cell = async (code, { id = nextId++, once = false, ...extra } = {}) => {
    const start = d.frames.length;
    d.send({ type: 'cell', id, code, once, ...extra });
    const end = await d.until(() => {
      const i = d.frames.findIndex((f, k) => k >= start && f.type === 'done');
      return i >= 0 ? i + 1 : 0;
    }, `the done frame of cell ${id}`);
    const frames = d.frames.slice(start, end);
    expect(frames[frames.length - 1]).toEqual(expect.objectContaining({ type: 'done', id }));
    return frames;
  };
  d.close = () => {
    if (ch) ch.end();
    return d.exit;
  };
  return d;
}

/** One cell in once-mode: resolves with its frames, output and exit once the driver is gone. */
async function runOnce(code, opts = {}) {
  const d = startDriver(opts);
  d.send({ type: 'cell', id: 1, code, once: true });
  const exit = await d.exit;
  return { frames: d.frames, stdout: d.stdout, stderr: d.stderr, code: exit.code, signal: exit.signal };
}

/** The display/result frames only, as [type, data] pairs. */
const outputs = (frames) => frames.filter((f) => f.type === 'display' || f.type === 'result').map((f) => [f.type, f.data]);
const doneOf = (frames) => frames[frames.length - 1];

// One long-lived driver for the tests that only look at a cell's frames.
let shared;
beforeAll(() => {
  shared = startDriver();
});
afterAll(async () => {
  if (shared && !shared.exited) {
    const exit = await shared.close();
    expect(exit).toEqual({ code: 0, signal: null });
  }
  // Drivers left running by a failed test.
  for (const d of started) {
    if (!d.exited) {
      d.child.kill('SIGKILL');
      await d.exit;
    }
  }
});

describe('the last expression (IPython last_expr)', () => {
  test('a bare last expression is the result, as text/plain from repr()', async () => {
    const frames = await shared.cell('x = 20\nx + 22');
    expect(outputs(frames)).toEqual([['result', { 'text/plain': '42' }]]);
    expect(frames[0].metadata).toEqual({});
    expect(doneOf(frames)).toMatchObject({ status: 'ok', exit: null });
    expect(outputs(await shared.cell('"a" * 3'))).toEqual([['result', { 'text/plain': "'aaa'" }]]);
  });

  test('nothing after an assignment, a compound statement, a trailing semicolon or None', async () => {
    const silent = ['x = 1', 'for i in range(2):\n    i', '1;', '1 + 1;  # comment', 'y = 5\ny;\n\n# end', 'None', 'print("p")', ''];
    for (const code of silent) {
      const frames = await shared.cell(code);
      expect([code, outputs(frames)]).toEqual([code, []]);
      expect(doneOf(frames).status).toBe('ok');
    }
  });

  test('a semicolon inside a string or a comment does not silence the value', async () => {
    expect(outputs(await shared.cell('"a;"'))).toEqual([['result', { 'text/plain': "'a;'" }]]);
    expect(outputs(await shared.cell('7  # ;'))).toEqual([['result', { 'text/plain': '7' }]]);
    expect(outputs(await shared.cell('x = 1; 8'))).toEqual([['result', { 'text/plain': '8' }]]);
  });

  test('top-level await runs on an event loop and its value is the result', async () => {
    const frames = await shared.cell('import asyncio\nawait asyncio.sleep(0)\nasync def f():\n    return 6\nawait f() + 1');
    expect(outputs(frames)).toEqual([['result', { 'text/plain': '7' }]]);
  });
});

describe('display()', () => {
  test('several objects, in order, then the last expression', async () => {
    const frames = await shared.cell('display(1, "two")\ndisplay([3])\n4');
    expect(outputs(frames)).toEqual([
      ['display', { 'text/plain': '1' }],
      ['display', { 'text/plain': "'two'" }],
      ['display', { 'text/plain': '[3]' }],
      ['result', { 'text/plain': '4' }],
    ]);
    expect(frames.map((f) => f.type)).toEqual(['display', 'display', 'display', 'result', 'done']);
  });

  test('metadata= goes with the bundle; raw=True sends a bundle as it is', async () => {
    const frames = await shared.cell(
      'display(5, metadata={"k": 1})\ndisplay({"text/plain": "raw", "text/html": "<b>raw</b>", "image/png": b"\\x89PNG"}, raw=True)'
    );
    expect(frames[0]).toEqual({ type: 'display', data: { 'text/plain': '5' }, metadata: { k: 1 } });
    expect(frames[1].data).toEqual({ 'text/plain': 'raw', 'text/html': '<b>raw</b>', 'image/png': Buffer.from('\x89PNG', 'latin1').toString('base64') });
  });

  test('a cell that deletes display gets it back in the next cell', async () => {
    const frames = await shared.cell('import builtins\ndel builtins.display');
    expect(doneOf(frames).status).toBe('ok');
    expect(outputs(await shared.cell('display("back")'))).toEqual([['display', { 'text/plain': "'back'" }]]);
  });
});

describe('MIME bundles (IPython formatter rules)', () => {
  const EVERY_REPR = `
class Rich:
    def __repr__(self): return "Rich()"
    def _repr_html_(self): return "<b>html</b>"
    def _repr_markdown_(self): return "*md*"
    def _repr_svg_(self): return "<svg></svg>"
    def _repr_png_(self): return (b"\\x89PNG\\r\\n", {"width": 10})
    def _repr_jpeg_(self): return "alreadybase64"
    def _repr_pdf_(self): return b"%PDF-1.4"
    def _repr_json_(self): return {"a": [1, 2]}
    def _repr_latex_(self): return "$x^2$"
    def _repr_javascript_(self): return "console.log(1)"
    def _repr_text_(self): return "not a formatter"
Rich()`;

  test('every _repr_*_ method gives its MIME type; bytes are base64, JSON is a value', async () => {
    const [result] = await shared.cell(EVERY_REPR);
    expect(result.type).toBe('result');
    expect(result.data).toEqual({
      'text/plain': 'Rich()',
      'text/html': '<b>html</b>',
      'text/markdown': '*md*',
      'image/svg+xml': '<svg></svg>',
      'image/png': Buffer.from('\x89PNG\r\n', 'latin1').toString('base64'),
      'image/jpeg': 'alreadybase64',
      'application/pdf': Buffer.from('%PDF-1.4').toString('base64'),
      'application/json': { a: [1, 2] },
      'text/latex': '$x^2$',
      'application/javascript': 'console.log(1)',
    });
    expect(result.metadata).toEqual({ 'image/png': { width: 10 } });
  });

  test('_repr_mimebundle_ with metadata: its keys win, the other methods fill in the rest', async () => {
    const frames = await shared.cell(`
class B:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return ({"text/plain": "from bundle", "text/html": "<i>bundle</i>",
                 "application/vnd.custom+json": {"k": [1]}}, {"text/html": {"isolated": True}})
    def _repr_html_(self): return "<i>method</i>"
    def _repr_markdown_(self): return "md"
display(B())`);
    expect(frames[0]).toEqual({
      type: 'display',
      data: { 'text/plain': 'from bundle', 'text/html': '<i>bundle</i>', 'application/vnd.custom+json': { k: [1] }, 'text/markdown': 'md' },
      metadata: { 'text/html': { isolated: true } },
    });
  });

  test('a raising _repr_html_ is reported on stderr and left out; the cell goes on', async () => {
    const before = shared.stderr.length;
    const frames = await shared.cell(`
class Bad:
    def __repr__(self): return "Bad()"
    def _repr_html_(self):
        raise ValueError("html is broken")
    def _repr_markdown_(self): return "**fine**"
Bad()
`);
    expect(outputs(frames)).toEqual([['result', { 'text/plain': 'Bad()', 'text/markdown': '**fine**' }]]);
    expect(doneOf(frames)).toMatchObject({ status: 'ok' });
    await shared.until(() => shared.stderr.slice(before).includes('ValueError: html is broken'), 'the report');
    const report = shared.stderr.slice(before);
    expect(report).toContain('Bad._repr_html_() raised ValueError');
    expect(report).toContain('in _repr_html_');
    expect(report).toContain('raise ValueError("html is broken")');
    expect(report).not.toMatch(/File "<string>"/);
  });

  test('a repr() that raises gives an <unrepresentable object> text/plain', async () => {
    const frames = await shared.cell('class R:\n    def __repr__(self):\n        raise RuntimeError("no repr")\nR()');
    expect(outputs(frames)).toEqual([['result', { 'text/plain': '<unrepresentable object: RuntimeError: no repr>' }]]);
    expect(doneOf(frames).status).toBe('ok');
  });

  test('a class object and an object whose __getattr__ answers everything show text/plain only', async () => {
    const frames = await shared.cell(`
class K:
    def _repr_html_(self): return "<b>instance</b>"
class Anything:
    def __getattr__(self, name): return lambda *a, **k: "<b>conjured</b>"
    def __repr__(self): return "Anything()"
display(K)
Anything()`);
    expect(outputs(frames)).toEqual([
      ['display', { 'text/plain': "<class '__main__.K'>" }],
      ['result', { 'text/plain': 'Anything()' }],
    ]);
  });

  test('values that cannot travel are left out with a line on stderr', async () => {
    const before = shared.stderr.length;
    const frames = await shared.cell(`
class J:
    def __repr__(self): return "J()"
    def _repr_json_(self): return {"x": float("nan")}
    def _repr_html_(self): return 42
J()`);
    expect(outputs(frames)).toEqual([['result', { 'text/plain': 'J()' }]]);
    await shared.until(() => /application\/json cannot be sent/.test(shared.stderr.slice(before)), 'the json note');
    expect(shared.stderr.slice(before)).toContain('returned int, not str, so text/html is left out');
  });

  test('a lone surrogate does not break the frame', async () => {
    const frames = await shared.cell('display({"text/plain": "a\\udcffb"}, raw=True)');
    expect(outputs(frames)).toEqual([['display', { 'text/plain': 'a\ufffdb' }]]);
  });
});

describe('state and errors', () => {
  test('a long-lived driver keeps one namespace across cells, and exits 0 at EOF', async () => {
    const d = startDriver();
    expect(doneOf(await d.cell('a = 41\ndef f():\n    return 1 / 0', { id: 7 }))).toMatchObject({ id: 7, status: 'ok' });
    expect(outputs(await d.cell('a + 1', { id: 8 }))).toEqual([['result', { 'text/plain': '42' }]]);
    const frames = await d.cell('f()', { id: 9 });
    expect(doneOf(frames)).toEqual({ type: 'done', id: 9, status: 'error', exit: null });
    // The traceback names each cell's own file and shows its source lines.
    expect(frames[0].traceback).toContain('File "<cell-9>", line 1, in <module>');
    expect(frames[0].traceback).toContain('File "<cell-7>", line 3, in f\n    return 1 / 0');
    expect(outputs(await d.cell('a', { id: 10 }))).toEqual([['result', { 'text/plain': '41' }]]);
    expect(await d.close()).toEqual({ code: 0, signal: null });
  });

  test('a prewarmed box\'s only cell ("single": true) is named <cell>, and ends the driver as a once-cell does', async () => {
    const d = startDriver();
    const frames = await d.cell('def f():\n    raise OSError("x")\nf()', { id: 3, single: true });
    expect(frames[0].traceback).toContain('File "<cell>", line 2, in f\n    raise OSError("x")');
    expect(frames[0].traceback).not.toContain('<cell-3>');
    // Its exit status is a once-cell's: 1, the cell raised.
    expect(await d.close()).toEqual({ code: 1, signal: null });
  });

  test('__future__ imports carry to later cells', async () => {
    await shared.cell('from __future__ import annotations');
    const frames = await shared.cell('def g(x: NotDefinedAnywhere) -> int: pass\ng.__annotations__["x"]');
    expect(outputs(frames)).toEqual([['result', { 'text/plain': "'NotDefinedAnywhere'" }]]);
  });

  test("the traceback starts at the cell's line, shows its source, and has no driver frames", async () => {
    const r = await runOnce('x = 1\ndef f():\n    return x / 0\nf()');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^Traceback \(most recent call last\):\n {2}File "<cell>", line 4, in <module>\n {4}f\(\)\n/);
    expect(r.stderr).toContain('  File "<cell>", line 3, in f\n    return x / 0\n');
    expect(r.stderr).toMatch(/ZeroDivisionError: division by zero\n$/);
    expect(r.stderr).not.toMatch(/File "<string>"|driver|_kern/);
    const error = r.frames.find((f) => f.type === 'error');
    expect(error).toEqual({ type: 'error', ename: 'ZeroDivisionError', evalue: 'division by zero', traceback: r.stderr });
    expect(r.frames.map((f) => f.type)).toEqual(['error', 'done']);
    expect(doneOf(r.frames)).toEqual({ type: 'done', id: 1, status: 'error', exit: null });
  });

  test("user code's traceback.print_exc() shows the cell's source lines too", async () => {
    const r = await runOnce('import traceback\ntry:\n    {}["missing"]\nexcept KeyError:\n    traceback.print_exc()');
    expect(r.code).toBe(0);
    expect(r.stderr).toContain('File "<cell>", line 3, in <module>\n    {}["missing"]');
  });

  test('a SyntaxError is an error frame and is printed as Python prints it', async () => {
    const r = await runOnce('x = 1\ny = (x +\n');
    expect(r.code).toBe(1);
    const error = r.frames.find((f) => f.type === 'error');
    expect(error.ename).toBe('SyntaxError');
    expect(error.traceback).toBe(r.stderr);
    expect(r.stderr).toContain('File "<cell>", line 2');
    expect(r.stderr).toContain('y = (x +');
    expect(r.stderr).toMatch(/SyntaxError: /);
    expect(r.stderr).not.toMatch(/Traceback|File "<string>"/);
    expect(doneOf(r.frames)).toMatchObject({ status: 'error', exit: null });
  });

  test('an exception in a long-lived driver fails that cell only', async () => {
    const frames = await shared.cell('raise KeyError("k")');
    expect(frames.map((f) => f.type)).toEqual(['error', 'done']);
    expect(frames[0]).toMatchObject({ ename: 'KeyError', evalue: "'k'" });
    expect(outputs(await shared.cell('1 + 2'))).toEqual([['result', { 'text/plain': '3' }]]);
  });
});

describe('once-mode exit codes', () => {
  test('0 when the cell succeeded', async () => {
    const r = await runOnce('x = 1\nx');
    expect(r.code).toBe(0);
    expect(r.frames.map((f) => f.type)).toEqual(['result', 'done']);
    expect(doneOf(r.frames)).toEqual({ type: 'done', id: 1, status: 'ok', exit: null });
  });

  test('1 when it raised', async () => {
    const r = await runOnce('raise ValueError("bad")');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/ValueError: bad\n$/);
  });

  test('the SystemExit code: 3, 0 for None, 1 for a message printed to stderr', async () => {
    const three = await runOnce('print("before")\nraise SystemExit(3)');
    expect(three.code).toBe(3);
    expect(three.stdout).toBe('before\n');
    expect(three.frames.map((f) => f.type)).toEqual(['done']);
    expect(doneOf(three.frames)).toEqual({ type: 'done', id: 1, status: 'error', exit: 3 });

    const none = await runOnce('import sys\nsys.exit()');
    expect(none.code).toBe(0);
    expect(doneOf(none.frames)).toMatchObject({ status: 'ok', exit: 0 });

    const msg = await runOnce('import sys\nsys.exit("bye now")');
    expect(msg.code).toBe(1);
    expect(msg.stderr).toBe('bye now\n');
    expect(doneOf(msg.frames)).toMatchObject({ status: 'error', exit: 1 });
  });

  test('a long-lived driver reports SystemExit and keeps going', async () => {
    const frames = await shared.cell('import sys\nsys.exit(4)');
    expect(doneOf(frames)).toMatchObject({ status: 'error', exit: 4 });
    expect(outputs(await shared.cell('5'))).toEqual([['result', { 'text/plain': '5' }]]);
  });
});

describe('the channel is private', () => {
  const FORGE = `import json, os, sys
b = json.dumps({"type": "result", "data": {"text/plain": "FORGED"}, "metadata": {}}).encode()
forged = len(b).to_bytes(4, "big") + b
sys.stdout.buffer.write(forged)
sys.stdout.flush()
os.write(1, forged)
print(repr(forged))
try:
    os.fstat(3)
    print("fd 3 is open")
except OSError as e:
    print("fd 3:", e.strerror)
`;

  test('a forged frame printed by the cell lands on stdout only', async () => {
    const r = await runOnce(FORGE);
    expect(r.code).toBe(0);
    expect(r.frames).toEqual([{ type: 'done', id: 1, status: 'ok', exit: null }]);
    const body = JSON.stringify({ type: 'result', data: { 'text/plain': 'FORGED' }, metadata: {} }).replace(/,/g, ', ').replace(/:/g, ': ');
    const head = Buffer.alloc(4);
    head.writeUInt32BE(Buffer.byteLength(body));
    const forged = head.toString('latin1') + body;
    expect(r.stdout.startsWith(forged + forged)).toBe(true);
    expect(r.stdout).toContain('fd 3: Bad file descriptor');
  });

  test('a subprocess does not inherit the channel', async () => {
    // The channel is a socket (so are Node's stdout/stderr pipes); a child started without
    // closing fds, as os.system and close_fds=False do, and given pipes for its output, must
    // have no socket at all.
    const frames = await shared.cell(`import os, subprocess, sys
FIND = """import os
def sockets():
    found = []
    for f in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + f).startswith("socket:"):
                found.append(f)
        except OSError:
            pass
    return found
"""
exec(FIND)
child = subprocess.run([sys.executable, "-c", FIND + "print(sockets())"], close_fds=False, capture_output=True, text=True)
shell = subprocess.run("ls -l /proc/self/fd/ | grep -c socket:", shell=True, close_fds=False, capture_output=True, text=True)
(len(sockets()) > 0, child.stdout.strip(), shell.stdout.strip())`);
    expect(outputs(frames)).toEqual([['result', { 'text/plain': "(True, '[]', '0')" }]]);
  });

  test('a forked child never writes into the channel', async () => {
    const d = startDriver();
    const frames = await d.cell(`import os
pid = os.fork()
if pid == 0:
    display("from the child")
    print("child ran", flush=True)
else:
    os.waitpid(pid, 0)
"parent" if pid else "child"`);
    expect(outputs(frames)).toEqual([['result', { 'text/plain': "'parent'" }]]);
    expect(d.stdout).toContain('child ran');
    // The child came back from the cell and ended there: it did not read the next cell.
    expect(outputs(await d.cell('1 + 1'))).toEqual([['result', { 'text/plain': '2' }]]);
    expect(await d.close()).toEqual({ code: 0, signal: null });
  });

  test('the cell can break json, os, sys.stdout, print and display; results still arrive', async () => {
    const d = startDriver();
    const frames = await d.cell(`import builtins, json, os, sys, binascii
json.dumps = json.loads = None
os.write = os.read = os.dup = None
binascii.b2a_base64 = None
sys.stdout = None
del builtins.print
del builtins.display`);
    expect(doneOf(frames).status).toBe('ok');
    const next = await d.cell('class P:\n    def _repr_png_(self): return b"png"\ndisplay(P())\n{"still": "here"}');
    expect(outputs(next)).toEqual([
      ['display', { 'text/plain': expect.stringContaining('P object'), 'image/png': Buffer.from('png').toString('base64') }],
      ['result', { 'text/plain': "{'still': 'here'}" }],
    ]);
    const failing = await d.cell('1 / 0');
    expect(failing[0]).toMatchObject({ type: 'error', ename: 'ZeroDivisionError' });
    expect(await d.close()).toEqual({ code: 0, signal: null });
  });
});

describe('environment of a cell', () => {
  test('like python3 -c: __main__, no __file__, argv ["-c"], path[0] ""; MPLBACKEND=Agg', async () => {
    const frames = await shared.cell(
      'import os, sys, pickle\nclass C: pass\n(__name__, "__file__" in globals(), sys.argv, sys.path[0], os.environ["MPLBACKEND"], type(pickle.loads(pickle.dumps(C()))).__name__)'
    );
    expect(outputs(frames)).toEqual([['result', { 'text/plain': "('__main__', False, ['-c'], '', 'Agg', 'C')" }]]);
  });

  test('stdout is flushed before the done frame', async () => {
    const d = startDriver(); // PYTHONUNBUFFERED unset: stdout is a block-buffered pipe
    await d.cell('print("buffered?")\nimport sys\nprint("err too", file=sys.stderr)');
    // Still running: without the driver's flush the text would sit in Python's buffer until exit.
    await d.until(() => d.stdout === 'buffered?\n' && d.stderr === 'err too\n', 'the output of a finished cell');
    expect(d.exited).toBeNull();
    await d.close();
  });

  test("a cell frame's marker is written to stdout and stderr after the cell's own output", async () => {
    const d = startDriver();
    await d.cell('print("out")\nimport sys\nsys.stderr.write("err\\n")', { marker: '\u0001kern-m-1\u0002' });
    await d.until(() => d.stdout.endsWith('\u0002') && d.stderr.endsWith('\u0002'), 'the markers');
    expect(d.stdout).toBe('out\n\u0001kern-m-1\u0002');
    expect(d.stderr).toBe('err\n\u0001kern-m-1\u0002');
    await d.close();
  });

  test('SIGINT interrupts a running cell, and is ignored between cells', async () => {
    const d = startDriver();
    const frames = await d.cell('import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(20)');
    expect(frames.map((f) => f.type)).toEqual(['error', 'done']);
    expect(frames[0].ename).toBe('KeyboardInterrupt');
    d.child.kill('SIGINT'); // the driver is waiting for a frame now
    await new Promise((r) => setTimeout(r, 200));
    expect(outputs(await d.cell('"alive"'))).toEqual([['result', { 'text/plain': "'alive'" }]]);
    expect(await d.close()).toEqual({ code: 0, signal: null });
  });

  test('the pure-python json fallback works when _json is missing', async () => {
    const d = startDriver({ prefix: 'import sys; sys.modules["_json"] = None\n' });
    expect(outputs(await d.cell('"h\\xe9llo", [1.5, None]'))).toEqual([['result', { 'text/plain': "('héllo', [1.5, None])" }]]);
    const frames = await d.cell('class H:\n    def _repr_html_(self): return "<p>\\u2603</p>"\n    def _repr_json_(self): return {"n": [1, 2]}\nH()');
    expect(frames[0].data['text/html']).toBe('<p>☃</p>');
    expect(frames[0].data['application/json']).toEqual({ n: [1, 2] });
    expect(await d.close()).toEqual({ code: 0, signal: null });
  });
});

describe('protocol errors end the driver with exit code 70', () => {
  test('no channel on fd 3', async () => {
    const d = startDriver({ withChannel: false });
    expect(await d.exit).toEqual({ code: 70, signal: null });
    expect(d.stderr).toMatch(/fd 3/);
  });

  test('a frame over 256 MiB', async () => {
    const d = startDriver();
    const head = Buffer.alloc(4);
    head.writeUInt32BE(256 * 1024 * 1024 + 1);
    d.child.stdio[3].write(head);
    expect(await d.exit).toEqual({ code: 70, signal: null });
    expect(d.stderr).toMatch(/over the 268435456-byte limit/);
  });

  test('a frame that is not JSON, and a frame that is not a cell', async () => {
    const d = startDriver();
    const body = Buffer.from('not json');
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length);
    d.child.stdio[3].write(Buffer.concat([head, body]));
    expect(await d.exit).toEqual({ code: 70, signal: null });
    expect(d.stderr).toMatch(/not a UTF-8 JSON object/);

    const e = startDriver();
    e.send({ type: 'hello' });
    expect(await e.exit).toEqual({ code: 70, signal: null });
    expect(e.stderr).toMatch(/expected a cell frame/);
  });

  test('EOF in the middle of a frame', async () => {
    const d = startDriver();
    d.child.stdio[3].end(Buffer.from([0, 0, 0, 10, 123]));
    expect(await d.exit).toEqual({ code: 70, signal: null });
    expect(d.stderr).toMatch(/middle of a frame/);
  });
});

const hasMatplotlib = spawnSync(PYTHON, ['-c', 'import matplotlib.pyplot'], { stdio: 'ignore' }).status === 0;

(hasMatplotlib ? describe : describe.skip)('matplotlib (skipped when this python has none)', () => {
  const PNG = /^iVBORw0KGgo/; // base64 of the PNG signature
  let d;
  beforeAll(() => {
    d = startDriver();
  });
  afterAll(() => d.close());

  test('every open figure is shown after the cell, then closed', async () => {
    const frames = await d.cell('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.figure()\nplt.plot([3, 1])');
    expect(frames.map((f) => f.type)).toEqual(['result', 'display', 'display', 'done']);
    expect(frames[0].data['text/plain']).toMatch(/^\[<matplotlib\.lines\.Line2D/);
    for (const f of frames.slice(1, 3)) {
      expect(f.data['text/plain']).toBe('<Figure size 640x480 with 1 Axes>');
      expect(f.data['image/png']).toMatch(PNG);
    }
    expect(outputs(await d.cell('plt.get_fignums()'))).toEqual([['result', { 'text/plain': '[]' }]]);
  });

  test('a figure as the last expression is the result, shown once', async () => {
    const frames = await d.cell('fig, ax = plt.subplots()\nax.plot([1, 2])\nfig');
    expect(frames.map((f) => f.type)).toEqual(['result', 'done']);
    expect(frames[0].data['text/plain']).toBe('<Figure size 640x480 with 1 Axes>');
    expect(frames[0].data['image/png']).toMatch(PNG);
  });

  test('plt.show() shows the figures at that point (then plt.close() cannot lose them)', async () => {
    const frames = await d.cell('plt.plot([1, 2])\nplt.show()\nprint("after")\nplt.close()');
    expect(frames.map((f) => f.type)).toEqual(['display', 'done']);
    expect(frames[0].data['image/png']).toMatch(PNG);
  });

  test('figures are shown after a cell that raised', async () => {
    const frames = await d.cell('plt.plot([1])\nraise RuntimeError("after plotting")');
    expect(frames.map((f) => f.type)).toEqual(['error', 'display', 'done']);
  });
});
