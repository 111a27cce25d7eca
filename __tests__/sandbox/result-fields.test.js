'use strict';
// rootless: yes
// What a cell's results say beyond their MIME data (additions): `error` (the exception a cell
// raised), `Result.isMainResult`, the latex/javascript/pdf getters, `onResult`, matplotlib chart
// data (`Result.chart`) and `lineBuffered` output, through real boxes on the sci test rootfs
// (matplotlib, IPython's Jupyter kernel).

const fs = require('fs');
const { Sandbox, SandboxError } = require('../..');
const { sharedSandbox, withKernel, expectSandboxError, notesOf, hostProcessesMatching, ourDescendant, waitFor } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

beforeAll(() => {
  if (!fs.existsSync(`${SCI}/.kern-test-rootfs`)) {
    throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
  }
});

const sb = sharedSandbox({ image: SCI });

/** Runs `body` (matplotlib code) after the imports, and returns the one figure's chart. */
async function chartOf(body) {
  const r = await sb.runCode(`import matplotlib.pyplot as plt\n${body}`);
  expect(r.codeStderr).toBe('');
  const figures = r.results.filter((x) => x.png);
  expect(figures).toHaveLength(1);
  expect(figures[0].isMainResult).toBe(false);
  return figures[0].chart;
}

describe('error', () => {
  test('a python runCode that raised reports the exception; a clean one and other languages say null', async () => {
    const r = await sb.runCode('x = 1\ndef f():\n    return x / 0\nf()');
    expect(r.exitCode).toBe(1);
    expect(r.fault).toBeNull();
    expect(r.error).toEqual({ name: 'ZeroDivisionError', value: 'division by zero', traceback: expect.any(String) });
    expect(r.error.traceback).toMatch(/^Traceback \(most recent call last\):\n/);
    expect(r.error.traceback).toContain('line 3, in f');
    expect(r.error.traceback).toMatch(/ZeroDivisionError: division by zero\n$/);
    // The traceback is on stderr as before.
    expect(r.codeStderr).toBe(r.error.traceback);
    expect((await sb.runCode('1 + 1')).error).toBeNull();
    const bash = await sb.runCode('exit 3', { language: 'bash' });
    expect([bash.exitCode, bash.error]).toEqual([3, null]);
    expect((await sb.run(['false'])).error).toBeNull();
  });

  test('a SyntaxError is an error; a SystemExit is an exit code, not an error', async () => {
    const syntax = await sb.runCode('def (:');
    expect(syntax.error.name).toBe('SyntaxError');
    expect(syntax.error.traceback).toContain('SyntaxError');
    const exit = await sb.runCode('import sys\nsys.exit(4)');
    expect([exit.exitCode, exit.error]).toEqual([4, null]);
    const custom = await sb.runCode('class Oops(Exception):\n    pass\nraise Oops("a\\nb")');
    expect([custom.error.name, custom.error.value]).toEqual(['Oops', 'a\nb']);
  });

  test('a timeout is a fault, not an error', async () => {
    const r = await sb.runCode('import time\ntime.sleep(60)', { timeoutS: 1 });
    expect(r.fault.type).toBe('timeout');
    expect(r.error).toBeNull();
  });

  test('driver kernel cells report their exception, and the next cell runs clean', async () => {
    await withKernel({ image: SCI }, {}, async (k) => {
      const bad = await k.runCode('d = {}\nd["missing"]');
      expect(bad.error).toMatchObject({ name: 'KeyError', value: "'missing'" });
      expect(bad.error.traceback).toMatch(/KeyError: 'missing'\n$/);
      const ok = await k.runCode('len(d)');
      expect(ok.error).toBeNull();
      expect(ok.results.map((x) => [x.text, x.isMainResult])).toEqual([['0', true]]);
    });
  });

  test('a Jupyter kernel cell reports ename/evalue/traceback without colour codes; a SystemExit as ipykernel does; a timeout is a fault', async () => {
    await withKernel({ image: SCI }, { jupyter: 'python3' }, async (k) => {
      const bad = await k.runCode('def g():\n    raise ValueError("no good")\ng()');
      expect(bad.exitCode).toBe(1);
      expect([bad.error.name, bad.error.value]).toEqual(['ValueError', 'no good']);
      expect(bad.error.traceback).toContain('no good');
      expect(bad.error.traceback).toContain('g()');
      expect(bad.error.traceback).not.toContain('\u001b');
      const ok = await k.runCode('from IPython.display import display, Latex\ndisplay(Latex("$x$"))\n40 + 2');
      expect(ok.error).toBeNull();
      expect(ok.results.map((x) => [x.isMainResult, x.text])).toEqual([[false, '<IPython.core.display.Latex object>'], [true, '42']]);
      expect(ok.results[0].latex).toBe('$x$');
      expect(ok.results[0].chart).toBeNull();
      // ipykernel reports a SystemExit as an error; a timeout's KeyboardInterrupt is the fault.
      const exit = await k.runCode('import sys\nsys.exit(3)');
      expect([exit.error.name, exit.error.value]).toEqual(['SystemExit', '3']);
      const slow = await k.runCode('import time\ntime.sleep(60)', { timeoutS: 1 });
      expect([slow.fault.type, slow.error]).toEqual(['timeout', null]);
      expect((await k.runCode('1')).error).toBeNull();
    });
  });
});

describe('isMainResult and the MIME getters', () => {
  test('display() output and figures are not the main result; the last value is, in order', async () => {
    const r = await sb.runCode([
      'import matplotlib.pyplot as plt',
      'display("shown")',
      'plt.plot([1, 2])',
      '"last"',
    ].join('\n'));
    expect(r.results.map((x) => [x.text.startsWith('<Figure') ? 'figure' : x.text, x.isMainResult]))
      .toEqual([["'shown'", false], ["'last'", true], ['figure', false]]);
  });

  test('a figure that is the last value is the main result', async () => {
    const r = await sb.runCode('import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([3, 1])\nfig');
    expect(r.results).toHaveLength(1);
    expect(r.results[0].isMainResult).toBe(true);
    expect(r.results[0].chart.type).toBe('line');
  });

  test('latex, javascript and pdf have getters; pdf is decoded', async () => {
    const r = await sb.runCode([
      'class Rich:',
      '    def _repr_latex_(self): return r"$\\alpha$"',
      '    def _repr_javascript_(self): return "console.log(1)"',
      '    def _repr_pdf_(self): return b"%PDF-1.4 fake"',
      'Rich()',
    ].join('\n'));
    expect(r.codeStderr).toBe('');
    const [x] = r.results;
    expect(x.latex).toBe('$\\alpha$');
    expect(x.javascript).toBe('console.log(1)');
    expect(x.pdf).toEqual(Buffer.from('%PDF-1.4 fake'));
    expect(x.isMainResult).toBe(true);
    const plain = (await sb.runCode('1')).results[0];
    expect([plain.latex, plain.javascript, plain.pdf, plain.chart]).toEqual([undefined, undefined, null, null]);
  });
});

describe('onResult', () => {
  test('is called with each result in order, before the promise resolves, equal to results', async () => {
    const seen = [];
    let resolved = false;
    const p = sb.runCode('display(1)\ndisplay(2)\n3', {
      onResult: (x) => {
        expect(resolved).toBe(false);
        seen.push(x);
      },
    });
    p.then(() => {
      resolved = true;
    });
    const r = await p;
    expect(seen.map((x) => [x.text, x.isMainResult])).toEqual([['1', false], ['2', false], ['3', true]]);
    expect(seen).toEqual(r.results);
  });

  // The cell waits, after its first display(), for a file that only onResult writes: it ends
  // only if that result reached the caller while the cell was still running.
  const WAITS = [
    'import os, time',
    'display("first")',
    'for _ in range(1200):',
    '    if os.path.exists("go-%s"): break',
    '    time.sleep(0.05)',
    'else:',
    '    raise SystemExit(9)',
    '"done"',
  ].join('\n');
  const release = (box, name) => (x) => {
    if (x.text === "'first'") box.writeFile(`go-${name}`, 'x').catch(() => {});
  };

  test('results arrive while the cell runs: a call, a driver kernel and a Jupyter kernel', async () => {
    const r = await sb.runCode(WAITS.replace('%s', 'call'), { onResult: release(sb, 'call'), timeoutS: 120 });
    expect([r.exitCode, r.fault]).toEqual([0, null]);
    expect(r.results.map((x) => x.text)).toEqual(["'first'", "'done'"]);
    for (const kOpts of [{}, { jupyter: 'python3' }]) {
      await withKernel({ image: SCI }, kOpts, async (k, box) => {
        const name = kOpts.jupyter ? 'jupyter' : 'kernel';
        const seen = [];
        const c = await k.runCode(WAITS.replace('%s', name), {
          timeoutS: 120,
          onResult: (x) => {
            seen.push(x.text);
            release(box, name)(x);
          },
        });
        expect([c.exitCode, c.fault, c.error]).toEqual([0, null, null]);
        expect(seen).toEqual(["'first'", "'done'"]);
      });
    }
  });

  test('a prewarmed box delivers them live too, and error and isMainResult as a fresh box does', async () => {
    // This process's drivers only: every python runCode's argv holds the name, other suites' too.
    const driverPids = () => hostProcessesMatching('_kern_driver').filter((p) => ourDescendant(p.pid)).map((p) => p.pid);
    const before = driverPids();
    const mine = () => driverPids().filter((p) => !before.includes(p));
    const box = await new Sandbox({ image: SCI, prewarm: 1 }).open();
    try {
      expect(await waitFor(() => mine().length === 1, 20000)).toBe(true);
      const [idle] = mine();
      const r = await box.runCode(WAITS.replace('%s', 'warm'), { onResult: release(box, 'warm'), timeoutS: 120 });
      expect([r.exitCode, r.fault]).toEqual([0, null]);
      expect(r.results.map((x) => [x.text, x.isMainResult])).toEqual([["'first'", false], ["'done'", true]]);
      // The idle driver ran it: it is gone.
      expect(await waitFor(() => !hostProcessesMatching('_kern_driver').some((p) => p.pid === idle), 20000)).toBe(true);
      const bad = await box.runCode('raise KeyError("k")');
      expect(bad.error).toMatchObject({ name: 'KeyError', value: "'k'" });
    } finally {
      await box.close();
    }
  });

  test('a throwing onResult does not break the call: a note, and later results still come', async () => {
    const seen = [];
    const r = await sb.runCode('display(1)\n2', {
      onResult: (x) => {
        seen.push(x.text);
        throw new Error('boom');
      },
    });
    expect(seen).toEqual(['1', '2']);
    expect(r.results).toHaveLength(2);
    expect(notesOf(r)).toContain('note: onResult threw boom; later results were still delivered');
  });

  test('kernel cells take onResult; a bad onResult is refused before any box starts', async () => {
    await withKernel({ image: SCI }, {}, async (k) => {
      const seen = [];
      await k.runCode('display("a")\n"b"', { onResult: (x) => seen.push(x.text) });
      expect(seen).toEqual(["'a'", "'b'"]);
      await expectSandboxError(() => k.runCode('1', { onResult: 5 }), SandboxError, /onResult.*function/);
    });
    await expectSandboxError(() => sb.runCode('1', { onResult: 'x' }), SandboxError, /`onResult` must be a function \(result: Result\)/);
  });
});

describe('chart data', () => {
  test('a line chart: title, labels, scales and every point', async () => {
    const c = await chartOf([
      'plt.plot([0, 1, 2], [1.5, float("nan"), 4], label="speed")',
      'plt.plot([0, 1], [7, 8])',
      'plt.title("Run")',
      'plt.xlabel("t (s)")',
      'plt.ylabel("v")',
      'plt.yscale("log")',
    ].join('\n'));
    expect(c).toEqual({
      type: 'line',
      title: 'Run',
      xLabel: 't (s)',
      yLabel: 'v',
      xUnit: 's',
      yUnit: null,
      xScale: 'linear',
      yScale: 'log',
      xTicks: expect.any(Array),
      yTicks: expect.any(Array),
      xTickLabels: expect.any(Array),
      yTickLabels: expect.any(Array),
      elements: [
        { label: 'speed', points: [[0, 1.5], [1, null], [2, 4]] },
        { label: '', points: [[0, 7], [1, 8]] },
      ],
    });
    // The ticks as drawn: positions and labels pair up.
    expect(c.xTicks.length).toBe(c.xTickLabels.length);
    expect(c.xTicks).toContain(1);
    expect(c.xTickLabels).toContain('1.00');
  });

  test('axes of dates and of strings: datetime and categorical scales, ISO ticks; units in [] too', async () => {
    const d = await chartOf([
      'import datetime',
      'plt.plot([datetime.date(2024, 1, d) for d in (1, 2, 3)], [1, 2, 3])',
      'plt.xlabel("Day [d]")',
      'plt.ylabel("Temperature (°C)")',
    ].join('\n'));
    expect(d).toMatchObject({ xScale: 'datetime', yScale: 'linear', xUnit: 'd', yUnit: '°C' });
    expect(d.elements[0].points[0]).toEqual(['2024-01-01', 1]);
    expect(d.xTicks.length).toBeGreaterThan(1);
    for (const t of d.xTicks) expect(t).toMatch(/^2024-01-0[1-3]T\d\d:\d\d:\d\d\+00:00$/);
    const cat = await chartOf('plt.plot(["mon", "tue", "wed"], [1, 2, 3])');
    expect(cat).toMatchObject({ xScale: 'categorical', xTicks: [0, 1, 2], xTickLabels: ['mon', 'tue', 'wed'] });
  });

  test('a scatter chart, with categorical x as strings', async () => {
    const c = await chartOf('plt.scatter([1, 2.5], [3, 4], label="pts")\nplt.scatter([5], [6])');
    expect(c.type).toBe('scatter');
    expect(c.elements).toEqual([
      { label: 'pts', points: [[1, 3], [2.5, 4]] },
      { label: '', points: [[5, 6]] },
    ]);
    const cat = await chartOf('plt.plot(["mon", "tue"], [1, 2])');
    expect(cat.elements[0].points).toEqual([['mon', 1], ['tue', 2]]);
  });

  test('a bar chart: a value per bar, named by its tick, grouped by its bar call', async () => {
    const c = await chartOf([
      'plt.bar(["a", "b", "c"], [3, 5, 2], label="2024")',
      'plt.title("Sales")',
      'plt.legend()',
    ].join('\n'));
    expect(c).toMatchObject({ type: 'bar', title: 'Sales' });
    expect(c.elements).toEqual([
      { label: 'a', group: '2024', value: 3 },
      { label: 'b', group: '2024', value: 5 },
      { label: 'c', group: '2024', value: 2 },
    ]);
    const h = await chartOf('plt.barh(["x", "y"], [10, 20])');
    expect(h.elements.map((e) => [e.label, e.value])).toEqual([['x', 10], ['y', 20]]);
  });

  test('a pie chart: a wedge per label with its angle', async () => {
    const c = await chartOf('plt.pie([1, 3], labels=["one", "three"])\nplt.title("Share")');
    expect(c.type).toBe('pie');
    expect(c.title).toBe('Share');
    expect(c.elements.map((e) => e.label)).toEqual(['one', 'three']);
    expect(c.elements[0].angle).toBe(90);
    expect(c.elements[1].angle).toBe(270);
    expect(c.elements[0].radius).toBe(1);
    // Rounded as E2B rounds them: 0.9 of a circle is 324 degrees, not 323.99999999999994.
    const r = await chartOf('plt.pie([90, 10])');
    expect(r.elements.map((e) => e.angle)).toEqual([324, 36]);
  });

  test('a box plot: the statistics of each box', async () => {
    const c = await chartOf('plt.boxplot([[1, 2, 3, 4, 5, 100], [2, 4, 6]], labels=["A", "B"])');
    expect(c.type).toBe('box_and_whisker');
    expect(c.elements).toEqual([
      { label: 'A', min: 1, firstQuartile: 2.25, median: 3.5, thirdQuartile: 4.75, max: 5, outliers: [100] },
      { label: 'B', min: 2, firstQuartile: 3, median: 4, thirdQuartile: 5, max: 6, outliers: [] },
    ]);
  });

  test('several axes make a superchart; an empty figure and a non-figure have no chart', async () => {
    const c = await chartOf([
      'fig, (a, b) = plt.subplots(1, 2)',
      'a.plot([1, 2])',
      'a.set_title("left")',
      'b.bar(["p"], [9])',
      'fig.suptitle("Both")',
    ].join('\n'));
    expect(c.type).toBe('superchart');
    expect(c.title).toBe('Both');
    expect(c.elements.map((e) => [e.type, e.title])).toEqual([['line', 'left'], ['bar', '']]);
    expect(c.elements[0].elements[0].points).toEqual([[0, 1], [1, 2]]);
    const mixed = await chartOf('plt.plot([1, 2])\nplt.bar([1], [2])');
    expect(mixed).toEqual({ type: 'unknown', title: '', xLabel: '', yLabel: '', xUnit: null, yUnit: null, elements: [] });
    const empty = await sb.runCode('import matplotlib.pyplot as plt\nplt.figure()');
    expect(empty.results.every((x) => x.chart === null)).toBe(true);
  });

  test('a million points are cut to 10,000 and say so', async () => {
    const c = await chartOf('import numpy as np\nplt.plot(np.arange(1_000_000) % 7)');
    expect(c.truncated).toBe(true);
    expect(c.elements[0].points).toHaveLength(10000);
    expect(c.elements[0].points[9]).toEqual([9, 2]);
  });

  test('a cell that never imported matplotlib does not get it imported', async () => {
    const r = await sb.runCode('import sys\ndisplay(1)\n"matplotlib" in sys.modules');
    expect(r.results.map((x) => x.text)).toEqual(['1', 'False']);
  });
});

describe('DataFrames and PIL images', () => {
  test('a DataFrame carries its rows as Table Schema JSON beside its text and HTML', async () => {
    const r = await sb.runCode([
      'import pandas as pd',
      'pd.DataFrame({"n": [1, 2], "when": pd.to_datetime(["2024-01-01", "2024-01-02"]), "x": [1.5, float("nan")]})',
    ].join('\n'));
    expect(r.error).toBeNull();
    const [res] = r.results;
    expect(res.formats()).toEqual(['text/plain', 'text/html', 'application/vnd.dataresource+json']);
    const table = JSON.parse(res.data['application/vnd.dataresource+json']);
    expect(table.schema.primaryKey).toEqual(['index']);
    expect(table.data).toEqual([
      { index: 0, n: 1, when: '2024-01-01T00:00:00.000', x: 1.5 },
      { index: 1, n: 2, when: '2024-01-02T00:00:00.000', x: null },
    ]);
  });

  test('Image.show() and Image.save(path) display the image; the file is still saved', async () => {
    const r = await sb.runCode([
      'from PIL import Image',
      'img = Image.new("RGB", (4, 4), "red")',
      'img.show()',
      'img.save("/tmp/red.png")',
      'import os',
      'print(os.path.getsize("/tmp/red.png") > 0)',
    ].join('\n'));
    expect(r.error).toBeNull();
    expect(r.stdout).toBe('True\n');
    expect(r.results.length).toBe(2);
    for (const res of r.results) expect(res.png.subarray(1, 4).toString()).toBe('PNG');
  });
});

describe('lineBuffered', () => {
  /** `chunks` hold `text` in whole lines: every chunk but the last ends with a newline, and the
   * last is what follows the text's last newline. */
  const expectLines = (chunks, text) => {
    expect(chunks.join('')).toBe(text);
    for (const c of chunks.slice(0, -1)) expect(c.endsWith('\n')).toBe(true);
    expect(chunks[chunks.length - 1]).toBe(text.slice(text.lastIndexOf('\n') + 1));
  };
  // The pause between a line's two writes is what lets a reader see them apart without
  // lineBuffered: long enough for a reader on a loaded machine.
  const code = 'import sys, time\nfor i in range(3):\n    sys.stdout.write("tick"); sys.stdout.flush(); time.sleep(0.3)\n    sys.stdout.write(" %d\\n" % i); sys.stdout.flush()\nsys.stdout.write("partial")';

  test('onStdout gets whole lines, and the trailing part at the end', async () => {
    const chunks = [];
    const r = await sb.runCode(code, { lineBuffered: true, onStdout: (c) => chunks.push(c.toString()) });
    expect(r.stdout).toBe('tick 0\ntick 1\ntick 2\npartial');
    expectLines(chunks, r.stdout);
  });

  test('without it the pieces come as written; a non-boolean is refused', async () => {
    const chunks = [];
    await sb.runCode(code, { onStdout: (c) => chunks.push(c.toString()) });
    expect(chunks.some((c) => c === 'tick')).toBe(true);
    const e = await expectSandboxError(() => sb.runCode('1', { lineBuffered: 'yes' }), SandboxError, /lineBuffered.*boolean/);
    expect(e.code).toBe('ERR_INVALID_OPTION');
  });

  test('stderr and kernel cells too', async () => {
    const err = [];
    const r = await sb.run(['sh', '-c', 'printf "a"; sleep 0.05; printf "b\\nc" >&2; sleep 0.05; printf "x\\ny" >&2'], {
      lineBuffered: true,
      onStderr: (c) => err.push(c.toString()),
    });
    // kern's own lines (a rootless run's best-effort caps) come first, whole: left out here.
    const ours = (c) => c.split(/(?<=\n)/).filter((l) => !r.runtimeNotes.includes(l.replace(/\n$/, ''))).join('');
    expectLines(err.map(ours).filter((c) => c !== ''), 'b\ncx\ny');
    const out = [];
    await withKernel({ image: SCI, onStdout: (c) => out.push(c.toString()) }, {}, async (k) => {
      await k.runCode(code, { lineBuffered: true });
      expectLines(out, 'tick 0\ntick 1\ntick 2\npartial');
      out.length = 0;
      await k.runCode(code);
      expect(out).toContain('tick');
    });
  });

  test('spawn() streams by lines, to the callback and the iterator', async () => {
    const seen = [];
    const p = await sb.spawn(['sh', '-c', 'printf "a"; sleep 0.05; printf "b\\nc"; sleep 0.05; printf "d\\n"; printf "e"'], {
      lineBuffered: true,
      onStdout: (c) => seen.push(c.toString()),
    });
    const iterated = [];
    for await (const c of p.stdout) iterated.push(c.toString());
    await p.wait();
    expectLines(seen, 'ab\ncd\ne');
    expect(iterated).toEqual(seen);
  });
});
