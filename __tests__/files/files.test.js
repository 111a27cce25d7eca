'use strict';
// rootless: yes
// The host file API (readFile, writeFile, listFiles) against a workspace that a box has planted
// things in: symlinks to host files and directories, FIFOs, sockets, hard links, hostile path
// strings, and a box that keeps swapping a directory for a symlink while the host reads and writes
// through it. Every attack test asserts the host call was refused with SandboxError AND that a host
// canary outside the workspace is byte-identical (and, for writes, that nothing new appeared
// outside). The ordinary behaviour (maxBytes, atomic replace, listing) is covered alongside.

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const {
  ROOTFS,
  isRoot,
  requireRootfs,
  opts,
  uniqueName,
  makeCanaryFile,
  makeTempDir,
  expectSandboxError,
  summary,
  expectOk,
  waitFor,
  startSwapLoop,
} = require('../helpers');

const { Sandbox, SandboxError } = require('../..');

let ws; // the workspace, also inspected from the host
let sb;
let hostDir; // a host directory outside the workspace, holding `dirCanary`
let canary; // a host file in os.tmpdir()
let dirCanary;

beforeAll(async () => {
  requireRootfs();
  ws = makeTempDir('kern-files-ws-');
  hostDir = makeTempDir('kern-files-host-');
  canary = makeCanaryFile(os.tmpdir());
  dirCanary = makeCanaryFile(hostDir);
  sb = await new Sandbox(opts({ workspace: ws })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  for (const d of [ws, hostDir]) if (d) fs.rmSync(d, { recursive: true, force: true });
  if (canary) canary.remove();
});

// Each test starts from an empty workspace (rmSync removes a planted symlink, never its target).
beforeEach(() => {
  for (const e of fs.readdirSync(ws)) fs.rmSync(path.join(ws, e), { recursive: true, force: true });
});

/** Runs a shell script in the box, in /workspace, and insists it succeeded. */
async function plant(script) {
  const r = await sb.run(['sh', '-c', `cd /workspace && ${script}`]);
  expectOk(r);
  return r;
}

// A refusal only counts when the method exists: "not built yet" would make every attack test pass.
const refused = (fn, ...patterns) => expectSandboxError(fn, SandboxError, /^(?![\s\S]*not built yet)/, ...patterns);
const lstat = (rel) => fs.lstatSync(path.join(ws, rel));
const existsOutside = (p) => {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
};

/** Everything outside the workspace this file watches is as it was. */
function expectHostUntouched() {
  expect(canary.intact()).toBe(true);
  expect(dirCanary.intact()).toBe(true);
  expect(fs.readdirSync(hostDir)).toEqual([dirCanary.name]);
}

/** Recursive listing of the workspace (type, size, content of regular files), nothing followed. */
function wsTree(root = ws) {
  const out = {};
  const walk = (dir, rel) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(dir, e.name);
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isSymbolicLink()) out[r] = `symlink:${fs.readlinkSync(p)}`;
      else if (e.isDirectory()) {
        out[r] = 'dir';
        walk(p, r);
      } else if (e.isFile()) out[r] = `file:${fs.readFileSync(p, 'latin1')}`;
      else out[r] = 'special';
    }
  };
  walk(root, '');
  return out;
}

describe('symlinks planted by the box', () => {
  test('pw -> a host file: readFile and writeFile refuse, the host file is unchanged', async () => {
    await plant(`ln -s ${canary.file} pw && ln -s ../${path.basename(canary.file)} rel`);
    expect(lstat('pw').isSymbolicLink()).toBe(true);
    expect(fs.readFileSync(path.join(ws, 'pw'), 'utf8')).toBe(canary.body); // the host WOULD reach it
    for (const p of ['pw', 'rel']) {
      await refused(() => sb.readFile(p));
      await refused(() => sb.readFile(p, { maxBytes: 1 << 20 }));
      await refused(() => sb.writeFile(p, 'x'));
      await refused(() => sb.writeFile(p, Buffer.from('overwritten')));
      expect(lstat(p).isSymbolicLink()).toBe(true);
    }
    expectHostUntouched();
  });

  test('up -> .. (relative, escaping the workspace): reads and writes through it refuse', async () => {
    // ws lives directly in os.tmpdir(), next to the canary file.
    expect(path.dirname(ws)).toBe(path.dirname(canary.file));
    const u = uniqueName('kernescape');
    await plant('ln -s .. up');
    await refused(() => sb.readFile(`up/${canary.name}`));
    await refused(() => sb.writeFile(`up/${canary.name}`, 'x'));
    await refused(() => sb.writeFile(`up/${u}`, 'x'));
    await refused(() => sb.writeFile(`up/${u}/deeper/f`, 'x'));
    expect(existsOutside(path.join(os.tmpdir(), u))).toBe(false);
    expectHostUntouched();
  });

  test('dir -> /etc: readFile(dir/passwd) and writes under it refuse', async () => {
    const passwd = fs.readFileSync('/etc/passwd');
    const u = uniqueName('kernetc');
    await plant('ln -s /etc dir');
    await refused(() => sb.readFile('dir/passwd'));
    await refused(() => sb.writeFile('dir/passwd', 'x'));
    await refused(() => sb.writeFile(`dir/${u}`, 'x'));
    expect(fs.readFileSync('/etc/passwd').equals(passwd)).toBe(true);
    expect(existsOutside(`/etc/${u}`)).toBe(false);
    expectHostUntouched();
  });

  test('dir -> /: readFile(dir/etc/passwd) and writeFile(dir/tmp/x) refuse', async () => {
    const u = uniqueName('kernroot');
    const tmpRel = path.relative('/', os.tmpdir()); // "tmp" unless TMPDIR says otherwise
    await plant('ln -s / dir');
    await refused(() => sb.readFile('dir/etc/passwd'));
    await refused(() => sb.readFile(`dir/${tmpRel}/${canary.name}`));
    await refused(() => sb.writeFile(`dir/${tmpRel}/${u}`, 'x'));
    await refused(() => sb.writeFile(`dir/${tmpRel}/${u}/sub/f`, 'x'));
    await refused(() => sb.writeFile(`dir/${tmpRel}/${canary.name}`, 'x'));
    expect(existsOutside(path.join(os.tmpdir(), u))).toBe(false);
    expectHostUntouched();
  });

  test('d -> a host dir holding a canary: readFile(d/<canary>), writeFile(d/new) refuse', async () => {
    await plant(`ln -s ${hostDir} d && mkdir -p real && ln -s ${hostDir} real/sub`);
    for (const base of ['d', 'real/sub']) {
      await refused(() => sb.readFile(`${base}/${dirCanary.name}`));
      await refused(() => sb.writeFile(`${base}/new`, 'x'));
      await refused(() => sb.writeFile(`${base}/newdir/new`, 'x'));
      await refused(() => sb.writeFile(`${base}/${dirCanary.name}`, 'x'));
    }
    expectHostUntouched();
  });

  test('a symlink to a file inside the workspace is refused too (no symlink is followed)', async () => {
    await plant('echo inside > a.txt && ln -s a.txt l');
    await refused(() => sb.readFile('l'));
    await refused(() => sb.writeFile('l', 'x'));
    expect(fs.readFileSync(path.join(ws, 'a.txt'), 'utf8')).toBe('inside\n');
    expect(lstat('l').isSymbolicLink()).toBe(true);
    expectHostUntouched();
  });
});

describe('special files and hard links', () => {
  test(
    'a FIFO: readFile rejects (without blocking) and writeFile refuses',
    async () => {
      await plant('mkfifo p');
      expect(lstat('p').isFIFO()).toBe(true);
      await refused(() => sb.readFile('p'));
      await refused(() => sb.readFile('p', { maxBytes: 10 }));
      await refused(() => sb.writeFile('p', 'x'));
      expect(lstat('p').isFIFO()).toBe(true);
      expectHostUntouched();
    },
    60000
  );

  test('a unix socket: readFile and writeFile refuse', async () => {
    const r = await sb.runCode(
      'import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind("/workspace/s")\nprint("bound")'
    );
    expectOk(r);
    expect(r.stdout).toBe('bound\n');
    expect(lstat('s').isSocket()).toBe(true);
    await refused(() => sb.readFile('s'));
    await refused(() => sb.writeFile('s', 'x'));
    expect(lstat('s').isSocket()).toBe(true);
    expectHostUntouched();
  });

  test('a hard link to a file outside the workspace: the box cannot make it, or the host refuses it', async () => {
    const rootfsPasswd = path.join(ROOTFS, 'etc/passwd');
    const before = fs.readFileSync(rootfsPasswd);
    const r = await plant(
      'echo inbox > /tmp/x; ln /tmp/x h1 2>/dev/null; echo "h1=$?"; ln /etc/passwd h2 2>/dev/null; echo "h2=$?"'
    );
    const rc = Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split('=')));
    for (const h of ['h1', 'h2']) {
      if (existsOutside(path.join(ws, h))) {
        // The link exists: the host must not use it.
        await refused(() => sb.readFile(h));
        await refused(() => sb.writeFile(h, 'x'));
      } else {
        expect({ [h]: rc[h] }).not.toEqual({ [h]: '0' }); // the box's `ln` failed (EXDEV/EPERM)
      }
    }
    expect(fs.readFileSync(rootfsPasswd).equals(before)).toBe(true);
    expectHostUntouched();
  });

  test('a hard link made inside the workspace (nlink 2): both names are refused', async () => {
    await plant('echo shared > a && ln a b');
    expect(lstat('b').nlink).toBe(2);
    await refused(() => sb.readFile('b'));
    await refused(() => sb.readFile('a'));
    await refused(() => sb.writeFile('b', 'x'));
    await refused(() => sb.writeFile('a', 'x'));
    expect(fs.readFileSync(path.join(ws, 'a'), 'utf8')).toBe('shared\n');
    expect(lstat('a').ino).toBe(lstat('b').ino);
    expectHostUntouched();
  });
});

describe('path strings', () => {
  const u = uniqueName('kernpath');
  const bad = [
    ['../x', `../${u}`],
    ['..', '..'],
    ['.', '.'],
    ['absolute /etc/passwd', '/etc/passwd'],
    ['absolute path into the host temp dir', path.join(os.tmpdir(), u)],
    ['a/../../x', `a/../../${u}`],
    ['./../x', `./../${u}`],
    ['a/../a.txt (.. even when it stays inside)', 'a/../a.txt'],
    ['a NUL byte', 'x\u0000y'],
    ['a 256-byte component', 'n'.repeat(256)],
    ['a 4097-byte path', `${'d/'.repeat(2048)}f`],
    ['a trailing slash on a file', 'a.txt/'],
    ['a trailing slash on a new name', 'newname/'],
    ['a directory', 'sub'],
  ];

  test.each(bad)('%s is refused by readFile and writeFile, nothing is created outside', async (_label, p) => {
    await plant('echo inside > a.txt && mkdir -p a sub');
    const before = wsTree();
    await refused(() => sb.readFile(p));
    await refused(() => sb.writeFile(p, 'x'));
    expect(wsTree()).toEqual(before);
    expect(existsOutside(path.join(os.tmpdir(), u))).toBe(false);
    expect(existsOutside(path.join(path.dirname(os.tmpdir()), u))).toBe(false);
    expectHostUntouched();
  });

  test('./a.txt and a//b.txt are ordinary paths', async () => {
    await plant('echo inside > a.txt');
    expect((await sb.readFile('./a.txt')).toString()).toBe('inside\n');
    await sb.writeFile('a//b.txt', 'bee');
    expect(fs.readFileSync(path.join(ws, 'a', 'b.txt'), 'utf8')).toBe('bee');
    expect((await sb.readFile('a/b.txt')).toString()).toBe('bee');
    expect((await sb.readFile('./a//b.txt')).toString()).toBe('bee');
  });

  test('a 255-byte component (NAME_MAX) works', async () => {
    const name = 'n'.repeat(255);
    await sb.writeFile(name, 'long');
    expect((await sb.readFile(name)).toString()).toBe('long');
    const r = await sb.run(['cat', `/workspace/${name}`]);
    expectOk(r);
    expect(r.stdout).toBe('long');
  });
});

describe('readFile maxBytes', () => {
  test('a 10-byte file: maxBytes 9 rejects naming maxBytes, 10 returns all 10 bytes, never a partial buffer', async () => {
    const body = Buffer.from('0123456789');
    await plant('printf 0123456789 > ten');
    await refused(() => sb.readFile('ten', { maxBytes: 9 }), /maxBytes/);
    expect((await sb.readFile('ten', { maxBytes: 10 })).equals(body)).toBe(true);
    expect((await sb.readFile('ten')).equals(body)).toBe(true);
    for (let m = 0; m <= 20; m++) {
      let got = null;
      try {
        got = await sb.readFile('ten', { maxBytes: m });
      } catch (e) {
        expect(e).toBeInstanceOf(SandboxError);
        expect(m).toBeLessThan(10);
        continue;
      }
      expect({ m, got: got.toString() }).toEqual({ m, got: body.toString() });
    }
  });

  test('an empty file reads as an empty Buffer, even with maxBytes 0', async () => {
    await plant(': > empty');
    const a = await sb.readFile('empty', { maxBytes: 0 });
    expect(Buffer.isBuffer(a)).toBe(true);
    expect(a.length).toBe(0);
  });

  test('invalid maxBytes values are refused', async () => {
    await plant('printf abc > f');
    for (const m of [-1, 1.5, 'x', NaN, Infinity]) await refused(() => sb.readFile('f', { maxBytes: m }));
  });
});

describe('writeFile', () => {
  test('creates missing parent directories; the box sees the content', async () => {
    await sb.writeFile('p/q/r.txt', 'deep');
    expect(lstat('p').isDirectory()).toBe(true);
    expect(lstat('p/q').isDirectory()).toBe(true);
    const r = await sb.run(['cat', '/workspace/p/q/r.txt']);
    expectOk(r);
    expect(r.stdout).toBe('deep');
  });

  test('Buffer data (every byte value) round-trips through the box', async () => {
    const data = Buffer.alloc(256 * 4);
    for (let i = 0; i < data.length; i++) data[i] = i % 256;
    await sb.writeFile('bin.dat', data);
    const r = await sb.run(['sha256sum', '/workspace/bin.dat']);
    expectOk(r);
    expect(r.stdout.split(' ')[0]).toBe(crypto.createHash('sha256').update(data).digest('hex'));
    expect((await sb.readFile('bin.dat')).equals(data)).toBe(true);
    expect(fs.readFileSync(path.join(ws, 'bin.dat')).equals(data)).toBe(true);
  });

  test('string data is written as UTF-8', async () => {
    const s = 'héllo wörld ☃ 🐍\n';
    await sb.writeFile('u.txt', s);
    const r = await sb.run(['cat', '/workspace/u.txt']);
    expectOk(r);
    expect(r.stdout).toBe(s);
    expect((await sb.readFile('u.txt')).toString('utf8')).toBe(s);
  });

  test('replaces atomically: a new inode is renamed in, an open reader keeps the old content, no temp file left', async () => {
    await plant('echo old > f');
    const ino = lstat('f').ino;
    // The box opens f, says so, waits for the host's go-ahead, then reads through its open fd.
    const box = sb.run(
      ['sh', '-c', 'cd /workspace && exec 3< f && : > opened && while [ ! -e go ]; do sleep 0.05; done; cat <&3'],
      { timeoutS: 30 }
    );
    expect(await waitFor(() => existsOutside(path.join(ws, 'opened')), 20000)).toBe(true);
    await sb.writeFile('f', 'new\n');
    fs.writeFileSync(path.join(ws, 'go'), '');
    const r = await box;
    expectOk(r);
    expect(r.stdout).toBe('old\n'); // replaced by rename, not truncated in place
    expect(lstat('f').ino).not.toBe(ino);
    const after = await sb.run(['cat', '/workspace/f']);
    expect(after.stdout).toBe('new\n');
    expect(Object.keys(wsTree()).filter((n) => n.includes('.kern-write'))).toEqual([]);
    expect(Object.keys(wsTree()).sort()).toEqual(['f', 'go', 'opened']);
  });

  test('writing over a directory is refused; the directory and its contents stay', async () => {
    await plant('mkdir -p dir/inner && echo keep > dir/inner/k');
    await refused(() => sb.writeFile('dir', 'x'));
    await refused(() => sb.writeFile('dir/inner', 'x'));
    expect(lstat('dir').isDirectory()).toBe(true);
    expect(fs.readFileSync(path.join(ws, 'dir/inner/k'), 'utf8')).toBe('keep\n');
    expect(Object.keys(wsTree()).filter((n) => n.includes('.kern-write'))).toEqual([]);
  });

  test('a path under an existing regular file is refused', async () => {
    await plant('echo f > a.txt');
    await refused(() => sb.writeFile('a.txt/x', 'x'));
    expect(fs.readFileSync(path.join(ws, 'a.txt'), 'utf8')).toBe('f\n');
  });

  (isRoot ? test : test.skip)('running as root, what it creates belongs to the workspace owner', async () => {
    const own = makeTempDir('kern-files-owner-');
    fs.chownSync(own, 4321, 4321);
    const s = await new Sandbox(opts({ workspace: own })).open();
    try {
      await s.writeFile('o/n.txt', 'owned');
      for (const p of ['o', 'o/n.txt']) {
        const st = fs.lstatSync(path.join(own, p));
        expect({ p, uid: st.uid, gid: st.gid }).toEqual({ p, uid: 4321, gid: 4321 });
      }
    } finally {
      await s.close();
      fs.rmSync(own, { recursive: true, force: true });
    }
  });

  (isRoot ? test : test.skip)('running as root with a workspace owned by another user, the box reads and replaces what writeFile wrote', async () => {
    // The box's account is meant to appear as the workspace's owner, whoever that is on disk.
    const own = makeTempDir('kern-files-owner-');
    fs.chownSync(own, 4321, 4321);
    const s = await new Sandbox(opts({ workspace: own })).open();
    try {
      await s.writeFile('o/n.txt', 'owned');
      const r = await s.run(['sh', '-c', 'cat /workspace/o/n.txt && echo more >> /workspace/o/n.txt && echo box > /workspace/b.txt']);
      expectOk(r);
      expect(r.stdout).toBe('owned');
      expect((await s.readFile('o/n.txt')).toString()).toBe('ownedmore\n');
      expect(fs.lstatSync(path.join(own, 'b.txt')).uid).toBe(4321);
    } finally {
      await s.close();
      fs.rmSync(own, { recursive: true, force: true });
    }
  });
});

describe('a box racing the host', () => {
  test(
    'swapping d for a symlink to a host dir never lets readFile/writeFile reach the host dir',
    async () => {
      const raceDir = makeTempDir('kern-files-race-');
      const secret = `host secret ${uniqueName()}\n`;
      fs.writeFileSync(path.join(raceDir, 'f'), secret); // what d/f would be through the symlink
      try {
        const { box, isDone } = await startSwapLoop(sb, ws, raceDir, { seconds: 8, timeoutS: 20, inside: 'inside\n' });
        const stats = { readOk: 0, readRefused: 0, writeOk: 0, writeRefused: 0, whileBoxRan: 0 };
        const wrong = [];
        const end = Date.now() + 6000;
        for (let i = 0; Date.now() < end; i++) {
          try {
            const got = (await sb.readFile('d/f')).toString();
            stats.readOk++;
            if (!got.startsWith('inside')) wrong.push(got);
          } catch (e) {
            if (!(e instanceof SandboxError)) throw e;
            stats.readRefused++;
          }
          try {
            await sb.writeFile('d/f', `inside host write ${i}\n`);
            stats.writeOk++;
          } catch (e) {
            if (!(e instanceof SandboxError)) throw e;
            stats.writeRefused++;
          }
          if (!isDone()) stats.whileBoxRan++;
        }
        const r = await box;
        expect(summary(r)).toMatchObject({ fault: null, exitCode: 0, stdout: 'looped\n' });
        expect(wrong).toEqual([]); // never the host dir's content
        expect(fs.readdirSync(raceDir)).toEqual(['f']); // nothing new appeared there
        expect(fs.readFileSync(path.join(raceDir, 'f'), 'utf8')).toBe(secret);
        expect(stats.whileBoxRan).toBeGreaterThan(0); // the race really overlapped the box
        expect(stats.readOk + stats.writeOk).toBeGreaterThan(0);
        expectHostUntouched();
      } finally {
        fs.rmSync(raceDir, { recursive: true, force: true });
      }
    },
    90000
  );

  test(
    'listFiles while the box swaps d for a symlink to a host dir never lists the host dir',
    async () => {
      const raceDir = makeTempDir('kern-files-race-');
      const marker = uniqueName('hostonly');
      fs.writeFileSync(path.join(raceDir, marker), 'host only\n');
      try {
        const { box, isDone } = await startSwapLoop(sb, ws, raceDir, { seconds: 6, timeoutS: 20, inside: 'inside\n' });
        const stats = { ok: 0, refused: 0, whileBoxRan: 0 };
        const leaked = [];
        const end = Date.now() + 4000;
        while (Date.now() < end) {
          for (const sub of [undefined, 'd']) {
            try {
              const got = await sb.listFiles(sub);
              stats.ok++;
              for (const f of got) if (f.path.includes(marker)) leaked.push(f.path);
            } catch (e) {
              if (!(e instanceof SandboxError)) throw e;
              stats.refused++;
            }
          }
          if (!isDone()) stats.whileBoxRan++;
        }
        const r = await box;
        expect(summary(r)).toMatchObject({ fault: null, exitCode: 0, stdout: 'looped\n' });
        expect(leaked).toEqual([]);
        expect(stats.whileBoxRan).toBeGreaterThan(0);
        expect(stats.ok).toBeGreaterThan(0);
        expect(fs.readdirSync(raceDir)).toEqual([marker]);
        expectHostUntouched();
      } finally {
        fs.rmSync(raceDir, { recursive: true, force: true });
      }
    },
    90000
  );
});

describe('listFiles', () => {
  const setup = () =>
    plant(
      'mkdir -p sub/deep .deps/lib && printf abc > a.txt && printf 12345 > sub/b.txt && : > sub/deep/c.txt && ' +
        'printf x > .deps/lib/m.py && printf hi > .hidden && printf q > .depsnot && printf zz > z.txt && ' +
        `ln -s a.txt link && ln -s /etc linkdir && ln -s ${hostDir} hostlink && mkfifo fifo && ln -s sub subl && ` +
        'mkfifo sub/fifo2 && ln -s ../a.txt sub/link2'
    );

  test('lists regular files with sizes, sorted, relative; skips .deps, symlinks and FIFOs', async () => {
    await setup();
    const got = await sb.listFiles();
    expect(got).toEqual([
      { path: '.depsnot', size: 1, change: 'created' },
      { path: '.hidden', size: 2, change: 'created' },
      { path: 'a.txt', size: 3, change: 'created' },
      { path: 'sub/b.txt', size: 5, change: 'created' },
      { path: 'sub/deep/c.txt', size: 0, change: 'created' },
      { path: 'z.txt', size: 2, change: 'created' },
    ]);
    expectHostUntouched();
  });

  test('listFiles(sub) lists only under sub, paths still workspace-relative', async () => {
    await setup();
    expect(await sb.listFiles('sub')).toEqual([
      { path: 'sub/b.txt', size: 5, change: 'created' },
      { path: 'sub/deep/c.txt', size: 0, change: 'created' },
    ]);
    expect(await sb.listFiles('sub/deep')).toEqual([{ path: 'sub/deep/c.txt', size: 0, change: 'created' }]);
  });

  test('a missing subdir lists nothing', async () => {
    await setup();
    expect(await sb.listFiles('nope')).toEqual([]);
    expect(await sb.listFiles('sub/nope/deeper')).toEqual([]);
  });

  test('a subdir that is a symlink (inside or to the host) is refused; so are escaping forms', async () => {
    await setup();
    for (const d of ['subl', 'linkdir', 'hostlink', 'subl/deep', 'hostlink/', '../', '..', '/etc', os.tmpdir(), `sub/../..`]) {
      await refused(() => sb.listFiles(d));
    }
    expectHostUntouched();
  });
});

describe('before open() and after close()', () => {
  test('readFile, writeFile and listFiles reject with SandboxError and create nothing', async () => {
    const w = makeTempDir('kern-files-closed-');
    try {
      const s = new Sandbox(opts({ workspace: w }));
      await refused(() => s.readFile('a.txt'));
      await refused(() => s.writeFile('a.txt', 'x'));
      await refused(() => s.listFiles());
      expect(fs.readdirSync(w)).toEqual([]);
      await s.open();
      await s.writeFile('a.txt', 'x');
      await s.close();
      await refused(() => s.readFile('a.txt'));
      await refused(() => s.writeFile('b.txt', 'x'));
      await refused(() => s.listFiles());
      // open() made .deps (empty, for `setup`); nothing else appeared.
      expect(fs.readdirSync(w).sort()).toEqual(['.deps', 'a.txt']);
    } finally {
      fs.rmSync(w, { recursive: true, force: true });
    }
  });
});
