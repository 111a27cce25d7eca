'use strict';
// rootless: yes
// Issue 34: `result.files` at the cost of what changed. A Sandbox watches its workspace (inotify,
// one watch per directory, set up by open()) instead of walking it before and after each call;
// with `workspaceMaxBytes` it still walks (the quota needs the byte count). Each scenario runs
// in a watched Sandbox and in a walking one, on workspaces seeded alike: their `files` must be
// the same. The host checks the watches themselves in /proc (this process's inotify fd).

const fs = require('fs');
const path = require('path');
const { opts, tempDirs } = require('../helpers');
const { Sandbox } = require('../..');

const { temp, removeAll } = tempDirs();
afterAll(removeAll);

/** Fills `ws` alike for both Sandboxes: 40 directories of 50 files, and a few to work on. */
function seed(ws) {
  for (let d = 0; d < 40; d++) {
    fs.mkdirSync(path.join(ws, `d${d}`));
    for (let f = 0; f < 50; f++) fs.writeFileSync(path.join(ws, `d${d}`, `f${f}`), `${d}.${f}`);
  }
  fs.mkdirSync(path.join(ws, 'x'));
  fs.mkdirSync(path.join(ws, 'y'));
  fs.writeFileSync(path.join(ws, 'x', 'linked'), 'one');
  fs.linkSync(path.join(ws, 'x', 'linked'), path.join(ws, 'y', 'other-link'));
  fs.writeFileSync(path.join(ws, 'mapped'), Buffer.alloc(4096));
  fs.mkdirSync(path.join(ws, 'old', 'inner'), { recursive: true });
  fs.writeFileSync(path.join(ws, 'old', 'inner', 'kept'), 'k');
  fs.writeFileSync(path.join(ws, 'becomes-dir'), 'f');
}

/** This process's inotify watches: the inodes they are on (fdinfo lines `inotify wd:… ino:…`). */
function watchedInodes() {
  const out = new Set();
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    let link;
    try {
      link = fs.readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue;
    }
    if (link !== 'anon_inode:inotify') continue;
    for (const line of fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8').split('\n')) {
      const m = /^inotify wd:\S+ ino:([0-9a-f]+) /.exec(line);
      if (m) out.add(parseInt(m[1], 16));
    }
  }
  return out;
}

/** The inodes of every directory under `ws`, `.deps` left out. */
function dirInodes(ws) {
  const out = [fs.statSync(ws).ino];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      if (!e.isDirectory() || path.join(d, e.name) === path.join(ws, '.deps')) continue;
      out.push(fs.lstatSync(path.join(d, e.name)).ino);
      walk(path.join(d, e.name));
    }
  };
  walk(ws);
  return out;
}

// Each runs in the box, in /workspace; `files` must be the same whether watched or walked.
const SCENARIOS = [
  ['a file among 2,000 modified', ['sh', '-c', 'echo changed > d17/f23']],
  ['a deep tree made at once', ['sh', '-c', 'mkdir -p new/a/b/c && echo 1 > new/a/b/c/f && echo 2 > new/a/top']],
  ['a directory renamed with its files', ['sh', '-c', 'mv old renamed']],
  ['files in the renamed directory changed later', ['sh', '-c', 'echo 2 > renamed/inner/kept && echo 3 > renamed/inner/new']],
  ['a write through one hard link shows at the other', ['sh', '-c', 'echo two >> x/linked']],
  ['a write through a shared memory mapping', ['python3', '-c', [
    'import mmap, time',
    'time.sleep(0.05)',
    'with open("mapped", "r+b") as f:',
    '    m = mmap.mmap(f.fileno(), 4096)',
    '    m[0:5] = b"hello"',
    '    m.close()',
  ].join('\n')]],
  ['only the modification time set', ['sh', '-c', 'touch -m -d 2001-01-01 d3/f4']],
  ['a file truncated', ['sh', '-c', 'truncate -s 0 d5/f5']],
  ['a file replaced by a directory holding a file', ['sh', '-c', 'rm becomes-dir && mkdir becomes-dir && echo in > becomes-dir/f']],
  ['only the mode changed (not a change of content)', ['sh', '-c', 'chmod 600 d6/f6']],
  ['a file renamed over another', ['sh', '-c', 'echo r > tmpfile && mv tmpfile d7/f7']],
  ['more files at once than the event queue holds (16,384 events)', ['python3', '-c', [
    'import os',
    'os.mkdir("many")',
    'for i in range(9000):',
    '    open("many/%d" % i, "w").write("x")',
  ].join('\n')]],
  ['a directory swapped for a symlink to /etc, then written through', ['sh', '-c', 'mv d9 d9-moved && ln -s /etc d9 && cat d9/hostname > /dev/null; echo w > d9-moved/f1']],
  ['nothing', ['true']],
];

describe('result.files, watched and walked', () => {
  let watched;
  let walked;
  let wsWatched;
  beforeAll(async () => {
    wsWatched = temp('kern-track-watched-');
    const wsWalked = temp('kern-track-walked-');
    seed(wsWatched);
    seed(wsWalked);
    const before = watchedInodes();
    watched = await new Sandbox(opts({ workspace: wsWatched })).open();
    // Watched from open(): every directory has a watch of this process.
    const now = watchedInodes();
    expect(dirInodes(wsWatched).filter((ino) => !now.has(ino) || before.has(ino))).toEqual([]);
    // A quota needs the walk's byte count: that Sandbox walks, and watches nothing.
    walked = await new Sandbox(opts({ workspace: wsWalked, workspaceMaxBytes: 2 ** 40 })).open();
    expect(watchedInodes().size).toBe(now.size);
  });
  afterAll(async () => {
    await watched?.close();
    await walked?.close();
  });

  test.each(SCENARIOS)('%s', async (what, argv) => {
    const a = await watched.run(argv);
    const b = await walked.run(argv);
    expect([a.exitCode, b.exitCode]).toEqual([0, 0]);
    expect(a.files).toEqual(b.files);
    // The notes agree too (the walk's cap note, for one).
    expect(a.runtimeNotes).toEqual(b.runtimeNotes);
  });

  test('the scenarios were seen: the watched Sandbox reports them', async () => {
    const r = await watched.run(['sh', '-c', 'echo again > d17/f23 && mkdir -p fresh/dir && echo n > fresh/dir/n']);
    expect(r.files.map((f) => [f.path, f.change])).toEqual([['d17/f23', 'modified'], ['fresh/dir/n', 'created']]);
    // New and renamed directories are watched where they are now; the symlink is not followed.
    const now = watchedInodes();
    const missing = dirInodes(wsWatched).filter((ino) => !now.has(ino));
    expect(missing).toEqual([]);
    expect(now.has(fs.statSync('/etc').ino)).toBe(false);
  });

  test('close() lets the watches go', async () => {
    const ws = temp('kern-track-close-');
    seed(ws);
    const before = watchedInodes().size;
    const sb = await new Sandbox(opts({ workspace: ws })).open();
    expect(watchedInodes().size).toBeGreaterThan(before);
    await sb.close();
    expect(watchedInodes().size).toBe(before);
  });
});
