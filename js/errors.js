'use strict';
// The error classes, and the mapping of the stable code the native side puts in front of each
// message (`[ERR_FILE] ...`) to them.

// Addition: every SandboxError has a `code` (the union SandboxErrorCode in index.d.ts). The
// native side's come in front of its messages (see fromNative); one made here is a bad argument
// unless `options.code` says otherwise.
const CODES = ['ERR_INVALID_OPTION', 'ERR_MOUNT_REFUSED', 'ERR_NOT_OPEN', 'ERR_CLOSED', 'ERR_FILE',
  'ERR_IMAGE', 'ERR_SETUP_FAILED', 'ERR_ISOLATION_UNAVAILABLE', 'ERR_HOST_UNSUPPORTED',
  'ERR_CONNECTION_REFUSED', 'ERR_RUNTIME', 'ERR_INTERNAL'];

class SandboxError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'SandboxError';
    const code = options && options.code;
    this.code = CODES.includes(code) ? code : 'ERR_INVALID_OPTION';
  }
}

class MountRefused extends SandboxError {
  constructor(message, options) {
    super(message, { code: 'ERR_MOUNT_REFUSED', ...options });
    this.name = 'MountRefused';
  }
}

/** Turns an error from the native layer into the class its code names. */
function fromNative(e) {
  // The JS layer's own checks (toWire, in a native call's argument) are already classified.
  if (e instanceof SandboxError) return e;
  const message = (e && e.message) || String(e);
  const m = /^\[(ERR_[A-Z_]+)\] ([\s\S]*)$/.exec(message);
  if (!m) return new SandboxError(`internal error in kern-sandbox: ${message}`, { cause: e, code: 'ERR_INTERNAL' });
  const Cls = m[1] === 'ERR_MOUNT_REFUSED' ? MountRefused : SandboxError;
  // Extra properties (a failed setup's exitCode and stderrTail) follow a NUL, as JSON.
  const nul = m[2].indexOf('\0');
  const err = new Cls(nul < 0 ? m[2] : m[2].slice(0, nul), { code: CODES.includes(m[1]) ? m[1] : 'ERR_INTERNAL' });
  if (nul >= 0) {
    try {
      Object.assign(err, JSON.parse(m[2].slice(nul + 1)));
    } catch {
      // Details are an extra; the message already says everything.
    }
  }
  return err;
}

async function callNative(fn) {
  try {
    return await fn();
  } catch (e) {
    throw fromNative(e);
  }
}


module.exports = { CODES, SandboxError, MountRefused, fromNative, callNative };
