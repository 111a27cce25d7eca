// rootless: yes
'use strict';
// `kern serve`'s volumes through the real `e2b` SDK: Volume.create/list/getInfo/connect/destroy,
// the content API on a Volume instance (write, read, list with depth, makeDir, getInfo, exists,
// updateMetadata, remove), a sandbox created with volumeMounts that sees and writes what the
// content API wrote, two sandboxes sharing one volume, one key's volumes out of another key's
// reach, and the volume's token required for its content.

const fs = require('fs');
const path = require('path');
const { requireRootfs } = require('../helpers.js');
const { startServe, sdk } = require('./serve-helpers.js');
const { Volume: KernVolume } = require('../..');

let srv;
beforeAll(async () => {
  requireRootfs();
  srv = await startServe();
});
afterAll(async () => {
  if (srv) await srv.close();
  // What a failed test left behind.
  for (const v of await KernVolume.list()) if (v.name.includes(`-kvs${process.pid}`)) await KernVolume.remove(v.name).catch(() => {});
});

const volEnv = () => ({ E2B_VOLUME_API_URL: srv.url });
let n = 0;
const fresh = () => `kvs${process.pid}x${++n}`;

test('create, list, getInfo, connect and destroy: a kern volume of this key, named after the E2B one', async () => {
  const name = fresh();
  const r = await sdk(`
    const { Volume } = e2b;
    const v = await Volume.create('${name}');
    const listed = await Volume.list();
    const info = await Volume.getInfo(v.volumeId);
    const again = await Volume.connect(v.volumeId);
    const dup = await Volume.create('${name}').then(() => 'made twice', (e) => e.constructor.name + ': ' + e.message);
    return { id: v.volumeId, name: v.name, token: v.token, listed, info, again: again.name, dup };`, volEnv());
  expect(r.name).toBe(name);
  expect(r.token).toMatch(/^[0-9a-f]{64}$/);
  expect(r.listed).toContainEqual({ volumeId: r.id, name });
  expect(r.info).toMatchObject({ volumeId: r.id, name, token: r.token });
  expect(r.again).toBe(name);
  expect(r.dup).toMatch(/already exists/);
  // On the host: a kern volume, as Volume.list() and `kern volume ls` show it.
  const kern = await KernVolume.inspect(r.id);
  expect(kern.path.endsWith(path.join(r.id, 'data'))).toBe(true);
  const gone = await sdk(`
    const { Volume } = e2b;
    const first = await Volume.destroy('${r.id}');
    const second = await Volume.destroy('${r.id}');
    const info = await Volume.getInfo('${r.id}').then(() => 'found', (e) => e.constructor.name);
    return { first, second, info };`, volEnv());
  expect(gone).toEqual({ first: true, second: false, info: 'VolumeNotFoundError' });
  expect((await KernVolume.list()).map((v) => v.name)).not.toContain(r.id);
});

test('the content API: write, read, list with depth, makeDir, getInfo, exists, updateMetadata, remove', async () => {
  const name = fresh();
  const r = await sdk(`
    const { Volume } = e2b;
    const v = await Volume.create('${name}');
    const wrote = await v.writeFile('/notes/a.txt', 'héllo\\n', { force: true });
    const bin = new Uint8Array(70000).map((_, i) => i % 251);
    await v.writeFile('/bin.dat', bin.buffer);
    const back = await v.readFile('/bin.dat', { format: 'bytes' });
    const dir = await v.makeDir('/deep/er', { force: true });
    const dupDir = await v.makeDir('/deep').then(() => 'made', (e) => e.constructor.name + ': ' + e.message);
    const top = (await v.list('/')).map((e) => e.path).sort();
    const all = (await v.list('/', { depth: 3 })).map((e) => e.path).sort();
    const info = await v.getInfo('/notes/a.txt');
    const meta = await v.updateMetadata('/notes/a.txt', { mode: 0o600 });
    const ex = [await v.exists('/notes/a.txt'), await v.exists('/nope')];
    await v.remove('/deep');
    const missing = await v.readFile('/deep/er/x').then(() => 'read', (e) => e.constructor.name);
    const climb = await v.readFile('/../../etc/passwd').then(() => 'read', (e) => e.constructor.name + ': ' + e.message);
    const after = (await v.list('/')).map((e) => e.path).sort();
    return { id: v.volumeId, wrote, text: await v.readFile('/notes/a.txt'), same: Buffer.from(back).equals(Buffer.from(bin)),
      dir, dupDir, top, all, info, mode: meta.mode & 0o777, ex, missing, climb, after };`, volEnv());
  expect(r.wrote).toMatchObject({ name: 'a.txt', path: '/notes/a.txt', type: 'file', size: 7 });
  expect(r.text).toBe('héllo\n');
  expect(r.same).toBe(true);
  expect(r.dir).toMatchObject({ path: '/deep/er', type: 'directory' });
  expect(r.dupDir).toMatch(/already exists/);
  expect(r.top).toEqual(['/bin.dat', '/deep', '/notes']);
  expect(r.all).toEqual(['/bin.dat', '/deep', '/deep/er', '/notes', '/notes/a.txt']);
  expect(r.info).toMatchObject({ name: 'a.txt', type: 'file', size: 7 });
  expect(r.mode).toBe(0o600);
  expect(r.ex).toEqual([true, false]);
  expect(r.missing).toBe('VolumePathNotFoundError');
  expect(r.climb).toMatch(/climbs out of the volume/);
  expect(r.after).toEqual(['/bin.dat', '/notes']);
  // The host holds the same files.
  const host = (await KernVolume.inspect(r.id)).path;
  expect(fs.readFileSync(path.join(host, 'notes/a.txt'), 'utf8')).toBe('héllo\n');
  expect(fs.statSync(path.join(host, 'notes/a.txt')).mode & 0o777).toBe(0o600);
  await KernVolume.remove(r.id);
});

test('volumeMounts: two sandboxes share a volume the content API filled; what they write is there after they end', async () => {
  const name = fresh();
  const r = await sdk(`
    const { Volume } = e2b;
    const v = await Volume.create('${name}');
    await v.writeFile('/in.txt', 'from the api');
    const a = await Sandbox.create('base', { volumeMounts: { '/mnt/data': '${name}' }, timeoutMs: 120000 });
    const b = await Sandbox.create('base', { volumeMounts: { '/mnt/data': v }, timeoutMs: 120000 });
    const info = await Sandbox.getInfo(a.sandboxId);
    const seen = (await a.commands.run('cat /mnt/data/in.txt')).stdout;
    await a.commands.run('echo from-a > /mnt/data/a.txt');
    await b.commands.run('echo from-b > /mnt/data/b.txt');
    const both = (await a.commands.run('cat /mnt/data/a.txt /mnt/data/b.txt')).stdout;
    const busy = await Volume.destroy(v.volumeId).then(() => 'destroyed', (e) => e.message);
    await a.kill();
    await b.kill();
    const later = await v.readFile('/b.txt');
    const missing = await Sandbox.create('base', { volumeMounts: { '/mnt/x': 'nosuch' } }).then(() => 'created', (e) => e.message);
    return { id: v.volumeId, seen, both, busy, later, missing, mounts: info.volumeMounts };`, volEnv());
  expect(r.mounts).toEqual([{ name, path: '/mnt/data' }]);
  expect(r.seen).toBe('from the api');
  expect(r.both).toBe('from-a\nfrom-b\n');
  expect(r.busy).toMatch(/mounted by a running sandbox/);
  expect(r.later).toBe('from-b\n');
  expect(r.missing).toMatch(/volume nosuch not found/);
  await KernVolume.remove(r.id);
});

test('one key\'s volumes are out of another key\'s reach, and a volume\'s content needs its own token', async () => {
  const name = fresh();
  const mine = await sdk(`const v = await e2b.Volume.create('${name}'); return { id: v.volumeId, token: v.token };`, volEnv());
  const other = await sdk(`
    const { Volume } = e2b;
    const listed = (await Volume.list()).map((v) => v.volumeId);
    const info = await Volume.getInfo('${mine.id}').then(() => 'found', (e) => e.constructor.name);
    const destroyed = await Volume.destroy('${mine.id}');
    const mount = await Sandbox.create('base', { volumeMounts: { '/mnt/x': '${name}' } }).then(async (s) => { await s.kill(); return 'mounted'; }, (e) => e.message);
    const forged = new Volume('${mine.id}', '${name}', 'f'.repeat(64));
    const read = await forged.list('/').then(() => 'listed', (e) => e.constructor.name + ': ' + e.message);
    return { listed, info, destroyed, mount, read };`, { ...volEnv(), E2B_API_KEY: 'kern-test-key-fedcba9876543210' });
  expect(other.listed).not.toContain(mine.id);
  expect(other.info).toBe('VolumeNotFoundError');
  expect(other.destroyed).toBe(false);
  expect(other.mount).toMatch(/not found/);
  expect(other.read).toMatch(/wrong volume token/);
  // The real token works; the volume is still there.
  const ok = await sdk(`const v = new e2b.Volume('${mine.id}', '${name}', '${mine.token}'); return (await v.list('/')).length;`, volEnv());
  expect(ok).toBe(0);
  await KernVolume.remove(mine.id);
});
