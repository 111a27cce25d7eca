'use strict';
// What the framework adapters (ai.js, langchain.js, openai-agents.js) share: one Sandbox opened
// lazily, box paths mapped onto the workspace, and the few file operations the public API has
// no call for (stat, list one directory, delete, read or write outside the workspace) done by a
// POSIX shell in a box of that Sandbox. Only the public API (js/index.js) is used: a framework
// gets nothing a caller of `Sandbox` could not do, and every box keeps its posture.

const path = require('path');
const { Sandbox, SandboxError } = require('../index.js');

const DEFAULT_MOUNT = '/workspace';

// Scripts run as `sh -c SCRIPT kern PATH`: the path travels as $1, never spliced into the text.
// Each prints one status word (then NUL-separated data) so the answer is data, not an exit code
// a missing program could also give.
const STAT_SH = 'if [ ! -e "$1" ]; then echo missing; else stat -L -c "%F|%s" -- "$1"; fi';
const LIST_SH = [
  'if [ ! -e "$1" ]; then echo missing; exit 0; fi',
  'if [ ! -d "$1" ]; then echo notdir; exit 0; fi',
  'cd -- "$1" || exit 1',
  'printf "ok\\0"',
  'for f in * .[!.]* ..?*; do',
  '  if [ -L "$f" ]; then t=symlink; elif [ -d "$f" ]; then t=directory;',
  '  elif [ -f "$f" ]; then t=file; elif [ -e "$f" ]; then t=other; else continue; fi',
  '  printf "%s/%s\\0" "$t" "$f"',
  'done',
].join('\n');
const DELETE_SH = [
  'if [ -d "$1" ] && [ ! -L "$1" ]; then echo isdir; exit 0; fi',
  'if [ -e "$1" ] || [ -L "$1" ]; then rm -f -- "$1" || exit 1; echo deleted; else echo missing; fi',
].join('\n');
const DELETE_TREE_SH = 'if [ -e "$1" ] || [ -L "$1" ]; then rm -rf -- "$1" || exit 1; echo deleted; else echo missing; fi';
// Exit 3: missing, 4: a directory; anything else non-zero is cat's own failure.
const READ_SH = 'if [ ! -e "$1" ]; then exit 3; elif [ -d "$1" ]; then exit 4; fi; exec cat -- "$1"';
const WRITE_SH = 'if [ -d "$1" ]; then exit 4; fi; mkdir -p -- "$(dirname -- "$1")" && cat > "$1"';

/** A kern SandboxError for a bad argument to an adapter. */
function badInput(message) {
  return new SandboxError(message, { code: 'ERR_INVALID_OPTION' });
}

/** A failed box-side file operation: what the box said, as an ERR_FILE SandboxError. */
function fileError(op, p, r) {
  const said = (r.codeStderr || '').trim() || (r.fault ? `${r.fault.type}: ${r.fault.message}` : `exit code ${r.exitCode}`);
  return new SandboxError(`${op} ${JSON.stringify(p)}: ${said}`, { code: 'ERR_FILE' });
}

class Box {
  #options;
  #sandbox = null;
  #opening = null;
  #owned;
  #closed = false;
  #openedOk = false;

  /**
   * @param {object} options Sandbox options, or `{ sandbox }`: an opened Sandbox to use (not
   *   closed by close()).
   */
  constructor(options) {
    if (options === undefined || options === null) options = {};
    if (typeof options !== 'object' || Array.isArray(options)) {
      throw badInput('the options must be an object of Sandbox options, e.g. { image: "python:3.12-slim" }');
    }
    const { sandbox, ...rest } = options;
    if (sandbox !== undefined && !(sandbox instanceof Sandbox)) {
      throw badInput('option `sandbox` must be a Sandbox from kern-sandbox');
    }
    this.#owned = sandbox === undefined;
    this.#options = rest;
    // The options themselves are checked by open(), the first call's or an explicit one.
    this.#sandbox = this.#owned ? new Sandbox(rest) : sandbox;
    this.mount = rest.workspaceMount === undefined ? DEFAULT_MOUNT : rest.workspaceMount;
  }

  /** The Sandbox options the box was made with (without `sandbox`). */
  get options() {
    return this.#options;
  }

  get closed() {
    return this.#closed;
  }

  /** Whether the Sandbox is open (opened here or given opened) and not closed. */
  get running() {
    return !this.#closed && (!this.#owned || (this.#opening !== null && this.#openedOk));
  }

  /** The opened Sandbox; the first call opens it (once, however many calls race for it). */
  async sandbox() {
    if (this.#closed) throw new SandboxError('this sandbox is closed', { code: 'ERR_CLOSED' });
    if (!this.#owned) return this.#sandbox;
    if (!this.#opening) {
      this.#opening = this.#sandbox.open().catch((e) => {
        this.#opening = null;
        throw e;
      });
    }
    await this.#opening;
    this.#openedOk = true;
    return this.#sandbox;
  }

  async open() {
    await this.sandbox();
  }

  /** Closes an owned Sandbox (its boxes and processes end, a temporary workspace goes). */
  async close() {
    if (this.#closed) return;
    this.#closed = true;
    if (!this.#owned) return;
    if (this.#opening) await this.#opening.catch(() => {});
    await this.#sandbox.close();
  }

  /** The workspace-relative form of a box path, `""` for the workspace itself, or null for a
   * path outside it (or one `..` leads out of). Relative paths are taken from the workspace. */
  rel(p) {
    if (typeof p !== 'string' || p === '' || p.includes('\0')) {
      throw badInput(`a path must be a non-empty string without NUL, got ${JSON.stringify(p)}`);
    }
    const abs = path.posix.resolve(this.mount, p);
    if (abs === this.mount) return '';
    const prefix = this.mount === '/' ? '/' : `${this.mount}/`;
    return abs.startsWith(prefix) ? abs.slice(prefix.length) : null;
  }

  /** The absolute box path of `p` (relative paths are taken from the workspace). */
  abs(p) {
    this.rel(p);
    return path.posix.resolve(this.mount, p);
  }

  /** `sh -c script kern ...args` in a fresh box; the result, whatever its exit code. */
  async sh(script, args, opts) {
    const sb = await this.sandbox();
    return sb.run(['sh', '-c', script, 'kern', ...args], opts);
  }

  /** `{ type, size }` of a box path (symlinks followed), or null when it does not exist. */
  async stat(p, signal) {
    const r = await this.sh(STAT_SH, [this.abs(p)], { signal });
    const out = r.stdout.trim();
    if (r.exitCode !== 0) throw fileError('stat', p, r);
    if (out === 'missing') return null;
    const bar = out.lastIndexOf('|');
    const kind = out.slice(0, bar);
    const size = Number(out.slice(bar + 1));
    const type = kind === 'directory' ? 'directory' : /^regular( empty)? file$/.test(kind) ? 'file' : 'other';
    return { type, size };
  }

  /** The entries of one directory, `[{ name, type }]`, type file, directory, symlink or other
   * (symlinks not followed); null when it does not exist; throws when it is not a directory. */
  async list(p, signal) {
    const r = await this.sh(LIST_SH, [this.abs(p)], { signal });
    if (r.exitCode !== 0) throw fileError('list', p, r);
    if (r.stdout.trim() === 'missing') return null;
    if (r.stdout.trim() === 'notdir') {
      throw new SandboxError(`list ${JSON.stringify(p)}: not a directory`, { code: 'ERR_FILE' });
    }
    return r.stdout.split('\0').slice(1, -1).map((e) => {
      const slash = e.indexOf('/');
      return { type: e.slice(0, slash), name: e.slice(slash + 1) };
    });
  }

  /** Deletes one file or symlink: true if it did, false if nothing was there; a directory is
   * refused unless `tree` (then removed with what is under it). */
  async remove(p, { tree = false, signal } = {}) {
    const r = await this.sh(tree ? DELETE_TREE_SH : DELETE_SH, [this.abs(p)], { signal });
    if (r.exitCode !== 0) throw fileError('delete', p, r);
    const out = r.stdout.trim();
    if (out === 'isdir') {
      throw new SandboxError(`delete ${JSON.stringify(p)}: is a directory`, { code: 'ERR_FILE' });
    }
    return out === 'deleted';
  }

  /** A file's bytes, or null when it does not exist. A workspace file is read from the host;
   * one the host read refuses (a symlink the box may follow inside itself) or outside the
   * workspace is read by `cat` in a box, its bytes as they come. */
  async read(p, signal) {
    const rel = this.rel(p);
    if (rel !== null && rel !== '') {
      const sb = await this.sandbox();
      if (signal && signal.aborted) throw signal.reason;
      try {
        return await sb.readFile(rel);
      } catch (e) {
        if (!(e instanceof SandboxError) || e.code !== 'ERR_FILE') throw e;
        // The host read refuses symlinks, directories and missing files alike; the box says which.
      }
    }
    const chunks = [];
    const r = await this.sh(READ_SH, [this.abs(p)], { signal, onStdout: (c) => chunks.push(c), onStderr: null });
    if (r.exitCode === 3) return null;
    if (r.exitCode === 4) throw new SandboxError(`read ${JSON.stringify(p)}: is a directory`, { code: 'ERR_FILE' });
    if (r.exitCode !== 0 || r.fault) throw fileError('read', p, r);
    if (r.stdoutTruncated) {
      throw new SandboxError(`read ${JSON.stringify(p)}: larger than maxOutputBytes; copy it into the workspace to read it`, { code: 'ERR_FILE' });
    }
    return Buffer.concat(chunks);
  }

  /** Writes a file, creating its directories. A workspace path is written from the host
   * (atomically, never through a symlink); another is written by a box (it lasts only where
   * that box's writes do: a writable mount). */
  async write(p, data, signal) {
    const buf = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const rel = this.rel(p);
    if (rel === '') throw new SandboxError(`write ${JSON.stringify(p)}: is a directory (the workspace)`, { code: 'ERR_FILE' });
    const sb = await this.sandbox();
    if (signal && signal.aborted) throw signal.reason;
    if (rel !== null) return sb.writeFile(rel, buf);
    const r = await this.sh(WRITE_SH, [this.abs(p)], { signal, stdin: buf });
    if (r.exitCode === 4) throw new SandboxError(`write ${JSON.stringify(p)}: is a directory`, { code: 'ERR_FILE' });
    if (r.exitCode !== 0 || r.fault) throw fileError('write', p, r);
    return undefined;
  }

  /** Makes directories (and their parents) in a box; nothing for none. */
  async mkdirs(paths) {
    if (paths.length === 0) return;
    const r = await this.sh('mkdir -p -- "$@"', paths.map((p) => this.abs(p)));
    if (r.exitCode !== 0 || r.fault) throw fileError('mkdir', paths.join(' '), r);
  }

  /** A description of the box for a model's instructions. */
  describe() {
    const o = this.#options;
    const net = o.egressAllow ? `only to ${o.egressAllow.join(', ') || 'nowhere'}` : o.network ? 'on' : 'off';
    return [
      `Commands run in an isolated Linux sandbox (kern-sandbox), image ${o.image || 'python:3.12-slim'}.`,
      `Each command runs in a fresh box: only files under ${this.mount} (the working directory) persist between commands;`,
      'variables, background shells, /tmp and changes elsewhere do not.',
      `Network access: ${net}.`,
    ].join(' ');
  }
}

/** Cuts a string to `max` UTF-16 units (a positive safe integer), or leaves it. */
function cut(s, max) {
  return max === undefined || s.length <= max ? s : s.slice(0, max);
}

/** What a run's stderr shows a model: what the code wrote, plus a line when kern intervened. */
function stderrOf(r) {
  return r.fault ? `${r.codeStderr}${r.codeStderr && !r.codeStderr.endsWith('\n') ? '\n' : ''}[kern-sandbox] ${r.fault.type}: ${r.fault.message}\n` : r.codeStderr;
}

module.exports = { Box, badInput, cut, stderrOf, DEFAULT_MOUNT };
