'use strict';
// Background processes (`sb.spawn`) and terminals (`sb.terminal`), both additions.

const net = require('net');
const { SandboxError, fromNative, callNative } = require('./errors.js');
const { ExecutionResult } = require('./results.js');
const { guard, toBuffer, checkSignalName } = require('./calls.js');
const { publish } = require('./publish.js');

/** Only Sandbox makes processes and terminals. */
const PROCESS_TOKEN = Symbol('process');

/** What SandboxProcess and Terminal share: the native process, its result, kill and wait. */
class Steered {
  #native;
  #done;

  constructor(nativeProcess, streams, errors, signal) {
    this.#native = nativeProcess;
    let aborted = false;
    const onAbort = () => {
      aborted = true;
      nativeProcess.kill('SIGKILL').catch(() => {});
    };
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    // Started at once, so the streams end with the process even if nobody waits.
    this.#done = callNative(() => nativeProcess.wait())
      .then((r) => {
        if (aborted) throw signal.reason;
        return new ExecutionResult(r, errors);
      })
      .finally(() => {
        if (signal) signal.removeEventListener('abort', onAbort);
        for (const s of streams) s.end();
      });
    this.#done.catch(() => {});
  }

  get pid() {
    return this.#native.pid;
  }

  get running() {
    return this.#native.running();
  }

  async write(data) {
    await callNative(() => this.#native.write(toBuffer(data, 'write(data): data must be a string or a Buffer')));
  }

  async kill(signal) {
    checkSignalName(signal);
    await callNative(() => this.#native.kill(signal));
  }

  wait() {
    return this.#done;
  }

  get native() {
    return this.#native;
  }
}

/** Addition: a background process (`sb.spawn`). */
class SandboxProcess extends Steered {
  #stdout;
  #stderr;

  constructor(token, nativeProcess, out, err, errors, signal) {
    if (token !== PROCESS_TOKEN) throw new SandboxError('a SandboxProcess comes from `await sandbox.spawn()`');
    super(nativeProcess, [out, err], errors, signal);
    this.#stdout = out;
    this.#stderr = err;
  }

  get stdout() {
    return this.#stdout;
  }

  get stderr() {
    return this.#stderr;
  }

  async end() {
    await callNative(() => this.native.end());
  }

  async connect(port, opts) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new SandboxError(`connect(port): the port must be a whole number from 1 to 65535, got ${String(port)}`);
    }
    const waitS = opts?.waitS ?? null;
    if (waitS !== null && (typeof waitS !== 'number' || !Number.isFinite(waitS))) {
      throw new SandboxError(`connect(port, { waitS }): waitS must be a number of seconds, got ${String(waitS)}`);
    }
    const fd = await callNative(() => this.native.connect(JSON.stringify({ port, waitS })));
    return new net.Socket({ fd, readable: true, writable: true });
  }

  /** Addition: a URL on the host into `port` of the process's box (see index.d.ts). */
  publish(port, opts) {
    return publish(this.native, port, opts);
  }
}

/** Addition: a program on a terminal of its box (`sb.terminal`). */
class Terminal extends Steered {
  #out;
  #errors;

  constructor(token, nativeProcess, out, errors) {
    if (token !== PROCESS_TOKEN) throw new SandboxError('a Terminal comes from `await sandbox.terminal()`');
    super(nativeProcess, [out], errors);
    this.#out = out;
    this.#errors = errors;
  }

  onData(cb) {
    if (typeof cb !== 'function') throw new SandboxError('onData(cb) takes a function (data: Buffer) => void');
    // A throw there can't break the terminal; the first one becomes a note of its result.
    return this.#out.listen(guard('onData', cb, this.#errors));
  }

  [Symbol.asyncIterator]() {
    return this.#out[Symbol.asyncIterator]();
  }

  resize(cols, rows) {
    try {
      this.native.resize(JSON.stringify({ cols: cols === undefined ? null : cols, rows: rows === undefined ? null : rows }));
    } catch (e) {
      throw fromNative(e);
    }
  }
}


module.exports = { PROCESS_TOKEN, SandboxProcess, Terminal };
