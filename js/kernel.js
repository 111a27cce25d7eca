'use strict';
// A kernel (`sb.kernel()`): cells run in one live interpreter, in the order they were called.

const OPTIONS = require('./options.js');
const { SandboxError, callNative } = require('./errors.js');
const { ExecutionResult, liveResults } = require('./results.js');
const { byLines } = require('./streams.js');
const { ASYNC_DISPOSE, toWire, checkOptions, underSignal, resolvesOnAbort, checkCallback, guard, checkLineBuffered } = require('./calls.js');

/** The languages a driver kernel runs (`kernel({ language })`, an addition). */
const KERNEL_LANGUAGES = ['python', 'node', 'typescript'];

/** Only Sandbox makes kernels. */
const KERNEL_TOKEN = Symbol('kernel');

/** Resolves once `before` (a kernel's earlier cells) has settled; rejects with the reason if
 * `signal` aborts first, and the cell waiting for its turn then never runs. */
function turnOf(before, signal) {
  if (!signal) return before;
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    before.then(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    });
  });
}

/** The names a saved state left out, as `notCarried` gives them. */
function leftOf(state) {
  return JSON.parse(state.left).map(([name, reason]) => ({ name, reason }));
}

/** Warns once about what a fork or checkpoint left out, so it is never lost silently. */
function warnLeft(what, left) {
  if (left.length === 0) return;
  const shown = left.slice(0, 5).map((l) => `${l.name} (${l.reason})`).join(', ');
  process.emitWarning(`${what} left out ${left.length} name${left.length === 1 ? '' : 's'} of the kernel that could not be carried: ${shown}${left.length > 5 ? ', …' : ''} (see notCarried)`, { code: 'KERN_STATE_LEFT_OUT' });
}

/** `{ count }` of fork(), checked. */
function forkCount(opts, what) {
  const { count = 1 } = checkOptions(opts, ['count'], `${what}(opts) takes an options object, such as { count: 4 }`,
    (k) => `unknown ${what}() option \`${k}\` (${what}() takes { count })`);
  if (!Number.isInteger(count) || count < 1 || count > 64) {
    throw new SandboxError(`${what}({ count }) takes a whole number from 1 to 64, got ${JSON.stringify(count)}`);
  }
  return count;
}

class Kernel {
  #native;
  #onStdout;
  #onStderr;
  // Cells run in the order they were called: each waits for the one before it here, on the JS
  // thread, since calls that reach the native side together may be scheduled in any order.
  #tail = Promise.resolve();
  // The Sandbox that opened it and its options (fork and checkpoint open kernels like it), and
  // whether closing this kernel closes that Sandbox (a fork's, a restore's own).
  #origin;
  #owns = false;
  #notCarried = [];

  constructor(token, nativeKernel, onStdout, onStderr, origin) {
    if (token !== KERNEL_TOKEN) throw new SandboxError('a Kernel comes from `await sandbox.kernel()`, not `new Kernel()`');
    this.#native = nativeKernel;
    this.#onStdout = onStdout;
    this.#onStderr = onStderr;
    this.#origin = origin;
  }

  /** Runs `job` in this kernel's turn: after the cells called before it, before those after. */
  #inTurn(job) {
    const turn = this.#tail.then(job);
    this.#tail = turn.catch(() => {});
    return turn;
  }

  async runCode(code, opts) {
    if (typeof code !== 'string') throw new SandboxError('runCode(code) takes the code as a string');
    // Refused at once: queued behind a paused cell, it would wait for resume().
    if (this.#native.paused) throw new SandboxError('the kernel is paused: call resume() first (a paused box runs nothing until then)');
    opts = checkOptions(opts, OPTIONS.cell, 'per-cell options must be an object',
      (k) => `unknown per-cell option \`${k}\`; a kernel cell takes ${OPTIONS.cell.join(', ')}`);
    checkCallback('onResult', opts.onResult);
    checkCallback('onStdout', opts.onStdout);
    checkCallback('onStderr', opts.onStderr);
    checkLineBuffered(opts.lineBuffered);
    const resolve = resolvesOnAbort(opts.onAbort);
    const errors = [];
    // Addition: a cell's own callbacks win over the Sandbox's; null turns streaming off.
    const onStdout = opts.onStdout === undefined ? this.#onStdout : opts.onStdout;
    const onStderr = opts.onStderr === undefined ? this.#onStderr : opts.onStderr;
    const out = byLines(guard('onStdout', onStdout, errors), opts.lineBuffered);
    const err = byLines(guard('onStderr', onStderr, errors), opts.lineBuffered);
    const live = liveResults(guard('onResult', opts.onResult, errors));
    const request = toWire({ code, timeoutS: opts.timeoutS, env: opts.env }, 'cell');
    const signal = opts.signal;
    if (signal && signal.aborted) throw signal.reason;
    // An abort interrupts the cell as its timeout would; the native call settles once it has
    // stopped (or the kernel was torn down).
    const before = this.#tail;
    const turn = turnOf(before, signal).then(() =>
      underSignal(signal, this.#native, (id) => this.#native.runCode(request, out.fn, err.fn, id, live), resolve));
    // The next cell waits for this one, and for those before it: this one may have left early.
    this.#tail = before.then(() => turn).catch(() => {});
    let r;
    try {
      r = await turn;
    } finally {
      out.flush();
      err.flush();
    }
    return new ExecutionResult(r, errors);
  }

  /** Addition: freezes the kernel's box (a running cell too, its timeout standing still)
   * until resume(); memory kept, no CPU. Cells called meanwhile are refused. */
  async pause() {
    await callNative(() => this.#native.pause());
  }

  /** Addition: lets a paused kernel run again; a paused cell goes on where it stopped. */
  async resume() {
    await callNative(() => this.#native.resume());
  }

  /** Addition: whether the kernel is paused. */
  get paused() {
    return this.#native.paused;
  }

  /** Addition: `count` new kernels, each in a fresh box of a new Sandbox (a fork of this
   * kernel's: its options, a copy of its workspace), holding this kernel's state; see
   * index.d.ts. This kernel goes on. */
  async fork(opts) {
    const count = forkCount(opts, 'fork');
    if (this.#native.paused) throw new SandboxError('the kernel is paused: call resume() before fork() (its state is read by its own interpreter)');
    return this.#inTurn(async () => {
      const state = await callNative(() => this.#native.saveState());
      const left = leftOf(state);
      const sandboxes = await this.#withFrozen((frozen) => this.#origin.fork(count, frozen));
      try {
        const kernels = await Promise.all(sandboxes.map((sb) => this.#origin.adopt(sb, state, left)));
        warnLeft('fork()', left);
        return kernels;
      } catch (e) {
        await Promise.all(sandboxes.map((sb) => sb.close().catch(() => {})));
        throw e;
      }
    });
  }

  /** Addition: writes this kernel's state and its Sandbox's workspace to the new host
   * directory `dir`, then closes the kernel unless `keepRunning`; see index.d.ts. */
  async checkpoint(dir, opts) {
    const { keepRunning = false } = checkOptions(opts, ['keepRunning'], 'checkpoint(dir, opts) takes an options object, such as { keepRunning: true }',
      (k) => `unknown checkpoint() option \`${k}\` (checkpoint() takes { keepRunning })`);
    if (typeof keepRunning !== 'boolean') throw new SandboxError('checkpoint() option `keepRunning` takes true or false');
    if (this.#native.paused) throw new SandboxError('the kernel is paused: call resume() before checkpoint() (its state is read by its own interpreter)');
    const at = this.#origin.checkpointDir(dir);
    const written = await this.#inTurn(async () => {
      const state = await callNative(() => this.#native.saveState());
      const manifest = await this.#withFrozen((frozen) => this.#origin.writeCheckpoint(at, state, frozen));
      return { dir: at, bytes: state.bytes, notCarried: leftOf(state), id: manifest.id };
    });
    warnLeft('checkpoint()', written.notCarried);
    if (!keepRunning) await this.close();
    return written;
  }

  /** Runs `job(nativeKernel)` with this kernel's box paused, so its workspace holds still; on
   * a host that cannot pause a box (unprivileged, cgroup v1), while it is idle between cells. */
  async #withFrozen(job) {
    let paused = false;
    try {
      await callNative(() => this.#native.pause());
      paused = true;
    } catch (e) {
      if (e.code !== 'ERR_HOST_UNSUPPORTED') throw e;
    }
    try {
      return await job(this.#native);
    } finally {
      if (paused) await callNative(() => this.#native.resume());
    }
  }

  /** Addition: what a fork or restore of a kernel did not carry (names whose values could not
   * be pickled), with why; [] for a kernel opened as new. */
  get notCarried() {
    return this.#notCarried.map((l) => ({ ...l }));
  }

  /** Addition: the Sandbox this kernel runs in (for a fork, the fork's own Sandbox). */
  get sandbox() {
    return this.#origin.sandbox;
  }

  /** Makes `k` the kernel of a fork or restore: it loads `state`, and closing it closes its
   * Sandbox when `owns`. */
  static async load(k, state, left, owns) {
    k.#owns = owns;
    k.#notCarried = left;
    await callNative(() => k.#native.loadState(state));
    return k;
  }

  async close() {
    try {
      await callNative(() => this.#native.close());
    } finally {
      if (this.#owns) await this.#origin.sandbox.close();
    }
  }

  /** Addition: `await using k = await sb.kernel()` closes it at the block's end. */
  [ASYNC_DISPOSE]() {
    return this.close();
  }
}


module.exports = { KERNEL_TOKEN, KERNEL_LANGUAGES, Kernel, forkCount, leftOf };
