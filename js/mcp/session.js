'use strict';
// One MCP session's state: its Sandbox (opened at the first tool call that needs it, closed
// with the session), and the kernels and background processes its tools started, by id.

const crypto = require('crypto');
const { Sandbox } = require('../index.js');
const { ToolError } = require('./results.js');

/** The most kernels and processes one session may hold at once: each is a live box. */
const MAX_LIVE = 16;

class Session {
  #opts;
  #opening = null;
  #closed = false;

  /** `opts`: the Sandbox options from the flags (config.js). Unless they say otherwise, a
   * stream past `maxOutputBytes` is kept whole in the workspace (`spillOutput`), where
   * read_file pages through it (`results.keepWhole` does the same for one past what a result
   * shows the model). */
  constructor(opts) {
    this.#opts = { spillOutput: true, ...opts };
    this.kernels = new Map();
    this.processes = new Map();
    /** Where the boxes see the workspace: tool paths may be relative to it or under it. */
    this.mount = (opts.workspaceMount || '/workspace').replace(/\/+$/, '') || '/';
    /** Whether code in its boxes may reach other hosts (the MCP tools' openWorldHint). */
    this.networked = opts.network === true || (Array.isArray(opts.egressAllow) && opts.egressAllow.length > 0);
  }

  /** The session's open Sandbox; opened once, on first use. */
  sandbox() {
    if (this.#closed) return Promise.reject(new ToolError('this MCP session has ended'));
    if (!this.#opening) {
      this.#opening = new Sandbox(this.#opts).open();
      // A failed open is not kept: the next tool call tries again and says why.
      this.#opening.catch(() => {
        this.#opening = null;
      });
    }
    return this.#opening;
  }

  /** A workspace-relative path from what a tool was given: relative, or absolute under the
   * workspace mount. Anything else is refused with what to give instead. */
  workspacePath(p, { allowRoot = false } = {}) {
    let rel = p;
    if (p.startsWith('/')) {
      if (p === this.mount) rel = '';
      else if (p.startsWith(`${this.mount}/`)) rel = p.slice(this.mount.length + 1);
      else throw new ToolError(`${p} is outside the workspace: give a path relative to ${this.mount} or under it (to reach other paths, use run_command)`);
    }
    rel = rel.replace(/^(\.\/)+/, '').replace(/\/+$/, '');
    if (rel === '.' ) rel = '';
    if (rel.split('/').includes('..')) throw new ToolError(`${p}: ".." is not allowed in a workspace path`);
    if (rel === '' && !allowRoot) throw new ToolError(`${p}: give a file in the workspace, not the workspace itself`);
    return rel;
  }

  /** A new id for a kernel or process, checking the session's cap on live ones. */
  newId(prefix) {
    const ended = [...this.processes].filter(([, p]) => p.result);
    const running = this.processes.size - ended.length;
    if (this.kernels.size + running >= MAX_LIVE) {
      throw new ToolError(`this session already holds ${MAX_LIVE} kernels and running processes: close_kernel or kill_process one first`);
    }
    // Ended processes wait for their last read_process_output, but not for ever: the oldest go.
    for (const [id] of ended.slice(0, Math.max(0, ended.length - MAX_LIVE))) this.processes.delete(id);
    return `${prefix}-${crypto.randomBytes(6).toString('hex')}`;
  }

  /** Ends every kernel, process and box of the session, and its Sandbox (its temp workspace). */
  async close() {
    if (this.#closed) return;
    this.#closed = true;
    const opening = this.#opening;
    if (!opening) return;
    let sb;
    try {
      sb = await opening;
    } catch {
      return;
    }
    // close() ends the Sandbox's kernels and processes with it.
    await sb.close();
  }
}

module.exports = { Session, MAX_LIVE };
