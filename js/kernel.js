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

class Kernel {
  #native;
  #onStdout;
  #onStderr;
  // Cells run in the order they were called: each waits for the one before it here, on the JS
  // thread, since calls that reach the native side together may be scheduled in any order.
  #tail = Promise.resolve();

  constructor(token, nativeKernel, onStdout, onStderr) {
    if (token !== KERNEL_TOKEN) throw new SandboxError('a Kernel comes from `await sandbox.kernel()`, not `new Kernel()`');
    this.#native = nativeKernel;
    this.#onStdout = onStdout;
    this.#onStderr = onStderr;
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

  async close() {
    await callNative(() => this.#native.close());
  }

  /** Addition: `await using k = await sb.kernel()` closes it at the block's end. */
  [ASYNC_DISPOSE]() {
    return this.close();
  }
}


module.exports = { KERNEL_TOKEN, KERNEL_LANGUAGES, Kernel };
