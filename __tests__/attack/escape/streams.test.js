'use strict';
// rootless: yes
// Attack suite, workspace streams and ranges (additions of issue 20). The box prepares the
// workspace between the host's steps: it replaces the directory a write stream is writing into
// by a symlink to a host directory before end(), plants a FIFO where the host will read or
// write, and the host asks for ranges at absurd offsets. The host directory must stay as it
// was, no host call may hang, and no descriptor may be left behind.

const fs = require('fs');
const path = require('path');
const { opts, requireRootfs, tempDirs } = require('../../helpers');
const { hostGuard } = require('../host');
const { Sandbox } = require('../../..');

const suite = { guard: null, dirs: tempDirs() };
let sb;
let ws;
let hostDir;

beforeAll(async () => {
  requireRootfs();
  suite.guard = await hostGuard();
  ws = suite.dirs.temp('kern-streams-attack-ws-');
  hostDir = suite.dirs.temp('kern-streams-attack-host-');
  fs.writeFileSync(path.join(hostDir, 'out.txt'), 'host file\n');
  fs.chmodSync(hostDir, 0o777);
  sb = await new Sandbox(opts({ workspace: ws })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  await suite.guard.assertNoLeaks();
  suite.guard.cleanup();
  suite.dirs.removeAll();
});

/** Descriptors of this process open on something in the workspace. */
const fdCount = () => fs.readdirSync('/proc/self/fd').filter((fd) => {
  try {
    return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(`${ws}/`);
  } catch {
    return false;
  }
}).length;
const finished = (s) => new Promise((resolve) => {
  s.once('error', (e) => resolve(e));
  s.once('finish', () => resolve(null));
});

test('a write stream whose directory the box turns into a symlink to a host directory lands in the directory it was opened in, never the host\'s', async () => {
  expect((await sb.run(['sh', '-c', 'mkdir -p sub && echo old > sub/out.txt'])).exitCode).toBe(0);
  const s = sb.createWriteStream('sub/out.txt');
  await new Promise((resolve, reject) => s.write('from the host stream\n', (e) => (e ? reject(e) : resolve())));
  // The link's target is the host's path: the host follows it if anything does (the box's
  // mount namespace has no such directory).
  const r = await sb.run(['sh', '-c', `mv sub sub.moved && ln -s ${hostDir} sub`]);
  expect(r.exitCode).toBe(0);
  expect(fs.lstatSync(path.join(ws, 'sub')).isSymbolicLink()).toBe(true);
  s.end();
  const err = await finished(s);
  // The stream holds the directory it was opened in (by descriptor): the file lands there,
  // under its new name, and the host directory behind the symlink is untouched.
  expect(err).toBe(null);
  expect(fs.readFileSync(path.join(ws, 'sub.moved', 'out.txt'), 'utf8')).toBe('from the host stream\n');
  expect(fs.readdirSync(hostDir)).toEqual(['out.txt']);
  expect(fs.readFileSync(path.join(hostDir, 'out.txt'), 'utf8')).toBe('host file\n');
  suite.guard.assertUntouched();
});

test('a FIFO the box planted is refused by streams and ranges at once, not waited on', async () => {
  expect((await sb.run(['sh', '-c', 'mkfifo pipe'])).exitCode).toBe(0);
  const before = fdCount();
  expect(before).toBe(0);
  const read = sb.createReadStream('pipe');
  const readErr = await new Promise((resolve) => {
    read.once('error', resolve);
    read.once('data', () => resolve(null));
  });
  expect(readErr && readErr.message).toMatch(/FIFO/);
  await expect(sb.readFile('pipe', { offset: 0, length: 10 })).rejects.toThrow(/FIFO/);
  const write = sb.createWriteStream('pipe');
  write.end('x');
  const writeErr = await finished(write);
  expect(writeErr && writeErr.message).toMatch(/FIFO/);
  expect(fs.lstatSync(path.join(ws, 'pipe')).isFIFO()).toBe(true);
  await new Promise((resolve) => setImmediate(resolve));
  expect(fdCount()).toBe(before);
  suite.guard.assertUntouched();
});

test('absurd ranges: past the end is empty, beyond a safe integer is refused before any read', async () => {
  fs.writeFileSync(path.join(ws, 'small.txt'), 'abc');
  expect((await sb.readFile('small.txt', { offset: Number.MAX_SAFE_INTEGER, length: 10 })).length).toBe(0);
  expect((await sb.readFile('small.txt', { offset: 1, length: Number.MAX_SAFE_INTEGER })).toString()).toBe('bc');
  await expect(sb.readFile('small.txt', { offset: 2 ** 64 })).rejects.toThrow(/offset must be a non-negative integer/);
  await expect(sb.readFile('small.txt', { offset: -1 })).rejects.toThrow(/offset must be a non-negative integer/);
  const chunks = [];
  for await (const c of sb.createReadStream('small.txt', { offset: Number.MAX_SAFE_INTEGER })) chunks.push(c);
  expect(Buffer.concat(chunks).length).toBe(0);
});

test('many streams opened and destroyed, or read to the end, leave no descriptor behind', async () => {
  fs.writeFileSync(path.join(ws, 'data.bin'), Buffer.alloc(256 * 1024, 7));
  const before = fdCount();
  expect(before).toBe(0);
  for (let i = 0; i < 50; i += 1) {
    const s = sb.createReadStream('data.bin');
    if (i % 2) {
      let n = 0;
      for await (const c of s) n += c.length;
      expect(n).toBe(256 * 1024);
    } else {
      await new Promise((resolve) => { s.once('data', resolve); });
      await new Promise((resolve) => { s.once('close', resolve); s.destroy(); });
    }
    const w = sb.createWriteStream(i % 2 ? `kept${i % 5}.bin` : `dropped${i % 5}.bin`);
    if (i % 2) {
      w.end('x');
      expect(await finished(w)).toBe(null);
    } else {
      await new Promise((resolve) => w.write('x', resolve));
      await new Promise((resolve) => { w.once('close', resolve); w.destroy(); });
    }
  }
  await new Promise((resolve) => setImmediate(resolve));
  expect(fdCount()).toBe(before);
  expect(fs.readdirSync(ws).filter((n) => /^(kept|dropped)/.test(n)).sort()).toEqual([0, 1, 2, 3, 4].map((k) => `kept${k}.bin`));
});
