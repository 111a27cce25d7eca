'use strict';
// rootless: yes
// Issue 35: `setup` is skipped at open() when a kept workspace's .deps still holds what the same
// setup installed (same command, image, options, the same content in what the command names,
// and .deps unchanged since), and the skip is said (open()'s onStderr, the first call's
// runtimeNotes). Anything else runs it again. Each setup here appends a line to
// .deps/python/runs, so the host counts the runs; the record that allows a skip lives under
// kern's home, which no box can reach.

const fs = require('fs');
const path = require('path');
const { opts, requireRootfs, tempDirs } = require('../helpers');
const { Sandbox } = require('../..');

const { temp, removeAll } = tempDirs();
// Names no workspace path: it writes through $PIP_TARGET (/workspace/.deps/python).
const COUNT = 'mkdir -p "$PIP_TARGET" && echo ran >> "$PIP_TARGET/runs"';

beforeAll(() => requireRootfs());
afterAll(() => removeAll());

const runs = (ws) => {
  const f = path.join(ws, '.deps', 'python', 'runs');
  return fs.existsSync(f) ? fs.readFileSync(f, 'utf8').split('\n').filter(Boolean).length : 0;
};

/** Opens a Sandbox on `ws` with `setup` (and `extra` options), runs one call, closes it; what
 * setup's stream and that call said of the skip. */
async function openOnce(ws, setup, extra = {}) {
  const streamed = [];
  const where = ws === undefined ? {} : { workspace: ws };
  const sb = await new Sandbox(opts({ ...where, setup, onStderr: (c) => streamed.push(c.toString()), ...extra })).open();
  try {
    const r = await sb.run(['true']);
    const said = (lines) => lines.some((l) => /^note: setup skipped: \.deps holds what the same command installed at \d{4}-\d\d-\d\dT/.test(l));
    return { streamed: said(streamed.join('').split('\n')), noted: said(r.runtimeNotes), exitCode: r.exitCode };
  } finally {
    await sb.close();
  }
}

test('the same setup on the same kept workspace runs once, and the skip is said', async () => {
  const ws = temp('kern-setup-skip-');
  const first = await openOnce(ws, COUNT);
  expect(first).toEqual({ streamed: false, noted: false, exitCode: 0 });
  expect(runs(ws)).toBe(1);
  const second = await openOnce(ws, COUNT);
  expect(second).toEqual({ streamed: true, noted: true, exitCode: 0 });
  expect(runs(ws)).toBe(1);
  // Still skipped the time after: a skip leaves the record as it was.
  expect((await openOnce(ws, COUNT)).noted).toBe(true);
  expect(runs(ws)).toBe(1);
});

test('another command, other env, or a removed .deps runs it again', async () => {
  const ws = temp('kern-setup-skip-');
  await openOnce(ws, COUNT);
  expect(runs(ws)).toBe(1);
  expect((await openOnce(ws, `${COUNT} # v2`)).noted).toBe(false);
  expect(runs(ws)).toBe(2);
  // Back to the first command: the record is of the last setup only, so it runs again.
  await openOnce(ws, COUNT);
  expect(runs(ws)).toBe(3);
  expect((await openOnce(ws, COUNT, { env: { PIP_INDEX_URL: 'https://example.invalid/simple' } })).noted).toBe(false);
  expect(runs(ws)).toBe(4);
  fs.rmSync(path.join(ws, '.deps'), { recursive: true });
  expect((await openOnce(ws, COUNT, { env: { PIP_INDEX_URL: 'https://example.invalid/simple' } })).noted).toBe(false);
  expect(runs(ws)).toBe(1);
});

test('a file the command names is part of what it ran with: a change to it runs setup again', async () => {
  const ws = temp('kern-setup-skip-');
  fs.writeFileSync(path.join(ws, 'requirements.txt'), 'six==1.16.0\n');
  const cmd = `${COUNT} && cat /workspace/requirements.txt >> "$PIP_TARGET/seen"`;
  await openOnce(ws, cmd);
  expect((await openOnce(ws, cmd)).noted).toBe(true);
  expect(runs(ws)).toBe(1);
  fs.writeFileSync(path.join(ws, 'requirements.txt'), 'six==1.17.0\n');
  expect((await openOnce(ws, cmd)).noted).toBe(false);
  expect(runs(ws)).toBe(2);
  expect(fs.readFileSync(path.join(ws, '.deps', 'python', 'seen'), 'utf8')).toBe('six==1.16.0\nsix==1.17.0\n');
  // A named path turned into a symlink (to a host file), or into a FIFO, is looked at without
  // following or blocking: the open goes on, and setup runs again (what it names changed).
  fs.rmSync(path.join(ws, 'requirements.txt'));
  fs.symlinkSync('/etc/hostname', path.join(ws, 'requirements.txt'));
  const tolerant = `${COUNT} && { cat /workspace/requirements.txt || true; } >> "$PIP_TARGET/seen"`;
  await openOnce(ws, tolerant);
  expect(runs(ws)).toBe(3);
  expect((await openOnce(ws, tolerant)).noted).toBe(true);
  fs.rmSync(path.join(ws, 'requirements.txt'));
  require('child_process').execFileSync('mkfifo', [path.join(ws, 'requirements.txt')]);
  const fifo = `${COUNT} && test -p /workspace/requirements.txt`;
  await openOnce(ws, fifo);
  expect(runs(ws)).toBe(4);
  expect((await openOnce(ws, fifo)).noted).toBe(true);
  expect(runs(ws)).toBe(4);
});

test('a box that writes .deps (depsReadonly: false) makes the next open run setup again', async () => {
  const ws = temp('kern-setup-skip-');
  await openOnce(ws, COUNT, { depsReadonly: false });
  const sb = await new Sandbox(opts({ workspace: ws, setup: COUNT, depsReadonly: false })).open();
  try {
    expect(runs(ws)).toBe(1);
    const r = await sb.run(['sh', '-c', 'echo planted > /workspace/.deps/python/planted']);
    expect(r.exitCode).toBe(0);
  } finally {
    await sb.close();
  }
  expect(fs.existsSync(path.join(ws, '.deps', 'python', 'planted'))).toBe(true);
  expect((await openOnce(ws, COUNT, { depsReadonly: false })).noted).toBe(false);
  expect(runs(ws)).toBe(2);
});

test('the setup box cannot make a later, different setup skip; a failed setup leaves no record', async () => {
  const ws = temp('kern-setup-skip-');
  // Setup A writes, as a package's install script could, everything in its reach that might
  // stand for "B is done": the workspace, .deps, its home and scratch directory.
  const B = `${COUNT} # B`;
  const A = `${COUNT} && for d in /workspace /workspace/.deps "$HOME" /.kern-setup; do echo '${B}' > "$d/setup-record.json"; done`;
  await openOnce(ws, A);
  expect(runs(ws)).toBe(1);
  expect((await openOnce(ws, B)).noted).toBe(false);
  expect(runs(ws)).toBe(2);
  // B's record now; a failing C takes it away, and B runs again after it.
  await expect(openOnce(ws, `${COUNT} && exit 3`)).rejects.toThrow(/setup failed: it exited with code 3/);
  expect(runs(ws)).toBe(3);
  expect((await openOnce(ws, B)).noted).toBe(false);
  expect(runs(ws)).toBe(4);
});

test('a temporary workspace (none given) runs setup at every open', async () => {
  const marks = temp('kern-setup-marks-');
  // Each run leaves a mark in a writable mount; a temporary workspace never records a setup.
  const cmd = 'touch /marks/$(cat /proc/sys/kernel/random/uuid)';
  for (let i = 0; i < 2; i++) {
    expect((await openOnce(undefined, cmd, { mounts: { [marks]: ['/marks', 'rw'] } })).noted).toBe(false);
  }
  expect(fs.readdirSync(marks)).toHaveLength(2);
});
