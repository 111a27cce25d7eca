'use strict';
// rootless: yes
// Attack suite, the drivers' frame channel (fd 3). Cell code runs in the driver's own process,
// so it can write frames itself: results are data, and the host trusts nothing in them beyond
// that. What it must not do is make the host allocate without bound: a frame of a few MiB of
// tiny JSON values (`[0,0,…]`) parses into some 40 times its size. The host's peak memory
// (VmHWM of this process, which runs the addon) is measured around the call; the cell's own
// main result must still arrive, and the forged one is dropped with a runtime note.

const fs = require('fs');
const { opts, requireRootfs } = require('../../helpers');
const { hostGuard } = require('../host');
const { Sandbox } = require('../../..');

const suite = { guard: null };
let sb;

beforeAll(async () => {
  requireRootfs();
  suite.guard = await hostGuard();
  sb = await new Sandbox(opts({ memoryMb: 2048 })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  await suite.guard.assertNoLeaks();
  suite.guard.cleanup();
});

const peakMiB = () => Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) / 1024;
/** Resets the peak to the current size (Linux 4.0+), so each test measures its own call. */
const resetPeak = () => fs.writeFileSync('/proc/self/clear_refs', '5');
const FRAME_MIB = 16;
const DROPPED = /rich result\(s\) were dropped/;

test('a node cell forging a frame of millions of tiny JSON values cannot balloon the host', async () => {
  const cell = [
    "const fs = require('fs');",
    `const n = ${FRAME_MIB} * 1024 * 1024 / 2;`,
    "const body = Buffer.from('{\"type\":\"display\",\"data\":{\"application/json\":[' + '0,'.repeat(n - 1) + '0]}}');",
    'const head = Buffer.alloc(4); head.writeUInt32BE(body.length);',
    'const all = Buffer.concat([head, body]);',
    // fd 3 is the driver's non-blocking socket: write until it took everything.
    "let off = 0; while (off < all.length) { try { off += fs.writeSync(3, all, off); } catch (e) { if (e.code !== 'EAGAIN') throw e; } }",
    "'after ' + off",
  ].join('\n');
  resetPeak();
  const before = peakMiB();
  const r = await sb.runCode(cell, { language: 'node' });
  const grew = peakMiB() - before;
  expect(r.error).toBe(null);
  // The cell's own value is its only result: the forged frame was dropped.
  expect(r.results.map((x) => [x.isMainResult, x.text])).toEqual([[true, expect.stringMatching(/^'after \d+'$/)]]);
  expect(r.runtimeNotes.join('\n')).toMatch(DROPPED);
  // Unbounded, this frame took the host from 54 to 663 MiB; bounded, it stays near its size.
  expect(grew).toBeLessThan(FRAME_MIB * 8);
  suite.guard.assertUntouched();
});

test('the same from a python cell, on the descriptor its driver moved the channel to', async () => {
  const code = [
    'import os, struct',
    `n = ${FRAME_MIB} * 1024 * 1024 // 2`,
    'body = b\'{"type":"display","data":{"application/json":[\' + b"0," * (n - 1) + b\'0]}}\'',
    // The driver moved its channel off fd 3 to a descriptor it keeps to itself: find it.
    'def link(f):',
    '    try: return os.readlink(f"/proc/self/fd/{f}")',
    '    except OSError: return ""',
    'fd = next(int(f) for f in os.listdir("/proc/self/fd") if link(f).startswith("socket:"))',
    'os.set_blocking(fd, True)',
    'data = struct.pack(">I", len(body)) + body',
    'while data:',
    '    data = data[os.write(fd, data):]',
    '"sent"',
  ].join('\n');
  resetPeak();
  const before = peakMiB();
  const r = await sb.runCode(code);
  const grew = peakMiB() - before;
  expect(r.error).toBe(null);
  expect(r.results.map((x) => [x.isMainResult, x.text])).toEqual([[true, "'sent'"]]);
  expect(r.runtimeNotes.join('\n')).toMatch(DROPPED);
  expect(grew).toBeLessThan(FRAME_MIB * 8);
  suite.guard.assertUntouched();
});
