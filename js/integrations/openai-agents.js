'use strict';
// kern-sandbox/openai-agents: a sandbox client for the OpenAI Agents SDK (@openai/agents), so a
// SandboxAgent's shell, filesystem (apply_patch, view_image) and manifest run in kern boxes.
//
//   const client = new KernSandboxClient({ image: "python:3.12-slim" });
//   await run(new SandboxAgent({ name, model, instructions }), "task", { sandbox: { client } });
//
// The SDK's SandboxClient/SandboxSession interfaces (@openai/agents-core/sandbox) are the
// specification. The session's workspace is the manifest's root (default /workspace, kern's
// `workspaceMount`); every command is `sh -c` in a fresh box of one Sandbox, so only files
// persist between commands. @openai/agents is loaded only when this module is: an optional peer
// dependency.

const { SandboxError: KernError } = require('../index.js');
const { Box, stderrOf } = require('./box.js');

let agents;
let sbx;
try {
  agents = require('@openai/agents');
  sbx = require('@openai/agents/sandbox');
} catch (e) {
  throw new KernError(`kern-sandbox/openai-agents needs the @openai/agents package (npm install @openai/agents): ${e.message}`, { cause: e, code: 'ERR_INVALID_OPTION' });
}

const PROVIDER = 'kern-sandbox';
const CONFIG_CODES = new Set(['ERR_INVALID_OPTION', 'ERR_MOUNT_REFUSED', 'ERR_IMAGE', 'ERR_SETUP_FAILED', 'ERR_ISOLATION_UNAVAILABLE', 'ERR_HOST_UNSUPPORTED']);

/** The SDK's sandbox error for a kern SandboxError, its message kept (other errors as they are). */
function asAgentsError(e, details = {}) {
  if (!(e instanceof KernError)) return e;
  const d = { provider: PROVIDER, kernCode: e.code, ...details };
  let err;
  if (CONFIG_CODES.has(e.code)) err = new sbx.SandboxConfigurationError(e.message, d);
  else if (e.code === 'ERR_CLOSED' || e.code === 'ERR_NOT_OPEN') err = new sbx.SandboxLifecycleError(e.message, d);
  else if (e.code === 'ERR_FILE') err = new sbx.SandboxPathResolutionError(e.message, d);
  else err = new sbx.SandboxProviderError(e.message, d);
  err.cause = e;
  return err;
}

async function guarded(fn, details) {
  try {
    return await fn();
  } catch (e) {
    throw asAgentsError(e, details);
  }
}

const BYTES_PER_TOKEN = 4;

/** Output cut to about `maxTokens` tokens (4 bytes each, as the SDK counts): its head and tail
 * around a `...N tokens truncated...` marker. */
function truncate(output, maxTokens) {
  const bytes = Buffer.byteLength(output);
  if (maxTokens === undefined || maxTokens === null || bytes <= maxTokens * BYTES_PER_TOKEN) return { text: output };
  const budget = Math.max(0, maxTokens * BYTES_PER_TOKEN);
  const buf = Buffer.from(output);
  const head = buf.subarray(0, Math.floor(budget / 2)).toString('utf8').replace(/\uFFFD$/, '');
  const tail = buf.subarray(bytes - Math.ceil(budget / 2)).toString('utf8').replace(/^\uFFFD/, '');
  const cut = Math.ceil((bytes - Buffer.byteLength(head) - Buffer.byteLength(tail)) / BYTES_PER_TOKEN);
  return { text: `${head}...${cut} tokens truncated...${tail}`, originalTokenCount: Math.ceil(bytes / BYTES_PER_TOKEN) };
}

/** What `execCommand` shows the model: the SDK's own exec response layout. */
function formatExec(r) {
  const lines = [`Chunk ID: ${Math.random().toString(16).slice(2, 8)}`, `Wall time: ${r.wallTimeSeconds.toFixed(4)} seconds`];
  if (typeof r.exitCode === 'number') lines.push(`Process exited with code ${r.exitCode}`);
  if (typeof r.originalTokenCount === 'number') lines.push(`Original token count: ${r.originalTokenCount}`);
  lines.push('Output:', r.output);
  return lines.join('\n');
}

const IMAGE_TYPES = [
  ['image/png', [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]],
  ['image/jpeg', [0xff, 0xd8, 0xff]],
  ['image/gif', [0x47, 0x49, 0x46, 0x38]],
  ['image/bmp', [0x42, 0x4d]],
];
const MAX_IMAGE_BYTES = 10 * 1024 * 1024;

function imageType(buf, p) {
  for (const [type, magic] of IMAGE_TYPES) {
    if (magic.every((b, i) => buf[i] === b)) return type;
  }
  if (buf.subarray(0, 4).toString('latin1') === 'RIFF' && buf.subarray(8, 12).toString('latin1') === 'WEBP') return 'image/webp';
  if (/\.svg$/i.test(p) || /^\s*(<\?xml[^>]*>\s*)?<svg[\s>]/.test(buf.subarray(0, 512).toString('utf8'))) return 'image/svg+xml';
  return null;
}

/** A kern session of the Agents SDK (`SandboxSession`). Made by KernSandboxClient.create(). */
class KernSandboxSession {
  #box;
  #preStopHooks = new Set();

  constructor(state, box) {
    this.state = state;
    this.#box = box;
  }

  /** The kern Sandbox under the session, opened. */
  sandbox() {
    return guarded(() => this.#box.sandbox());
  }

  /** Opens the Sandbox and writes the manifest's entries into the workspace. */
  async start() {
    await guarded(() => this.#box.open());
    if (!this.state.workspaceReady) {
      await this.#materialize(this.state.manifest.entries);
      this.state.workspaceReady = true;
    }
  }

  async running() {
    return this.#box.running;
  }

  registerPreStopHook(hook) {
    this.#preStopHooks.add(hook);
    return () => this.#preStopHooks.delete(hook);
  }

  async runPreStopHooks() {
    // A copy: a hook may unregister itself.
    for (const hook of Array.from(this.#preStopHooks)) await hook();
  }

  /** Every end of the session closes its Sandbox: its boxes end, a temporary workspace goes. */
  async stop() {
    await this.close();
  }

  async shutdown() {
    await this.close();
  }

  async delete() {
    await this.close();
  }

  async close() {
    await guarded(() => this.#box.close());
  }

  supportsPty() {
    return false;
  }

  /** Runs `cmd` with `shell -c` (default sh) in a fresh box, in `workdir` (default the
   * workspace), to its end; stdout then stderr as `output`, cut to `maxOutputTokens`. */
  async exec(args) {
    if (!args || typeof args.cmd !== 'string' || args.cmd === '') {
      throw new sbx.SandboxConfigurationError('exec takes { cmd }: a non-empty shell command string', { provider: PROVIDER });
    }
    if (args.runAs !== undefined && args.runAs !== null) {
      throw new sbx.SandboxUnsupportedFeatureError('kern-sandbox runs every command as the Sandbox\'s `user` option; runAs is not supported', { provider: PROVIDER, runAs: args.runAs });
    }
    const shell = args.shell || 'sh';
    const started = Date.now();
    const r = await guarded(async () => {
      const sb = await this.#box.sandbox();
      return sb.run([shell, '-c', args.cmd], { cwd: args.workdir, env: this.state.environment });
    }, { cmd: args.cmd });
    const stderr = stderrOf(r);
    const t = truncate(r.stdout + stderr, args.maxOutputTokens);
    return {
      output: t.text,
      stdout: r.stdout,
      stderr,
      wallTimeSeconds: (Date.now() - started) / 1000,
      exitCode: r.exitCode,
      ...(t.originalTokenCount === undefined ? {} : { originalTokenCount: t.originalTokenCount }),
    };
  }

  async execCommand(args) {
    return formatExec(await this.exec(args));
  }

  async readFile(args) {
    const p = args && args.path;
    const buf = await guarded(() => this.#box.read(p), { path: p });
    if (buf === null) throw new sbx.SandboxWorkspaceReadNotFoundError(`file not found: ${p}`, { provider: PROVIDER, path: p });
    const max = args.maxBytes;
    const out = typeof max === 'number' && buf.byteLength > max ? buf.subarray(0, max) : buf;
    return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  }

  async viewImage(args) {
    const p = args && args.path;
    const buf = await guarded(() => this.#box.read(p), { path: p });
    if (buf === null) throw new agents.UserError(`Image file not found: ${p}`);
    if (buf.byteLength > MAX_IMAGE_BYTES) throw new agents.UserError(`Image file exceeds the 10 MB limit: ${p}`);
    const mediaType = imageType(buf, p);
    if (!mediaType) throw new agents.UserError(`Unsupported image format for view_image: ${p}`);
    return { type: 'image', image: { data: Uint8Array.from(buf), mediaType } };
  }

  /** The entries of a directory; `path` of each as the caller named the directory. */
  async listDir(args) {
    const p = args && args.path;
    const entries = await guarded(() => this.#box.list(p), { path: p });
    if (entries === null) throw new sbx.SandboxWorkspaceReadNotFoundError(`directory not found: ${p}`, { provider: PROVIDER, path: p });
    const rel = this.#box.rel(p);
    const base = rel === null ? this.#box.abs(p) : rel;
    return entries.map((e) => ({
      name: e.name,
      path: base === '' ? e.name : `${base.replace(/\/$/, '')}/${e.name}`,
      type: e.type === 'file' ? 'file' : e.type === 'directory' ? 'dir' : 'other',
    }));
  }

  async pathExists(p) {
    return (await guarded(() => this.#box.stat(p), { path: p })) !== null;
  }

  async directoryExists(p) {
    const st = await guarded(() => this.#box.stat(p), { path: p });
    return st !== null && st.type === 'directory';
  }

  /** An Editor applying the SDK's V4A diffs (apply_patch) to files of the box. */
  createEditor(runAs) {
    if (runAs !== undefined && runAs !== null) {
      throw new sbx.SandboxUnsupportedFeatureError('kern-sandbox edits files as the Sandbox\'s user; runAs is not supported', { provider: PROVIDER, runAs });
    }
    const box = this.#box;
    const readText = async (p) => {
      const buf = await guarded(() => box.read(p), { path: p });
      if (buf === null) throw new sbx.SandboxApplyPatchFileNotFoundError(`file not found: ${p}`, { provider: PROVIDER, path: p });
      return buf.toString('utf8');
    };
    const diffed = (fn, p) => {
      try {
        return fn();
      } catch (e) {
        throw new sbx.SandboxApplyPatchDiffError(`${p}: ${e.message}`, { provider: PROVIDER, path: p });
      }
    };
    return {
      createFile: async (op) => {
        const text = diffed(() => agents.applyDiff('', op.diff, 'create'), op.path);
        await guarded(() => box.write(op.path, Buffer.from(text)), { path: op.path });
        return { status: 'completed', output: `Created ${op.path}` };
      },
      updateFile: async (op) => {
        const before = await readText(op.path);
        const after = diffed(() => agents.applyDiff(before, op.diff), op.path);
        const dest = op.moveTo || op.path;
        await guarded(() => box.write(dest, Buffer.from(after)), { path: dest });
        if (op.moveTo && op.moveTo !== op.path) await guarded(() => box.remove(op.path), { path: op.path });
        return { status: 'completed', output: op.moveTo ? `Updated ${op.path} -> ${op.moveTo}` : `Updated ${op.path}` };
      },
      deleteFile: async (op) => {
        const gone = await guarded(() => box.remove(op.path), { path: op.path });
        if (!gone) throw new sbx.SandboxApplyPatchFileNotFoundError(`file not found: ${op.path}`, { provider: PROVIDER, path: op.path });
        return { status: 'completed', output: `Deleted ${op.path}` };
      },
    };
  }

  /** Writes one manifest entry (a file or a directory of them) at `path`. */
  async materializeEntry(args) {
    await this.#materialize({ [args.path]: args.entry }, args.runAs);
  }

  /** Writes a manifest's entries and adds its environment to later commands'. */
  async applyManifest(manifest, runAs) {
    await this.#materialize(manifest.entries, runAs);
    this.state.environment = { ...this.state.environment, ...(await manifest.resolveEnvironment()) };
  }

  async #materialize(entries, runAs) {
    if (runAs !== undefined && runAs !== null) {
      throw new sbx.SandboxUnsupportedFeatureError('kern-sandbox writes files as the Sandbox\'s user; runAs is not supported', { provider: PROVIDER, runAs });
    }
    const files = [];
    const dirs = [];
    const walk = (base, map) => {
      for (const [name, entry] of Object.entries(map || {})) {
        const p = base ? `${base}/${name}` : name;
        if (entry && entry.type === 'file') files.push([p, entry.content]);
        else if (entry && entry.type === 'dir') {
          if (!entry.children || Object.keys(entry.children).length === 0) dirs.push(p);
          walk(p, entry.children);
        } else {
          throw new sbx.SandboxUnsupportedFeatureError(`kern-sandbox materializes file and dir manifest entries only; ${p} is ${entry && entry.type}: use the Sandbox's mounts option (or setup) for host files and repositories`, { provider: PROVIDER, path: p, entryType: entry && entry.type });
        }
      }
    };
    walk('', entries);
    await guarded(() => this.#box.mkdirs(dirs));
    for (const [p, content] of files) {
      await guarded(() => this.#box.write(p, typeof content === 'string' ? Buffer.from(content) : content), { path: p });
    }
  }
}

/** A sandbox client of the OpenAI Agents SDK on kern: each session one kern Sandbox. */
class KernSandboxClient {
  #defaults;

  /**
   * @param {object} [options] Sandbox options for every session (image, network, egressAllow,
   *   memoryMb, mounts, workspace, ...); a run's `sandbox.options` adds to them.
   */
  constructor(options) {
    if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options))) {
      throw new sbx.SandboxConfigurationError('KernSandboxClient(options) takes an object of Sandbox options', { provider: PROVIDER });
    }
    this.backendId = 'kern';
    this.#defaults = options || {};
  }

  async create(args, manifestOptions) {
    const n = sbx.normalizeSandboxClientCreateArgs(args, manifestOptions);
    if (n.snapshot) {
      throw new sbx.SandboxUnsupportedFeatureError('kern-sandbox does not restore SDK snapshots; keep state in a `workspace` directory instead', { provider: PROVIDER });
    }
    const options = { ...this.#defaults, ...n.options };
    const root = n.manifest.root;
    if (options.workspaceMount !== undefined && options.workspaceMount !== root) {
      throw new sbx.SandboxConfigurationError(`the manifest's root ${root} and option workspaceMount ${options.workspaceMount} differ; give one`, { provider: PROVIDER });
    }
    if (root !== '/workspace') options.workspaceMount = root;
    let box;
    try {
      box = new Box(options);
    } catch (e) {
      throw asAgentsError(e);
    }
    const environment = await n.manifest.resolveEnvironment();
    return new KernSandboxSession({ manifest: n.manifest, workspaceReady: false, environment }, box);
  }
}

module.exports = { KernSandboxClient, KernSandboxSession };
