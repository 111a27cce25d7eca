'use strict';
// rootless: yes
// A workspace or a "rw" mount is a host directory the box writes, and so does kern: it makes
// `.deps` in a workspace and clears every set-id bit it finds in both after a call. Given the
// host's own trees (/usr, /etc, /, a home, the shared /tmp...), that stripped the set-uid bit
// of the host's passwd, su and mount, and let a box write the host's system. Each is refused
// before anything is made, by open() (fresh and persist), `kern run` and `kern doctor` alike;
// the host's set-id programs and the refused directories are checked on the host after every
// attempt, and a read-only mount of a system tree still works and changes nothing.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { Sandbox, SandboxError, MountRefused } = require('../../..');
const { opts, requireRootfs, tempDirs, expectRefusedBeforeAnyBox, uniqueName, isRoot } = require('../../helpers');

const KERN = process.env.KERN_BIN || path.join(__dirname, '..', '..', '..', 'kern');
const dirs = tempDirs();
afterAll(() => dirs.removeAll());
beforeAll(() => requireRootfs());

/** The set-id files of the host's system trees, found once: kern must never change one. */
const SETID = spawnSync('find', ['/usr', '/bin', '/sbin', '/etc', '-xdev', '-type', 'f', '-perm', '/6000', '-print'], { encoding: 'utf8', maxBuffer: 16 << 20 })
  .stdout.split('\n').filter(Boolean).sort();

/** Each of them with its mode, as the host sees it now. */
function hostSetid() {
  return SETID.map((f) => `${(fs.statSync(f).mode & 0o7777).toString(8)} ${f}`);
}

/** What kern would have made at `p`: the directory itself, or its `.deps` and owner files. (Not
 * a listing: other processes write /tmp and /var/tmp meanwhile.) */
function entries(p) {
  if (!fs.existsSync(p)) return 'absent';
  return ['.deps', '.owner', '.owner.new'].filter((n) => fs.existsSync(path.join(p, n)));
}

const setidBefore = hostSetid();
const tag = uniqueName('kernsys');

/** Host directories no box may write, with what the refusal names. */
function systemDirs() {
  const link = path.join(dirs.temp('kern-sysdirs-'), 'to-usr');
  fs.symlinkSync('/usr', link);
  return [
    ['/', /is \/ \(the host's root directory\)/],
    ['/usr', /is \/usr \(the host's installed software\)/],
    ['/usr/bin', /is inside \/usr/],
    [`/usr/lib/${tag}`, /is inside \/usr/],
    ['/etc', /is \/etc/],
    [`/etc/${tag}/deeper`, /is inside \/etc/],
    ['/var/lib', /is \/var\/lib/],
    ['/dev/shm', /is inside \/dev/],
    ['/tmp', /shared by every user/],
    ['/var/tmp', /shared by every user/],
    [os.homedir(), /a home directory|is \/root/],
    [`${os.homedir()}/.ssh/${tag}`, /credentials|is inside \/root/],
    // Not there yet, below a symlink to /usr: refused where it would be made.
    [path.join(link, tag), /which resolves to \/usr\//],
  ];
}

test('a system directory, a home or the shared /tmp is refused as the workspace before anything is made, and the host\'s set-id programs keep their bits', async () => {
  // The host has set-id programs to lose (passwd, su...), each set-id now.
  expect(SETID.length).toBeGreaterThan(0);
  expect(setidBefore.filter((l) => /^[246][0-7]{3} /.test(l))).toEqual(setidBefore);
  for (const [p, says] of systemDirs()) {
    const before = entries(p);
    const err = await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ workspace: p }), /^option `workspace` .* is refused: it /, says, /leave `workspace` out/);
    expect(err).toBeInstanceOf(MountRefused);
    expect(err.code).toBe('ERR_MOUNT_REFUSED');
    // The named Sandbox kind checks the same, first.
    await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ workspace: p, persist: true, name: `${tag}-p` }), says);
    // Nothing made there (no .deps, no owner file, no new directory), nothing stripped.
    expect({ p, entries: entries(p) }).toEqual({ p, entries: before });
    expect(hostSetid()).toEqual(setidBefore);
  }
});

test('kern run and kern doctor refuse the same workspaces with the same words', () => {
  for (const [p, says] of systemDirs()) {
    const before = entries(p);
    const run = spawnSync(KERN, ['run', '--image', 'host', '--workspace', p, '--', 'true'], { encoding: 'utf8', timeout: 60000 });
    expect({ p, code: run.status }).toEqual({ p, code: 125 });
    expect(run.stderr).toMatch(says);
    expect(run.stderr).toMatch(/is refused/);
    const doc = spawnSync(KERN, ['doctor', '--workspace', p, '--json'], { encoding: 'utf8', timeout: 60000 });
    const idmap = JSON.parse(doc.stdout).checks.find((c) => c.name === 'idmap');
    expect({ p, status: idmap.status, blocking: idmap.blocking }).toEqual({ p, status: 'missing', blocking: true });
    expect(idmap.detail).toMatch(says);
    expect({ p, entries: entries(p) }).toEqual({ p, entries: before });
    expect(hostSetid()).toEqual(setidBefore);
  }
});

test('a system tree may be mounted read-only, never "rw"; the read-only one is not swept', async () => {
  for (const src of ['/usr/bin', '/var/lib', '/usr']) {
    const sb = new Sandbox(opts({ mounts: { [src]: ['/host', 'rw'] } }));
    try {
      await expect(sb.open()).rejects.toThrow(new RegExp(`refused source "${src}" as "rw": .*which a box must not write; mount it read-only`));
    } finally {
      await sb.close();
    }
  }
  const sb = await new Sandbox(opts({ mounts: { '/usr/bin': '/host' } })).open();
  try {
    const r = await sb.run(['sh', '-c', 'test -u /host/passwd && echo suid; echo x > /host/kern-probe || echo refused']);
    expect(r.stdout).toBe('suid\nrefused\n');
  } finally {
    await sb.close();
  }
  expect(fs.existsSync('/usr/bin/kern-probe')).toBe(false);
  expect(hostSetid()).toEqual(setidBefore);
});

test('a project directory, and one still to be made inside a home, are workspaces as before', async () => {
  const project = dirs.temp('kern-sysdirs-project-');
  for (const ws of [project, path.join(project, 'new', 'deeper')]) {
    const sb = await new Sandbox(opts({ workspace: ws })).open();
    try {
      expect((await sb.run(['sh', '-c', 'echo hi > f; cat f'])).stdout).toBe('hi\n');
    } finally {
      await sb.close();
    }
    expect(fs.readFileSync(path.join(ws, 'f'), 'utf8')).toBe('hi\n');
  }
  // As root a home is /root, inside which nothing may be; unprivileged, a project in one is fine.
  if (!isRoot) {
    const inHome = path.join(os.homedir(), `${tag}-project`);
    try {
      const sb = await new Sandbox(opts({ workspace: inHome })).open();
      await sb.close();
      expect(fs.statSync(inHome).isDirectory()).toBe(true);
    } finally {
      fs.rmSync(inHome, { recursive: true, force: true });
    }
  }
  expect(hostSetid()).toEqual(setidBefore);
});
