'use strict';
// rootless: yes
// ADDITION (issue 20): `readFile(path, { offset, length, maxBytes })` ranges,
// `createReadStream(path, { offset, length })` and `createWriteStream(path)`, on real workspace
// files a box wrote. Ranges past the end give what exists; a stream reads a file readFile's cap
// refuses whole, a chunk at a time, and its fd goes at destroy(); a write stream lands atomically
// at end() and leaves the old file and no temp file behind when destroyed or refused. The path
// rules are readFile's and writeFile's: symlinks planted by the box are refused and a host canary
// outside stays byte-identical.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const stream = require('stream');
const { requireRootfs, opts, tempDirs, makeCanaryFile, expectSandboxError, isRoot, startSwapLoop, summary, uniqueName } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const { temp, removeAll } = tempDirs();
let ws;
let sb;

beforeAll(async () => {
  requireRootfs();
  ws = temp('kern-range-ws-');
  sb = await new Sandbox(opts({ workspace: ws })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  removeAll();
});

/** Every chunk of a Readable, and the stream's end. */
function drain(s) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    s.on('data', (c) => chunks.push(c));
    s.on('end', () => resolve(chunks));
    s.on('error', reject);
  });
}

/** Writes `parts` to a Writable and ends it; resolves at 'finish'. */
function pour(s, parts) {
  return new Promise((resolve, reject) => {
    s.on('finish', resolve);
    s.on('error', reject);
    for (const p of parts) s.write(p);
    s.end();
  });
}

/** The error a stream emits (it must emit one). */
function streamError(s) {
  return new Promise((resolve, reject) => {
    s.on('error', resolve);
    s.on('finish', () => reject(new Error('the stream finished')));
    s.on('end', () => reject(new Error('the stream ended')));
    if (s.resume) s.resume();
  });
}

/** Temp files of writeFile/createWriteStream left in `dir` of the workspace. */
function temps(dir = '') {
  return fs.readdirSync(path.join(ws, dir)).filter((n) => n.startsWith('.kern-write-'));
}

/** This process's fds that point at `file`. */
function fdsOn(file) {
  return fs.readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`) === file;
    } catch {
      return false;
    }
  });
}

describe('readFile ranges', () => {
  beforeAll(async () => {
    const r = await sb.run(['sh', '-c', 'printf 0123456789 > digits.txt']);
    expect(r.exitCode).toBe(0);
  });

  test.each([
    [{ offset: 0, length: 4 }, '0123'],
    [{ offset: 3, length: 4 }, '3456'],
    [{ offset: 7 }, '789'],
    [{ length: 2 }, '01'],
    [{ offset: 8, length: 100 }, '89'],
    [{ offset: 10 }, ''],
    [{ offset: 1000, length: 5 }, ''],
    [{ offset: 2, length: 0 }, ''],
    [{ offset: 2, length: 3, maxBytes: 3 }, '234'],
  ])('%j -> %j', async (o, want) => {
    expect((await sb.readFile('digits.txt', o)).toString()).toBe(want);
  });

  test('maxBytes caps the range, not the file; a whole read keeps its rule', async () => {
    // The file is 10 bytes: a 3-byte range fits maxBytes 3, the rest of the file does not.
    const err = await expectSandboxError(() => sb.readFile('digits.txt', { offset: 2, maxBytes: 3 }), SandboxError,
      /the range holds 8 bytes, over maxBytes 3/);
    expect(err.code).toBe('ERR_FILE');
    await expectSandboxError(() => sb.readFile('digits.txt', { maxBytes: 3 }), SandboxError, /is 10 bytes, over maxBytes 3; readFile never returns part of a file/);
  });

  test.each([
    [{ offset: -1 }, /readFile offset must be a non-negative integer, got -1/],
    [{ offset: 1.5 }, /readFile offset must be a non-negative integer, got 1.5/],
    [{ length: -3 }, /readFile length must be a non-negative integer, got -3/],
    [{ length: '4' }, /readFile length must be a non-negative integer, got 4/],
    [{ offset: 2 ** 53 }, /readFile offset must be a non-negative integer/],
    [{ count: 1 }, /unknown readFile\(\) option `count`; it takes maxBytes, offset, length/],
  ])('%j is refused before reading', async (o, pattern) => {
    const err = await expectSandboxError(() => sb.readFile('digits.txt', o), SandboxError, pattern);
    expect(err.code).toBe('ERR_INVALID_OPTION');
  });
});

describe('createReadStream', () => {
  const SIZE = 48 * 1024 * 1024;
  let sum;

  beforeAll(async () => {
    const r = await sb.run(['sh', '-c', `head -c ${SIZE} /dev/urandom > big.bin && sha256sum big.bin`]);
    expect(r.exitCode).toBe(0);
    sum = r.stdout.split(' ')[0];
  });

  test('a file readFile\'s cap refuses whole streams through in chunks, byte for byte', async () => {
    await expectSandboxError(() => sb.readFile('big.bin', { maxBytes: 1 << 20 }), SandboxError, /over maxBytes/);
    const chunks = await drain(sb.createReadStream('big.bin'));
    const h = crypto.createHash('sha256');
    for (const c of chunks) h.update(c);
    expect(h.digest('hex')).toBe(sum);
    expect(chunks.reduce((n, c) => n + c.length, 0)).toBe(SIZE);
    // Read a highWaterMark (64 KiB) at a time from the native side, never the whole file.
    expect(Math.max(...chunks.map((c) => c.length))).toBeLessThanOrEqual(64 * 1024);
    expect(chunks.length).toBeGreaterThanOrEqual(SIZE / (64 * 1024));
  });

  test('a range: offset and length, and past the end', async () => {
    const whole = fs.readFileSync(path.join(ws, 'big.bin'));
    const part = Buffer.concat(await drain(sb.createReadStream('big.bin', { offset: 1000, length: 200000 })));
    expect(part.equals(whole.subarray(1000, 201000))).toBe(true);
    const tail = Buffer.concat(await drain(sb.createReadStream('big.bin', { offset: SIZE - 10, length: 100 })));
    expect(tail.equals(whole.subarray(SIZE - 10))).toBe(true);
    expect(Buffer.concat(await drain(sb.createReadStream('big.bin', { offset: SIZE + 5 }))).length).toBe(0);
  });

  test('the fd is held while the stream is open and released by destroy()', async () => {
    const file = path.join(ws, 'big.bin');
    expect(fdsOn(file)).toEqual([]);
    const s = sb.createReadStream('big.bin');
    await new Promise((resolve, reject) => {
      s.once('data', resolve);
      s.once('error', reject);
    });
    s.pause();
    expect(fdsOn(file)).toHaveLength(1);
    await new Promise((resolve) => {
      s.once('close', resolve);
      s.destroy();
    });
    expect(fdsOn(file)).toEqual([]);
  });

  test('refused like readFile: a symlink to a host file, a directory, a missing file', async () => {
    const canary = makeCanaryFile();
    const r = await sb.run(['sh', '-c', `ln -sf ${canary.file} leak && mkdir -p adir`]);
    expect(r.exitCode).toBe(0);
    for (const [p, pattern] of [['leak', /never follows a symlink/], ['adir', /is a directory/], ['none.bin', /no such file/]]) {
      const e = await streamError(sb.createReadStream(p));
      expect(e).toBeInstanceOf(SandboxError);
      expect({ code: e.code, message: e.message }).toEqual({ code: 'ERR_FILE', message: expect.stringMatching(pattern) });
    }
    expect(canary.intact()).toBe(true);
  });
});

describe('createWriteStream', () => {
  test('lands atomically at end(): the old content until then, the new one after, no temp left', async () => {
    await sb.writeFile('out/a.txt', 'old');
    const s = sb.createWriteStream('out/a.txt');
    const done = new Promise((resolve, reject) => {
      s.on('finish', resolve);
      s.on('error', reject);
    });
    await new Promise((resolve) => s.write('new ', resolve));
    await new Promise((resolve) => s.write(Buffer.from('content'), resolve));
    // Written so far: to an unnamed file; the path still holds the old bytes, and neither the
    // host nor a box sees anything else in the directory.
    expect(temps('out')).toEqual([]);
    expect((await sb.run(['ls', '-A', 'out'])).stdout).toBe('a.txt\n');
    expect((await sb.readFile('out/a.txt')).toString()).toBe('old');
    s.end();
    await done;
    expect((await sb.readFile('out/a.txt')).toString()).toBe('new content');
    expect(temps('out')).toEqual([]);
    const r = await sb.run(['cat', 'out/a.txt']);
    expect(r.stdout).toBe('new content');
    if (isRoot) expect(fs.statSync(path.join(ws, 'out/a.txt')).uid).toBe(fs.statSync(ws).uid);
    expect(fs.statSync(path.join(ws, 'out/a.txt')).mode & 0o777).toBe(0o644);
  });

  test('makes missing parents and a new file; takes many chunks', async () => {
    const parts = Array.from({ length: 100 }, (_, i) => `line ${i}\n`);
    await pour(sb.createWriteStream('new/deep/b.txt'), parts);
    expect((await sb.readFile('new/deep/b.txt')).toString()).toBe(parts.join(''));
  });

  test('destroy() before end(): the old file untouched, no temp behind', async () => {
    await sb.writeFile('keep.txt', 'original');
    const s = sb.createWriteStream('keep.txt');
    await new Promise((resolve) => s.write('half of a new', resolve));
    await new Promise((resolve) => {
      s.once('close', resolve);
      s.destroy();
    });
    expect((await sb.readFile('keep.txt')).toString()).toBe('original');
    expect(temps()).toEqual([]);
  });

  test('refused like writeFile, with nothing written: a symlinked parent, a symlink at the path, a directory', async () => {
    const canary = makeCanaryFile();
    const outside = temp('kern-range-outside-');
    const r = await sb.run(['sh', '-c', `ln -sf ${outside} outdir && ln -sf ${canary.file} wleak && mkdir -p wdir`]);
    expect(r.exitCode).toBe(0);
    for (const [p, pattern] of [['outdir/x.txt', /symlink/], ['wleak', /exists and is a symlink/], ['wdir', /exists and is a directory/]]) {
      const s = sb.createWriteStream(p);
      s.write('pwned');
      s.end();
      const e = await streamError(s);
      expect({ code: e.code, message: e.message }).toEqual({ code: 'ERR_FILE', message: expect.stringMatching(pattern) });
    }
    expect(fs.readdirSync(outside)).toEqual([]);
    expect(canary.intact()).toBe(true);
    expect(fs.lstatSync(path.join(ws, 'wleak')).isSymbolicLink()).toBe(true);
    expect(temps()).toEqual([]);
  });

  test('a symlink planted at the path while the stream is open: end() refuses, the link and the host untouched', async () => {
    const canary = makeCanaryFile();
    const s = sb.createWriteStream('swap.txt');
    await new Promise((resolve) => s.write('pwned', resolve));
    const r = await sb.run(['ln', '-s', canary.file, 'swap.txt']);
    expect(r.exitCode).toBe(0);
    s.end();
    const e = await streamError(s);
    expect({ code: e.code, message: e.message }).toEqual({ code: 'ERR_FILE', message: expect.stringMatching(/exists and is a symlink/) });
    expect(fs.lstatSync(path.join(ws, 'swap.txt')).isSymbolicLink()).toBe(true);
    expect(canary.intact()).toBe(true);
    await new Promise((resolve) => setImmediate(resolve));
    expect(temps()).toEqual([]);
  });

  test('the Sandbox\'s close() ends the streams still open: the write lands nothing, the read\'s fd is released', async () => {
    const ws2 = temp('kern-range-ws2-');
    fs.writeFileSync(path.join(ws2, 'old.txt'), 'old');
    const s2 = await new Sandbox(opts({ workspace: ws2 })).open();
    const w = s2.createWriteStream('late.txt');
    await new Promise((resolve) => w.write('x', resolve));
    const r = s2.createReadStream('old.txt');
    await new Promise((resolve, reject) => {
      r.once('readable', resolve);
      r.once('error', reject);
    });
    expect(fdsOn(path.join(ws2, 'old.txt'))).toHaveLength(1);
    const closed = Promise.all([w, r].map((s) => new Promise((resolve) => s.once('close', resolve))));
    await s2.close();
    await closed;
    expect([w.destroyed, r.destroyed]).toEqual([true, true]);
    // finished() sees the early end; nothing was thrown at the process meanwhile.
    await expect(stream.promises.finished(w)).rejects.toHaveProperty('code', 'ERR_STREAM_PREMATURE_CLOSE');
    expect(fdsOn(path.join(ws2, 'old.txt'))).toEqual([]);
    expect(fs.readdirSync(ws2).filter((n) => n !== '.deps').sort()).toEqual(['old.txt']);
    expect(fs.readFileSync(path.join(ws2, 'old.txt'), 'utf8')).toBe('old');
  });
});

describe('a box swapping a directory for a symlink to a host directory, while the host streams through it', () => {
  test('ranges, read streams and write streams never read or write the host directory', async () => {
    const raceDir = temp('kern-range-race-');
    const secret = `host secret ${uniqueName()}\n`;
    fs.writeFileSync(path.join(raceDir, 'f'), secret); // what d/f would be through the symlink
    const { box, isDone } = await startSwapLoop(sb, ws, raceDir, { seconds: 6, timeoutS: 20, inside: 'inside\n' });
    const stats = { ok: 0, refused: 0, whileBoxRan: 0 };
    const wrong = [];
    const tally = async (fn) => {
      try {
        const got = await fn();
        stats.ok++;
        if (typeof got === 'string' && !got.startsWith('inside')) wrong.push(got);
      } catch (e) {
        if (!(e instanceof SandboxError)) throw e;
        stats.refused++;
      }
    };
    const end = Date.now() + 4000;
    for (let i = 0; Date.now() < end; i++) {
      await tally(async () => (await sb.readFile('d/f', { offset: 0, length: 64 })).toString());
      await tally(async () => Buffer.concat(await drain(sb.createReadStream('d/f'))).toString());
      await tally(async () => {
        await pour(sb.createWriteStream('d/f'), [`inside stream ${i}\n`]);
      });
      if (!isDone()) stats.whileBoxRan++;
    }
    const r = await box;
    expect(summary(r)).toMatchObject({ fault: null, exitCode: 0, stdout: 'looped\n' });
    expect(wrong).toEqual([]); // never the host directory's content
    expect(fs.readdirSync(raceDir)).toEqual(['f']); // nothing new appeared there
    expect(fs.readFileSync(path.join(raceDir, 'f'), 'utf8')).toBe(secret);
    expect(stats.whileBoxRan).toBeGreaterThan(0); // the race really overlapped the box
    expect(stats.ok).toBeGreaterThan(0);
  });
});
