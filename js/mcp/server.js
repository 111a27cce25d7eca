'use strict';
// One MCP server per session, on the SDK's low-level `Server` with hand-written JSON schemas (no
// zod needed by users): tools/list, tools/call, resources/list and resources/read. A tool's
// failure is a result with isError; progress notifications carry a long call's output lines
// when the request has a progressToken; a cancelled request aborts the library call's `signal`.

const { tools: codeTools } = require('./tools/code.js');
const { tools: fileTools, listResources, readResource } = require('./tools/files.js');
const { tools: processTools } = require('./tools/processes.js');
const { checkArgs } = require('./tools/args.js');
const { errorResult, ToolError } = require('./results.js');
const { version } = require('../index.js');

const TOOLS = [...codeTools, ...fileTools, ...processTools];
const BY_NAME = new Map(TOOLS.map((t) => [t.name, t]));
/** The most progress notifications one call sends (each is an output line). */
const MAX_PROGRESS = 1000;
/** A silent long call still says it is alive this often, when the client asked for progress. */
const HEARTBEAT_MS = 10_000;

const INSTRUCTIONS = 'Tools that run code and commands in isolated Linux boxes (kern-sandbox). Each call is a fresh box; files in the '
  + 'workspace (the working directory) persist for this session, variables do not: use start_kernel and run_cell for a stateful '
  + 'interpreter, start_process for servers and long-running programs.';

/** What a handler gets besides its arguments: the cancellation signal and output streaming. */
function callContext(request, extra) {
  const meta = request.params['_meta'];
  const token = meta ? meta.progressToken : undefined;
  let sent = 0;
  let timer = null;
  // Sends not yet written: the result waits for them, as a client drops progress that comes
  // after the result.
  const pending = new Set();
  const progress = (message) => {
    if (token === undefined || sent >= MAX_PROGRESS || extra.signal.aborted) return Promise.resolve();
    sent++;
    const p = extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: sent, message } }).catch(() => {});
    pending.add(p);
    p.finally(() => pending.delete(p));
    return p;
  };
  if (token !== undefined) {
    timer = setInterval(() => progress('still running'), HEARTBEAT_MS);
    timer.unref();
  }
  // A chunk is whole lines (lineBuffered), maybe several: one notification per line.
  // (The box's output waits for the sends: a flood of lines is paced by the client.)
  const line = (stream) => (chunk) => Promise.all(chunk.toString('utf8').replace(/\n$/, '').split('\n').map((l) => progress(`${stream}: ${l}`)));
  return {
    signal: extra.signal,
    /** Call options that stream output lines as progress, when the client asked for it. */
    streaming: () => (token === undefined ? {} : { lineBuffered: true, onStdout: line('stdout'), onStderr: line('stderr') }),
    async done() {
      if (timer) clearInterval(timer);
      await Promise.all(pending);
      // The SDK's client handles a notification a microtask late but a result at once, so
      // progress read in the same chunk as the result is dropped: the result goes a turn later.
      if (sent) await new Promise((resolve) => setImmediate(resolve));
    },
  };
}

/** A thrown error as the tool result the model reads. */
function asToolError(name, e) {
  if (e instanceof ToolError) return errorResult(e.message);
  if (e && e.name === 'SandboxError') return errorResult(`${name}: ${e.message}`, { code: e.code });
  if (e && e.name === 'AbortError') return errorResult(`${name}: cancelled`);
  return errorResult(`${name}: ${e && e.message ? e.message : String(e)}`);
}

/** A new SDK `Server` for `session`. `sdk`: the lazily loaded SDK modules (sdk.js); `inflight`:
 * a Set that holds each tool call's promise while it runs. */
function createServer(sdk, session, inflight = new Set()) {
  const { Server, types } = sdk;
  const server = new Server(
    { name: 'kern-sandbox', title: 'kern-sandbox', version },
    { capabilities: { tools: {}, resources: {} }, instructions: INSTRUCTIONS },
  );
  // Code reaches the outside world only where the flags gave the boxes a network.
  const networked = session.networked;
  server.setRequestHandler(types.ListToolsRequestSchema, async () => ({
    tools: TOOLS.map(({ name, title, description, inputSchema, annotations, runsCode }) => ({
      name, title, description, inputSchema, annotations: { ...annotations, openWorldHint: !!runsCode && networked },
    })),
  }));
  server.setRequestHandler(types.CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: args } = request.params;
    const tool = BY_NAME.get(name);
    if (!tool) return errorResult(`unknown tool ${JSON.stringify(name)}; the tools are ${TOOLS.map((t) => t.name).join(', ')}`);
    const ctx = callContext(request, extra);
    const call = (async () => {
      try {
        return await tool.handler(session, checkArgs(tool, args), ctx);
      } catch (e) {
        return asToolError(name, e);
      } finally {
        await ctx.done();
      }
    })();
    inflight.add(call);
    call.finally(() => inflight.delete(call));
    return call;
  });
  server.setRequestHandler(types.ListResourcesRequestSchema, async () => ({ resources: await listResources(session) }));
  server.setRequestHandler(types.ReadResourceRequestSchema, async (request) => {
    try {
      return { contents: await readResource(session, request.params.uri) };
    } catch (e) {
      if (e instanceof ToolError) throw new types.McpError(types.ErrorCode.InvalidParams, e.message);
      throw e;
    }
  });
  return server;
}

module.exports = { createServer, TOOLS };
