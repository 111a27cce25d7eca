'use strict';
// Real servers on 127.0.0.1 for the secrets and live-egress tests: an HTTPS server with a
// certificate (IP SAN 127.0.0.1) from a test CA made here with the openssl CLI, and a plain HTTP
// server. Each records the request line and headers of every request it got, so a test checks
// on the host what arrived.
//
// The egress proxy verifies a secret's host against the store pulls use: the system's plus
// KERN_REGISTRY_CA, which `trustTestCa` points at the test CA (in the real process environment,
// which the native side reads; Jest's process.env is a copy). Boxes do not trust the test CA.

const fs = require('fs');
const path = require('path');
const http = require('http');
const https = require('https');
const { execFileSync } = require('child_process');

const realEnv = require('vm').runInThisContext('process').env;

/** A test CA and a server certificate for 127.0.0.1 signed by it, as PEM files in `dir`. */
function makeTestCa(dir) {
  const f = (n) => path.join(dir, n);
  const ossl = (...a) => execFileSync('openssl', a, { stdio: 'pipe' });
  ossl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
    '-subj', '/CN=kern test CA', '-keyout', f('ca.key'), '-out', f('ca.crt'),
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign');
  ossl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=127.0.0.1',
    '-keyout', f('srv.key'), '-out', f('srv.csr'));
  fs.writeFileSync(f('ext.cnf'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n');
  ossl('x509', '-req', '-in', f('srv.csr'), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
    '-days', '2', '-extfile', f('ext.cnf'), '-out', f('srv.crt'));
  for (const n of ['ca.crt', 'srv.crt']) fs.chmodSync(f(n), 0o644);
  fs.chmodSync(dir, 0o755);
  return { caFile: f('ca.crt'), ca: fs.readFileSync(f('ca.crt'), 'utf8'), key: fs.readFileSync(f('srv.key')), cert: fs.readFileSync(f('srv.crt')) };
}

/** The proxy (of Sandboxes opened from now on) trusts the test CA for secrets' hosts. */
function trustTestCa(caFile) {
  realEnv.KERN_REGISTRY_CA = caFile;
}

function untrustTestCa() {
  delete realEnv.KERN_REGISTRY_CA;
}

function recorder(req, res, seen) {
  seen.push({ method: req.method, url: req.url, headers: req.headers });
  res.setHeader('Content-Type', 'text/plain');
  // The path only: a server echoing the query would hand the value back to the box itself.
  res.end(`hello ${req.url.split('?')[0]}\n`);
}

/** An HTTPS server on 127.0.0.1 with `tls` (makeTestCa's); `seen` lists the requests. */
function startHttps(tls) {
  return new Promise((resolve) => {
    const seen = [];
    const server = https.createServer({ key: tls.key, cert: tls.cert }, (req, res) => recorder(req, res, seen));
    server.listen(0, '127.0.0.1', () => resolve({ server, port: server.address().port, seen }));
  });
}

/** A plain HTTP server on 127.0.0.1; `seen` lists the requests. */
function startHttp() {
  return new Promise((resolve) => {
    const seen = [];
    const server = http.createServer((req, res) => recorder(req, res, seen));
    server.listen(0, '127.0.0.1', () => resolve({ server, port: server.address().port, seen }));
  });
}

/**
 * What common servers reflect, on purpose or not: a JSON 404 quoting the request line, a
 * trailing-slash redirect (`/dir` -> `/dir/`, query kept), CORS echoing `Origin`, a preflight
 * echoing `Access-Control-Request-Headers`/`-Method`, and `/echo` (a debug endpoint) returning
 * `Authorization` in a header and, in a body written a few bytes at a time (chunked), or with
 * a Content-Length (`/echo-len`), as itself, base64, base64url, percent-encoded, JSON- and
 * HTML-escaped and hex.
 */
function reflector(req, res, seen) {
  let body = '';
  req.on('data', (c) => {
    body += c;
  });
  req.on('end', () => {
    seen.push({ method: req.method, url: req.url, headers: req.headers, body });
    if (req.headers.origin) res.setHeader('Access-Control-Allow-Origin', req.headers.origin);
    if (req.method === 'OPTIONS') {
      res.setHeader('Access-Control-Allow-Headers', req.headers['access-control-request-headers'] || '');
      res.setHeader('Access-Control-Allow-Methods', req.headers['access-control-request-method'] || '');
      res.statusCode = 204;
      res.end();
      return;
    }
    const u = new URL(req.url, 'http://reflector');
    if (u.pathname === '/echo' || u.pathname === '/echo-len') {
      const a = req.headers.authorization || '';
      const forms = {
        plain: a,
        b64: Buffer.from(`x${a}yz`).toString('base64'),
        b64url: Buffer.from(`${a}!`).toString('base64url'),
        pct: encodeURIComponent(a),
        json: JSON.stringify({ a }),
        html: a.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;'),
        hex: Buffer.from(a).toString('hex'),
      };
      const text = JSON.stringify(forms);
      res.setHeader('Content-Type', 'application/json');
      res.setHeader('X-Echo', a);
      res.setHeader('X-Echo-B64', Buffer.from(a).toString('base64'));
      if (u.pathname === '/echo-len') {
        res.setHeader('Content-Length', Buffer.byteLength(text));
        res.end(text);
        return;
      }
      for (let i = 0; i < text.length; i += 5) res.write(text.slice(i, i + 5));
      res.end();
      return;
    }
    if (u.pathname.startsWith('/dir') && !u.pathname.endsWith('/')) {
      res.statusCode = 301;
      res.setHeader('Location', `${u.pathname}/${u.search}`);
      res.end();
      return;
    }
    res.statusCode = 404;
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ error: 'Not Found', message: `Cannot ${req.method} ${req.url}` }));
  });
}

/** `reflector` over HTTPS with `tls` (makeTestCa's), or plain HTTP without. */
function startReflector(tls) {
  return new Promise((resolve) => {
    const seen = [];
    const handler = (req, res) => reflector(req, res, seen);
    const server = tls ? https.createServer({ key: tls.key, cert: tls.cert }, handler) : http.createServer(handler);
    server.listen(0, '127.0.0.1', () => resolve({ server, port: server.address().port, seen }));
  });
}

/** Closes servers, ending their kept-alive connections. */
function stopAll(...servers) {
  for (const s of servers) {
    if (!s) continue;
    if (s.server.closeAllConnections) s.server.closeAllConnections();
    s.server.close();
  }
}

module.exports = { makeTestCa, trustTestCa, untrustTestCa, startHttps, startHttp, startReflector, stopAll, realEnv };
