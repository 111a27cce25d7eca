'use strict';
// Watching a directory of a sandbox (envd's WatchDir and its polled form). The sandbox's kept
// trees, its home and /tmp, are host directories, so the host's inotify watches them (Node's
// fs.watch). The box controls what is in them, so the watched directory is reached one
// component at a time, each opened without following a symlink (through /proc/self/fd of its
// parent): a symlink the box planted never leads a watch out of the sandbox's own directory.

const fs = require('fs');
const path = require('path');
const { ConnectError, Code } = require('../errors.js');
const { keptTree } = require('./paths.js');

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = fs.constants;
const DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
/** The most directories one recursive watch follows (each is an inotify watch of the host's). */
const MAX_DIRS = 1000;
/** The most events a polled watcher keeps between two reads. */
const MAX_PENDING = 10000;
const EVENT = { create: 1, write: 2, remove: 3, rename: 4, chmod: 5 };
const TYPE_OF = (st) => (st.isFile() ? 1 : st.isDirectory() ? 2 : st.isSymbolicLink() ? 3 : 0);

/** Opens `rel` (components under `rootFd`'s directory) without following any symlink. */
function openBeneath(rootFd, rel) {
  // (The first step is our own descriptor's magic link, which must be followed.)
  let fd = fs.openSync(`/proc/self/fd/${rootFd}`, O_RDONLY | O_DIRECTORY);
  for (const part of rel.split('/').filter(Boolean)) {
    let next;
    try {
      next = fs.openSync(`/proc/self/fd/${fd}/${part}`, DIR_FLAGS);
    } finally {
      fs.closeSync(fd);
    }
    fd = next;
  }
  return fd;
}

/** The host directory of a kept tree, opened. */
function treeRoot(s, tree) {
  return fs.openSync(path.join(s.dir, tree), DIR_FLAGS);
}

class DirWatch {
  /** Watches box directory `boxPath` of sandbox `s`; `emit(event)` gets envd's FilesystemEvent. */
  constructor(s, boxPath, { recursive, includeEntry }, emit) {
    const kept = keptTree(s, boxPath);
    if (!kept) throw new ConnectError(`${boxPath}: kern serve watches directories under ${s.home} and /tmp, where a sandbox's files are kept`, Code.InvalidArgument);
    this.s = s;
    this.boxPath = boxPath;
    this.recursive = recursive;
    this.includeEntry = includeEntry;
    this.emit = emit;
    this.watches = new Map();
    this.closed = false;
    this.root = treeRoot(s, kept.tree);
    let fd;
    try {
      fd = openBeneath(this.root, kept.rel);
    } catch (e) {
      this.close();
      if (e.code === 'ENOENT') throw new ConnectError(`${boxPath}: no such directory`, Code.NotFound);
      if (e.code === 'ENOTDIR' || e.code === 'ELOOP') throw new ConnectError(`${boxPath} is not a directory (a symlink is not followed)`, Code.InvalidArgument);
      throw new ConnectError(`${boxPath}: ${e.message}`, Code.Internal);
    }
    this.add('', fd);
  }

  /** Watches the directory open as `fd`, at `sub` (relative to the watched one); `announce`:
   * it is new, so what is already in it (made before its watch was) is reported as created. */
  add(sub, fd, announce = false) {
    if (this.closed || this.watches.has(sub)) {
      fs.closeSync(fd);
      return;
    }
    if (this.watches.size >= MAX_DIRS) {
      fs.closeSync(fd);
      throw new ConnectError(`a recursive watch follows at most ${MAX_DIRS} directories`, Code.ResourceExhausted);
    }
    const at = `/proc/self/fd/${fd}`;
    const w = fs.watch(at, { persistent: false }, (kind, name) => this.on(sub, fd, kind, name));
    w.on('error', () => this.drop(sub));
    const entries = fs.readdirSync(at, { withFileTypes: true });
    // Node's 'rename' says neither create nor delete: an entry is told by whether it exists when
    // the event is read, and by these names (present as last reported; reported created and
    // removed at once because it was gone by then, so its own delete event is already told).
    this.watches.set(sub, { w, fd, known: new Set(entries.map((d) => d.name)), vanished: new Set() });
    for (const d of this.recursive || announce ? entries : []) {
      const rel = sub ? `${sub}/${d.name}` : d.name;
      if (announce) this.report(rel, d.name, fd, EVENT.create);
      if (!d.isDirectory() || !this.recursive) continue;
      try {
        this.add(rel, fs.openSync(`${at}/${d.name}`, DIR_FLAGS), announce);
      } catch (e) {
        if (e instanceof ConnectError) throw e;
        // Gone or swapped for a symlink meanwhile: not followed.
      }
    }
  }

  drop(sub) {
    const entry = this.watches.get(sub);
    if (!entry) return;
    entry.w.close();
    fs.closeSync(entry.fd);
    this.watches.delete(sub);
  }

  on(sub, fd, kind, name) {
    if (this.closed || !name) return;
    const rel = sub ? `${sub}/${name}` : name;
    let st = null;
    try {
      st = fs.lstatSync(`/proc/self/fd/${fd}/${name}`);
    } catch {
      // It is gone.
    }
    const entry = this.watches.get(sub);
    let type;
    if (kind === 'change') type = EVENT.write;
    else if (st) {
      type = EVENT.create;
      entry?.known.add(name);
      entry?.vanished.delete(name);
    } else if (entry?.vanished.delete(name)) {
      // The delete of an entry already reported created and removed.
      return;
    } else {
      if (entry && !entry.known.has(name)) {
        // Made and gone before this event was read: it was created, then removed.
        entry.vanished.add(name);
        this.report(rel, name, fd, EVENT.create, st);
      }
      entry?.known.delete(name);
      type = EVENT.remove;
      for (const w of Array.from(this.watches.keys())) if (w === rel || w.startsWith(`${rel}/`)) this.drop(w);
    }
    this.report(rel, name, fd, type, st);
    if (st && st.isDirectory() && this.recursive && type === EVENT.create) {
      try {
        this.add(rel, fs.openSync(`/proc/self/fd/${fd}/${name}`, DIR_FLAGS), true);
      } catch {
        // Too many directories, or swapped for a symlink: its own events are not followed.
      }
    }
  }

  /** Emits `type` for `rel` (entry `name` of the directory open as `fd`). */
  report(rel, name, fd, type, st) {
    const event = { name: rel, type };
    if (this.includeEntry) {
      let info = st;
      try {
        info ??= fs.lstatSync(`/proc/self/fd/${fd}/${name}`);
      } catch {
        // Gone already.
      }
      if (info) event.entry = this.entryOf(rel, name, fd, info);
    }
    this.emit(event);
  }

  entryOf(rel, name, fd, st) {
    const kind = TYPE_OF(st);
    const boxPath = `${this.boxPath}/${rel}`;
    return {
      name,
      type: kind,
      path: boxPath,
      size: BigInt(st.size),
      mode: st.mode & 0o777,
      permissions: ({ 1: '-', 2: 'd', 3: 'L' }[kind] ?? '?') + [...Array(9)].map((_, i) => ((st.mode >> (8 - i)) & 1 ? 'rwx'[i % 3] : '-')).join(''),
      owner: '',
      group: '',
      modifiedTime: { seconds: BigInt(Math.floor(st.mtimeMs / 1000)), nanos: Math.floor((st.mtimeMs % 1000) * 1e6) },
      symlinkTarget: kind === 3 ? safeReadlink(`/proc/self/fd/${fd}/${name}`) : undefined,
    };
  }

  close() {
    if (this.closed) return;
    this.closed = true;
    for (const sub of Array.from(this.watches.keys())) this.drop(sub);
    if (this.root !== undefined) fs.closeSync(this.root);
    if (this.onClose) this.onClose();
  }
}

function safeReadlink(p) {
  try {
    return fs.readlinkSync(p);
  } catch {
    return undefined;
  }
}

/** A watcher read by polling (CreateWatcher/GetWatcherEvents): its events wait in a queue. */
class PolledWatch {
  constructor(s, boxPath, opts) {
    this.pending = [];
    this.overflow = false;
    this.watch = new DirWatch(s, boxPath, opts, (ev) => {
      if (this.pending.length < MAX_PENDING) this.pending.push(ev);
      else this.overflow = true;
    });
  }

  take() {
    const out = this.pending;
    this.pending = [];
    return out;
  }

  get closed() {
    return this.watch.closed;
  }

  close() {
    this.watch.close();
  }
}

module.exports = { DirWatch, PolledWatch };
