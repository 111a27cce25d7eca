'use strict';
// rootless: yes
// The set-id wall behind the seccomp filter: after every call, no regular file under the
// workspace keeps a set-id bit, whoever cleared it — the Sandbox's watch of the workspace
// (`trackFiles`, the default: it clears what changed) or kern's walk (`trackFiles: false`, a
// caller that died mid-call). The filter refuses every set-id mode a box asks for (setid.test.js),
// so the bits stand here for "a kernel path the filter does not know": the host sets them while
// the box runs, in every shape a change can take (a new tree, an existing file's mode, `.deps`,
// a hard link), and looks after each call, on every route.

const fs = require('fs');
const path = require('path');
const { execFileSync, spawn } = require('child_process');
const { Sandbox } = require('../../..');
const { opts, tempDirs, waitFor } = require('../../helpers');

const { temp, removeAll } = tempDirs();
afterAll(() => removeAll());
const isRoot = process.getuid() === 0;
const rootOnly = isRoot ? test : test.skip;

// The box says it runs (`started`), then waits for the host's `go`.
const WAIT_SH = 'touch started; while [ ! -e go ]; do sleep 0.01; done';
const WAIT_PY = [
  'import os, time',
  "open('started', 'w').close()",
  "while not os.path.exists('go'):",
  '    time.sleep(0.01)',
].join('\n');

/** A workspace with `old` (a file a call will find) and `.deps`. */
function workspace(prefix) {
  const ws = temp(prefix);
  fs.writeFileSync(path.join(ws, 'old'), 'x');
  fs.mkdirSync(path.join(ws, '.deps'), { recursive: true });
  return ws;
}

/** Set-id files in every shape a call's changes take; returns their paths. */
function plant(ws, tag) {
  const planted = [];
  const make = (rel, mode) => {
    const p = path.join(ws, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, '#!/bin/sh\n');
    fs.chmodSync(p, mode);
    planted.push(p);
    return p;
  };
  make(`${tag}/new/deep/er/f`, 0o4755); // a tree made during the call
  make(`${tag}-gid`, 0o2755);
  fs.chmodSync(path.join(ws, 'old'), 0o6755); // a file that was there: only its mode changes
  planted.push(path.join(ws, 'old'));
  make(`.deps/${tag}`, 0o4755); // what the watch leaves out: kern's
  const inDeps = make(`.deps/${tag}-linked`, 0o4755);
  fs.linkSync(inDeps, path.join(ws, `${tag}-link`)); // a hard link into the watched part
  planted.push(path.join(ws, `${tag}-link`));
  for (const p of planted) expect(fs.statSync(p).mode & 0o6000).not.toBe(0);
  return planted;
}

const setid = (planted) => planted.filter((p) => fs.existsSync(p) && (fs.statSync(p).mode & 0o6000) !== 0);

/** Runs `call` (which starts the waiting box), plants while it waits, lets it end; the planted
 * files once it has. */
async function during(ws, tag, call) {
  for (const f of ['started', 'go']) fs.rmSync(path.join(ws, f), { force: true });
  const pending = call();
  pending.catch(() => {});
  expect(await waitFor(() => fs.existsSync(path.join(ws, 'started')), 60_000, 10)).toBe(true);
  const planted = plant(ws, tag);
  fs.writeFileSync(path.join(ws, 'go'), '');
  const r = await pending;
  return { r, planted };
}

describe.each([
  ['watched (trackFiles, the default)', {}],
  ['walked by kern (trackFiles: false)', { trackFiles: false }],
])('%s', (_name, extra) => {
  test('a fresh box, a spawned process and a zygote cell: nothing set-id is left after each', async () => {
    const ws = workspace('kern-setid-wall-');
    const sb = await new Sandbox(opts({ workspace: ws, zygote: true, ...extra })).open();
    try {
      let { r, planted } = await during(ws, 'run', () => sb.run(['sh', '-c', WAIT_SH]));
      expect(r.fault).toBeNull();
      expect(r.exitCode).toBe(0);
      expect(setid(planted)).toEqual([]);

      ({ r, planted } = await during(ws, 'spawned', async () => (await sb.spawn(['sh', '-c', WAIT_SH])).wait()));
      expect(r.fault).toBeNull();
      expect(setid(planted)).toEqual([]);

      ({ r, planted } = await during(ws, 'cell', () => sb.runCode(WAIT_PY)));
      expect(r.fault).toBeNull();
      expect(r.stderr).not.toMatch(/zygote: this call's box could not/);
      expect(setid(planted)).toEqual([]);
      if (extra.trackFiles === false) expect(r.files).toEqual([]);
      else expect(r.files.map((f) => f.path)).toContain('cell/new/deep/er/f');
    } finally {
      await sb.close();
    }
  }, 180_000);

  test('a call into a persist box: nothing set-id is left after it', async () => {
    const ws = workspace('kern-setid-wall-res-');
    const name = `setidwall${process.pid}${extra.trackFiles === false ? 'w' : 't'}`;
    const sb = await new Sandbox(opts({ workspace: ws, persist: true, name, ...extra })).open();
    try {
      const { r, planted } = await during(ws, 'resident', () => sb.run(['sh', '-c', WAIT_SH]));
      expect(r.fault).toBeNull();
      expect(setid(planted)).toEqual([]);
    } finally {
      await sb.destroy();
      await sb.close();
    }
  }, 180_000);
});

test('a caller killed while its box runs: kern clears the workspace itself once the box is gone', async () => {
  const ws = workspace('kern-setid-wall-dead-');
  const REPO = path.resolve(__dirname, '..', '..', '..');
  const script = `
    const { Sandbox } = require(${JSON.stringify(REPO)});
    (async () => {
      const sb = await new Sandbox(${JSON.stringify(opts({ workspace: ws }))}).open();
      await sb.run(['sh', '-c', ${JSON.stringify(WAIT_SH)}]);
    })();`;
  const env = require('vm').runInThisContext('process').env;
  const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore', env });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  try {
    expect(await waitFor(() => fs.existsSync(path.join(ws, 'started')), 60_000, 10)).toBe(true);
    const planted = plant(ws, 'dead');
    child.kill('SIGKILL');
    await exited;
    // Nobody is left to say the workspace was swept: kern sweeps it, after the box it kills.
    const cleared = await waitFor(() => setid(planted).length === 0, 60_000, 50);
    expect(setid(planted)).toEqual([]);
    expect(cleared).toBe(true);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}, 120_000);

rootOnly('a set-id file the watch cannot clear fails the call closed, and every call after it until it goes', async () => {
  const ws = workspace('kern-setid-wall-stuck-');
  const sb = await new Sandbox(opts({ workspace: ws })).open();
  const stuck = path.join(ws, 'sub', 'stuck');
  try {
    expect((await sb.run(['true'])).fault).toBeNull();
    // Set-id and immutable (root only): nobody can clear its bits until the flag goes.
    fs.mkdirSync(path.dirname(stuck));
    fs.writeFileSync(stuck, 'x');
    fs.chmodSync(stuck, 0o4755);
    execFileSync('chattr', ['+i', stuck]);
    for (let i = 0; i < 2; i++) {
      const r = await sb.run(['true']);
      expect(r.fault).toMatchObject({ type: 'killed' });
      expect(r.fault.message).toMatch(/could not clear the set-id bits of a file .*sub\/stuck/);
    }
    execFileSync('chattr', ['-i', stuck]);
    expect((await sb.run(['true'])).fault).toBeNull();
    expect(fs.statSync(stuck).mode & 0o6000).toBe(0);
  } finally {
    try {
      execFileSync('chattr', ['-i', stuck]);
    } catch {
      // never made
    }
    await sb.close();
  }
}, 180_000);
