'use strict';
// `kern mcp --http`: Streamable HTTP at /mcp, every request behind `Authorization: Bearer
// <token>` (compared in constant time). One SDK transport, server and Session per MCP session
// id; a session ends on DELETE, after --session-idle-s without a request, or at shutdown, and
// its Sandbox (every box of it, its temp workspace) ends with it.

const http = require('http');
const crypto = require('crypto');
const { tokenMatches } = require('../serve/auth.js');
const { Session } = require('./session.js');
const { createServer } = require('./server.js');

function reply(res, status, body, headers = {}) {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

const rpcError = (code, message) => ({ jsonrpc: '2.0', error: { code, message }, id: null });

/** Starts the HTTP server; resolves with { address, close } once it listens. */
async function serveHttp(sdk, cfg, log) {
  const sessions = new Map();

  const end = async (id) => {
    const s = sessions.get(id);
    if (!s) return;
    sessions.delete(id);
    clearTimeout(s.idle);
    await s.transport.close().catch(() => {});
    await s.session.close().catch((e) => log(`session ${id}: closing its sandbox failed: ${e.message}`));
  };
  const touch = (s, id) => {
    clearTimeout(s.idle);
    s.idle = setTimeout(() => {
      // A call still running is not idleness.
      if (s.inflight.size) return touch(s, id);
      log(`session ${id} idle for ${cfg.sessionIdleS} s: ended`);
      end(id);
    }, cfg.sessionIdleS * 1000);
    s.idle.unref();
  };

  async function newSession(req, res) {
    const session = new Session(cfg.sandbox);
    const entry = { session, transport: null, idle: null, inflight: new Set() };
    const transport = new sdk.StreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, entry);
        touch(entry, id);
      },
      onsessionclosed: (id) => end(id),
    });
    entry.transport = transport;
    // oxlint-disable-next-line unicorn/prefer-add-event-listener -- the SDK has only this hook
    transport.onclose = () => {
      if (transport.sessionId) end(transport.sessionId);
      else session.close().catch(() => {});
    };
    const server = createServer(sdk, session, entry.inflight);
    await server.connect(transport);
    await transport.handleRequest(req, res);
    // A request that did not initialize a session leaves nothing behind.
    if (!transport.sessionId) {
      await transport.close().catch(() => {});
      await session.close().catch(() => {});
    }
  }

  const server = http.createServer(async (req, res) => {
    try {
      const url = new URL(req.url, 'http://localhost');
      if (url.pathname !== '/mcp') return reply(res, 404, { error: 'not found: the MCP endpoint is /mcp' });
      const auth = req.headers.authorization || '';
      const presented = auth.startsWith('Bearer ') ? auth.slice(7).trim() : null;
      if (!tokenMatches(cfg.token, presented)) {
        return reply(res, 401, rpcError(-32001, 'unauthorized: send Authorization: Bearer <token> (kern mcp printed it, or --token-file / KERN_MCP_TOKEN)'), { 'www-authenticate': 'Bearer' });
      }
      const id = req.headers['mcp-session-id'];
      if (id !== undefined) {
        const s = sessions.get(id);
        if (!s) return reply(res, 404, rpcError(-32001, 'no such session (it ended): initialize a new one'));
        touch(s, id);
        return await s.transport.handleRequest(req, res);
      }
      if (req.method !== 'POST') return reply(res, 400, rpcError(-32000, 'no Mcp-Session-Id: initialize a session with a POST first'));
      // Each session holds a Sandbox: past the cap a new one waits for another to end.
      if (sessions.size >= cfg.maxSessions) {
        return reply(res, 503, rpcError(-32000, `${cfg.maxSessions} sessions are open (--max-sessions): end one (DELETE) or try later`), { 'retry-after': '10' });
      }
      return await newSession(req, res);
    } catch (e) {
      log(`request failed: ${e && e.stack ? e.stack : e}`);
      return reply(res, 500, rpcError(-32603, 'internal error'));
    }
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(cfg.http.port, cfg.http.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    address: server.address(),
    sessions,
    async close() {
      server.close();
      server.closeAllConnections();
      await Promise.all([...sessions.keys()].map(end));
    },
  };
}

module.exports = { serveHttp };
