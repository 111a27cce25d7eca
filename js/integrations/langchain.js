'use strict';
// kern-sandbox/langchain: a LangChain Deep Agents (deepagents JS) sandbox backend on a kern
// Sandbox.
//
//   const backend = await KernSandbox.create({ image: "python:3.12-slim" });
//   const agent = createDeepAgent({ model, backend });
//   ...
//   await backend.close();
//
// deepagents' BaseSandbox builds every file operation (ls, read, grep, glob, write, edit,
// delete) on three primitives: `execute`, `uploadFiles`, `downloadFiles`. This class supplies
// them (commands as `sh -c` in a fresh box, workspace files from the host, other paths through
// a box) and nothing else, so the protocol's behaviour is deepagents' own. deepagents is loaded
// only when this module is: an optional peer dependency.

const crypto = require('crypto');
const { SandboxError: KernError } = require('../index.js');
const { Box, stderrOf } = require('./box.js');

let deepagents;
try {
  deepagents = require('deepagents');
} catch (e) {
  throw new KernError(`kern-sandbox/langchain needs the deepagents package (npm install deepagents): ${e.message}`, { cause: e, code: 'ERR_INVALID_OPTION' });
}
const { BaseSandbox, SandboxError } = deepagents;

/** deepagents' SandboxError carrying kern's message (and the kern error as its cause). */
function asDeepagentsError(e, code) {
  if (SandboxError.isInstance(e)) return e;
  if (e instanceof KernError) return new SandboxError(e.message, code, e);
  return e;
}

class KernSandbox extends BaseSandbox {
  #box;
  #id;

  /**
   * @param {object} [options] Sandbox options (image, network, egressAllow, memoryMb, mounts,
   *   ...), or `{ sandbox }`: an opened Sandbox to use (then close() leaves it open).
   */
  constructor(options) {
    super();
    try {
      this.#box = new Box(options);
    } catch (e) {
      throw asDeepagentsError(e, 'NOT_INITIALIZED');
    }
    this.#id = `kern-${crypto.randomUUID()}`;
  }

  /** A KernSandbox, opened (bad options reject here, with deepagents' SandboxError). */
  static async create(options) {
    const s = new KernSandbox(options);
    await s.initialize();
    return s;
  }

  get id() {
    return this.#id;
  }

  /** Whether it is usable: not closed (it opens at its first use if not opened yet). */
  get isRunning() {
    return !this.#box.closed;
  }

  /** Opens the Sandbox now (else the first operation does). */
  async initialize() {
    try {
      await this.#box.open();
    } catch (e) {
      throw asDeepagentsError(e, 'NOT_INITIALIZED');
    }
  }

  /** Closes the Sandbox: its boxes end, a temporary workspace is removed. */
  async close() {
    await this.#box.close();
  }

  /** The kern Sandbox, opened. */
  sandbox() {
    return this.#box.sandbox();
  }

  /** Runs `command` with `sh -c` in a fresh box, in the workspace: stdout then stderr as one
   * output (with a `[kern-sandbox]` line when the sandbox ended it), the exit code, and whether
   * maxOutputBytes cut it. */
  async execute(command) {
    if (typeof command !== 'string' || command === '') {
      throw new SandboxError('execute(command) takes a non-empty shell command string', 'COMMAND_FAILED');
    }
    let r;
    try {
      const sb = await this.#box.sandbox();
      r = await sb.run(['sh', '-c', command]);
    } catch (e) {
      throw asDeepagentsError(e, 'COMMAND_FAILED');
    }
    const err = stderrOf(r);
    const output = r.stdout + (r.stdout && err && !r.stdout.endsWith('\n') ? '\n' : '') + err;
    return { output, exitCode: r.exitCode, truncated: r.truncated };
  }

  /** Writes each `[path, bytes]`; one failing does not stop the others. */
  async uploadFiles(files) {
    if (!Array.isArray(files)) throw new SandboxError('uploadFiles(files) takes an array of [path, Uint8Array]', 'FILE_OPERATION_FAILED');
    const out = [];
    for (const entry of files) {
      const [p, content] = Array.isArray(entry) ? entry : [];
      if (typeof p !== 'string' || !(content instanceof Uint8Array)) {
        out.push({ path: String(p), error: 'invalid_path' });
        continue;
      }
      try {
        await this.#box.write(p, content);
        out.push({ path: p, error: null });
      } catch (e) {
        out.push({ path: p, error: await this.#why(p, e) });
      }
    }
    return out;
  }

  /** Reads each path; one failing does not stop the others. */
  async downloadFiles(paths) {
    if (!Array.isArray(paths)) throw new SandboxError('downloadFiles(paths) takes an array of paths', 'FILE_OPERATION_FAILED');
    const out = [];
    for (const p of paths) {
      try {
        const buf = await this.#box.read(p);
        out.push(buf === null
          ? { path: p, content: null, error: 'file_not_found' }
          : { path: p, content: new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength), error: null });
      } catch (e) {
        out.push({ path: String(p), content: null, error: await this.#why(p, e) });
      }
    }
    return out;
  }

  /** The protocol's error code for a failed transfer: the box says what is at the path. */
  async #why(p, e) {
    if (!(e instanceof KernError)) throw e;
    if (e.code === 'ERR_INVALID_OPTION') return 'invalid_path';
    if (e.code !== 'ERR_FILE') throw asDeepagentsError(e, 'FILE_OPERATION_FAILED');
    const st = await this.#box.stat(p).catch(() => null);
    return st && st.type === 'directory' ? 'is_directory' : 'permission_denied';
  }
}

module.exports = { KernSandbox };
