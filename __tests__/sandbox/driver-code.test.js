'use strict';
// rootless: yes
// Issue 34: a python `runCode` box starts with the results driver as the image's own python
// compiled it (`pycCache`, `$KERN_HOME/pyc/<image>/driver-<id>.code`, built once per image and
// release from the image alone), sent on the box's channel with its source; the box compiles the
// source only when that code is not there, or not for its python. The host checks each case by
// what the box ran: a code file replaced by one whose driver also prints a marker.

const fs = require('fs');
const path = require('path');
const { Sandbox } = require('../..');
const { opts, tempDirs, unseal, waitFor, stderrLinesOf } = require('../helpers');

const realEnv = require('vm').runInThisContext('process').env;
const { temp, removeAll } = tempDirs();
const LANG = path.join(__dirname, '..', '..', 'src', 'lang');
const read = (f) => fs.readFileSync(path.join(LANG, f), 'utf8');
const MARK = 'kern-compiled-driver-ran';

// The driver as src/lang/driver.rs puts it together, with a first line that prints MARK.
const DRIVER = `print(${JSON.stringify(MARK)})\n${read('driver.py')}\n_RICH = r'''\n${read('charts.py')}\n${read('driver_rich.py')}'''\n_STATE = r'''\n${read('driver_state.py')}'''\n\n_kern_driver(_RICH, globals().get("_kern_zygote"), _STATE)\n`;

let home;
let saved;
beforeAll(() => {
  // A store of our own: the code file is built here, and replaced by these tests.
  home = temp('kern-driver-code-home-');
  saved = realEnv.KERN_HOME;
  realEnv.KERN_HOME = home;
});
afterAll(() => {
  if (saved === undefined) delete realEnv.KERN_HOME;
  else realEnv.KERN_HOME = saved;
  if (home) unseal(home);
  removeAll();
});

/** The built code file, once there. */
function codeFile() {
  const top = path.join(home, 'pyc');
  if (!fs.existsSync(top)) return null;
  for (const key of fs.readdirSync(top)) {
    const found = fs.readdirSync(path.join(top, key)).find((n) => /^driver-[0-9a-f]+\.code$/.test(n));
    if (found) return path.join(top, key, found);
  }
  return null;
}

/** Puts `data` at `file` as the builder leaves it (0444), by a rename. */
function replace(file, data, mode = 0o444) {
  const tmp = `${file}.new`;
  fs.writeFileSync(tmp, data);
  fs.chmodSync(tmp, mode);
  fs.renameSync(tmp, file);
}

/** A plain cell's stdout and stderr lines in a new Sandbox (each reads the code file anew). */
async function plainCell() {
  const sb = await new Sandbox(opts()).open();
  try {
    const r = await sb.runCode('print(6 * 7)\n"result"');
    return { stdout: r.stdout, stderr: stderrLinesOf(r), result: r.results[0]?.text, exitCode: r.exitCode };
  } finally {
    await sb.close();
  }
}

test('the box runs the driver the image compiled; another python\'s code, or a writable file, is not run', async () => {
  // Before the code exists, the box compiles the source (the first open() starts its build).
  const first = await new Sandbox(opts()).open();
  let file;
  let marked;
  try {
    expect((await first.runCode('print(6 * 7)')).stdout).toBe('42\n');
    file = await waitFor(codeFile, 120_000, 100);
    expect(file).toBeTruthy();
    const st = fs.lstatSync(file);
    expect([st.isFile(), st.mode & 0o7777, st.uid]).toEqual([true, 0o444, process.getuid()]);
    // The marked driver, compiled by the image's python in a box, as the builder compiles it.
    await first.writeFile('marked.py', DRIVER);
    const c = await first.run(['python3', '-I', '-c', [
      'import importlib.util, marshal',
      'code = compile(open("marked.py").read(), "<string>", "exec", dont_inherit=True)',
      'open("marked.code", "wb").write(importlib.util.MAGIC_NUMBER + marshal.dumps(code))',
    ].join('\n')]);
    expect(c.exitCode).toBe(0);
    marked = await first.readFile('marked.code');
  } finally {
    await first.close();
  }
  const plain = { stdout: '42\n', stderr: [], result: "'result'", exitCode: 0 };
  expect(await plainCell()).toEqual(plain);

  // The code file is what the box runs.
  replace(file, marked);
  expect(await plainCell()).toEqual({ ...plain, stdout: `${MARK}\n42\n` });

  // Code for another python (its magic number changed): the source is compiled instead.
  const other = Buffer.from(marked);
  other[0] ^= 0xff;
  replace(file, other);
  expect(await plainCell()).toEqual(plain);

  // A code file anyone could write was not made by kern: not sent.
  replace(file, marked, 0o666);
  expect(await plainCell()).toEqual(plain);
}, 240_000);

test('a build of the driver removes other builds\' drivers older than a week, and nothing else', async () => {
  // (A Sandbox's close() ends its builds: each waits open.)
  const built = async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      return await waitFor(codeFile, 120_000, 100);
    } finally {
      await sb.close();
    }
  };
  const file = codeFile() || (await built());
  expect(file).toBeTruthy();
  const dir = path.dirname(file);
  const weekAgo = new Date(Date.now() - 8 * 24 * 3600 * 1000);
  // (Other builds' names, not hex: `codeFile` finds only this build's.)
  const old = ['driver-oldbuild.code', 'driver-oldbuild.failed'].map((n) => path.join(dir, n));
  const kept = ['driver-newbuild.code', 'not-a-driver-oldbuild.code'].map((n) => path.join(dir, n));
  for (const p of [...old, ...kept]) fs.writeFileSync(p, 'x');
  for (const p of old) fs.utimesSync(p, weekAgo, weekAgo);
  fs.utimesSync(kept[1], weekAgo, weekAgo);
  // This build's driver gone: the next open() builds it again, and prunes.
  fs.rmSync(file);
  expect(await built()).toBe(file);
  expect(old.filter((p) => fs.existsSync(p))).toEqual([]);
  expect(kept.filter((p) => fs.existsSync(p))).toEqual(kept);
}, 240_000);
