'use strict';
// E2B's volumes on kern's named volumes (js/volume.js): the control routes (`/volumes`, with an
// API key), the content routes the SDK's `Volume` instance calls (`/volumecontent/{id}/…`, with
// the volume's own token; point E2B_VOLUME_API_URL at kern serve), and the `volumeMounts` of a
// sandbox. A key sees only its own volumes: each is the kern volume `e2b-<keyId>-<name>`, which
// is also its volumeID. E2B's volumes are written by many sandboxes at once, so every mount here
// is `shared`. The content routes run each operation as a command in a box of its own that
// mounts the volume (as envd's filesystem service does), so the host never follows a path
// something in a box made.

const crypto = require('crypto');
const { ApiError } = require('./errors.js');
const { Sandbox, Volume } = require('../index.js');

/** Where a content box sees the volume. */
const AT = '/vol';
/** One entry per NUL-terminated record: type, size, mode, uid, gid, atime, mtime, ctime, link, path. */
const PRINTF = '%y\\0%s\\0%m\\0%U\\0%G\\0%A@\\0%T@\\0%C@\\0%l\\0%p\\0';
const FIELDS = 10;
const TYPES = { f: 'file', d: 'directory', l: 'symlink' };
/** The most one content request's body may hold (it is given whole to the box's stdin). */
const MAX_WRITE = 512 << 20;

const kernName = (owner, name) => `e2b-${owner}-${name}`;

class Volumes {
  #secret = crypto.randomBytes(32);

  constructor(cfg) {
    this.cfg = cfg;
  }

  /** The token of volume `id` for this server's life (the SDK asks for it again on connect). */
  token(id) {
    return crypto.createHmac('sha256', this.#secret).update(id).digest('hex');
  }

  #withToken(info, owner) {
    const name = info.name.slice(`e2b-${owner}-`.length);
    return { volumeID: info.name, name, token: this.token(info.name) };
  }

  /** The kern volume `id` if it is `owner`'s, else a 404. */
  async #mine(id, owner) {
    if (typeof id !== 'string' || !id.startsWith(`e2b-${owner}-`)) throw new ApiError(404, `volume ${id} not found`);
    try {
      return await Volume.inspect(id);
    } catch (e) {
      if (e && e.code === 'ERR_INVALID_OPTION') throw new ApiError(404, `volume ${id} not found`);
      throw e;
    }
  }

  async create(owner, body) {
    const name = body && body.name;
    if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name) || kernName(owner, name).length > 64) {
      throw new ApiError(400, `a volume name is letters, digits, '_', '.' or '-', starting with a letter or digit, at most ${64 - kernName(owner, '').length} of them`);
    }
    try {
      return this.#withToken(await Volume.create(kernName(owner, name)), owner);
    } catch (e) {
      if (e && /already exists/.test(e.message)) throw new ApiError(409, `a volume named ${name} already exists`);
      throw e;
    }
  }

  async list(owner) {
    const mine = `e2b-${owner}-`;
    return (await Volume.list()).filter((v) => v.name.startsWith(mine)).map((v) => ({ volumeID: v.name, name: v.name.slice(mine.length) }));
  }

  async get(id, owner) {
    return this.#withToken(await this.#mine(id, owner), owner);
  }

  async remove(id, owner) {
    await this.#mine(id, owner);
    try {
      await Volume.remove(id);
    } catch (e) {
      if (e && /mounted by a Sandbox/.test(e.message)) throw new ApiError(409, `volume ${id} is mounted by a running sandbox; kill it first`);
      throw e;
    }
  }

  /** A sandbox's `volumeMounts` as the `volumes` option (each must be `owner`'s). */
  async mounts(owner, list) {
    if (!Array.isArray(list) || list.length === 0) return null;
    const out = {};
    for (const m of list) {
      if (!m || typeof m.name !== 'string' || typeof m.path !== 'string') throw new ApiError(400, 'each of volumeMounts is { name, path }');
      const id = kernName(owner, m.name);
      try {
        await Volume.inspect(id);
      } catch {
        throw new ApiError(400, `volume ${m.name} not found: create it first (Volume.create)`);
      }
      out[id] = { path: m.path, shared: true };
    }
    return out;
  }

  /** `/volumecontent/{id}/{dir|path|file}`: the volume's token checked, then one operation. */
  async content(ctx, req, res, url) {
    const m = /^\/volumecontent\/([^/]+)\/(dir|path|file)$/.exec(url.pathname.replace(/\/+$/, ''));
    if (!m) throw new ApiError(404, `no route ${req.method} ${url.pathname}`);
    const [, id, what] = m;
    const presented = (req.headers.authorization || '').replace(/^Bearer\s+/i, '');
    const expected = Buffer.from(this.token(id));
    const got = Buffer.from(presented);
    if (got.length !== expected.length || !crypto.timingSafeEqual(got, expected)) {
      throw new ApiError(401, 'a missing or wrong volume token (Authorization: Bearer <the token Volume.create or Volume.connect gave>)');
    }
    // The box's open() finds the volume (no walk of it first, as inspect() would make): one
    // that is gone or damaged is not found.
    const box = new Sandbox({ image: this.cfg.image, volumes: { [id]: { path: AT, shared: true } }, tmpfs: {}, trackFiles: false, pycCache: false });
    try {
      await box.open();
    } catch (e) {
      if (e && e.code === 'ERR_INVALID_OPTION' && /no volume named|is damaged/.test(e.message)) throw new ApiError(404, `volume ${id} not found`);
      throw e;
    }
    const q = url.searchParams;
    const route = `${req.method} ${what}`;
    try {
      const p = boxPath(q.get('path'));
      switch (route) {
        case 'GET dir': {
          const depth = q.has('depth') ? Number(q.get('depth')) : 1;
          if (!Number.isInteger(depth) || depth < 1) throw new ApiError(400, 'depth must be a whole number from 1');
          const out = await inBox(box, `[ -d "$1" ] || { [ -e "$1" ] && exit 20; exit 2; }; exec find "$1" -mindepth 1 -maxdepth "$2" -printf '${PRINTF}'`, [p, String(depth)]);
          ctx.sendJson(res, 200, entries(out));
          break;
        }
        case 'POST dir': {
          const mk = q.get('force') === 'true' ? 'mkdir -p -- "$1"' : 'mkdir -- "$1" 2>/dev/null || { [ -e "$1" ] && exit 17; exit 2; }';
          ctx.sendJson(res, 201, await change(box, p, mk, q));
          break;
        }
        case 'GET path':
          ctx.sendJson(res, 200, await stat(box, p));
          break;
        case 'PATCH path':
          ctx.sendJson(res, 200, await change(box, p, '{ [ -e "$1" ] || [ -L "$1" ]; } || exit 2', new Map(Object.entries(await ctx.readJson(req)))));
          break;
        case 'DELETE path':
          if (p === AT) throw new ApiError(400, 'the volume\'s root can\'t be removed; remove the volume instead');
          await inBox(box, '{ [ -e "$1" ] || [ -L "$1" ]; } || exit 2; rm -rf -- "$1"', [p]);
          res.writeHead(204).end();
          break;
        case 'GET file': {
          await inBox(box, '[ -f "$1" ] || { [ -e "$1" ] && exit 21; exit 2; }', [p]);
          res.writeHead(200, { 'content-type': 'application/octet-stream' });
          const proc = await box.spawn(['cat', '--', p], { cwd: '/', onStdout: (c) => res.write(c) });
          const r = await proc.wait();
          if (r.exitCode !== 0) res.destroy(new Error(r.stderr));
          else res.end();
          break;
        }
        case 'PUT file': {
          const data = await ctx.readBody(req, MAX_WRITE);
          const parent = q.get('force') === 'true' ? 'mkdir -p -- "$(dirname -- "$1")" && ' : '';
          await inBox(box, `${parent}[ -d "$(dirname -- "$1")" ] || exit 2; [ ! -d "$1" ] || exit 21; cat > "$1"`, [p], data);
          ctx.sendJson(res, 200, await change(box, p, ':', q));
          break;
        }
        default:
          throw new ApiError(405, `${req.method} /volumecontent/{id}/${what} is not a route`);
      }
    } finally {
      await box.close();
    }
    return `${req.method} /volumecontent/:id/${what}`;
  }
}

/** A volume path (absolute from its root, or relative to it) as the content box's path; never
 * above the volume. */
function boxPath(p) {
  if (typeof p !== 'string' || p === '') throw new ApiError(400, 'path is required');
  const parts = [];
  for (const c of p.split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') throw new ApiError(400, `path ${p} climbs out of the volume ('..')`);
    if (c.includes('\0')) throw new ApiError(400, 'path holds a NUL byte');
    parts.push(c);
  }
  return [AT, ...parts].join('/');
}

/** Runs `script` (sh, `args` as $1…) in the content box; exit codes name the refusal. */
async function inBox(box, script, args, stdin) {
  const r = await box.run(['sh', '-c', script, 'sh', ...args], { cwd: '/', timeoutS: 120, stdin });
  if (r.exitCode === 0 && !r.fault) return r.stdout;
  const shown = args[0].slice(AT.length) || '/';
  if (r.exitCode === 2) throw new ApiError(404, `Path ${shown} not found`);
  if (r.exitCode === 17) throw new ApiError(409, `${shown} already exists`);
  if (r.exitCode === 20) throw new ApiError(400, `${shown} is not a directory`);
  if (r.exitCode === 21) throw new ApiError(400, `${shown} is a directory`);
  const err = String(r.stderr).trim().split('\n').pop() || (r.fault && r.fault.message) || `exit ${r.exitCode}`;
  if (r.fault && r.fault.type === 'workspace_full') throw new ApiError(507, r.fault.message);
  if (/Permission denied|Read-only file system|Operation not permitted|Invalid argument/.test(err)) throw new ApiError(400, err);
  throw new ApiError(500, err);
}

function entries(out) {
  const parts = out.split('\0');
  const list = [];
  for (let i = 0; i + FIELDS <= parts.length; i += FIELDS) {
    const [kind, size, mode, uid, gid, atime, mtime, ctime, link, p] = parts.slice(i, i + FIELDS);
    const rel = p.slice(AT.length) || '/';
    const e = {
      name: rel === '/' ? '/' : rel.slice(rel.lastIndexOf('/') + 1),
      path: rel,
      type: TYPES[kind] ?? 'unknown',
      size: Number(size),
      mode: parseInt(mode, 8),
      uid: Number(uid),
      gid: Number(gid),
      atime: new Date(Number(atime) * 1000).toISOString(),
      mtime: new Date(Number(mtime) * 1000).toISOString(),
      ctime: new Date(Number(ctime) * 1000).toISOString(),
    };
    if (kind === 'l') e.target = link;
    list.push(e);
  }
  return list;
}

async function stat(box, p) {
  const [e] = entries(await inBox(box, `{ [ -e "$1" ] || [ -L "$1" ]; } || exit 2; exec find "$1" -maxdepth 0 -printf '${PRINTF}'`, [p]));
  return e;
}

/** Runs `first`, then applies `uid`/`gid`/`mode` from `q` (a URLSearchParams or a Map), and
 * answers the entry's stat. */
async function change(box, p, first, q) {
  const num = (k) => {
    const v = q.get(k);
    if (v === undefined || v === null || v === '') return null;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new ApiError(400, `${k} must be a whole number`);
    return n;
  };
  const [uid, gid, mode] = [num('uid'), num('gid'), num('mode')];
  let script = first;
  if (uid !== null || gid !== null) script += ` && chown -h -- "${uid ?? ''}${gid !== null ? `:${gid}` : ''}" "$1"`;
  if (mode !== null) script += ` && chmod -- ${(mode & 0o7777).toString(8)} "$1"`;
  await inBox(box, script, [p]);
  return stat(box, p);
}

module.exports = { Volumes, kernName };
