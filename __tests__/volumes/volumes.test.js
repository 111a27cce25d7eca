'use strict';
// rootless: yes
// Named volumes through the public API (`Volume`, the `volumes` option, `kern volume`, `kern run
// --volume`): their lifecycle, data that outlives every Sandbox, who may write them at once,
// their size cap, and the refusals, each before any box. The attacks on a volume are
// __tests__/attack/escape/volume.test.js.

const fs = require('fs');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { requireRootfs, opts, makeTempDir, expectSandboxError, expectRefusedBeforeAnyBox } = require('../helpers');
const { KERN_BIN } = require('../attack/host');
const { Sandbox, Volume, SandboxError, MountRefused } = require('../..');

// The user's store, as kern finds it (Jest's process.env is a copy the addon doesn't see, so
// the store is the real one; names carry this process's pid, and afterAll removes them).
const home = process.env.HOME;
const store = process.env.KERN_VOLUMES || (process.env.KERN_HOME ? path.join(process.env.KERN_HOME, 'volumes')
  : process.env.XDG_DATA_HOME ? path.join(process.env.XDG_DATA_HOME, 'kern-sandbox/volumes') : path.join(home, '.local/share/kern-sandbox/volumes'));
const prefix = `kvt${process.pid}-`;
let n = 0;
const fresh = () => `${prefix}${++n}`;
const open = async (o) => new Sandbox(opts(o)).open();
const sh = async (sb, script) => sb.run(['sh', '-c', script]);

beforeAll(() => requireRootfs());

afterAll(async () => {
  for (const v of await Volume.list()) if (v.name.startsWith(prefix)) await Volume.remove(v.name);
});

test('create, inspect, list and remove: a volume is a directory of the store, owned by the caller, gone after remove', async () => {
  const name = fresh();
  const made = await Volume.create(name, { sizeMb: 64 });
  expect(made).toMatchObject({ name, path: path.join(store, name, 'data'), sizeMb: 64, usedBytes: 0, inUse: false });
  expect(Math.abs(made.createdAt - Date.now())).toBeLessThan(60_000);
  const st = fs.statSync(made.path);
  expect(st.isDirectory()).toBe(true);
  expect(st.uid).toBe(process.getuid());
  // Only its owner reaches in: the volume's own directory is 0700.
  expect(fs.statSync(path.dirname(made.path)).mode & 0o777).toBe(0o700);
  expect(await Volume.inspect(name)).toEqual(made);
  expect((await Volume.list()).map((v) => v.name)).toContain(name);
  await expectSandboxError(() => Volume.create(name), SandboxError, /already exists/);
  await Volume.remove(name);
  expect(fs.existsSync(path.join(store, name))).toBe(false);
  expect((await Volume.list()).map((v) => v.name)).not.toContain(name);
  await expectSandboxError(() => Volume.inspect(name), SandboxError, /no volume named/, /Volume\.create/);
  await expectSandboxError(() => Volume.remove(name), SandboxError, /no volume named/);
});

test('bad names and sizes are refused with what to do, and nothing is made', async () => {
  const before = (await Volume.list()).map((v) => v.name);
  for (const bad of ['', '..', '.hidden', 'a/b', '../escape', 'x'.repeat(65), 'sp ace', 'nul\0x', '-dash']) {
    await expectSandboxError(() => Volume.create(bad), SandboxError, bad === '' ? /non-empty string/ : /not allowed|non-empty/);
  }
  for (const size of [0, -1, 1.5, 2 ** 40, Number.NaN]) {
    await expectSandboxError(() => Volume.create(fresh(), { sizeMb: size }), SandboxError, /whole number of MiB/);
  }
  await expectSandboxError(() => Volume.create(fresh(), { sizeMb: '10' }), SandboxError, /whole number of MiB/);
  await expectSandboxError(() => Volume.create(fresh(), { size: 10 }), SandboxError, /unknown Volume.create\(\) option `size`/);
  await expectSandboxError(() => Volume.remove('../..'), SandboxError, /not allowed/);
  expect((await Volume.list()).map((v) => v.name)).toEqual(before);
  expect(() => new Volume()).toThrow(TypeError);
});

test('what a box writes in a volume outlives its Sandbox: the next Sandbox, and the host, see it', async () => {
  const name = fresh();
  const v = await Volume.create(name);
  const a = await open({ volumes: { [name]: '/data' } });
  try {
    const r = await sh(a, 'mkdir -p /data/sub && echo kept > /data/sub/f && stat -c %u /data/sub/f');
    expect(r.exitCode).toBe(0);
  } finally {
    await a.close();
  }
  // On the host: the caller's file.
  expect(fs.readFileSync(path.join(v.path, 'sub/f'), 'utf8')).toBe('kept\n');
  expect(fs.statSync(path.join(v.path, 'sub/f')).uid).toBe(process.getuid());
  const b = await open({ volumes: { [name]: { path: '/elsewhere' } } });
  try {
    expect((await sh(b, 'cat /elsewhere/sub/f')).stdout).toBe('kept\n');
    // A kernel's box mounts it too.
    const k = await b.kernel();
    const c = await k.runCode('print(open("/elsewhere/sub/f").read().strip())');
    expect(c.stdout).toBe('kept\n');
    await k.close();
  } finally {
    await b.close();
  }
  expect((await Volume.inspect(name)).usedBytes).toBeGreaterThan(0);
});

test('one writer at a time: a second writer is refused at open(), readers are not, and see its writes; the writer\'s close() frees it', async () => {
  const name = fresh();
  await Volume.create(name);
  const writer = await open({ volumes: { [name]: '/data' } });
  let reader;
  try {
    expect((await Volume.inspect(name)).inUse).toBe(true);
    await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ volumes: { [name]: '/data' } }), /mounted read-write by another Sandbox/, /readonly: true/, /shared: true/);
    await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ volumes: { [name]: { path: '/data', shared: true } } }), /only writer/);
    reader = await open({ volumes: { [name]: { path: '/ro', readonly: true } } });
    expect((await sh(writer, 'echo one > /data/f')).exitCode).toBe(0);
    expect((await sh(reader, 'cat /ro/f')).stdout).toBe('one\n');
    const w = await sh(reader, 'echo two > /ro/f; echo $?; mkdir /ro/d; touch /ro/g');
    expect(w.stderr).toMatch(/Read-only file system/);
    expect(w.exitCode).not.toBe(0);
    expect((await sh(writer, 'cat /data/f; ls /data')).stdout).toBe('one\nf\n');
  } finally {
    await writer.close();
  }
  // Freed by close(): the next writer opens.
  const next = await open({ volumes: { [name]: '/data' } });
  expect((await sh(next, 'echo three >> /data/f; cat /data/f')).stdout).toBe('one\nthree\n');
  await next.close();
  await reader.close();
  expect((await Volume.inspect(name)).inUse).toBe(false);
});

test('shared writers write together; a writer alone is refused beside them', async () => {
  const name = fresh();
  await Volume.create(name);
  const shared = { volumes: { [name]: { path: '/data', shared: true } } };
  const a = await open(shared);
  const b = await open(shared);
  try {
    await sh(a, 'echo a > /data/a');
    await sh(b, 'echo b > /data/b');
    expect((await sh(a, 'cat /data/a /data/b')).stdout).toBe('a\nb\n');
    await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ volumes: { [name]: '/data' } }), /mounted read-write by another Sandbox/);
  } finally {
    await a.close();
    await b.close();
  }
});

test('remove waits for close(): refused while a Sandbox has the volume, done after, and the volume gone for the next open()', async () => {
  const name = fresh();
  const v = await Volume.create(name);
  const sb = await open({ volumes: { [name]: { path: '/data', readonly: true } } });
  try {
    await expectSandboxError(() => Volume.remove(name), SandboxError, /mounted by a Sandbox/, /close it first/);
    expect(fs.existsSync(v.path)).toBe(true);
    expect((await sh(sb, 'ls -d /data')).exitCode).toBe(0);
  } finally {
    await sb.close();
  }
  await Volume.remove(name);
  await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ volumes: { [name]: '/data' } }), /no volume named/, /Volume\.create/);
});

test('the size cap: the call that crosses it completes, later calls and cells get workspace_full naming the volume; freeing space lets them run', async () => {
  const name = fresh();
  const v = await Volume.create(name, { sizeMb: 1 });
  const sb = await open({ volumes: { [name]: '/data' } });
  try {
    const cross = await sh(sb, 'head -c 2000000 /dev/urandom > /data/big');
    expect(cross.exitCode).toBe(0);
    const refused = await sh(sb, 'echo ran > /data/after');
    expect(refused.fault).toMatchObject({ type: 'workspace_full' });
    expect(refused.fault.message).toContain(`the volume "${name}"`);
    expect(refused.fault.message).toContain(v.path);
    expect(fs.existsSync(path.join(v.path, 'after'))).toBe(false);
    const k = await sb.kernel();
    try {
      const cell = await k.runCode('print("ran")');
      expect(cell.fault).toMatchObject({ type: 'workspace_full' });
      expect(cell.stdout).toBe('');
      // Bytes hidden where a workspace keeps kern's own `.deps` count too: a volume has none.
      fs.rmSync(path.join(v.path, 'big'));
      expect((await k.runCode('print("ran")')).stdout).toBe('ran\n');
      await k.runCode('import os\nos.makedirs("/data/.deps", exist_ok=True)\nopen("/data/.deps/x", "wb").write(os.urandom(2000000))');
      expect((await k.runCode('print("ran")')).fault).toMatchObject({ type: 'workspace_full' });
    } finally {
      await k.close();
    }
    // A reader is not held to the writer's cap.
    const reader = await open({ volumes: { [name]: { path: '/ro', readonly: true } } });
    expect((await sh(reader, 'echo read')).stdout).toBe('read\n');
    await reader.close();
  } finally {
    await sb.close();
  }
});

test('create({ from }): a copy of one moment, independent after; refused while a Sandbox writes the source', async () => {
  const src = fresh();
  const v = await Volume.create(src);
  const w = await open({ volumes: { [src]: '/data' } });
  await sh(w, 'mkdir -p /data/d && echo one > /data/d/f && ln -s /etc/hostname /data/link && mkfifo /data/fifo');
  await expectSandboxError(() => Volume.create(fresh(), { from: src }), SandboxError, /mounted read-write by a Sandbox/, /close the Sandboxes that write it/);
  await w.close();
  // A reader may stay.
  const r = await open({ volumes: { [src]: { path: '/ro', readonly: true } } });
  const name = fresh();
  const copy = await Volume.create(name, { from: src, sizeMb: 16 });
  await r.close();
  expect(copy).toMatchObject({ name, sizeMb: 16, inUse: false });
  expect(fs.readFileSync(path.join(copy.path, 'd/f'), 'utf8')).toBe('one\n');
  // The link as a link (never followed), the FIFO left out.
  expect(fs.readlinkSync(path.join(copy.path, 'link'))).toBe('/etc/hostname');
  expect(fs.existsSync(path.join(copy.path, 'fifo'))).toBe(false);
  // Independent: a write in the copy is not in the source.
  const c = await open({ volumes: { [name]: '/data' } });
  await sh(c, 'echo two > /data/d/f && echo new > /data/n');
  await c.close();
  expect(fs.readFileSync(path.join(v.path, 'd/f'), 'utf8')).toBe('one\n');
  expect(fs.existsSync(path.join(v.path, 'n'))).toBe(false);
  await expectSandboxError(() => Volume.create(fresh(), { from: 'nosuch' }), SandboxError, /no volume named "nosuch"/);
  await expectSandboxError(() => Volume.create(name, { from: src }), SandboxError, /already exists/);
  await expectSandboxError(() => Volume.create(fresh(), { from: 5 }), SandboxError, /takes the name of the volume to copy/);
});

test('a volume still being made or removed is never swept as left over, however old; what a dead process left is', async () => {
  fs.mkdirSync(store, { recursive: true });
  const making = path.join(store, `.new-${prefix}m-x`);
  const left = path.join(store, `.gone-${prefix}g-x`);
  for (const d of [making, left]) {
    fs.mkdirSync(d, { recursive: true });
    fs.writeFileSync(path.join(d, 'use.lock'), '');
  }
  // A maker at work holds its use.lock (here flock(1), as create() does).
  // -o: only flock itself holds the lock (its `sleep` doesn't), so killing it frees the lock.
  const holder = spawn('flock', ['-o', '-x', path.join(making, 'use.lock'), 'sleep', '120'], { stdio: 'ignore', detached: true });
  try {
    const held = () => spawnSync('flock', ['-n', '-x', path.join(making, 'use.lock'), 'true']).status !== 0;
    for (let i = 0; i < 100 && !held(); i++) await new Promise((r) => setTimeout(r, 50));
    expect(held()).toBe(true);
    // Both two hours old: past the age a sweep looks at.
    for (const d of [making, left]) spawnSync('touch', ['-d', '2 hours ago', d]);
    await Volume.list();
    expect({ making: fs.existsSync(making), left: fs.existsSync(left) }).toEqual({ making: true, left: false });
  } finally {
    process.kill(-holder.pid, 'SIGKILL');
  }
  await new Promise((r) => (holder.exitCode !== null || holder.signalCode !== null ? r() : holder.once('exit', r)));
  spawnSync('touch', ['-d', '2 hours ago', making]);
  await Volume.list();
  expect(fs.existsSync(making)).toBe(false);
});

test('bad `volumes` options are refused at open(), before any box, with what to do', async () => {
  const name = fresh();
  await Volume.create(name);
  const ws = makeTempDir('kern-vols-ws-');
  const cases = [
    [{ volumes: [name] }, SandboxError, /must be an object/],
    [{ volumes: { [name]: 5 } }, SandboxError, /must be a box path/],
    [{ volumes: { [name]: { readonly: true } } }, SandboxError, /must be a box path/],
    [{ volumes: { [name]: { path: '/d', mode: 'rw' } } }, SandboxError, /unknown key `mode`/],
    [{ volumes: { [name]: { path: '/d', readonly: 'yes' } } }, SandboxError, /must be a boolean/],
    [{ volumes: { [name]: { path: '/d', readonly: true, shared: true } } }, SandboxError, /both readonly and shared/],
    [{ volumes: { '../x': '/d' } }, SandboxError, /not allowed/],
    [{ volumes: { [name]: 'relative' } }, MountRefused, /relative or escapes/],
    [{ volumes: { [name]: '/proc/x' } }, MountRefused, /which the box mounts itself/],
    [{ volumes: { [name]: '/workspace/sub' } }, MountRefused, /over or inside the workspace/],
    [{ volumes: { [name]: '/tmp' }, tmpfs: { '/tmp': '8m' } }, SandboxError, /overlap/],
    [{ mounts: { [ws]: '/data' }, volumes: { [name]: '/data/sub' } }, MountRefused, /another mount or volume/],
    [{ volumes: { [name]: '/data' }, persist: true, name: 'volp', workspace: ws }, SandboxError, /`persist` and `volumes` can't be combined/],
    [{ volumes: { [name]: '/data' }, zygote: true }, SandboxError, /writable volume/, /readonly: true/],
    [{ volumes: { nosuch: '/data' } }, SandboxError, /no volume named "nosuch"/],
  ];
  for (const [o, cls, ...patterns] of cases) {
    await expectRefusedBeforeAnyBox(Sandbox, cls, opts(o), ...patterns);
  }
  // Nothing held after a refusal: the volume is free.
  expect((await Volume.inspect(name)).inUse).toBe(false);
  // Read-only with a zygote is fine.
  const z = await open({ volumes: { [name]: { path: '/data', readonly: true } }, zygote: true });
  expect((await z.runCode('import os; print(os.path.isdir("/data"))')).stdout).toBe('True\n');
  await z.close();
  fs.rmSync(ws, { recursive: true, force: true });
});

test('fork(): copies mount the same shared volume; a volume written alone can\'t be forked', async () => {
  const name = fresh();
  await Volume.create(name);
  const alone = await open({ volumes: { [name]: '/data' } });
  try {
    await expectSandboxError(() => alone.fork(), SandboxError, /only writer/, /shared: true/);
  } finally {
    await alone.close();
  }
  const sb = await open({ volumes: { [name]: { path: '/data', shared: true } } });
  try {
    await sh(sb, 'echo parent > /data/p');
    const [copy] = await sb.fork();
    try {
      expect((await sh(copy, 'cat /data/p; echo copy > /data/c')).stdout).toBe('parent\n');
      expect((await sh(sb, 'cat /data/c')).stdout).toBe('copy\n');
    } finally {
      await copy.close();
    }
  } finally {
    await sb.close();
  }
});

test('kern volume create|ls|inspect|rm and kern run --volume', async () => {
  const name = fresh();
  const kern = (...args) => spawnSync(KERN_BIN, args, { encoding: 'utf8', timeout: 60_000 });
  expect(kern('volume', 'create', name, '--size', '8')).toMatchObject({ status: 0, stdout: `${name}\n` });
  expect(kern('volume', 'ls').stdout).toMatch(new RegExp(`^${name}\\s+8 MiB`, 'm'));
  const listed = JSON.parse(kern('volume', 'ls', '--json').stdout);
  expect(listed.find((v) => v.name === name)).toMatchObject({ sizeMb: 8, inUse: false });
  const w = kern('run', '--image', opts().image, '-v', `${name}:/data`, '--', 'sh', '-c', 'echo from-cli > /data/f');
  expect(w.status).toBe(0);
  const r = kern('run', '--image', opts().image, '-v', `${name}:/v:ro`, '--', 'sh', '-c', 'cat /v/f; touch /v/g');
  expect(r.stdout).toBe('from-cli\n');
  expect(r.stderr).toMatch(/Read-only file system/);
  expect(JSON.parse(kern('volume', 'inspect', name).stdout)).toMatchObject({ name, sizeMb: 8 });
  // The same volume, as a Sandbox sees it.
  const sb = await open({ volumes: { [name]: '/data' } });
  expect((await sh(sb, 'cat /data/f')).stdout).toBe('from-cli\n');
  // Held by the Sandbox: kern's writer and kern's rm are refused.
  const busy = kern('run', '--image', opts().image, '-v', `${name}:/data`, '--', 'true');
  expect(busy.status).toBe(125);
  expect(busy.stderr).toMatch(/mounted read-write by another Sandbox/);
  expect(kern('volume', 'rm', name)).toMatchObject({ status: 1 });
  await sb.close();
  for (const bad of [`${name}`, `${name}:/d:rx`, `${name}:rel`]) {
    const b = kern('run', '--image', opts().image, '-v', bad, '--', 'true');
    expect(b.status).toBe(125);
    expect(b.stderr).toMatch(/--volume/);
  }
  expect(kern('volume', 'rm', name)).toMatchObject({ status: 0, stdout: `${name}\n` });
  expect(kern('volume', 'inspect', name)).toMatchObject({ status: 1 });
  expect(fs.readdirSync(store)).not.toContain(name);
  // KERN_VOLUMES moves the store; a relative one is refused.
  const other = makeTempDir('kern-vols-');
  try {
    const at = (v, ...args) => spawnSync(KERN_BIN, args, { env: { ...process.env, KERN_VOLUMES: v }, encoding: 'utf8' });
    expect(at(other, 'volume', 'create', name)).toMatchObject({ status: 0 });
    expect(fs.statSync(path.join(other, name, 'data')).isDirectory()).toBe(true);
    expect(at('rel/dir', 'volume', 'ls')).toMatchObject({ status: 1, stderr: expect.stringMatching(/KERN_VOLUMES=rel\/dir is relative/) });
  } finally {
    fs.rmSync(other, { recursive: true, force: true });
  }
});
