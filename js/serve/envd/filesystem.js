'use strict';
// envd's `filesystem.Filesystem` Connect service (vendor/e2b-envd/filesystem/filesystem.proto).
// Each operation runs as a small command in a box of the sandbox (its own posture, its own view
// of the tree, any path of the box), so the host never follows a path the box controls.
// Needs GNU find and coreutils in the image (Debian/Ubuntu images have them).

const { ConnectError, Code, toConnectError } = require('../errors.js');
const { SANDBOX } = require('./context.js');
const crypto = require('crypto');
const { resolvePath, requestUser } = require('./paths.js');
const { DirWatch, PolledWatch } = require('./watch.js');

/** One entry per NUL-terminated record: type, size, mode, owner, group, mtime, link, path. */
const PRINTF = '%y\\0%s\\0%m\\0%u\\0%g\\0%T@\\0%l\\0%p\\0';
const FIELDS = 8;
const TYPES = { f: 1, d: 2, l: 3 };
const MODE_CHAR = { f: '-', d: 'd', l: 'L' };

function permissions(kind, mode) {
  const rwx = ['r', 'w', 'x'];
  let s = MODE_CHAR[kind] ?? '?';
  for (let i = 8; i >= 0; i--) s += mode & (1 << i) ? rwx[(8 - i) % 3] : '-';
  return s;
}

function parseEntries(stdout) {
  const parts = stdout.split('\0');
  const out = [];
  for (let i = 0; i + FIELDS <= parts.length; i += FIELDS) {
    const [kind, size, mode, owner, group, mtime, link, p] = parts.slice(i, i + FIELDS);
    const m = parseInt(mode, 8);
    const [sec, frac = '0'] = mtime.split('.');
    out.push({
      name: p === '/' ? '/' : p.slice(p.lastIndexOf('/') + 1),
      type: TYPES[kind] ?? 0,
      path: p,
      size: BigInt(size),
      mode: m,
      permissions: permissions(kind, m),
      owner,
      group,
      modifiedTime: { seconds: BigInt(sec), nanos: Number(frac.padEnd(9, '0').slice(0, 9)) },
      symlinkTarget: kind === 'l' ? link : undefined,
    });
  }
  return out;
}

/** Runs `script` (sh, with `args` as $1…) in a box of `s`; a failure becomes the ConnectError
 * its exit code or message names. */
async function inBox(s, script, args, user) {
  let r;
  try {
    r = await s.sandbox.run(['sh', '-c', script, 'sh', ...args], { cwd: '/', timeoutS: 60, user });
  } catch (e) {
    throw toConnectError(e);
  }
  if (r.exitCode === 0 && !r.fault) return r.stdout;
  const err = r.codeStderr.trim().split('\n').pop() || (r.fault && r.fault.message) || `exit ${r.exitCode}`;
  if (r.exitCode === 2 || /No such file or directory/.test(err)) throw new ConnectError(`${args[0]}: no such file or directory`, Code.NotFound);
  if (r.exitCode === 17) throw new ConnectError(`${args[0]} already exists`, Code.AlreadyExists);
  if (r.exitCode === 20) throw new ConnectError(`${args[0]} is not a directory`, Code.InvalidArgument);
  if (/Permission denied|Read-only file system|Operation not permitted/.test(err)) throw new ConnectError(err, Code.PermissionDenied);
  throw new ConnectError(err, Code.Internal);
}

const EXISTS = '{ [ -e "$1" ] || [ -L "$1" ]; } || exit 2;';

async function stat(s, p, user) {
  const [entry] = parseEntries(await inBox(s, `${EXISTS} exec find "$1" -maxdepth 0 -printf '${PRINTF}'`, [p], user));
  if (!entry) throw new ConnectError(`${p}: no such file or directory`, Code.NotFound);
  return entry;
}

function filesystemService() {
  return {
    async stat(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const user = requestUser(ctx.requestHeader);
      return { entry: await stat(s, resolvePath(s, req.path), user) };
    },

    async listDir(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const user = requestUser(ctx.requestHeader);
      const p = resolvePath(s, req.path);
      const depth = Math.max(1, Math.min(req.depth || 1, 64));
      const script = `${EXISTS} [ -d "$1" ] || exit 20; exec find "$1" -mindepth 1 -maxdepth "$2" -printf '${PRINTF}'`;
      const entries = parseEntries(await inBox(s, script, [p, String(depth)], user));
      entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
      return { entries };
    },

    async makeDir(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const user = requestUser(ctx.requestHeader);
      const p = resolvePath(s, req.path);
      const script = `{ [ -e "$1" ] || [ -L "$1" ]; } && exit 17; mkdir -p -- "$1" && exec find "$1" -maxdepth 0 -printf '${PRINTF}'`;
      const [entry] = parseEntries(await inBox(s, script, [p], user));
      return { entry };
    },

    async move(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const user = requestUser(ctx.requestHeader);
      const from = resolvePath(s, req.source);
      const to = resolvePath(s, req.destination);
      const script = `${EXISTS} mkdir -p -- "$(dirname -- "$2")" && mv -T -- "$1" "$2" && exec find "$2" -maxdepth 0 -printf '${PRINTF}'`;
      const [entry] = parseEntries(await inBox(s, script, [from, to], user));
      return { entry };
    },

    async remove(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const user = requestUser(ctx.requestHeader);
      const p = resolvePath(s, req.path);
      if (p === '/' || p === s.home || p === '/tmp') throw new ConnectError(`${p} can't be removed`, Code.InvalidArgument);
      await inBox(s, `${EXISTS} exec rm -rf -- "$1"`, [p], user);
      return {};
    },

    async *watchDir(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const queue = [];
      let wake = null;
      const watch = new DirWatch(s, resolvePath(s, req.path), { recursive: req.recursive, includeEntry: req.includeEntry }, (ev) => {
        queue.push(ev);
        if (wake) wake();
      });
      const stop = () => wake && wake();
      ctx.signal.addEventListener('abort', stop, { once: true });
      // The sandbox's end closes its watches: the stream ends with it.
      watch.onClose = stop;
      s.watches.add(watch);
      const every = Number(ctx.requestHeader.get('keepalive-ping-interval'));
      try {
        yield { event: { case: 'start', value: {} } };
        while (!ctx.signal.aborted && !watch.closed) {
          while (queue.length && !ctx.signal.aborted) yield { event: { case: 'filesystem', value: queue.shift() } };
          let timer = null;
          const idle = await new Promise((resolve) => {
            wake = () => resolve(false);
            if (every > 0) timer = setTimeout(() => resolve(true), every * 1000);
          });
          clearTimeout(timer);
          wake = null;
          if (idle && !queue.length) yield { event: { case: 'keepalive', value: {} } };
        }
      } finally {
        watch.close();
        s.watches.delete(watch);
      }
    },

    async createWatcher(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const w = new PolledWatch(s, resolvePath(s, req.path), { recursive: req.recursive, includeEntry: req.includeEntry });
      const id = crypto.randomUUID();
      s.watchers.set(id, w);
      s.watches.add(w);
      return { watcherId: id };
    },

    async getWatcherEvents(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const w = s.watchers.get(req.watcherId);
      if (!w) throw new ConnectError(`watcher ${req.watcherId} not found`, Code.NotFound);
      if (w.overflow) {
        w.overflow = false;
        w.take();
        throw new ConnectError('more events came than a watcher keeps between two reads (10,000): some were lost; read more often', Code.ResourceExhausted);
      }
      return { events: w.take() };
    },

    async removeWatcher(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const w = s.watchers.get(req.watcherId);
      if (!w) throw new ConnectError(`watcher ${req.watcherId} not found`, Code.NotFound);
      w.close();
      s.watchers.delete(req.watcherId);
      s.watches.delete(w);
      return {};
    },
  };
}

module.exports = { filesystemService, stat };
