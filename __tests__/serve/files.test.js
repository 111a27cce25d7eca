// rootless: yes
'use strict';
// `kern serve`'s files through the real `e2b` SDK: write and read (text, binary, streamed,
// several at once), list with depth, stat, exists, make a directory, rename, remove; files in
// the home land in the sandbox's workspace on the host, /tmp outlives a command, the image stays
// read-only, and no path leads out of the box.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { requireRootfs, uniqueName } = require('../helpers.js');
const { startServe, sdk } = require('./serve-helpers.js');

let srv;
let id;
let home;
let homeDir;
beforeAll(async () => {
  requireRootfs();
  srv = await startServe();
  id = await sdk(`return (await Sandbox.create('base', { timeoutMs: 600000 })).sandboxId;`);
  home = srv.serve.sandboxes.get(id).home;
  homeDir = path.join(srv.stateDir, id, 'home');
});
afterAll(() => srv && srv.close());

const inSandbox = (body) => sdk(`const sb = await Sandbox.connect('${id}');\n${body}`);

test('write then read text and bytes; a relative path is under the home; the host workspace holds them', async () => {
  const bytes = crypto.randomBytes(70_000);
  const r = await inSandbox(`
    const info = await sb.files.write('notes/a.txt', 'héllo\\n');
    await sb.files.write('${home}/bin.dat', new Uint8Array(Buffer.from('${bytes.toString('base64')}', 'base64')).buffer);
    const back = await sb.files.read('${home}/bin.dat', { format: 'bytes' });
    const seen = await sb.commands.run('cat notes/a.txt; sha256sum bin.dat');
    return { info, text: await sb.files.read('notes/a.txt'), back: Buffer.from(back).toString('base64'), seen: seen.stdout };`);
  expect(r.info).toMatchObject({ name: 'a.txt', path: `${home}/notes/a.txt`, type: 'file' });
  expect(r.text).toBe('héllo\n');
  expect(Buffer.from(r.back, 'base64').equals(bytes)).toBe(true);
  expect(r.seen).toContain('héllo\n');
  expect(r.seen).toContain(crypto.createHash('sha256').update(bytes).digest('hex'));
  expect(fs.readFileSync(path.join(homeDir, 'notes/a.txt'), 'utf8')).toBe('héllo\n');
  expect(fs.readFileSync(path.join(homeDir, 'bin.dat')).equals(bytes)).toBe(true);
});

test('several files in one write, and a streamed upload of 8 MiB', async () => {
  const r = await inSandbox(`
    const many = await sb.files.write([{ path: 'm/one.txt', data: '1' }, { path: 'm/two.txt', data: '2' }]);
    const big = new Uint8Array(8 << 20).fill(120);
    const stream = new ReadableStream({ start(c) { for (let i = 0; i < 8; i++) c.enqueue(big.subarray(i << 20, (i + 1) << 20)); c.close(); } });
    await sb.files.write('big.bin', stream);
    const size = (await sb.commands.run('stat -c %s big.bin')).stdout.trim();
    return { many: many.map((f) => f.path), size };`);
  expect(r.many).toEqual([`${home}/m/one.txt`, `${home}/m/two.txt`]);
  expect(r.size).toBe(String(8 << 20));
  expect(fs.statSync(path.join(homeDir, 'big.bin')).size).toBe(8 << 20);
});

test('/tmp outlives a command, as in E2B, and lives on the host only under the sandbox', async () => {
  const word = uniqueName('tmp');
  const r = await inSandbox(`
    await sb.commands.run('echo ${word} > /tmp/kept.txt');
    await sb.files.write('/tmp/up.txt', 'up');
    const a = await sb.files.read('/tmp/kept.txt');
    const b = (await sb.commands.run('cat /tmp/up.txt')).stdout;
    return { a, b };`);
  expect(r).toEqual({ a: `${word}\n`, b: 'up' });
  expect(fs.readFileSync(path.join(srv.stateDir, id, 'tmp', 'kept.txt'), 'utf8')).toBe(`${word}\n`);
});

test('list with depth, stat, exists, makeDir, rename, remove', async () => {
  const r = await inSandbox(`
    await sb.files.write('tree/a/b/c.txt', 'c');
    const one = (await sb.files.list('tree')).map((e) => [e.name, e.type]);
    const three = (await sb.files.list('tree', { depth: 3 })).map((e) => e.path);
    const st = await sb.files.getInfo('tree/a/b/c.txt');
    const made = [await sb.files.makeDir('tree/new/deep'), await sb.files.makeDir('tree/new/deep')];
    const moved = await sb.files.rename('tree/a/b/c.txt', 'tree/moved/c2.txt');
    const ex = [await sb.files.exists('tree/a/b/c.txt'), await sb.files.exists('tree/moved/c2.txt')];
    await sb.files.remove('tree/a');
    const after = (await sb.files.list('tree')).map((e) => e.name).sort();
    let missing;
    try { await sb.files.getInfo('tree/none'); } catch (e) { missing = e.constructor.name; }
    let notDir;
    try { await sb.files.list('tree/moved/c2.txt'); } catch (e) { notDir = e.constructor.name; }
    return { one, three, st: { name: st.name, type: st.type, size: st.size, path: st.path, permissions: st.permissions, mtime: st.modifiedTime }, made, moved: moved.path, ex, after, missing, notDir };`);
  expect(r.one).toEqual([['a', 'dir']]);
  expect(r.three).toEqual([`${home}/tree/a`, `${home}/tree/a/b`, `${home}/tree/a/b/c.txt`]);
  expect(r.st).toMatchObject({ name: 'c.txt', type: 'file', size: 1, path: `${home}/tree/a/b/c.txt`, permissions: expect.stringMatching(/^-rw/) });
  expect(Math.abs(new Date(r.st.mtime).getTime() - Date.now())).toBeLessThan(600_000);
  expect(r.made).toEqual([true, false]);
  expect(r.moved).toBe(`${home}/tree/moved/c2.txt`);
  expect(r.ex).toEqual([false, true]);
  expect(r.after).toEqual(['moved', 'new']);
  expect(r.missing).toBe('FileNotFoundError');
  expect(r.notDir).toBe('InvalidArgumentError');
  expect(fs.existsSync(path.join(homeDir, 'tree/moved/c2.txt'))).toBe(true);
  expect(fs.existsSync(path.join(homeDir, 'tree/a'))).toBe(false);
});

test('the image reads through the files API but never changes; a missing file is NotFound', async () => {
  const r = await inSandbox(`
    const os = await sb.files.read('/etc/os-release');
    let write;
    try { await sb.files.write('/etc/kern-written', 'x'); write = 'written'; } catch (e) { write = e.constructor.name + ': ' + e.message; }
    let rm;
    try { await sb.files.remove('/etc/os-release'); rm = 'removed'; } catch (e) { rm = e.constructor.name; }
    let missing;
    try { await sb.files.read('/etc/no-such-file'); } catch (e) { missing = e.constructor.name; }
    return { os: os.slice(0, 40), write, rm, still: await sb.files.exists('/etc/os-release'), missing };`);
  expect(r.os).toMatch(/Debian|NAME=/);
  expect(r.write).toMatch(/Read-only file system|Permission denied/);
  expect(r.rm).not.toBe('removed');
  expect(r.still).toBe(true);
  expect(r.missing).toBe('FileNotFoundError');
});

test('a symlink the box plants in its home leads nowhere on the host: reads and writes stay in the box', async () => {
  const canaryDir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'kern-serve-canary-'));
  const canary = path.join(canaryDir, 'secret.txt');
  fs.writeFileSync(canary, 'host secret');
  try {
    const r = await inSandbox(`
      await sb.commands.run('ln -sfn ${canaryDir} escape; ln -sfn ${canary} escape-file');
      const out = {};
      try { out.read = await sb.files.read('escape-file'); } catch (e) { out.read = e.constructor.name; }
      try { await sb.files.write('escape/planted.txt', 'x'); out.write = 'ok'; } catch (e) { out.write = e.constructor.name; }
      try { await sb.files.write('escape-file', 'overwritten'); out.over = 'ok'; } catch (e) { out.over = e.constructor.name; }
      try { out.list = (await sb.files.list('escape')).map((e) => e.name); } catch (e) { out.list = e.constructor.name; }
      return out;`);
    // The box has no such host path: whatever the SDK was told, the host file is untouched.
    expect(r.read).not.toBe('host secret');
    expect(JSON.stringify(r.list)).not.toContain('secret.txt');
    expect(fs.readFileSync(canary, 'utf8')).toBe('host secret');
    expect(fs.readdirSync(canaryDir)).toEqual(['secret.txt']);
  } finally {
    fs.rmSync(canaryDir, { recursive: true, force: true });
  }
});

test('a bad path is InvalidArgument before any box; the home and /tmp themselves are not removed', async () => {
  const r = await inSandbox(`
    const out = {};
    for (const p of ['${home}', '/tmp', '/']) { try { await sb.files.remove(p); out[p] = 'removed'; } catch (e) { out[p] = e.constructor.name; } }
    try { await sb.files.read('a\\u0000b'); } catch (e) { out.nul = e.constructor.name; }
    return out;`);
  expect(r).toEqual({ [home]: 'InvalidArgumentError', '/tmp': 'InvalidArgumentError', '/': 'InvalidArgumentError', nul: 'InvalidArgumentError' });
  expect(fs.existsSync(homeDir)).toBe(true);
});

test('watchDir: create, write, remove in the home, recursively; a symlink the box plants is never followed', async () => {
  const canaryDir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'kern-serve-watch-canary-'));
  try {
    const r = await inSandbox(`
      await sb.commands.run('mkdir -p w/sub && ln -sfn ${canaryDir} w/out');
      const events = [];
      const h = await sb.files.watchDir('w', (e) => events.push([e.type, e.name]), { recursive: true, timeoutMs: 0 });
      await sb.commands.run('echo one > w/a.txt; echo two > w/sub/b.txt; mkdir w/new; echo three > w/new/c.txt; rm w/a.txt; : > w/quick; rm w/quick; : > w/last');
      for (let i = 0; i < 50 && !events.some((e) => e[1] === 'last'); i++) await new Promise((res) => setTimeout(res, 100));
      await h.stop();
      const out = { events };
      for (const p of ['w/out', '/etc', 'w/none']) {
        try { const x = await sb.files.watchDir(p, () => {}); await x.stop(); out[p] = 'watched'; } catch (e) { out[p] = e.constructor.name + ': ' + e.message; }
      }
      return out;`);
    if (!r.events) throw new Error(JSON.stringify(r));
    const seen = (type, name) => r.events.some(([t, n]) => t === type && n === name);
    expect(seen('create', 'a.txt')).toBe(true);
    expect(seen('write', 'a.txt')).toBe(true);
    expect(seen('create', 'sub/b.txt')).toBe(true);
    expect(seen('create', 'new')).toBe(true);
    expect(seen('create', 'new/c.txt')).toBe(true);
    expect(seen('remove', 'a.txt')).toBe(true);
    // Made and removed before its first event is read (node's fs.watch says 'rename' for both):
    // still one create, then one remove.
    expect(r.events.filter(([, n]) => n === 'quick').map(([t]) => t).filter((t) => t !== 'write')).toEqual(['create', 'remove']);
    expect(r.events.every(([, n]) => !n.startsWith('out/'))).toBe(true);
    expect(r['w/out']).toMatch(/InvalidArgument.*not a directory \(a symlink is not followed\)/);
    expect(r['/etc']).toMatch(/InvalidArgument.*watches directories under \/home\/user and \/tmp/);
    expect(r['w/none']).toMatch(/NotFound/);
    expect(fs.readdirSync(canaryDir)).toEqual([]);
  } finally {
    fs.rmSync(canaryDir, { recursive: true, force: true });
  }
});
