'use strict';
// rootless: yes
// snapshot()/restore(): the workspace as a gzip tar and back. They are SYNCHRONOUS (they throw, not
// reject). Covered: a faithful round trip (nested dirs, binary, modes, unicode, long paths), what is
// left out (.deps, symlinks, special files, with a KERN_SNAPSHOT_SKIPPED warning), the consistency
// rule (refused while a call runs or a kernel is open), and hostile archives built by hand with
// support/tar.js. Every attack test asserts restore() threw SandboxError AND the workspace is exactly
// as before AND nothing was created outside it (host canaries byte-identical).

const fs = require('fs');
const os = require('os');
const path = require('path');
const zlib = require('zlib');
const crypto = require('crypto');
const {
  isRoot,
  requireRootfs,
  opts,
  uniqueName,
  makeCanaryFile,
  makeTempDir,
  expectOk,
  waitFor,
  startSwapLoop,
} = require('../helpers');
const tar = require('../support/tar');

const { Sandbox, SandboxError } = require('../..');

let ws; // the workspace, inspected from the host
let sb;
let arch; // where archives live (outside the workspace)
let hostDir; // a host directory outside the workspace, holding `dirCanary`
let canary; // a host file in os.tmpdir()
let dirCanary;

beforeAll(async () => {
  requireRootfs();
  ws = makeTempDir('kern-snap-ws-');
  arch = makeTempDir('kern-snap-arch-');
  hostDir = makeTempDir('kern-snap-host-');
  canary = makeCanaryFile(os.tmpdir());
  dirCanary = makeCanaryFile(hostDir);
  sb = await new Sandbox(opts({ workspace: ws })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  for (const d of [ws, arch, hostDir]) if (d) fs.rmSync(d, { recursive: true, force: true });
  if (canary) canary.remove();
});

// Each test starts from an empty workspace (rmSync removes a planted symlink, never its target).
beforeEach(() => {
  for (const e of fs.readdirSync(ws)) fs.rmSync(path.join(ws, e), { recursive: true, force: true });
});

/** Runs a shell script in the box, in /workspace, and insists it succeeded. */
async function plant(script, box = sb) {
  const r = await box.run(['bash', '-c', `cd /workspace && ${script}`]);
  expectOk(r);
  return r;
}

/** Asserts a synchronous call throws SandboxError matching every pattern; returns the error. */
function throwsSandboxError(fn, ...patterns) {
  let err = null;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  if (!err) throw new Error(`expected a SandboxError matching ${patterns.join(', ')}, got success`);
  if (!(err instanceof SandboxError)) {
    throw new Error(`expected a SandboxError, got ${err && err.constructor && err.constructor.name}: ${err && err.message}`);
  }
  // A refusal only counts when the method exists: "not built yet" would make every attack test pass.
  if (/not built yet/.test(err.message)) throw new Error(`the method is not built: ${err.message}`);
  for (const p of patterns) {
    if (!p.test(err.message)) throw new Error(`SandboxError message ${JSON.stringify(err.message)} does not match ${p}`);
  }
  return err;
}

const existsAt = (p) => {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
};

/** Recursive listing of a tree: type, mode and (for files) content; nothing is followed. */
function tree(root = ws, { modes = true } = {}) {
  const out = {};
  const walk = (dir, rel) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      // open() makes an empty .deps in every workspace; snapshots never hold it.
      if (!rel && e.name === '.deps') continue;
      const p = path.join(dir, e.name);
      const r = rel ? `${rel}/${e.name}` : e.name;
      const st = fs.lstatSync(p);
      const mode = modes ? `${(st.mode & 0o7777).toString(8)}:` : '';
      if (e.isSymbolicLink()) out[r] = `symlink:${fs.readlinkSync(p)}`;
      else if (e.isDirectory()) {
        out[r] = `dir:${mode}`;
        walk(p, r);
      } else if (e.isFile()) {
        out[r] = `file:${mode}${crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex').slice(0, 16)}`;
      } else out[r] = 'special';
    }
  };
  walk(root, '');
  return out;
}

/** Member names of an archive, with a leading "./" dropped. */
const memberNames = (file) => tar.list(fs.readFileSync(file)).map((m) => m.name.replace(/^\.\//, ''));

/** A fresh archive path in its own directory (so leftovers next to it can be checked). */
function newDest(name = 'snap.tgz') {
  return path.join(fs.mkdtempSync(path.join(arch, 'd-')), name);
}

/** Calls fn() and collects the process warnings it emits (`quiet`: without printing them). */
async function warningsDuring(fn, { quiet = false } = {}) {
  // Under Jest, `process` in a test is a copy whose 'warning' event never fires (Node emits it on the
  // real process object), so the emitWarning calls are observed too. The spy calls through
  // unless `quiet`, which only keeps a race loop from printing dozens of them.
  const seen = [];
  const onWarning = (w) => seen.push({ message: w.message, code: w.code });
  process.on('warning', onWarning);
  const spy = jest.spyOn(process, 'emitWarning');
  if (quiet) spy.mockImplementation(() => {});
  try {
    fn();
    await new Promise((r) => setImmediate(r));
  } finally {
    process.removeListener('warning', onWarning);
    for (const [w, o, code] of spy.mock.calls) {
      const c = (o && typeof o === 'object' && o.code) || (typeof code === 'string' ? code : undefined);
      seen.push({ message: String(w && w.message ? w.message : w), code: c || (w && w.code) });
    }
    spy.mockRestore();
  }
  return seen;
}

/** Everything outside the workspace this file watches is as it was; `u` names were never created. */
function expectHostUntouched(...names) {
  expect(canary.intact()).toBe(true);
  expect(dirCanary.intact()).toBe(true);
  expect(fs.readdirSync(hostDir)).toEqual([dirCanary.name]);
  for (const u of names) {
    for (const dir of [os.tmpdir(), path.dirname(os.tmpdir()), '/', '/etc', hostDir]) {
      expect({ at: path.join(dir, u), exists: existsAt(path.join(dir, u)) }).toEqual({ at: path.join(dir, u), exists: false });
    }
  }
}

const LONG = `${'L'.repeat(70)}/${'M'.repeat(70)}/${'n'.repeat(8)}`; // 150 characters

describe('round trip', () => {
  test('nested dirs, binary, modes, unicode and spaces, a 150-char path: all come back', async () => {
    expect(LONG.length).toBe(150);
    await plant(
      [
        'mkdir -p nest/a/b/c empty "dir with space" "$(dirname ' + LONG + ')"',
        'echo deep > nest/a/b/c/d.txt',
        'head -c 65536 /dev/urandom > bin.dat',
        'echo secret > private.txt && chmod 600 private.txt',
        'printf "#!/bin/sh\\necho hi\\n" > run.sh && chmod 755 run.sh',
        'printf uni > "héllo wörld ☃.txt"',
        'printf sp > "dir with space/file name.txt"',
        `printf long > ${LONG}`,
        'chmod 700 nest/a',
      ].join(' && ')
    );
    expect((fs.statSync(path.join(ws, 'private.txt')).mode & 0o777).toString(8)).toBe('600');
    const before = tree();
    expect(Object.keys(before)).toEqual(
      expect.arrayContaining(['bin.dat', 'empty', 'héllo wörld ☃.txt', 'dir with space/file name.txt', LONG, 'nest/a/b/c/d.txt'])
    );

    const dest = newDest();
    sb.snapshot(dest);
    const buf = fs.readFileSync(dest);
    expect(buf.subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b])); // gzip
    expect(fs.readdirSync(path.dirname(dest))).toEqual(['snap.tgz']); // no temp file left next to it
    const names = memberNames(dest);
    expect(names).toEqual(expect.arrayContaining(['bin.dat', 'private.txt', LONG]));
    for (const n of names) expect(n.startsWith('/') || n.split('/').includes('..')).toBe(false);

    await plant('find /workspace -mindepth 1 -delete && ls -A /workspace | wc -l');
    expect(fs.readdirSync(ws).filter((n) => n !== '.deps')).toEqual([]);
    sb.restore(dest);
    expect(tree()).toEqual(before);

    // The box sees the restored files, with their modes.
    const r = await plant(`cat private.txt; stat -c %a private.txt run.sh; ./run.sh; cat ${LONG}`);
    expect(r.stdout).toBe('secret\n600\n755\nhi\nlong');

    // And a fresh Sandbox on an empty workspace gets the same tree.
    const ws2 = makeTempDir('kern-snap-ws2-');
    const s2 = await new Sandbox(opts({ workspace: ws2 })).open();
    try {
      s2.restore(dest);
      expect(tree(ws2)).toEqual(before);
    } finally {
      await s2.close();
      fs.rmSync(ws2, { recursive: true, force: true });
    }
  });

  test('names that are not UTF-8 are left out, and the warning names them (restore accepts only UTF-8 names)', async () => {
    await plant("find /workspace -mindepth 1 -delete && printf x > $'bad\\377name' && mkdir -p $'d\\376' && printf y > $'d\\376/f' && printf ok > ok.txt");
    const dest = newDest();
    const warnings = await warningsDuring(() => sb.snapshot(dest));
    expect(memberNames(dest)).toEqual(['ok.txt']);
    const skipped = warnings.filter((w) => w.code === 'KERN_SNAPSHOT_SKIPPED');
    expect(skipped).toHaveLength(1);
    expect(skipped[0].message).toMatch(/left out 2 .*not UTF-8/);
    expect(skipped[0].message).toMatch(/bad.name/);
    // Later tests walk the workspace by string names, which these can't be.
    await plant('find /workspace -mindepth 1 -delete');
  });

  test('restore merges: archived files replace what is there, other files stay', async () => {
    await plant('echo old > a.txt && mkdir -p sub && echo s > sub/s.txt');
    const dest = newDest();
    sb.snapshot(dest);
    await plant('echo new > a.txt && echo keep > keep.txt && rm sub/s.txt && echo other > sub/other.txt');
    sb.restore(dest);
    expect(fs.readFileSync(path.join(ws, 'a.txt'), 'utf8')).toBe('old\n');
    expect(fs.readFileSync(path.join(ws, 'keep.txt'), 'utf8')).toBe('keep\n');
    expect(fs.readFileSync(path.join(ws, 'sub/s.txt'), 'utf8')).toBe('s\n');
    expect(fs.readFileSync(path.join(ws, 'sub/other.txt'), 'utf8')).toBe('other\n');
  });

  test('.deps is not archived, and restore leaves an existing .deps alone', async () => {
    await plant('mkdir -p .deps/lib sub/.depsdir && echo m > .deps/lib/m.py && echo k > keep.txt && echo d > .depsnot');
    const dest = newDest();
    sb.snapshot(dest);
    const names = memberNames(dest);
    expect(names.filter((n) => n === '.deps' || n.startsWith('.deps/'))).toEqual([]);
    expect(names).toEqual(expect.arrayContaining(['keep.txt', '.depsnot']));
    sb.restore(dest);
    expect(fs.readFileSync(path.join(ws, '.deps/lib/m.py'), 'utf8')).toBe('m\n');

    const ws2 = makeTempDir('kern-snap-ws2-');
    const s2 = await new Sandbox(opts({ workspace: ws2 })).open();
    try {
      s2.restore(dest);
      // The empty .deps open() made, untouched by the restore.
      expect(fs.readdirSync(path.join(ws2, '.deps'))).toEqual([]);
      expect(fs.readFileSync(path.join(ws2, 'keep.txt'), 'utf8')).toBe('k\n');
    } finally {
      await s2.close();
      fs.rmSync(ws2, { recursive: true, force: true });
    }
  });

  test('a symlink and a FIFO are left out, with a KERN_SNAPSHOT_SKIPPED warning naming them', async () => {
    await plant(`echo r > real.txt && ln -s ${hostDir} planted-link && mkfifo planted-fifo && mkdir -p sub && ln -s ../real.txt sub/inner-link`);
    const dest = newDest();
    const warnings = await warningsDuring(() => sb.snapshot(dest));
    const skipped = warnings.filter((w) => w.code === 'KERN_SNAPSHOT_SKIPPED');
    expect(skipped.length).toBe(1);
    expect(skipped[0].message).toMatch(/planted-link/);
    expect(skipped[0].message).toMatch(/planted-fifo/);
    expect(skipped[0].message).toMatch(/inner-link/);
    const names = memberNames(dest);
    expect(names).toContain('real.txt');
    expect(names.filter((n) => /planted|inner-link/.test(n))).toEqual([]);
    expect(names.filter((n) => n.includes(dirCanary.name))).toEqual([]); // the link was not followed
    expectHostUntouched();

    // With nothing to skip, no such warning.
    await plant('rm planted-link planted-fifo sub/inner-link');
    const none = await warningsDuring(() => sb.snapshot(newDest()));
    expect(none.filter((w) => w.code === 'KERN_SNAPSHOT_SKIPPED')).toEqual([]);
  });
});

describe('sparse files', () => {
  test('a 3 GiB sparse file the box made: a small snapshot, restored sparse with its data in place', async () => {
    // The box makes it in no time: 3 GiB apparent, a few KiB of data near the start and the middle.
    await plant(
      'truncate -s 3G sparse.bin && printf head | dd of=sparse.bin conv=notrunc status=none && ' +
        'head -c 10000 /dev/zero | tr "\\0" "\\011" | dd of=sparse.bin bs=1 seek=1073741824 conv=notrunc status=none'
    );
    const before = fs.statSync(path.join(ws, 'sparse.bin'));
    expect(before.size).toBe(3 * 2 ** 30);
    expect(before.blocks * 512).toBeLessThan(1 << 20);
    const dest = newDest();
    sb.snapshot(dest);
    // The archive holds what the box wrote, not 3 GiB of zeros.
    expect(fs.statSync(dest).size).toBeLessThan(64 * 1024);
    await plant('rm sparse.bin');
    sb.restore(dest);
    const p = path.join(ws, 'sparse.bin');
    const st = fs.statSync(p);
    expect(st.size).toBe(3 * 2 ** 30);
    expect(st.blocks * 512).toBeLessThan(1 << 20); // still sparse
    const fd = fs.openSync(p, 'r');
    try {
      const read = (pos, len) => {
        const b = Buffer.alloc(len);
        expect(fs.readSync(fd, b, 0, len, pos)).toBe(len);
        return b;
      };
      expect(read(0, 4).toString()).toBe('head');
      expect(read(2 ** 30, 10000).equals(Buffer.alloc(10000, 9))).toBe(true);
      expect(read(2 ** 30 + 10000, 4096).equals(Buffer.alloc(4096))).toBe(true);
      expect(read(3 * 2 ** 30 - 4096, 4096).equals(Buffer.alloc(4096))).toBe(true);
    } finally {
      fs.closeSync(fd);
    }
    // The box reads the same file.
    const r = await plant('head -c 4 sparse.bin; stat -c " %s" sparse.bin; rm sparse.bin');
    expect(r.stdout).toBe(`head ${3 * 2 ** 30}\n`);
  });
});

describe('where and when', () => {
  test('dest inside the workspace is refused and nothing is written there', async () => {
    await plant('mkdir -p sub && echo a > a.txt');
    const before = tree();
    throwsSandboxError(() => sb.snapshot(path.join(ws, 'snap.tgz')));
    throwsSandboxError(() => sb.snapshot(path.join(ws, 'sub', 'snap.tgz')));
    throwsSandboxError(() => sb.snapshot(path.join(arch, '..', path.basename(ws), 'x.tgz')));
    expect(tree()).toEqual(before);
  });

  test('dest reached through a host symlink into the workspace is refused too', async () => {
    await plant('mkdir -p sub && echo a > a.txt');
    const before = tree();
    const linkDir = fs.mkdtempSync(path.join(arch, 'l-'));
    fs.symlinkSync(ws, path.join(linkDir, 'into-ws'));
    throwsSandboxError(() => sb.snapshot(path.join(linkDir, 'into-ws', 'snap.tgz')));
    expect(tree()).toEqual(before);
  });

  test('snapshot and restore while a call is running are refused; afterwards they work', async () => {
    await plant('echo a > a.txt');
    const good = newDest();
    sb.snapshot(good);
    const dest = newDest();
    const call = sb.run(['sh', '-c', 'cd /workspace && : > started && sleep 3'], { timeoutS: 30 });
    try {
      expect(await waitFor(() => existsAt(path.join(ws, 'started')), 20000)).toBe(true);
      throwsSandboxError(() => sb.snapshot(dest), /call|running|busy/i);
      throwsSandboxError(() => sb.restore(good), /call|running|busy/i);
      expect(existsAt(dest)).toBe(false);
      expect(fs.readdirSync(path.dirname(dest))).toEqual([]);
    } finally {
      expectOk(await call);
    }
    sb.snapshot(dest);
    expect(memberNames(dest)).toEqual(expect.arrayContaining(['a.txt', 'started']));
    sb.restore(good);
  });

  test('snapshot and restore while a kernel is open are refused; after k.close() they work', async () => {
    await plant('echo a > a.txt');
    const good = newDest();
    sb.snapshot(good);
    const dest = newDest();
    const k = await sb.kernel();
    try {
      const r = await k.runCode('open("/workspace/k.txt", "w").write("k")');
      expectOk(r);
      throwsSandboxError(() => sb.snapshot(dest), /kernel/i);
      throwsSandboxError(() => sb.restore(good), /kernel/i);
      expect(existsAt(dest)).toBe(false);
    } finally {
      await k.close();
    }
    sb.snapshot(dest);
    expect(memberNames(dest)).toEqual(expect.arrayContaining(['a.txt', 'k.txt']));
    sb.restore(good);
  });

  test('before open() and after close(), snapshot and restore throw SandboxError', async () => {
    const w = makeTempDir('kern-snap-closed-');
    try {
      const dest = newDest();
      const s = new Sandbox(opts({ workspace: w }));
      throwsSandboxError(() => s.snapshot(dest));
      throwsSandboxError(() => s.restore(dest));
      await s.open();
      await s.writeFile('a.txt', 'a');
      s.snapshot(dest);
      await s.close();
      throwsSandboxError(() => s.snapshot(newDest()));
      throwsSandboxError(() => s.restore(dest));
      expect(fs.readdirSync(w).sort()).toEqual(['.deps', 'a.txt']);
    } finally {
      fs.rmSync(w, { recursive: true, force: true });
    }
  });
});

describe('archives built by hand', () => {
  const writeArchive = (buf) => {
    const f = newDest('in.tgz');
    fs.writeFileSync(f, buf);
    return f;
  };

  // Controls: the hand-built format (ustar prefix, PAX path, GNU longname, modes) is accepted, so a
  // refusal below is about the hostile member, not about the writer.
  test('control: a well-formed hand-built archive restores, including PAX, GNU and prefix names', async () => {
    const deep = `${'p'.repeat(60)}/${'q'.repeat(60)}/${'r'.repeat(60)}/f.txt`;
    const f = writeArchive(
      tar.tgz([
        { name: 'benign.txt', data: 'b' },
        { name: 'd/', type: 'dir', mode: 0o750 },
        { name: 'd/f', data: 'f', mode: 0o600 },
        { name: './dot.txt', data: 'dot' },
        { name: 'innocent', data: 'pax', pax: { path: 'pax-named.txt' } },
        { name: 'short', data: 'gnu', longname: deep },
        { name: 'n.txt', prefix: 'pre/fix', data: 'prefix' },
      ])
    );
    sb.restore(f);
    expect(fs.readFileSync(path.join(ws, 'benign.txt'), 'utf8')).toBe('b');
    expect(fs.readFileSync(path.join(ws, 'd/f'), 'utf8')).toBe('f');
    expect((fs.statSync(path.join(ws, 'd/f')).mode & 0o777).toString(8)).toBe('600');
    expect((fs.statSync(path.join(ws, 'd')).mode & 0o777).toString(8)).toBe('750');
    expect(fs.readFileSync(path.join(ws, 'dot.txt'), 'utf8')).toBe('dot');
    expect(fs.readFileSync(path.join(ws, 'pax-named.txt'), 'utf8')).toBe('pax');
    expect(existsAt(path.join(ws, 'innocent'))).toBe(false);
    expect(fs.readFileSync(path.join(ws, deep), 'utf8')).toBe('gnu');
    expect(existsAt(path.join(ws, 'short'))).toBe(false);
    expect(fs.readFileSync(path.join(ws, 'pre/fix/n.txt'), 'utf8')).toBe('prefix');
  });

  const u = uniqueName('kernrestore');
  const T = os.tmpdir();
  // Each archive starts with a harmless member, so an unpacker that writes as it goes is caught.
  // Members are built lazily: the canaries exist only once beforeAll has run.
  const hostile = [
    ['../../x', () => [{ name: `../../${u}`, data: 'evil' }]],
    ['../x', () => [{ name: `../${u}`, data: 'evil' }]],
    ['an absolute name under the host temp dir', () => [{ name: `${T}/${u}`, data: 'evil' }]],
    ['an absolute /etc name', () => [{ name: `/etc/${u}`, data: 'evil' }]],
    ['./../x', () => [{ name: `./../${u}`, data: 'evil' }]],
    ['a/../../x', () => [{ name: `a/../../${u}`, data: 'evil' }]],
    ['a/../b (.. even when it stays inside)', () => [{ name: 'sub/../inside.txt', data: 'evil' }]],
    ['a ../ directory member', () => [{ name: `../${u}/`, type: 'dir' }]],
    ['ustar prefix "../.." before the name', () => [{ name: u, prefix: '../..', data: 'evil' }]],
    ['a symlink member to a host dir', () => [{ name: 'l', type: 'symlink', linkname: hostDir }]],
    ['a relative symlink member escaping', () => [{ name: 'l', type: 'symlink', linkname: '../..' }]],
    ['a symlink member to a file in the archive', () => [{ name: 'l', type: 'symlink', linkname: 'benign.txt' }]],
    ['a hardlink member with an absolute linkname', () => [{ name: 'h', type: 'hardlink', linkname: canary.file }]],
    ['a hardlink member with a .. linkname', () => [{ name: 'h', type: 'hardlink', linkname: `../${canary.name}` }]],
    ['a hardlink member to a file in the archive', () => [{ name: 'h', type: 'hardlink', linkname: 'benign.txt' }]],
    ['a char device', () => [{ name: 'dev', type: 'chardev', devmajor: 1, devminor: 3 }]],
    ['a block device', () => [{ name: 'blk', type: 'blockdev', devmajor: 8, devminor: 0 }]],
    ['a FIFO', () => [{ name: 'p', type: 'fifo' }]],
    ['x a symlink, then x/evil', () => [{ name: 'x', type: 'symlink', linkname: hostDir }, { name: 'x/evil', data: 'evil' }]],
    ['a duplicate name', () => [{ name: 'dup.txt', data: 'one' }, { name: 'dup.txt', data: 'two' }]],
    ['a duplicate spelled ./dup.txt', () => [{ name: 'dup.txt', data: 'one' }, { name: './dup.txt', data: 'two' }]],
    ['x a file, then x/y', () => [{ name: 'x', data: 'file' }, { name: 'x/y', data: 'y' }]],
    ['a .deps/ member', () => [{ name: '.deps/evil.py', data: 'import os' }]],
    ['a ./.deps/ member', () => [{ name: './.deps/evil.py', data: 'import os' }]],
    ['a .deps directory member', () => [{ name: '.deps/', type: 'dir' }]],
    ['a PAX path=../../evil override', () => [{ name: 'innocent.txt', data: 'evil', pax: { path: `../../${u}` } }]],
    ['a PAX absolute path override', () => [{ name: 'innocent.txt', data: 'evil', pax: { path: `${T}/${u}` } }]],
    ['a GNU longname ../../x', () => [{ name: 'short.txt', data: 'evil', longname: `../../${u}` }]],
    ['a long GNU longname that climbs out', () => [{ name: 'short.txt', data: 'evil', longname: `${'a/'.repeat(60)}${'../'.repeat(62)}${u}` }]],
  ];

  test.each(hostile)('%s: restore throws, the workspace is untouched, nothing is created outside', async (_label, members) => {
    await plant('echo keep > keep.txt && mkdir -p sub && echo x > sub/x.txt');
    const before = tree();
    const f = writeArchive(tar.tgz([{ name: 'benign.txt', data: 'benign' }, ...members()]));
    throwsSandboxError(() => sb.restore(f));
    expect(tree()).toEqual(before);
    expectHostUntouched(u);
  });

  test('restore through a planted d -> host dir and f -> host file: nothing lands outside, d and f become real', async () => {
    const emptyHost = makeTempDir('kern-snap-empty-');
    try {
      await plant(`ln -s ${emptyHost} d && ln -s ${canary.file} f && mkdir -p n && ln -s ${hostDir} n/deep`);
      const arc = writeArchive(
        tar.tgz([
          { name: 'd/f', data: 'in d' },
          { name: 'f', data: 'in f' },
          { name: 'n/deep/sub/g', data: 'in g' },
        ])
      );
      sb.restore(arc);
      expect(fs.readdirSync(emptyHost)).toEqual([]);
      expectHostUntouched();
      for (const d of ['d', 'n/deep', 'n/deep/sub']) {
        const st = fs.lstatSync(path.join(ws, d));
        expect({ d, dir: st.isDirectory(), link: st.isSymbolicLink() }).toEqual({ d, dir: true, link: false });
      }
      expect(fs.lstatSync(path.join(ws, 'f')).isFile()).toBe(true);
      expect(fs.readFileSync(path.join(ws, 'd/f'), 'utf8')).toBe('in d');
      expect(fs.readFileSync(path.join(ws, 'f'), 'utf8')).toBe('in f');
      expect(fs.readFileSync(path.join(ws, 'n/deep/sub/g'), 'utf8')).toBe('in g');
    } finally {
      fs.rmSync(emptyHost, { recursive: true, force: true });
    }
  });

  test('set-id and sticky bits in an archive are not restored', async () => {
    const f = writeArchive(
      tar.tgz([
        { name: 'suid', data: '#!/bin/sh\n', mode: 0o6755 },
        { name: 'sticky/', type: 'dir', mode: 0o1777 },
        { name: 'sticky/f', data: 'f', mode: 0o2644 },
      ])
    );
    sb.restore(f);
    for (const p of ['suid', 'sticky', 'sticky/f']) {
      const mode = fs.lstatSync(path.join(ws, p)).mode & 0o7000;
      expect({ p, setIdOrSticky: mode.toString(8) }).toEqual({ p, setIdOrSticky: '0' });
    }
  });

  test('a FIFO or socket the box planted where the archive has a file is replaced, not opened', async () => {
    const r = await sb.runCode(
      'import os, socket\nos.mkfifo("/workspace/f")\nsocket.socket(socket.AF_UNIX).bind("/workspace/sock")\nprint("planted")'
    );
    expectOk(r);
    const f = writeArchive(tar.tgz([{ name: 'f', data: 'was a fifo' }, { name: 'sock', data: 'was a socket' }]));
    sb.restore(f); // writing into the FIFO would block this (synchronous) call for good
    expect(fs.lstatSync(path.join(ws, 'f')).isFile()).toBe(true);
    expect(fs.readFileSync(path.join(ws, 'f'), 'utf8')).toBe('was a fifo');
    expect(fs.lstatSync(path.join(ws, 'sock')).isFile()).toBe(true);
    expect(fs.readFileSync(path.join(ws, 'sock'), 'utf8')).toBe('was a socket');
  });

  const corrupt = [
    ['random bytes', () => crypto.randomBytes(4096)],
    ['an empty file', () => Buffer.alloc(0)],
    ['a valid archive cut in half', () => {
      const full = tar.tgz([{ name: 'benign.txt', data: 'benign' }, { name: 'big.bin', data: crypto.randomBytes(20000) }]);
      return full.subarray(0, Math.floor(full.length / 2));
    }],
    ['a gzip stream with a flipped byte', () => {
      const full = Buffer.from(tar.tgz([{ name: 'benign.txt', data: 'benign' }, { name: 'b.txt', data: 'x'.repeat(5000) }]));
      full[Math.floor(full.length / 2)] ^= 0xff;
      return full;
    }],
    ['valid gzip of something that is not a tar', () => zlib.gzipSync(crypto.randomBytes(4096))],
    ['a tar whose last member is shorter than its header says', () =>
      zlib.gzipSync(tar.tar([{ name: 'benign.txt', data: 'benign' }, { name: 'short.bin', data: 'abc', size: 5000 }], { end: false }))],
  ];

  test.each(corrupt)('a corrupt archive (%s) throws SandboxError, the workspace is untouched', async (_label, make) => {
    await plant('echo keep > keep.txt && mkdir -p sub && echo x > sub/x.txt');
    const before = tree();
    const f = writeArchive(make());
    throwsSandboxError(() => sb.restore(f));
    expect(tree()).toEqual(before);
  });

  test('a missing archive throws SandboxError', () => {
    throwsSandboxError(() => sb.restore(path.join(arch, uniqueName('missing'), 'nope.tgz')));
  });

  (isRoot ? test : test.skip)('running as root, what restore creates belongs to the workspace owner, not to the archive', async () => {
    const own = makeTempDir('kern-snap-owner-');
    fs.chownSync(own, 4321, 4321);
    const s = await new Sandbox(opts({ workspace: own })).open();
    try {
      const f = writeArchive(
        tar.tgz([
          { name: 'o/', type: 'dir', uid: 0, gid: 0 },
          { name: 'o/n.txt', data: 'owned', uid: 0, gid: 0 },
          { name: 'p/q.txt', data: 'implied dir', uid: 1, gid: 1 },
        ])
      );
      s.restore(f);
      for (const p of ['o', 'o/n.txt', 'p', 'p/q.txt']) {
        const st = fs.lstatSync(path.join(own, p));
        expect({ p, uid: st.uid, gid: st.gid }).toEqual({ p, uid: 4321, gid: 4321 });
      }
    } finally {
      await s.close();
      fs.rmSync(own, { recursive: true, force: true });
    }
  });
});

describe('a box of another Sandbox on the same workspace racing the host', () => {
  // The consistency rule is per Sandbox: a second Sandbox on the same workspace can run a box
  // while this one snapshots or restores, so the walk itself must never follow a swapped-in symlink.
  let other;
  beforeAll(async () => {
    other = await new Sandbox(opts({ workspace: ws })).open();
  });
  afterAll(async () => {
    if (other) await other.close();
  });

  test(
    'snapshot never archives the host dir a swapped-in symlink points at',
    async () => {
      const raceDir = makeTempDir('kern-snap-race-');
      const secret = `host secret ${uniqueName()}`;
      const marker = uniqueName('hostonly');
      fs.writeFileSync(path.join(raceDir, 'f'), secret);
      fs.writeFileSync(path.join(raceDir, marker), secret);
      try {
        const { box } = await startSwapLoop(other, ws, raceDir, { seconds: 6, timeoutS: 26, inside: 'inside' });
        const stats = { ok: 0, refused: 0 };
        const leaked = [];
        const skippedNames = new Set();
        const end = Date.now() + 4000;
        while (Date.now() < end) {
          const dest = newDest();
          let warnings;
          try {
            warnings = await warningsDuring(() => sb.snapshot(dest), { quiet: true });
          } catch (e) {
            if (!(e instanceof SandboxError)) throw e;
            stats.refused++;
            continue;
          }
          for (const w of warnings) if (w.code === 'KERN_SNAPSHOT_SKIPPED') skippedNames.add(w.message.replace(/^.*: /, ''));
          stats.ok++;
          for (const m of tar.list(fs.readFileSync(dest))) {
            if (m.name.includes(marker) || m.data.includes(secret)) leaked.push(m.name);
          }
          fs.rmSync(path.dirname(dest), { recursive: true, force: true });
          await new Promise((r) => setImmediate(r));
        }
        const r = await box;
        expect(r.stdout).toBe('looped\n');
        expect(leaked).toEqual([]);
        expect(stats.ok).toBeGreaterThan(0);
        // What was left out was the swapped-in symlink itself (or its transient d.real), nothing in the host dir.
        for (const n of skippedNames) expect(n).toMatch(/^(d|d\.real)(, (d|d\.real))*$/);
        expect(fs.readdirSync(raceDir).sort()).toEqual(['f', marker].sort());
        expectHostUntouched();
      } finally {
        fs.rmSync(raceDir, { recursive: true, force: true });
      }
    },
    90000
  );

  test(
    'restore never writes into the host dir a swapped-in symlink points at',
    async () => {
      const raceDir = makeTempDir('kern-snap-race-');
      const secret = `host secret ${uniqueName()}`;
      fs.writeFileSync(path.join(raceDir, 'f'), secret);
      try {
        const arc = newDest('race.tgz');
        fs.writeFileSync(
          arc,
          tar.tgz([
            { name: 'd/', type: 'dir' },
            { name: 'd/f', data: 'restored' },
            { name: 'd/new', data: 'restored new' },
            { name: 'd/sub/g', data: 'restored g' },
          ])
        );
        const { box } = await startSwapLoop(other, ws, raceDir, { seconds: 6, timeoutS: 26, inside: 'inside' });
        const stats = { ok: 0, refused: 0 };
        const end = Date.now() + 4000;
        while (Date.now() < end) {
          try {
            sb.restore(arc);
            stats.ok++;
          } catch (e) {
            if (!(e instanceof SandboxError)) throw e;
            stats.refused++;
          }
          await new Promise((r) => setImmediate(r));
        }
        const r = await box;
        expect(r.stdout).toBe('looped\n');
        expect(stats.ok + stats.refused).toBeGreaterThan(0);
        expect(fs.readdirSync(raceDir)).toEqual(['f']);
        expect(fs.readFileSync(path.join(raceDir, 'f'), 'utf8')).toBe(secret);
        expectHostUntouched();
      } finally {
        fs.rmSync(raceDir, { recursive: true, force: true });
      }
    },
    90000
  );
});
