'use strict';
// A sandbox's own ports, as E2B's `getHost(port)` names them: a request whose Host is
// `<port>-<sandboxID>.<domain>` goes to that port of the sandbox, HTTP and WebSocket, through the
// library's `publish()` (src/session/publish.rs: each connection dialled into the box by its
// connector; nothing of the host opens to the box). Public, as in E2B, unless the sandbox was
// created with `network.allowPublicTraffic: false`: then each request carries the sandbox's
// traffic token in `e2b-traffic-access-token`. Point getHost at this server with E2B_DOMAIN
// (`localhost:<port>`: `*.localhost` is 127.0.0.1 wherever systemd's resolver or
// nss-myhostname answers), or a wildcard DNS name of your own.

const http = require('http');
const net = require('net');
const { ApiError } = require('./errors.js');
const { tokenMatches } = require('./auth.js');

/** `<port>-<id>.` at the start of a Host header. */
const HOST = /^(\d{1,5})-([A-Za-z0-9-]+)\./;

/** The port and sandbox id a Host names, or null. */
function portHost(req) {
  const m = HOST.exec(String(req.headers.host || ''));
  if (!m) return null;
  const port = Number(m[1]);
  if (port < 1 || port > 65535) return null;
  return { port, id: m[2] };
}

/** The sandbox the request is for, checked: running, and its token when it isn't public. */
function target(sandboxes, req, { id }) {
  const s = sandboxes.byId.get(id);
  if (!s || s.ended) throw new ApiError(502, `The sandbox ${id} was not found`);
  if (s.net.network && s.net.network.allowPublicTraffic === false
    && !tokenMatches(s.trafficToken, req.headers['e2b-traffic-access-token'])) {
    throw new ApiError(403, 'this sandbox\'s ports are private (allowPublicTraffic: false): send its traffic token in e2b-traffic-access-token');
  }
  return s;
}

/** The sandbox's published port (one per sandbox and port, closed with the sandbox). */
async function published(s, port) {
  s.published ??= new Map();
  let p = s.published.get(port);
  if (!p) {
    p = s.sandbox.publish(port);
    s.published.set(port, p);
    p.catch(() => s.published.delete(port));
  }
  return p;
}

/** Headers for the box: the traffic token stays here, the published port's token goes on. */
function headersFor(req, pub) {
  const h = { ...req.headers };
  delete h['e2b-traffic-access-token'];
  h['x-kern-token'] = pub.token;
  return h;
}

/** An HTTP request to a sandbox's port, proxied whole (streamed both ways). */
async function proxy(sandboxes, req, res, at) {
  const s = target(sandboxes, req, at);
  const pub = await published(s, at.port);
  await new Promise((resolve) => {
    const out = http.request({ host: pub.host, port: pub.port, method: req.method, path: req.url, headers: headersFor(req, pub) }, (back) => {
      res.writeHead(back.statusCode, back.statusMessage, back.rawHeaders);
      back.pipe(res);
      back.on('end', resolve);
      back.on('error', resolve);
    });
    out.on('error', (e) => {
      if (!res.headersSent) {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ code: 502, message: `port ${at.port} of sandbox ${at.id}: ${e.message}` }));
      } else res.destroy();
      resolve();
    });
    req.pipe(out);
  });
  return `port ${at.port}`;
}

/** An upgrade (WebSocket) to a sandbox's port: the head passed on with the published port's
 * token, then bytes both ways. */
async function upgrade(sandboxes, req, socket, head, at) {
  let s;
  try {
    s = target(sandboxes, req, at);
  } catch (e) {
    socket.end(`HTTP/1.1 ${e.status} ${http.STATUS_CODES[e.status]}\r\ncontent-length: 0\r\n\r\n`);
    return;
  }
  const pub = await published(s, at.port);
  const box = net.connect(pub.port, pub.host, () => {
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    const h = headersFor(req, pub);
    for (const [k, v] of Object.entries(h)) for (const one of [].concat(v)) lines.push(`${k}: ${one}`);
    box.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head && head.length) box.write(head);
    box.pipe(socket);
    socket.pipe(box);
  });
  const end = () => {
    box.destroy();
    socket.destroy();
  };
  box.on('error', end);
  socket.on('error', end);
}

module.exports = { portHost, proxy, upgrade };
