'use strict';
// `publish()` (an addition, on a Sandbox and on a SandboxProcess): a URL on the host into a
// box's port, with a token; the proxy is native (src/session/publish.rs).

const { SandboxError, callNative } = require('./errors.js');
const { ASYNC_DISPOSE, checkOptions, toWire } = require('./calls.js');
const OPTIONS = require('./options.js');

const PUBLISHED_TOKEN = Symbol('PublishedPort');

/** A published port, until close() (or its process's end, or its Sandbox's close()). */
class PublishedPort {
  #native;

  constructor(token, native) {
    if (token !== PUBLISHED_TOKEN) throw new TypeError('PublishedPort is made by publish()');
    this.#native = native;
  }

  /** The URL with the token: `fetch(url)` or a browser works as is. */
  get url() {
    return this.#native.url;
  }

  get token() {
    return this.#native.token;
  }

  /** The host's address and port it listens on. */
  get host() {
    return this.#native.host;
  }

  get port() {
    return this.#native.port;
  }

  /** Revokes it: resolves once the host's port is closed and every connection through it
   * ended. */
  async close() {
    await this.#native.close();
  }

  [ASYNC_DISPOSE]() {
    return this.close();
  }
}

/** Checks `publish(port, opts)` and calls `native.publish`. */
async function publish(native, port, opts) {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new SandboxError(`publish(port): the port must be a whole number from 1 to 65535, got ${String(port)}`);
  }
  opts = checkOptions(opts, OPTIONS.publish, 'publish(port, opts): opts must be an object such as { protocol: "http" }',
    (k) => `unknown publish() option \`${k}\`; it takes ${OPTIONS.publish.join(', ')}`);
  for (const k of ['protocol', 'host']) {
    if (opts[k] !== undefined && typeof opts[k] !== 'string') {
      throw new SandboxError(`publish({ ${k} }) takes a string, got ${JSON.stringify(opts[k])}`);
    }
  }
  const wire = toWire({ port, protocol: opts.protocol, host: opts.host }, 'publish option');
  const n = await callNative(() => native.publish(wire));
  return new PublishedPort(PUBLISHED_TOKEN, n);
}

module.exports = { PublishedPort, publish };
