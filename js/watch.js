'use strict';
// `sb.watch()` (an addition): the workspace's changes as an async iterator of events.

const { callNative } = require('./errors.js');
const { ASYNC_DISPOSE } = require('./calls.js');

const WATCH_TOKEN = Symbol('WorkspaceWatch');

function toEvent(e) {
  const ev = { type: e.type, path: e.path, isDir: e.isDir };
  if (e.type === 'rename') ev.oldPath = e.oldPath;
  if (e.type === 'overflow') ev.dropped = e.dropped ?? null;
  return ev;
}

/** The events of one watch, in order; it ends at close(), when a `for await` over it is left,
 * or with the Sandbox. */
class WorkspaceWatch {
  #native;
  #closed = false;

  constructor(token, native) {
    if (token !== WATCH_TOKEN) throw new TypeError('WorkspaceWatch is made by sandbox.watch()');
    this.#native = native;
  }

  async *[Symbol.asyncIterator]() {
    try {
      for (;;) {
        const batch = await callNative(() => this.#native.next());
        if (batch.length === 0) return;
        for (const e of batch) yield toEvent(e);
      }
    } finally {
      this.close();
    }
  }

  /** Ends the watch: its inotify instance goes now; what was queued is still delivered. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#native.close();
  }

  [ASYNC_DISPOSE]() {
    this.close();
    return Promise.resolve();
  }
}

module.exports = { WATCH_TOKEN, WorkspaceWatch };
