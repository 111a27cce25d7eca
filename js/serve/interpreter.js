'use strict';
// E2B's code interpreter (sandbox port 49999), as `@e2b/code-interpreter` and
// `e2b-code-interpreter` call it: `POST /execute` streams a cell's output as JSON lines, and
// `/contexts` makes, lists, restarts and removes code contexts. A context is a library kernel
// (`Sandbox.kernel()`), started at its first cell; each language has a default context.

const crypto = require('crypto');
const { StringDecoder } = require('string_decoder');
const { ApiError } = require('./errors.js');
const { resolvePath } = require('./envd/paths.js');

/** E2B's language names, and the kernel each runs in. */
const LANGUAGES = {
  // A python cell the client stops waiting for is interrupted; the context keeps its state.
  python: { language: 'python', onTimeout: 'interrupt' },
  js: { language: 'node' },
  javascript: { language: 'node' },
  ts: { language: 'typescript' },
  typescript: { language: 'typescript' },
  r: { jupyter: 'ir' },
  bash: { jupyter: 'bash' },
};
/** A cell runs until the client stops waiting (the SDK's `timeoutMs`), at most a day. */
const CELL_TIMEOUT_S = 86400;
/** MIME types as E2B names a result's formats; any other stays under its MIME type. */
const FORMATS = {
  'text/plain': 'text',
  'text/html': 'html',
  'text/markdown': 'markdown',
  'image/svg+xml': 'svg',
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'application/pdf': 'pdf',
  'text/latex': 'latex',
  'application/json': 'json',
  'application/javascript': 'javascript',
};

class Context {
  constructor(s, language, cwd) {
    this.s = s;
    this.id = crypto.randomUUID();
    this.language = language;
    this.cwd = cwd;
    this.kernel = null;
  }

  async ensure() {
    if (!this.kernel) {
      this.kernel = this.s.sandbox.kernel({ ...LANGUAGES[this.language], cwd: this.cwd, env: this.s.callEnv(), timeoutS: CELL_TIMEOUT_S }).catch((e) => {
        this.kernel = null;
        throw e;
      });
    }
    return this.kernel;
  }

  async close() {
    const k = this.kernel;
    this.kernel = null;
    if (k) await (await k.catch(() => null))?.close().catch(() => {});
  }

  view() {
    return { id: this.id, language: this.language, cwd: this.cwd };
  }
}

function languageOf(v) {
  const l = (v ?? 'python').toLowerCase();
  if (!Object.hasOwn(LANGUAGES, l)) throw new ApiError(400, `language ${JSON.stringify(v)} is not one kern serve runs: python, js, ts, r or bash (r and bash when the image has their Jupyter kernel)`);
  return l;
}

function newContext(s, body) {
  const language = languageOf(body.language);
  const cwd = body.cwd === undefined || body.cwd === null ? s.home : resolvePath(s, String(body.cwd));
  const c = new Context(s, language, cwd);
  s.contexts.set(c.id, c);
  return c;
}

/** Answers a cell that can't run with its reason as the execution's error: the SDK shows only
 * the status of a refused request, but every message of the stream. */
function failInStream(res, name, value) {
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  res.end(JSON.stringify({ type: 'error', name, value, traceback: '' }) + '\n' + JSON.stringify({ type: 'end_of_execution' }) + '\n');
  return 'POST /execute';
}

/** The library's chart data (camelCase keys, index.d.ts) in E2B's names (snake_case:
 * `x_label`, `first_quartile`, ...), at every level (a superchart's elements are charts). */
function e2bChart(v) {
  if (Array.isArray(v)) return v.map(e2bChart);
  if (v === null || typeof v !== 'object') return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), k === 'points' ? x : e2bChart(x)]));
}

const TABLE_MIME = 'application/vnd.dataresource+json';

/** A DataFrame's table (Table Schema JSON, from the library) as E2B's `data`: each column's
 * values in order, the index left out; null if it can't be read. */
function tableColumns(text) {
  try {
    const t = JSON.parse(text);
    const index = new Set(t.schema.primaryKey ?? []);
    const columns = t.schema.fields.map((f) => f.name).filter((n) => !index.has(n));
    return Object.fromEntries(columns.map((c) => [c, t.data.map((row) => row[c] ?? null)]));
  } catch {
    return null;
  }
}

/** A library Result as E2B's result message. */
function resultMessage(r) {
  const msg = { type: 'result' };
  for (const [mime, v] of Object.entries(r.data)) {
    if (mime === TABLE_MIME) msg.data = tableColumns(v) ?? undefined;
    else msg[FORMATS[mime] ?? mime] = v;
  }
  if (r.chart) msg.chart = e2bChart(r.chart);
  msg.is_main_result = r.isMainResult;
  return msg;
}

async function execute(ctx, s, req, res) {
  const body = await ctx.readJson(req, 16 << 20);
  if (typeof body.code !== 'string') throw new ApiError(400, 'code must be a string');
  if (body.context_id && body.language) throw new ApiError(400, 'give context_id or language, not both');
  let c;
  if (body.context_id) {
    c = s.contexts.get(String(body.context_id));
    if (!c) throw new ApiError(404, `context ${body.context_id} not found`);
  } else {
    let language;
    try {
      language = languageOf(body.language);
    } catch (e) {
      return failInStream(res, 'InvalidArgument', e.message);
    }
    s.defaults ??= new Map();
    c = s.defaults.get(language);
    if (!c) {
      c = newContext(s, { language });
      s.defaults.set(language, c);
    }
  }
  const env = body.env_vars ?? undefined;
  if (env !== undefined && (typeof env !== 'object' || Array.isArray(env))) throw new ApiError(400, 'env_vars must be an object of strings');

  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort(new Error('the client went away'));
  });
  // From here on every outcome is in the stream, where the SDK shows its message (it shows
  // only the status of a refused request).
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  // The SDK's cell timeout starts once the headers are in: send them now, not with the first
  // output (a quiet cell would otherwise wait out the request timeout instead).
  res.flushHeaders();
  const send = (m) => res.write(JSON.stringify(m) + '\n');
  const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  const stream = (type) => (chunk) => {
    const text = decoders[type].write(chunk);
    if (text) send({ type, text, timestamp: Date.now() * 1000 });
  };
  const cell = async () => {
    const kernel = await c.ensure();
    return kernel.runCode(body.code, {
      env: env && Object.keys(env).length ? env : undefined,
      signal: abort.signal,
      onStdout: stream('stdout'),
      onStderr: stream('stderr'),
      onResult: (result) => send(resultMessage(result)),
    });
  };
  let r;
  try {
    try {
      r = await cell();
    } catch (e) {
      // The context's kernel ended at an earlier cell (a timeout, the client leaving, memory):
      // this cell starts a new one, and says so.
      if (e.code !== 'ERR_CLOSED' || abort.signal.aborted) throw e;
      c.kernel = null;
      send({ type: 'stderr', text: `note: this ${c.language} context's kernel had ended (${e.message}); this cell runs in a new one, without the earlier cells' state\n`, timestamp: Date.now() * 1000 });
      r = await cell();
    }
  } catch (e) {
    if (abort.signal.aborted) return 'POST /execute';
    const name = e.code === 'ERR_INVALID_OPTION' ? 'InvalidArgument' : e.code === 'ERR_CLOSED' ? 'ContextEnded' : 'KernelError';
    send({ type: 'error', name, value: e.message, traceback: '' });
    send({ type: 'end_of_execution' });
    res.end();
    return 'POST /execute';
  }
  for (const type of ['stdout', 'stderr']) {
    const rest = decoders[type].end();
    if (rest) send({ type, text: rest, timestamp: Date.now() * 1000 });
  }
  if (r.error) {
    const tb = Array.isArray(r.error.traceback) ? r.error.traceback.join('\n') : r.error.traceback;
    send({ type: 'error', name: r.error.name, value: r.error.value, traceback: tb });
  } else if (r.fault) {
    // The kernel's box ended (a timeout, memory): the context starts afresh at its next cell.
    c.kernel = null;
    send({ type: 'error', name: r.fault.type, value: r.fault.message, traceback: '' });
  }
  if (r.executionCount !== null) send({ type: 'number_of_executions', execution_count: r.executionCount });
  send({ type: 'end_of_execution' });
  res.end();
  return 'POST /execute';
}

async function handle(ctx, s, req, res, url) {
  const p = url.pathname.replace(/\/+$/, '') || '/';
  const m = req.method;
  if (p === '/health' && m === 'GET') {
    ctx.sendJson(res, 200, 'OK');
    return 'interpreter /health';
  }
  if (p === '/execute' && m === 'POST') return execute(ctx, s, req, res);
  if (p === '/contexts' && m === 'POST') {
    const c = newContext(s, await ctx.readJson(req));
    ctx.sendJson(res, 200, c.view());
    return 'POST /contexts';
  }
  if (p === '/contexts' && m === 'GET') {
    ctx.sendJson(res, 200, [...s.contexts.values()].map((c) => c.view()));
    return 'GET /contexts';
  }
  const one = /^\/contexts\/([^/]+)(\/restart)?$/.exec(p);
  if (one) {
    const c = s.contexts.get(one[1]);
    if (!c) throw new ApiError(404, `context ${one[1]} not found`);
    if (one[2] && m === 'POST') {
      await c.close();
      res.writeHead(204).end();
      return 'POST /contexts/:id/restart';
    }
    if (!one[2] && m === 'DELETE') {
      await c.close();
      s.contexts.delete(c.id);
      for (const [l, d] of s.defaults ?? []) if (d === c) s.defaults.delete(l);
      res.writeHead(204).end();
      return 'DELETE /contexts/:id';
    }
  }
  throw new ApiError(404, `no code interpreter route ${m} ${p}`);
}

module.exports = { handle };
