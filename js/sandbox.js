'use strict';
// The Sandbox, and the helpers over it (withSandbox, runCode).

const path = require('path');
const platform = require('./platform.js');
const OPTIONS = require('./options.js');
const native = require('./addon.js');
const { SandboxError, fromNative, callNative } = require('./errors.js');
const { ExecutionResult, liveResults } = require('./results.js');
const { byLines, Chunks, WorkspaceReadStream, WorkspaceWriteStream } = require('./streams.js');
const {
  ASYNC_DISPOSE, toWire, checkOptions, underSignal, resolvesOnAbort, checkCallback, guard, checkLineBuffered,
  toBuffer, stdinBuffer, callRequest, checkRelPath, byteCount,
} = require('./calls.js');
const { KERNEL_TOKEN, KERNEL_LANGUAGES, Kernel, forkCount } = require('./kernel.js');
const { PROCESS_TOKEN, SandboxProcess, Terminal } = require('./processes.js');
const { WATCH_TOKEN, WorkspaceWatch } = require('./watch.js');
const { publish } = require('./publish.js');

// 'typescript' is an addition (run by the node driver where the box's Node strips types).
const LANGUAGES = ['python', 'bash', 'sh', 'node', 'typescript'];

// Sandboxes opened and not yet closed. A process that exits without close() still removes the
// temporary workspaces they made (their boxes die with it: kern's lifeline closes).
const unclosed = new Set();
let exitHook = false;
function removeOnExit(native) {
  unclosed.add(native);
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const n of unclosed) {
      try {
        n.abandon();
      } catch {
        // Best effort at exit: nothing is left to report to.
      }
    }
  });
}

class Sandbox {
  #native;
  #onStdout;
  #onStderr;
  #processes = new Set();
  #streams = new Set();
  // The options as given (fork() opens its copies with them), the allowlist as it now stands.
  #opts;
  // The id of the checkpoint whose workspace this Sandbox's holds (fromCheckpoint, restoreKernel).
  #fromCheckpoint = null;

  constructor(opts) {
    if (opts === undefined || opts === null) opts = {};
    if (typeof opts !== 'object' || Array.isArray(opts)) {
      throw new SandboxError('Sandbox options must be an object, e.g. new Sandbox({ image: "host" })');
    }
    const { onStdout, onStderr, ...rest } = opts;
    checkCallback('onStdout', onStdout);
    checkCallback('onStderr', onStderr);
    this.#onStdout = onStdout;
    this.#onStderr = onStderr;
    this.#opts = { ...opts };
    try {
      this.#native = new native.NativeSandbox(toWire(rest, 'option'), platform.kernPath());
    } catch (e) {
      throw fromNative(e);
    }
  }

  async open(opts) {
    const { signal } = checkOptions(opts, ['signal'], 'open(opts) takes an options object, such as { signal }',
      (k) => `unknown open() option \`${k}\` (open() takes { signal })`);
    // `setup`'s output streams to the session's callbacks.
    const errors = [];
    const out = guard('onStdout', this.#onStdout, errors);
    const err = guard('onStderr', this.#onStderr, errors);
    await underSignal(signal, this.#native, (id) => this.#native.open(out, err, id));
    removeOnExit(this.#native);
    return this;
  }

  async close() {
    unclosed.delete(this.#native);
    // Workspace streams still open end with the Sandbox: their fds are closed now, not at GC,
    // and a write stream not yet ended leaves the path as it was. Destroyed without an error:
    // an 'error' nobody listens for would throw in the caller's process; pipeline() and
    // finished() still report a premature close.
    for (const s of this.#streams) s.destroy();
    await callNative(() => this.#native.close());
  }

  /** Addition: `await using sb = await new Sandbox(o).open()` closes it at the block's end. */
  [ASYNC_DISPOSE]() {
    return this.close();
  }

  async destroy() {
    // Stops the resident box of this Sandbox's `name` (a no-op without `persist`), wherever
    // it was started; resolves once its state and cgroup are gone.
    await callNative(() => this.#native.destroy());
  }

  /** Addition: freezes a `persist` Sandbox's resident box (its processes too) until resume(). */
  async pause() {
    await callNative(() => this.#native.pause());
  }

  /** Addition: lets a paused resident box run again. */
  async resume() {
    await callNative(() => this.#native.resume());
  }

  /** Addition: whether the resident box is paused. */
  get paused() {
    return this.#native.paused;
  }

  /** Addition: a background process in a fresh box of this Sandbox (see index.d.ts). */
  async spawn(argv, opts) {
    if (!Array.isArray(argv) || argv.some((a) => typeof a !== 'string')) {
      throw new SandboxError('spawn() takes an argv array of strings, e.g. spawn(["python3", "-m", "http.server", "8000"])');
    }
    const o = this.#perCall(opts, OPTIONS.spawn);
    const wire = toWire({ argv, env: o.env, cwd: o.cwd, user: o.user, timeoutS: o.timeoutS }, 'spawn');
    if (o.signal && o.signal.aborted) throw o.signal.reason;
    // As for a call: the Sandbox's callbacks unless the process names its own (null: none).
    const pick = (k, session) => (o[k] === undefined ? session : o[k]);
    const p = await this.#start(wire, false, pick('onStdout', this.#onStdout), pick('onStderr', this.#onStderr), o.lineBuffered);
    const sp = new SandboxProcess(PROCESS_TOKEN, p.native, p.out, p.err, p.errors, o.signal);
    this.#processes.add(sp);
    sp.wait().then(() => this.#processes.delete(sp), () => this.#processes.delete(sp));
    return sp;
  }

  /** Addition: the egress allowlist for every later connection of this Sandbox's boxes. */
  async setEgressAllow(list) {
    if (!Array.isArray(list) || list.some((e) => typeof e !== 'string')) {
      throw new SandboxError('setEgressAllow(list) takes an array of strings, as option `egressAllow` does, e.g. ["pypi.org", ".example.com"] ([] denies everything)');
    }
    await callNative(() => this.#native.setEgressAllow(JSON.stringify(list)));
    this.#opts.egressAllow = [...list];
  }

  /** Addition: `count` new open Sandboxes with this one's options, each with a copy of this
   * workspace as it is now (see index.d.ts). */
  async fork(opts) {
    return this.#forkCopies(forkCount(opts, 'fork'), null);
  }

  /** fork()'s work; `frozen`: a paused kernel of this Sandbox, whose fork this is. */
  async #forkCopies(count, frozen) {
    if (this.#opts.persist) {
      throw new SandboxError('fork() of a `persist` Sandbox is not available: its resident box\'s running processes can\'t be copied into a new box safely yet; fork a Sandbox without persist (its workspace is copied)');
    }
    // Its copies mount the same volumes: one this Sandbox writes alone can't have more writers.
    const alone = Object.entries(this.#opts.volumes ?? {}).find(([, v]) => typeof v === 'string' || (v !== null && typeof v === 'object' && !v.readonly && !v.shared));
    if (alone) {
      throw new SandboxError(`fork() of a Sandbox that writes the volume "${alone[0]}" as its only writer: its copies would mount it too, and a volume has one writer unless every writer says so; open this Sandbox with { volumes: { "${alone[0]}": { path, shared: true } } } (or readonly) to fork it`);
    }
    // A kept `workspace` stays this Sandbox's: each copy gets a temporary one of its own.
    const { workspace: _kept, ...childOpts } = this.#opts;
    const opened = await Promise.allSettled(Array.from({ length: count }, () => new Sandbox(childOpts).open()));
    const kids = opened.filter((o) => o.status === 'fulfilled').map((o) => o.value);
    try {
      const failed = opened.find((o) => o.status === 'rejected');
      if (failed) throw failed.reason;
      // One at a time: each copy holds this workspace still while it reads it.
      for (const kid of kids) await callNative(() => this.#native.copyWorkspaceTo(kid.#native, frozen));
    } catch (e) {
      await Promise.all(kids.map((k) => k.close().catch(() => {})));
      throw e;
    }
    return kids;
  }

  /** Addition: writes this Sandbox's workspace to the new host directory `dir` (see
   * index.d.ts); `Sandbox.fromCheckpoint(dir)` opens a Sandbox with it again. */
  async checkpoint(dir) {
    const at = checkpointDir(dir);
    const m = JSON.parse(await callNative(() => this.#native.writeCheckpoint(at, null, null, this.#checkpointMeta(null))));
    return { dir: at, id: m.id, bytes: m.workspace.bytes, notCarried: [] };
  }

  /** Addition: a new open Sandbox with the workspace of the checkpoint in `dir` (a kernel's or
   * a Sandbox's), in the image it was taken in unless `options.image` says otherwise. */
  static async fromCheckpoint(dir, options) {
    const at = checkpointDir(dir);
    if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options))) {
      throw new SandboxError('Sandbox.fromCheckpoint(dir, options) takes the Sandbox options as an object, e.g. { memoryMb: 512 }');
    }
    const ckpt = await callNative(() => native.readCheckpoint(at));
    const m = JSON.parse(ckpt.manifest);
    const opts = { ...options };
    if (opts.image === undefined && m.image !== null) opts.image = m.image;
    const sb = new Sandbox(opts);
    await sb.open();
    try {
      await sb.#restoreFiles(ckpt, m);
    } catch (e) {
      await sb.close().catch(() => {});
      throw e;
    }
    return sb;
  }

  /** Addition: a kernel of this Sandbox with the state of the kernel checkpoint in `dir`, and
   * its workspace (into an empty workspace; one made by fromCheckpoint(dir) has it already). */
  async restoreKernel(dir, opts) {
    const at = checkpointDir(dir);
    opts = checkOptions(opts, OPTIONS.kernel, 'restoreKernel(dir, opts) takes kernel options as an object, e.g. { env: { TOKEN: "…" } }',
      (k) => `unknown restoreKernel() option \`${k}\`; it takes the kernel options ${OPTIONS.kernel.join(', ')}`);
    const ckpt = await callNative(() => native.readCheckpoint(at));
    const m = JSON.parse(ckpt.manifest);
    const state = ckpt.state;
    if (!state) throw new SandboxError(`${at} is a Sandbox's checkpoint (sandbox.checkpoint()), which holds no kernel: open it with Sandbox.fromCheckpoint(dir)`);
    await this.#restoreFiles(ckpt, m);
    const k = await this.kernel({ ...m.kernel, ...opts });
    try {
      return await Kernel.load(k, state, m.left.map(([name, reason]) => ({ name, reason })), false);
    } catch (e) {
      await k.close().catch(() => {});
      throw e;
    }
  }

  /** The checkpoint's workspace into this one, once (a Sandbox made from it has it). */
  async #restoreFiles(ckpt, m) {
    if (this.#fromCheckpoint === m.id) return;
    await callNative(() => this.#native.restoreCheckpointWorkspace(ckpt));
    this.#fromCheckpoint = m.id;
  }

  #checkpointMeta(kernel) {
    return JSON.stringify({ kernel });
  }

  /** Addition: the background processes started by spawn() that still run. */
  processes() {
    return [...this.#processes].filter((p) => p.running);
  }

  /** Addition: a program on a terminal of a fresh box of this Sandbox (see index.d.ts). */
  async terminal(opts) {
    const o = checkOptions(opts, OPTIONS.terminal, 'terminal(opts): opts must be an object such as { cols: 80, rows: 24 }',
      (k) => `unknown terminal() option \`${k}\`; it takes ${OPTIONS.terminal.join(', ')}`);
    if (o.argv !== undefined && (!Array.isArray(o.argv) || o.argv.some((a) => typeof a !== 'string'))) {
      throw new SandboxError('terminal() option `argv` must be an array of strings, e.g. ["bash"]');
    }
    const wire = toWire({ argv: o.argv, env: o.env, cwd: o.cwd, user: o.user, cols: o.cols, rows: o.rows }, 'terminal');
    const p = await this.#start(wire, true);
    return new Terminal(PROCESS_TOKEN, p.native, p.out, p.errors);
  }

  async #start(wire, terminal, onStdout, onStderr, lineBuffered = false) {
    const errors = [];
    const out = new Chunks(guard('onStdout', onStdout, errors), lineBuffered);
    const err = new Chunks(guard('onStderr', onStderr, errors), lineBuffered);
    const n = await callNative(() => this.#native.startProcess(wire, terminal, (c) => out.push(c), (c) => err.push(c)));
    return { native: n, out, err, errors };
  }

  async runCode(code, opts) {
    if (typeof code !== 'string') throw new SandboxError('runCode(code) takes the code as a string');
    const { language, ...perCall } = this.#perCall(opts, OPTIONS.runCode);
    if (language !== undefined && !LANGUAGES.includes(language)) {
      throw new SandboxError(`language ${JSON.stringify(language)} is not supported; use one of ${LANGUAGES.map((l) => `"${l}"`).join(', ')}`);
    }
    return this.#exec({ code, language: language || 'python', ...callRequest(perCall) }, perCall);
  }

  async run(command, opts) {
    if (!Array.isArray(command) || command.some((a) => typeof a !== 'string')) {
      throw new SandboxError('run() takes an argv array of strings, e.g. run(["ls", "-la"]); it never runs a shell string');
    }
    const perCall = this.#perCall(opts, OPTIONS.run);
    return this.#exec({ argv: command, ...callRequest(perCall) }, perCall);
  }

  #perCall(opts, known) {
    opts = checkOptions(opts, known, 'per-call options must be an object',
      (k) => `unknown per-call option \`${k}\`; a call takes ${known.join(', ')}`);
    checkCallback('onStdout', opts.onStdout);
    checkCallback('onStderr', opts.onStderr);
    checkCallback('onResult', opts.onResult);
    checkLineBuffered(opts.lineBuffered);
    resolvesOnAbort(opts.onAbort);
    return opts;
  }

  async #exec(request, perCall) {
    const errors = [];
    const pick = (k, session) => (perCall[k] === undefined ? session : perCall[k]);
    const out = byLines(guard('onStdout', pick('onStdout', this.#onStdout), errors), perCall.lineBuffered);
    const err = byLines(guard('onStderr', pick('onStderr', this.#onStderr), errors), perCall.lineBuffered);
    const stdin = stdinBuffer(perCall.stdin);
    const wire = toWire(request, 'call');
    // An abort ends the box and everything in it; the native call settles once it is gone.
    const live = liveResults(guard('onResult', perCall.onResult, errors));
    let r;
    try {
      r = await underSignal(perCall.signal, this.#native, (id) => this.#native.exec(wire, out.fn, err.fn, stdin, id, live), resolvesOnAbort(perCall.onAbort));
    } finally {
      out.flush();
      err.flush();
    }
    return new ExecutionResult(r, errors);
  }

  async writeFile(filePath, data) {
    checkRelPath('writeFile', filePath);
    const buf = toBuffer(data, 'writeFile(path, data): data must be a Buffer or a string');
    await callNative(() => this.#native.writeFile(filePath, buf));
  }

  async readFile(filePath, opts) {
    checkRelPath('readFile', filePath);
    opts = checkOptions(opts, OPTIONS.readFile, 'readFile(path, opts): opts must be an object such as { maxBytes: 1048576 }',
      (k) => `unknown readFile() option \`${k}\`; it takes ${OPTIONS.readFile.join(', ')}`);
    const max = byteCount('readFile', 'maxBytes', opts.maxBytes);
    // Addition: a range.
    const offset = byteCount('readFile', 'offset', opts.offset);
    const length = byteCount('readFile', 'length', opts.length);
    if (offset !== null || length !== null) {
      return callNative(() => this.#native.readRange(filePath, offset ?? 0, length, max));
    }
    return callNative(() => this.#native.readFile(filePath, max));
  }

  /** Addition: the measured isolation of this Sandbox's boxes (see index.d.ts). */
  async isolation() {
    return JSON.parse(await callNative(() => this.#native.isolation()));
  }

  /** Addition: a workspace file as a Node Readable, read in chunks (see index.d.ts). */
  createReadStream(filePath, opts) {
    checkRelPath('createReadStream', filePath);
    opts = checkOptions(opts, OPTIONS.readStream, 'createReadStream(path, opts): opts must be an object such as { offset: 0, length: 1024 }',
      (k) => `unknown createReadStream() option \`${k}\`; it takes ${OPTIONS.readStream.join(', ')}`);
    const offset = byteCount('createReadStream', 'offset', opts.offset) ?? 0;
    const length = byteCount('createReadStream', 'length', opts.length);
    return this.#track(new WorkspaceReadStream(this.#native, filePath, offset, length === null ? Infinity : length));
  }

  /** Addition: a Node Writable whose bytes land at `path` atomically at end() (see index.d.ts). */
  createWriteStream(filePath) {
    checkRelPath('createWriteStream', filePath);
    return this.#track(new WorkspaceWriteStream(this.#native, filePath));
  }

  /** Workspace streams open now, so close() can end them. */
  #track(s) {
    this.#streams.add(s);
    s.once('close', () => this.#streams.delete(s));
    return s;
  }

  async listFiles(subdir) {
    if (subdir !== undefined && subdir !== null) checkRelPath('listFiles', subdir);
    const json = await callNative(() => this.#native.listFiles(subdir === undefined ? null : subdir));
    return JSON.parse(json);
  }

  snapshot(dest) {
    if (typeof dest !== 'string' || dest === '') throw new SandboxError('snapshot(dest) takes the archive\'s path as a string');
    let skipped;
    try {
      skipped = this.#native.snapshot(path.resolve(dest));
    } catch (e) {
      throw fromNative(e);
    }
    // snapshot() returns nothing, so what it could not archive is said as a process warning.
    if (skipped.length) {
      const shown = skipped.slice(0, 10).join(', ') + (skipped.length > 10 ? `, and ${skipped.length - 10} more` : '');
      process.emitWarning(`snapshot() left out ${skipped.length} entr${skipped.length === 1 ? 'y' : 'ies'} that restore() would refuse (symlinks, special files, names that are not UTF-8): ${shown}`, { code: 'KERN_SNAPSHOT_SKIPPED' });
    }
  }

  restore(src) {
    if (typeof src !== 'string' || src === '') throw new SandboxError('restore(src) takes the archive\'s path as a string');
    try {
      this.#native.restore(path.resolve(src));
    } catch (e) {
      throw fromNative(e);
    }
  }
  /** Addition: the workspace's changes below `dir` as events (see index.d.ts). */
  async watch(dir = '.', opts) {
    checkRelPath('watch', dir);
    opts = checkOptions(opts, OPTIONS.watch, 'watch(path, opts): opts must be an object such as { recursive: true, include: ["**/*.py"] }',
      (k) => `unknown watch() option \`${k}\`; it takes ${OPTIONS.watch.join(', ')}`);
    if (opts.recursive !== undefined && typeof opts.recursive !== 'boolean') {
      throw new SandboxError(`watch({ recursive }) takes true or false, got ${JSON.stringify(opts.recursive)}`);
    }
    const globs = (name) => {
      const v = opts[name];
      if (v === undefined) return undefined;
      const list = typeof v === 'string' ? [v] : v;
      if (!Array.isArray(list) || !list.every((g) => typeof g === 'string' && g !== '')) {
        throw new SandboxError(`watch({ ${name} }) takes a glob or an array of globs, e.g. "**/*.py", got ${JSON.stringify(v)}`);
      }
      return list;
    };
    const wire = { recursive: opts.recursive, include: globs('include'), exclude: globs('exclude') };
    const nw = await callNative(() => this.#native.watch(dir, toWire(wire, 'watch option')));
    return new WorkspaceWatch(WATCH_TOKEN, nw);
  }

  /** Addition: a URL on the host into `port` of the newest running process that accepts on it. */
  async publish(port, opts) {
    return publish(this.#native, port, opts);
  }

  async kernel(opts) {
    opts = checkOptions(opts, OPTIONS.kernel, 'kernel(opts) takes an object, e.g. kernel({ timeoutS: 10 })',
      (k) => `unknown kernel() option \`${k}\`; it takes ${OPTIONS.kernel.join(', ')}`);
    const jupyter = opts.jupyter;
    if (jupyter !== undefined && typeof jupyter !== 'string') {
      throw new SandboxError('kernel({ jupyter }) takes the name of a kernelspec in the image as a string, e.g. kernel({ jupyter: "python3" })');
    }
    // Additions: language, cwd, env (checked on the native side as a call's cwd and env are).
    const language = opts.language;
    if (language !== undefined && !KERNEL_LANGUAGES.includes(language)) {
      throw new SandboxError(`kernel({ language }) takes one of ${KERNEL_LANGUAGES.map((l) => `"${l}"`).join(', ')}, got ${JSON.stringify(language)}`);
    }
    const onTimeout = opts.onTimeout;
    if (onTimeout !== undefined && onTimeout !== 'teardown' && onTimeout !== 'interrupt') {
      throw new SandboxError(`kernel({ onTimeout }) takes "teardown" or "interrupt", got ${JSON.stringify(onTimeout)}`);
    }
    const wire = { timeoutS: opts.timeoutS, jupyter, language, cwd: opts.cwd, env: opts.env, onTimeout };
    const nk = await callNative(() => this.#native.kernel(toWire(wire, 'kernel option')));
    return new Kernel(KERNEL_TOKEN, nk, this.#onStdout, this.#onStderr, this.#kernelOrigin(wire));
  }

  /** What a kernel opened with `wire` needs of this Sandbox to fork and checkpoint itself. */
  #kernelOrigin(wire) {
    // A checkpoint keeps the kernel's options but `env`, which may hold secrets: restoreKernel()
    // takes it again.
    const { env: _env, ...kept } = wire;
    return {
      sandbox: this,
      fork: (count, frozen) => this.#forkCopies(count, frozen),
      adopt: async (sb, state, left) => {
        const k = await sb.kernel(wire);
        try {
          return await Kernel.load(k, state, left, true);
        } catch (e) {
          await k.close().catch(() => {});
          throw e;
        }
      },
      checkpointDir,
      writeCheckpoint: async (dir, state, frozen) =>
        JSON.parse(await callNative(() => this.#native.writeCheckpoint(dir, state, frozen, this.#checkpointMeta(kept)))),
    };
  }
}

/** A checkpoint's directory as given, checked and made absolute. */
function checkpointDir(dir) {
  if (typeof dir !== 'string' || dir === '') throw new SandboxError('a checkpoint\'s directory is a path, as a string, e.g. "/var/tmp/ckpt-1"');
  return path.resolve(dir);
}

async function withSandbox(optsOrFn, maybeFn) {
  const [opts, fn] = typeof optsOrFn === 'function' ? [{}, optsOrFn] : [optsOrFn, maybeFn];
  if (typeof fn !== 'function') throw new SandboxError('withSandbox(opts, fn) needs an async function (sandbox) => ...');
  const sb = new Sandbox(opts);
  let result;
  try {
    await sb.open();
    result = await fn(sb);
  } catch (e) {
    // The caller's error is the one to see; a failing close() rides along instead of masking it.
    await sb.close().catch((closeError) => {
      if (e && typeof e === 'object') e.closeError = closeError;
    });
    throw e;
  }
  await sb.close();
  return result;
}

async function runCode(code, opts) {
  const { language, ...rest } = opts || {};
  return withSandbox(rest, (sb) => sb.runCode(code, language === undefined ? undefined : { language }));
}


module.exports = { Sandbox, withSandbox, runCode };
