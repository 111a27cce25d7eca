'use strict';
// rootless: yes
// (Rootless: inotify on the caller's own workspace.)
// `sb.watch()` (issue 35): the workspace's changes as events seen from the host: what a box does
// and what the host does, filtered, one directory or the tree, bounded (an overflow is said,
// never a silent loss), never through a symlink a box planted, and let go when closed.

const fs = require('fs');
const path = require('path');
const helpers = require('../helpers');

const { opts, expectOk, makeTempDir, waitFor, expectSandboxError } = helpers;
const { Sandbox, SandboxError } = require('../..');

beforeAll(() => helpers.requireRootfs());

let sb;
let ws;
beforeEach(async () => {
  ws = makeTempDir('kern-watch-ws-');
  sb = await new Sandbox(opts({ workspace: ws })).open();
});
afterEach(async () => {
  await sb.close();
});

/** Reads `w` in one loop (leaving a `for await` ends a watch); `until(path)` gives the events
 * since the last `until` up to the first for `path` (not kept), `ended` the loop's end. */
function reader(w) {
  const all = [];
  let from = 0;
  const ended = (async () => {
    for await (const e of w) all.push(e);
    return all;
  })();
  return {
    all,
    ended,
    async until(stop, ms = 60000) {
      const at = () => all.findIndex((e, i) => i >= from && e.path === stop);
      await waitFor(() => at() >= 0, ms, 20);
      const i = at();
      if (i < 0) throw new Error(`no event for ${stop} within ${ms} ms; saw ${JSON.stringify(all.slice(from, from + 20))}`);
      const got = all.slice(from, i);
      from = i + 1;
      return got;
    },
  };
}

/** Collects `w`'s events until one for `stop` (which is not kept), then ends the watch. */
async function collect(w, stop) {
  const r = reader(w);
  const got = await r.until(stop);
  w.close();
  return got;
}

/** This process's inotify instances. */
function inotifyFds() {
  let n = 0;
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`) === 'anon_inode:inotify') n++;
    } catch {
      /* closed meanwhile */
    }
  }
  return n;
}

test('a box\'s creates, writes, renames and deletes arrive in order, with the new directory\'s files', async () => {
  fs.mkdirSync(path.join(ws, 'd'));
  const w = await sb.watch('d');
  const r = reader(w);
  expectOk(await sb.run(['sh', '-c', 'echo a > d/f && mv d/f d/g && rm d/g && mkdir d/sub && touch d/stop']));
  expect(await r.until('d/stop')).toEqual([
    { type: 'create', path: 'd/f', isDir: false },
    { type: 'modify', path: 'd/f', isDir: false },
    { type: 'rename', path: 'd/g', oldPath: 'd/f', isDir: false },
    { type: 'delete', path: 'd/g', isDir: false },
    { type: 'create', path: 'd/sub', isDir: true },
  ]);
  // The new directory is watched: its file is seen, and it keeps its watch under a new name.
  expectOk(await sb.run(['sh', '-c', 'echo b > d/sub/x && mv d/sub d/moved && echo c > d/moved/y && touch d/stop2']));
  expect(await r.until('d/stop2')).toEqual([
    { type: 'create', path: 'd/sub/x', isDir: false },
    { type: 'modify', path: 'd/sub/x', isDir: false },
    { type: 'rename', path: 'd/moved', oldPath: 'd/sub', isDir: true },
    { type: 'create', path: 'd/moved/y', isDir: false },
    { type: 'modify', path: 'd/moved/y', isDir: false },
  ]);
  // A directory made with its files before the host could watch it: what it holds is reported
  // as created (a path made at that very moment may come twice: by its event and the walk).
  expectOk(await sb.run(['sh', '-c', 'mkdir -p d/t/u && echo x > d/t/u/v && touch d/stop3']));
  const made = (await r.until('d/stop3')).filter((e) => e.type === 'create').map((e) => e.path);
  expect(new Set(made)).toEqual(new Set(['d/t', 'd/t/u', 'd/t/u/v']));
  w.close();
  await r.ended;
});

test('the host\'s own writes are events too, and include/exclude pick them', async () => {
  const w = await sb.watch('.', { include: ['**/*.py', 'top.txt'], exclude: 'skip/**' });
  const got = collect(w, 'stop.py');
  await sb.writeFile('a/b/c.py', 'x = 1\n');
  await sb.writeFile('a/b/c.txt', 'no\n');
  await sb.writeFile('skip/d.py', 'no\n');
  await sb.writeFile('top.txt', 'yes\n');
  expectOk(await sb.run(['sh', '-c', 'echo > a/e.py && touch stop.py']));
  const paths = (await got).map((e) => `${e.type} ${e.path}`);
  w.close();
  // writeFile lands by a link or a rename of a temp file: either names the final path (a file
  // made while its new directory was being watched may be reported twice).
  for (const p of ['a/b/c.py', 'top.txt']) expect(paths.filter((x) => x === `create ${p}` || x === `rename ${p}`).length).toBeGreaterThan(0);
  expect(paths).toContain('create a/e.py');
  expect(paths.filter((p) => /c\.txt|skip\//.test(p) || (!p.endsWith('.py') && !p.endsWith('top.txt')))).toEqual([]);
});

test('recursive: false sees only the directory itself', async () => {
  const w = await sb.watch('.', { recursive: false });
  const got = collect(w, 'stop');
  expectOk(await sb.run(['sh', '-c', 'mkdir -p deep/er && echo x > deep/er/f && echo y > top && touch stop']));
  const paths = (await got).map((e) => e.path);
  w.close();
  expect(paths).toEqual(expect.arrayContaining(['deep', 'top']));
  expect(paths.filter((p) => p.startsWith('deep/'))).toEqual([]);
});

test('10,000 changes arrive whole, without an overflow', async () => {
  fs.mkdirSync(path.join(ws, 'many'));
  const w = await sb.watch('many');
  const got = collect(w, 'many/stop');
  expectOk(await sb.runCode('for i in range(10000): open(f"many/f{i}", "w").close()\nopen("many/stop", "w").close()\n'));
  const events = await got;
  w.close();
  expect(events.filter((e) => e.type === 'overflow')).toEqual([]);
  const created = new Set(events.filter((e) => e.type === 'create').map((e) => e.path));
  expect(created.size).toBe(10000);
  expect(created.has('many/f0') && created.has('many/f9999')).toBe(true);
});

test('a watch nobody reads is bounded: past its queue an overflow says how many were dropped', async () => {
  fs.mkdirSync(path.join(ws, 'flood'));
  const w = await sb.watch('flood');
  // Nobody takes events while the box makes 70,000 files: more than a watch holds.
  expectOk(await sb.runCode('for i in range(70000): open(f"flood/f{i}", "w").close()\n', { timeoutS: 300 }));
  const r = reader(w);
  await waitFor(() => r.all.some((e) => e.type === 'overflow'), 60000, 20);
  const overflows = r.all.filter((e) => e.type === 'overflow');
  expect(overflows.length).toBeGreaterThan(0);
  // Each overflow stands where events were lost: ours counts them, the kernel's can't.
  for (const o of overflows) expect(o.dropped === null || o.dropped > 0).toBe(true);
  // What came before the first loss is the box's order, with nothing invented.
  const first = r.all.indexOf(overflows[0]);
  expect(first).toBeGreaterThan(0);
  expect(r.all.slice(0, first).map((e) => e.path)).toEqual(Array.from({ length: first }, (_, i) => `flood/f${i}`));
  // Once read, the watch goes on.
  await sb.writeFile('flood/after', '');
  await r.until('flood/after');
  w.close();
  const all = await r.ended;
  expect(all.filter((e) => e.type === 'create').length).toBeLessThan(70000);
});

test('a symlink is never followed: refused as the watched path, and a swapped directory reports nothing of the host', async () => {
  const host = makeTempDir('kern-watch-host-');
  try {
    expectOk(await sb.run(['sh', '-c', `ln -s ${host} link && mkdir sub`]));
    const err = await expectSandboxError(() => sb.watch('link'), SandboxError, /symlink/);
    expect(err.code).toBe('ERR_FILE');
    const w = await sb.watch('.');
    const got = collect(w, 'stop');
    // The box swaps the watched directory for a symlink to a host directory; the host then
    // writes there.
    expectOk(await sb.run(['sh', '-c', `mv sub sub2 && ln -s ${host} sub`]));
    fs.writeFileSync(path.join(host, 'host-secret'), 'x');
    fs.mkdirSync(path.join(host, 'host-dir'));
    expectOk(await sb.run(['touch', 'stop']));
    const events = await got;
    w.close();
    expect(events.filter((e) => /host-/.test(e.path))).toEqual([]);
    expect(events).toEqual(expect.arrayContaining([
      { type: 'rename', path: 'sub2', oldPath: 'sub', isDir: true },
      { type: 'create', path: 'sub', isDir: false },
    ]));
  } finally {
    fs.rmSync(host, { recursive: true, force: true });
  }
});

test('bad input is refused before any watch starts', async () => {
  const before = inotifyFds();
  for (const [args, code, re] of [
    [['../up'], 'ERR_FILE', /\.\./],
    [['missing'], 'ERR_FILE', /does not exist/],
    [['.', { recursive: 'yes' }], 'ERR_INVALID_OPTION', /recursive/],
    [['.', { include: 5 }], 'ERR_INVALID_OPTION', /include/],
    [['.', { exclude: ['['] }], 'ERR_INVALID_OPTION', /not a glob/],
    [['.', { depth: 2 }], 'ERR_INVALID_OPTION', /unknown watch\(\) option/],
  ]) {
    const err = await expectSandboxError(() => sb.watch(...args), SandboxError, re);
    expect({ args, code: err.code }).toEqual({ args, code });
  }
  expect(inotifyFds()).toBe(before);
});

test('a watch costs one inotify instance while open; close() and the Sandbox\'s close() end it', async () => {
  const before = inotifyFds();
  const w = await sb.watch('.');
  expect(inotifyFds()).toBe(before + 1);
  const r = reader(w);
  w.close();
  expect(await r.ended).toEqual([]);
  await waitFor(() => inotifyFds() === before, 5000);
  expect(inotifyFds()).toBe(before);
  // One left open ends with its Sandbox: its loop returns.
  const w2 = await sb.watch('.');
  const r2 = reader(w2);
  await sb.close();
  expect(await r2.ended).toEqual([]);
  sb = await new Sandbox(opts({ workspace: makeTempDir('kern-watch-ws-') })).open();
});
