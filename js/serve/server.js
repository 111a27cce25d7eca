'use strict';
// `kern serve`'s HTTP server. One listener carries all three of E2B's surfaces, told apart as
// the SDKs address them when E2B_SANDBOX_URL is set: a request with an `E2b-Sandbox-Id` header
// goes to that sandbox (port 49983: envd's Connect services and /files; port 49999: the code
// interpreter), any other request is the control plane (E2B_API_URL).

const http = require('http');
const https = require('https');
const fs = require('fs');
const { universalRequestFromNodeRequest, universalResponseToNodeResponse } = require('@connectrpc/connect-node');
const { createConnectRouter, createContextValues } = require('@connectrpc/connect');
const { SANDBOX } = require('./envd/context.js');
const { Process } = require('./gen/process/process_pb.js');
const { Filesystem } = require('./gen/filesystem/filesystem_pb.js');
const { Keys, tokenMatches } = require('./auth.js');
const { ApiError, toHttpError } = require('./errors.js');
const { Volumes } = require('./volumes.js');
const ports = require('./ports.js');
const { Sandboxes } = require('./sandboxes.js');
const { createLogger } = require('./log.js');
const { createMetrics } = require('./metrics.js');
const control = require('./control.js');
const { processService } = require('./envd/process.js');
const { filesystemService } = require('./envd/filesystem.js');
const files = require('./envd/files.js');
const interpreter = require('./interpreter.js');

const ENVD_PORT = '49983';
const INTERPRETER_PORT = '49999';
/** The most a Connect message may hold (a stdin chunk, a request). */
const RPC_MAX_BYTES = 16 << 20;
/** An oversized body is read and dropped up to this, then the connection is cut. */
const DRAIN_MAX_BYTES = 64 << 20;

/** Sends `body` as JSON with `status`. */
function sendJson(res, status, body) {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res, e, log) {
  const { status, body } = toHttpError(e);
  if (status >= 500) log.error('request failed', { status, error: body.message });
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, status, body);
}

/** Reads a body of at most `max` bytes whole. Past the limit the rest is read and dropped (so
 * the client gets the 413, not a reset), up to a hard stop. */
function readBody(req, max) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n > max) {
        chunks.length = 0;
        if (n > Math.max(DRAIN_MAX_BYTES, max)) req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (n > max) return reject(new ApiError(413, `the request body is over ${max} bytes`));
      resolve(Buffer.concat(chunks));
    });
    req.on('error', reject);
  });
}

/** Reads a JSON body of at most `max` bytes ({} when empty). */
async function readJson(req, max = 1 << 20) {
  const text = (await readBody(req, max)).toString('utf8');
  if (!text.trim()) return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(400, 'the request body is not JSON');
  }
}

/** Builds the server; `listen()` starts it, `close()` ends every sandbox and stops it. */
function createServe(cfg, { log = createLogger(cfg.logLevel), metrics = createMetrics() } = {}) {
  const keys = new Keys(cfg.keys, cfg.insecureNoAuth);
  const sandboxes = new Sandboxes(cfg, log, metrics);
  const volumes = new Volumes(cfg);
  sandboxes.volumes = volumes;
  const ctx = { cfg, keys, sandboxes, volumes, log, metrics, sendJson, sendError, readJson, readBody };

  // connect's router and its Node request/response bridge; the few lines of connectNodeAdapter
  // that join them are ours, so a client that went away mid-stream (a command's disconnect())
  // is a debug line in our log, not an error on the console.
  const router = createConnectRouter({ readMaxBytes: RPC_MAX_BYTES });
  router.service(Process, processService());
  router.service(Filesystem, filesystemService());
  const rpcs = new Map(router.handlers.map((h) => [h.requestPath, h]));
  async function envd(req, res, pathname) {
    const h = rpcs.get(pathname);
    if (!h) throw new ApiError(404, `no envd route ${pathname}`);
    const uReq = universalRequestFromNodeRequest(req, res, undefined, createContextValues().set(SANDBOX, req.kernSandbox));
    try {
      await universalResponseToNodeResponse(await h(uReq), res);
    } catch (e) {
      if (res.destroyed || req.destroyed) log.debug('rpc client went away', { rpc: h.method.name });
      else log.error('rpc failed', { rpc: h.method.name, error: String(e && e.message) });
    }
  }

  /** A request to one sandbox: its access token checked, then handed to the port's surface. */
  async function sandboxTraffic(req, res, id) {
    const s = sandboxes.byId.get(id);
    if (!s || s.ended) {
      // What E2B's proxy answers for a sandbox that is gone; the SDKs read it as a timeout.
      sendJson(res, 502, { sandboxId: id, message: 'The sandbox was not found', code: 502 });
      return 'gone';
    }
    const port = req.headers['e2b-sandbox-port'];
    const allowed = tokenMatches(s.accessToken, req.headers['x-access-token'])
      || (port === INTERPRETER_PORT && tokenMatches(s.trafficToken, req.headers['e2b-traffic-access-token']));
    if (!allowed) throw new ApiError(401, 'a missing or wrong access token for this sandbox (X-Access-Token, or E2B-Traffic-Access-Token for the code interpreter)');
    const url = new URL(req.url, 'http://x');
    req.kernSandbox = s;
    if (port === ENVD_PORT) {
      if (url.pathname === '/health') {
        res.writeHead(204).end();
        return 'envd /health';
      }
      if (url.pathname === '/files') {
        await files.handle(ctx, s, req, res, url);
        return `envd ${req.method} /files`;
      }
      await envd(req, res, url.pathname);
      return 'envd rpc';
    }
    if (port === INTERPRETER_PORT) return interpreter.handle(ctx, s, req, res, url);
    throw new ApiError(502, `port ${port} of a sandbox is not reachable through kern serve (only envd, ${ENVD_PORT}, and the code interpreter, ${INTERPRETER_PORT})`);
  }

  async function handler(req, res) {
    const t0 = process.hrtime.bigint();
    const id = req.headers['e2b-sandbox-id'];
    const surface = id === undefined ? 'api' : 'sandbox';
    let route = 'unknown';
    res.on('finish', () => {
      metrics.requests.inc({ surface, status: String(res.statusCode) });
      metrics.latency.observe({ surface, route }, Number(process.hrtime.bigint() - t0) / 1e9);
      log.debug('request', { surface, route, method: req.method, status: res.statusCode });
    });
    try {
      // getHost(port): a Host of `<port>-<id>.<domain>`; envd's and the interpreter's ports
      // that way are the sandbox traffic they always are.
      const at = ports.portHost(req);
      if (at && (String(at.port) === ENVD_PORT || String(at.port) === INTERPRETER_PORT)) {
        req.headers['e2b-sandbox-port'] = String(at.port);
        route = await sandboxTraffic(req, res, at.id);
      } else if (at) route = await ports.proxy(sandboxes, req, res, at);
      else route = id === undefined ? await control.handle(ctx, req, res) : await sandboxTraffic(req, res, String(id));
    } catch (e) {
      sendError(res, e, log);
    }
  }

  const server = cfg.tlsCert
    ? https.createServer({ cert: fs.readFileSync(cfg.tlsCert), key: fs.readFileSync(cfg.tlsKey) }, handler)
    : http.createServer(handler);
  // A WebSocket to a sandbox's own port (getHost); no other route upgrades.
  server.on('upgrade', (req, socket, head) => {
    const at = ports.portHost(req);
    if (!at) {
      socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    ports.upgrade(sandboxes, req, socket, head, at).catch(() => socket.destroy());
  });
  // Streams (a long command, a watched directory) stay open as long as they need.
  server.requestTimeout = 0;
  server.headersTimeout = 30_000;

  return {
    server,
    sandboxes,
    listen() {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(cfg.listen.port, cfg.listen.host, () => resolve(server.address()));
      });
    },
    async close(reason = 'shutdown') {
      server.close();
      await sandboxes.closeAll(reason);
      server.closeAllConnections();
    },
  };
}

module.exports = { createServe };
