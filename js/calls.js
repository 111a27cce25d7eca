'use strict';
// What every call shares on its way to the native side: argument checks, options as JSON,
// user callbacks made safe, a call's `signal`, bytes in.

const { SandboxError, callNative } = require('./errors.js');

// Addition: `await using`. Node 20 may lack Symbol.asyncDispose; Node itself (and TypeScript's
// downlevel helper) then use the registered symbol of the same name, so that is the fallback
// (no polyfill: Symbol.asyncDispose itself is left alone).
const ASYNC_DISPOSE = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

/** Options travel as JSON: refuse what JSON would silently change (functions, NaN, ...). */
function toWire(value, where) {
  const check = (v, at) => {
    if (v === undefined) return;
    const t = typeof v;
    if (t === 'function' || t === 'symbol' || t === 'bigint') {
      throw new SandboxError(`${at} must be plain data, got a ${t}`);
    }
    if (t === 'number' && !Number.isFinite(v)) {
      throw new SandboxError(`${at} must be a finite number, got ${v}`);
    }
    if (Array.isArray(v)) v.forEach((x, i) => {
      if (x === undefined) throw new SandboxError(`${at}[${i}] is undefined`);
      check(x, `${at}[${i}]`);
    });
    else if (v !== null && t === 'object') {
      for (const [k, x] of Object.entries(v)) check(x, `${at}.${k}`);
    }
  };
  check(value, where);
  return JSON.stringify(value);
}

/** An options argument: absent (-> {}) or an object whose keys are all in `known`; `notObject`
 * and `unknown(key)` are the errors' messages. A `signal` (a call's or a cell's) must be an
 * AbortSignal. */
function checkOptions(opts, known, notObject, unknown) {
  if (opts === undefined || opts === null) return {};
  if (typeof opts !== 'object' || Array.isArray(opts)) throw new SandboxError(notObject);
  for (const k of Object.keys(opts)) {
    if (!known.includes(k)) throw new SandboxError(unknown(k));
  }
  if (opts.signal !== undefined && opts.signal !== null && !(opts.signal instanceof AbortSignal)) {
    throw new SandboxError('option `signal` must be an AbortSignal (from an AbortController, or AbortSignal.timeout())');
  }
  return opts;
}

/** Runs a native call under `signal` (none: just runs it), as Node's own APIs do: an aborted
 * signal rejects with its reason and starts nothing; an abort during the call stops it through
 * `calls.abortCall` (a call's box is ended, a kernel cell is interrupted as at its timeout), and
 * only once the native call has settled does this reject with the reason. `start(id)` starts the
 * native call with its abort's id. */
/** Runs native call `start` under `signal`: an abort ends the call, which then rejects with
 * `signal.reason`, or with `resolve` (a call's `onAbort: "resolve"`) resolves with what the call
 * had made by then (its output, its `killed` fault), once it has stopped. A call aborted before
 * it started rejects either way: it made nothing. */
async function underSignal(signal, calls, start, resolve = false) {
  if (!signal) return callNative(() => start(undefined));
  if (signal.aborted) throw signal.reason;
  // Registered before the call starts, so an abort can't come first.
  const id = calls.beginCall();
  let aborted = false;
  const onAbort = () => {
    aborted = true;
    calls.abortCall(id);
  };
  signal.addEventListener('abort', onAbort, { once: true });
  let r;
  try {
    r = await callNative(() => start(id));
  } catch (e) {
    if (aborted) throw signal.reason;
    throw e;
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  if (aborted && !resolve) throw signal.reason;
  return r;
}

/** A call's `onAbort` (an addition): true for "resolve". */
function resolvesOnAbort(v) {
  if (v === undefined || v === 'reject') return false;
  if (v === 'resolve') return true;
  throw new SandboxError(`option \`onAbort\` takes "reject" (the default: the call rejects with signal.reason) or "resolve" (it resolves with the output made until the abort), got ${JSON.stringify(v)}`);
}

function checkCallback(name, fn) {
  if (fn !== undefined && fn !== null && typeof fn !== 'function') {
    const sig = name === 'onResult' ? '(result: Result) => void' : '(chunk: Buffer) => void';
    throw new SandboxError(`option \`${name}\` must be a function ${sig}, or null`);
  }
}

/** Wraps a user callback so a throw can't break the call; the first error becomes a note. */
function guard(name, fn, errors) {
  if (typeof fn !== 'function') return undefined;
  const failed = (e) => {
    const later = name === 'onResult' ? 'results' : 'chunks';
    if (errors.length === 0) errors.push(`note: ${name} threw ${e && e.message ? e.message : e}; later ${later} were still delivered`);
  };
  return (chunk) => {
    try {
      const r = fn(chunk);
      // An async callback's promise goes back to the native side, which waits for it (and the
      // box's writes with it) before the next chunk.
      if (r && typeof r.then === 'function') return Promise.resolve(r).then(() => undefined, failed);
    } catch (e) {
      failed(e);
    }
    return undefined;
  };
}

function checkLineBuffered(v) {
  if (v !== undefined && v !== null && typeof v !== 'boolean') {
    throw new SandboxError('option `lineBuffered` must be a boolean (true: onStdout/onStderr get whole lines)');
  }
}

/** Bytes given as a string (UTF-8), a Buffer or a Uint8Array (not copied), as a Buffer;
 * anything else is a SandboxError saying `wrong`. */
function toBuffer(data, wrong) {
  if (typeof data === 'string') return Buffer.from(data, 'utf8');
  if (Buffer.isBuffer(data)) return data;
  if (data instanceof Uint8Array) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  throw new SandboxError(wrong);
}

/** A call's `stdin` as the Buffer the native side feeds to the workload, or undefined. */
function stdinBuffer(stdin) {
  if (stdin === undefined || stdin === null) return undefined;
  return toBuffer(stdin, 'option `stdin` must be a string or a Buffer');
}

/** What of a call's options goes to the native side as data (the callbacks and stdin stay
 * out of the JSON). */
function callRequest(perCall) {
  return { timeoutS: perCall.timeoutS, env: perCall.env, cwd: perCall.cwd, user: perCall.user };
}

function checkRelPath(method, p) {
  if (typeof p !== 'string' || p === '') {
    throw new SandboxError(`${method}() takes a workspace-relative path as a non-empty string, e.g. "out/result.csv"`);
  }
}

/** A byte count option (maxBytes, offset, length): absent -> null, else a non-negative safe
 * integer. */
function byteCount(method, name, v) {
  if (v === undefined || v === null) return null;
  if (!(Number.isSafeInteger(v) && v >= 0)) {
    throw new SandboxError(`${method} ${name} must be a non-negative integer, got ${String(v)}`);
  }
  return v;
}

function checkSignalName(signal) {
  if (signal !== undefined && typeof signal !== 'string') {
    throw new SandboxError('kill(signal): the signal is a name such as "SIGTERM" or "SIGINT"');
  }
}


module.exports = {
  ASYNC_DISPOSE,
  toWire,
  checkOptions,
  underSignal,
  resolvesOnAbort,
  checkCallback,
  guard,
  checkLineBuffered,
  toBuffer,
  stdinBuffer,
  callRequest,
  checkRelPath,
  byteCount,
  checkSignalName,
};
