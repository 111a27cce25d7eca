'use strict';
// rootless: yes
// Issue 34: a python cell in a box of its own (a fresh box's runCode, a zygote's fork, a
// prewarmed box) ends as python's own exit would — non-daemon threads joined, atexit handlers
// run, __main__ torn down, files left open closed — before its done frame, then skips the
// teardown of every object (in a zygote's fork, that teardown wrote to every shared page). What
// a program can see of its exit must be what plain `python3 -c` gives in a fresh box: output,
// exit code, the files it touched and what they hold, on every route.

const { Sandbox } = require('../..');
const { opts, hostProcessesMatching, ourDescendant, waitFor } = require('../helpers');

// `@` becomes a tag of the route and scenario, so that no two runs share a file.
const SCENARIOS = [
  ['an atexit handler prints and writes a file',
    'import atexit\ndef bye():\n    print("bye")\n    open("@-atexit.txt", "w").write("from atexit")\natexit.register(bye)\nprint("hi")'],
  ['a file left open and unflushed in __main__',
    'f = open("@-main.txt", "w")\nf.write("unflushed " * 1000)'],
  ['a file held by a module, not by __main__',
    'import json\njson.kept = open("@-module.txt", "w")\njson.kept.write("held elsewhere")'],
  ['a text layer over a buffered file, held by a module',
    'import io, json\njson.w = io.TextIOWrapper(open("@-wrapped.bin", "wb"), encoding="utf-8")\njson.w.write("wrapped text")'],
  ["a logging file handler, flushed by logging's exit hook",
    'import logging\nlogging.basicConfig(filename="@-log.txt", level=logging.INFO, format="%(message)s")\nlogging.info("logged")'],
  ['a non-daemon thread that finishes after the cell',
    'import threading, time\ndef late():\n    time.sleep(0.3)\n    open("@-thread.txt", "w").write("late")\n    print("thread done", flush=True)\nthreading.Thread(target=late).start()\nprint("cell done")'],
  ['a daemon thread, stopped by the exit',
    'import threading, time\ndef never():\n    time.sleep(30)\n    open("@-daemon.txt", "w").write("never")\nthreading.Thread(target=never, daemon=True).start()\nprint("left running")'],
  // (Only print: by the time python's own exit collects `b`, it has taken `open` out of the
  // builtins; the driver's end tears __main__ down with the builtins whole.)
  ['__del__ of an object in __main__',
    'class Bye:\n    def __del__(self):\n        print("collected")\nb = Bye()\nprint("made")'],
  // What the cell made is collected at the end (what was there before it is frozen, not this).
  ['a reference cycle with a __del__, dropped by the cell',
    'class C:\n    def __del__(self):\n        print("cycle collected")\na = C()\na.me = a\ndel a\nprint("dropped")'],
  ['a reference cycle with a __del__, still held by __main__',
    'class C:\n    def __del__(self):\n        print("held cycle collected")\nkept = [C()]\nkept[0].me = kept\nprint("held")'],
  ['SystemExit with a code, an atexit handler after it',
    'import atexit, sys\natexit.register(lambda: print("exit hook"))\nprint("before")\nsys.exit(3)'],
  ['a child process that outlives the cell ends with the box',
    'import subprocess\nsubprocess.Popen(["sh", "-c", "sleep 30; echo late > @-child.txt"])\nprint("spawned")'],
  ['a child process an atexit handler waits for',
    'import atexit, subprocess\np = subprocess.Popen(["sh", "-c", "sleep 0.2; echo waited > @-waited.txt"])\natexit.register(p.wait)'],
  ['output without a newline, never flushed',
    'import sys\nsys.stdout.write("no newline")\nsys.stderr.write("nor here")'],
];

/** What a program shows of its exit: output, exit code, fault, the files it touched (tag
 * removed) and their contents. */
async function seen(sb, r, tag) {
  const files = {};
  for (const f of r.files) {
    const name = f.path.split('/').pop().replace(tag, '@');
    files[name] = (await sb.readFile(f.path)).toString('latin1');
  }
  return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, fault: r.fault, files };
}

/** Idle prewarmed drivers of this file's Sandboxes (a zygote's processes hold the zygote). */
const idleDrivers = () => hostProcessesMatching('_kern_driver')
  .filter((p) => !p.cmdline.includes('def _kern_zygote(') && ourDescendant(p.pid))
  .map((p) => p.pid);

describe('a python cell ends as python -c does, on every route', () => {
  let fresh;
  let zygote;
  let warm;
  beforeAll(async () => {
    fresh = await new Sandbox(opts()).open();
    zygote = await new Sandbox(opts({ zygote: true })).open();
    warm = await new Sandbox(opts({ prewarm: 1 })).open();
  });
  afterAll(async () => {
    await fresh?.close();
    await zygote?.close();
    await warm?.close();
  });

  test.each(SCENARIOS.map(([what, code], i) => [what, code, i]))('%s', async (what, code, i) => {
    const at = (route) => code.replaceAll('@', `${route}${i}`);
    const truth = await seen(fresh, await fresh.run(['python3', '-c', at('t')]), `t${i}`);
    expect(truth.fault).toBeNull();
    expect(await seen(fresh, await fresh.runCode(at('f')), `f${i}`)).toEqual(truth);

    const z = await zygote.runCode(at('z'));
    // Served by the zygote: a call it can't serve says so in a note.
    expect(z.runtimeNotes.filter((n) => /zygote/.test(n))).toEqual([]);
    expect(await seen(zygote, z, `z${i}`)).toEqual(truth);

    // The prewarmed box is up and idle before the call takes it.
    expect(await waitFor(() => idleDrivers().length === 1, 30000, 20)).toBe(true);
    const [idle] = idleDrivers();
    const p = await warm.runCode(at('p'));
    // It served this call: it is gone (a call that took a fresh box would leave it idle).
    expect(await waitFor(() => !hostProcessesMatching('_kern_driver').some((x) => x.pid === idle), 30000, 20)).toBe(true);
    expect(await seen(warm, p, `p${i}`)).toEqual(truth);
  });

  test('the zygote serves these calls: its forks share its string hash secret', async () => {
    const a = await zygote.runCode('hash("kern")');
    const b = await zygote.runCode('hash("kern")');
    expect(a.results[0].text).toBe(b.results[0].text);
    const c = await fresh.runCode('hash("kern")');
    expect(c.results[0].text).not.toBe(a.results[0].text);
  });
});
