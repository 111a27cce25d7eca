'use strict';
// rootless: yes
// Attack suite, named volumes: the workspace's attack classes pointed at a volume. Code in a box
// that mounts one (with every capability it may keep) climbs out of it, plants symlinks, hard
// links, devices, FIFOs, set-id files and closed directories in it, remounts it, and races the
// host's walks; a reader tries to write what it only reads. Each test asserts the attack
// failed AND the host is untouched (host.js guard), and the volume's own files (its lock files
// and volume.json, beside what boxes see) are as they were.

const fs = require('fs');
const path = require('path');
const { KEEP_ALL_CAPS, requireRootfs, opts, uniqueName } = require('../../helpers');
const { hostGuard, runJson, PY_PRELUDE, fileState } = require('../host');
const { Sandbox, Volume } = require('../../..');

const name = uniqueName('kva');
let guard;
let vol; // its VolumeInfo
let kept; // the volume's own files, as made
let w; // a writer with every capability a box may keep
let r; // a reader, likewise

const own = () => {
  const dir = path.dirname(vol.path);
  return { listing: fs.readdirSync(dir).sort(), meta: fileState(path.join(dir, 'volume.json')), mode: fs.statSync(dir).mode & 0o7777 };
};

/** Every set-id file under the volume, and every device node, as the host sees them. */
function special(root) {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      const st = fs.lstatSync(p);
      if (st.mode & 0o6000) out.push(`setid ${p}`);
      if (e.isCharacterDevice() || e.isBlockDevice()) out.push(`device ${p}`);
      if (e.isDirectory()) walk(p);
    }
  };
  walk(root);
  return out;
}

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  vol = await Volume.create(name, { sizeMb: 64 });
  kept = own();
  expect(kept.listing).toEqual(['data', 'use.lock', 'volume.json', 'write.lock']);
  expect(kept.mode).toBe(0o700);
  w = await new Sandbox(opts({ capDrop: KEEP_ALL_CAPS, volumes: { [name]: '/data' } })).open();
  r = await new Sandbox(opts({ capDrop: KEEP_ALL_CAPS, volumes: { [name]: { path: '/ro', readonly: true } } })).open();
});

afterAll(async () => {
  if (w) await w.close();
  if (r) await r.close();
  // Whatever the boxes left, removal takes only the volume.
  await Volume.remove(name);
  expect(fs.existsSync(path.dirname(vol.path))).toBe(false);
  guard.assertUntouched();
  await guard.assertNoLeaks();
  guard.cleanup();
});

afterEach(() => {
  expect(own()).toEqual(kept);
  expect(special(vol.path)).toEqual([]);
  guard.assertUntouched();
});

test('climbing out of the volume: .. from /data (50 levels) is the box root; the volume\'s own files are nowhere in the box', async () => {
  const { j } = await runJson(
    w,
    PY_PRELUDE +
      [
        'out = {"up": os.path.realpath("/data/" + "../" * 50), "root": sorted(os.listdir("/data/" + "../" * 50))}',
        'out["parent"] = sorted(os.listdir("/data/.."))',
        'for f in ("volume.json", "use.lock", "write.lock"):',
        '    out[f] = os.path.exists("/data/../" + f)',
        `out["write above"] = try_(lambda: open("/data/../${guard.token}", "w").write("x"))`,
        'print(json.dumps(out))',
      ].join('\n')
  );
  expect(j.up).toBe('/');
  expect(j.root).toEqual(j.parent);
  expect(j.root).toContain('data');
  expect(j).toMatchObject({ 'volume.json': false, 'use.lock': false, 'write.lock': false });
  expect(j['write above']).toMatch(/^(EROFS|EACCES|EPERM)$/);
});

test('symlinks planted in the volume to host paths resolve in each box that follows them, and the host\'s walks never follow them', async () => {
  const targets = { canary: guard.canary.file, dir: guard.dir, etc: '/etc', root: '/' };
  const { j } = await runJson(
    w,
    PY_PRELUDE +
      [
        `t = ${JSON.stringify(targets)}`,
        'out = {}',
        'for k, p in t.items():',
        '    os.symlink(p, "/data/ln-" + k)',
        'out["read canary"] = try_(lambda: open("/data/ln-canary").read())',
        `out["write through dir"] = try_(lambda: open("/data/ln-dir/${guard.token}", "w").write("x"))`,
        'print(json.dumps(out))',
      ].join('\n')
  );
  expect(j['read canary']).toBe('ENOENT');
  expect(j['write through dir']).toMatch(/^(ENOENT|EROFS|EACCES)$/);
  // The reader follows them in its own box.
  const seen = await runJson(r, PY_PRELUDE + 'print(json.dumps({"canary": try_(lambda: open("/ro/ln-canary").read()), "dir": try_(lambda: os.listdir("/ro/ln-dir"))}))');
  expect(seen.j).toEqual({ canary: 'ENOENT', dir: 'ENOENT' });
  // The host's walks (usage, the set-id sweep after each box) saw links, not what they name.
  const info = await Volume.inspect(name);
  expect(info.usedBytes).toBeLessThan(64 * 1024);
  for (const k of Object.keys(targets)) expect(fs.lstatSync(path.join(vol.path, `ln-${k}`)).isSymbolicLink()).toBe(true);
});

test('hard links across the volume\'s edge fail (EXDEV): nothing of the image or the workspace shares an inode with it', async () => {
  const { j } = await runJson(
    w,
    PY_PRELUDE +
      [
        'open("/workspace/ws-file", "w").write("ws")',
        'open("/data/vol-file", "w").write("vol")',
        'out = {',
        '  "image into volume": try_(lambda: os.link("/etc/passwd", "/data/pw")),',
        '  "workspace into volume": try_(lambda: os.link("/workspace/ws-file", "/data/ws-link")),',
        '  "volume into workspace": try_(lambda: os.link("/data/vol-file", "/workspace/vol-link")),',
        '  "volume into tmp": try_(lambda: os.link("/data/vol-file", "/tmp/vol-link")),',
        '}',
        'print(json.dumps(out))',
      ].join('\n')
  );
  for (const [k, v] of Object.entries(j)) expect({ [k]: v }).toEqual({ [k]: expect.stringMatching(/^(EXDEV|EPERM|EACCES)$/) });
  expect(fs.statSync(path.join(vol.path, 'vol-file')).nlink).toBe(1);
  expect(fs.existsSync(path.join(vol.path, 'pw'))).toBe(false);
});

test('devices, set-id files and remounts: mknod fails, set-id bits never reach the host past the box, nosuid/nodev can\'t be lifted', async () => {
  const go = `${guard.token}-go`;
  let during = null;
  const call = runJson(
    w,
    PY_PRELUDE +
      [
        'import shutil, stat, time',
        'MS_REMOUNT, MS_BIND, MS_NOSUID, MS_NODEV = 32, 4096, 2, 4',
        'out = {}',
        'out["mknod mem"] = try_(lambda: os.mknod("/data/mem", 0o666 | stat.S_IFCHR, os.makedev(1, 1)))',
        'out["mknod sda"] = try_(lambda: os.mknod("/data/sda", 0o666 | stat.S_IFBLK, os.makedev(8, 0)))',
        'shutil.copy("/bin/true", "/data/suid")',
        'out["chmod 4755"] = try_(lambda: os.chmod("/data/suid", 0o4755))',
        'os.mkdir("/data/sgid-dir")',
        'out["chmod 2775"] = try_(lambda: os.chmod("/data/sgid-dir", 0o2775))',
        'out["remount suid,dev"] = "ok" if libc.mount(None, b"/data", None, MS_REMOUNT | MS_BIND, None) == 0 else ename(ctypes.get_errno())',
        'out["umount"] = "ok" if libc.umount2(b"/data", 2) == 0 else ename(ctypes.get_errno())',
        'out["mode"] = oct(os.stat("/data/suid").st_mode & 0o7777)',
        'print(json.dumps(out), flush=True)',
        `while not os.path.exists("/data/${go}"): time.sleep(0.05)`,
      ].join('\n'),
    {
      onStdout: () => {
        if (during) return;
        // While the box runs: whatever bits it holds, only the volume's owner reaches the file.
        const dir = path.dirname(vol.path);
        during = { dirMode: fs.statSync(dir).mode & 0o777, owner: fs.statSync(dir).uid };
        fs.writeFileSync(path.join(vol.path, go), '');
      },
    }
  );
  const { j } = await call;
  expect(during).toEqual({ dirMode: 0o700, owner: process.getuid() });
  expect(j['mknod mem']).toBe('EPERM');
  expect(j['mknod sda']).toMatch(/^(EPERM|EACCES)$/);
  // The remount keeps the locked nosuid/nodev (or is refused); the umount is refused.
  expect(j['remount suid,dev']).toMatch(/^(ok|EPERM)$/);
  expect(j.umount).toMatch(/^(EPERM|EINVAL)$/);
  // afterEach: no set-id bit and no device under the volume on the host, after the box.
  fs.rmSync(path.join(vol.path, go));
  const after = await runJson(w, PY_PRELUDE + 'print(json.dumps({"mode": oct(os.stat("/data/suid").st_mode & 0o7777), "opts": [l.split()[5] for l in open("/proc/self/mountinfo") if l.split()[4] == "/data"]}))');
  expect(after.j.mode).toBe('0o755');
  expect(after.j.opts.join(',')).toMatch(/nosuid/);
  expect(after.j.opts.join(',')).toMatch(/nodev/);
});

test('the reader, with every capability it may keep, cannot write: not directly, not by remounting, not by unmounting', async () => {
  fs.writeFileSync(path.join(vol.path, 'shared.txt'), 'original\n');
  const before = fileState(path.join(vol.path, 'shared.txt'));
  const { j } = await runJson(
    r,
    PY_PRELUDE +
      [
        'MS_REMOUNT, MS_BIND, MS_RDONLY = 32, 4096, 1',
        'out = {}',
        'out["write"] = try_(lambda: open("/ro/shared.txt", "a").write("pwned"))',
        `out["create"] = try_(lambda: open("/ro/${guard.token}", "w").write("x"))`,
        'out["chmod"] = try_(lambda: os.chmod("/ro/shared.txt", 0o777))',
        'out["remount rw"] = "ok" if libc.mount(None, b"/ro", None, MS_REMOUNT | MS_BIND, None) == 0 else ename(ctypes.get_errno())',
        'out["write after remount"] = try_(lambda: open("/ro/shared.txt", "a").write("pwned"))',
        'out["umount"] = "ok" if libc.umount2(b"/ro", 2) == 0 else ename(ctypes.get_errno())',
        'out["write after umount"] = try_(lambda: open("/ro/shared.txt", "a").write("pwned"))',
        'print(json.dumps(out))',
      ].join('\n')
  );
  for (const k of ['write', 'create', 'chmod', 'write after remount', 'write after umount']) {
    expect({ [k]: j[k] }).toEqual({ [k]: expect.stringMatching(/^(EROFS|EACCES|EPERM|ENOENT)$/) });
  }
  expect(fileState(path.join(vol.path, 'shared.txt'))).toEqual(before);
  expect(fs.existsSync(path.join(vol.path, guard.token))).toBe(false);
});

test('hiding bytes from the size cap: a closed directory, many empty files and kern\'s own `.deps` name all count (or fail the call closed)', async () => {
  const small = uniqueName('kvs');
  const v = await Volume.create(small, { sizeMb: 1 });
  const s = await new Sandbox(opts({ capDrop: KEEP_ALL_CAPS, volumes: { [small]: '/v' } })).open();
  try {
    const plant = [
      // 2 MB in a directory nobody may enter.
      'import os; os.makedirs("/v/closed/deep"); open("/v/closed/deep/f", "wb").write(os.urandom(2000000)); os.chmod("/v/closed", 0)',
      // 300 empty files: 4 KiB each at least.
      'import os\nfor i in range(300): open(f"/v/e{i}", "w").close()',
      // Where a workspace keeps kern's `.deps`.
      'import os; os.makedirs("/v/.deps"); open("/v/.deps/f", "wb").write(os.urandom(2000000))',
    ];
    for (const code of plant) {
      for (const e of fs.readdirSync(v.path)) fs.rmSync(path.join(v.path, e), { recursive: true, force: true });
      const planted = await s.runCode(code);
      expect(planted.exitCode).toBe(0);
      const next = await s.run(['true']);
      expect({ code, fault: next.fault && next.fault.type }).toEqual({ code, fault: 'workspace_full' });
      expect(next.fault.message).toContain(small);
      // Made deletable and emptied by the host, the volume takes calls again.
      fs.chmodSync(path.join(v.path), 0o755);
      for (const e of fs.readdirSync(v.path)) {
        const p = path.join(v.path, e);
        if (fs.lstatSync(p).isDirectory()) fs.chmodSync(p, 0o755);
        fs.rmSync(p, { recursive: true, force: true });
      }
      expect((await s.run(['true'])).fault).toBeNull();
    }
    // A closed directory left in place: remove() still takes the whole volume.
    await s.runCode('import os; os.makedirs("/v/c2/x"); os.chmod("/v/c2/x", 0); os.chmod("/v/c2", 0)');
  } finally {
    await s.close();
  }
  await Volume.remove(small);
  expect(fs.existsSync(path.dirname(v.path))).toBe(false);
});

test('FIFOs and sockets in the volume stall none of the host\'s walks; a directory swapped for a symlink during them leads nowhere', async () => {
  await runJson(
    w,
    PY_PRELUDE +
      [
        'os.mkfifo("/data/fifo")',
        's = socket.socket(socket.AF_UNIX); s.bind("/data/sock")',
        'print(json.dumps({}))',
      ].join('\n')
  );
  expect((await Volume.inspect(name)).usedBytes).toBeGreaterThan(0);
  // The box swaps /data/d between a directory and a symlink to the guard's dir while the host
  // walks the volume (inspect) and sweeps it (after each box).
  fs.mkdirSync(path.join(vol.path, 'd'));
  const loop = w.run(['sh', '-c', `cd /data && timeout 4 sh -c 'while :; do mv -T d d.real; ln -s ${guard.dir} d; rm d; mv -T d.real d; done' 2>/dev/null; echo looped`], { timeoutS: 20 });
  const looks = [];
  while (looks.length < 30) looks.push((await Volume.inspect(name)).usedBytes);
  expect((await loop).stdout).toBe('looped\n');
  expect(looks.every((b) => b === null || b < 1 << 20)).toBe(true);
  for (const n of ['d', 'd.real']) fs.rmSync(path.join(vol.path, n), { recursive: true, force: true });
});
