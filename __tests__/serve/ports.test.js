// rootless: yes
'use strict';
// A sandbox's own ports through `kern serve`, as E2B's getHost(port) names them: a Host of
// `<port>-<sandboxID>.<domain>` reaches an HTTP server and a WebSocket-style upgrade in the box;
// with allowPublicTraffic: false only with the sandbox's traffic token; a port nothing listens on
// and a sandbox that is gone answer 502. (The test sets the Host header itself: on this Debian
// host `*.localhost` does not resolve; where systemd's resolver runs it does.)

const http = require('http');
const { requireRootfs, uniqueName } = require('../helpers.js');
const { startServe, sdk } = require('./serve-helpers.js');

let srv;
let port;
beforeAll(async () => {
  requireRootfs();
  srv = await startServe();
  port = Number(new URL(srv.url).port);
});
afterAll(() => srv && srv.close());

/** Polls the async `pred` until true or `ms` elapse (a grace period for a server to start). */
async function until(pred, ms) {
  const end = Date.now() + ms;
  for (;;) {
    if (await pred()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A request to the server naming `host`; resolves { status, body, headers }. */
function get(host, path = '/', headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, headers: { host, ...headers } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, body, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

const SERVER = (word) => `
mkdir -p site && echo '${word}' > site/index.html
cd site && exec python3 -m http.server 8000 --bind 127.0.0.1`;

// Answers an upgrade with 101, then echoes what comes, upper-cased.
const UPGRADE = `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 8001)); s.listen(4)
while True:
    c, _ = s.accept()
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += c.recv(1024)
    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n")
    data = c.recv(1024)
    c.sendall(data.upper() + b"|" + head)
    c.close()
`;

async function sandboxWith(opts) {
  return sdk(`
    const sb = await Sandbox.create('base', { timeoutMs: 300000, ${opts} });
    await sb.files.write('up.py', ${JSON.stringify(UPGRADE)});
    await sb.commands.run(${JSON.stringify(SERVER('served'))}, { background: true });
    await sb.commands.run('python3 up.py', { background: true });
    return { id: sb.sandboxId, host: sb.getHost(8000) };`, { E2B_DOMAIN: `localhost:${port}` });
}

/** An upgrade to `host` through the server: the status and what the box echoed (`PING|<the
 * head it was sent>`). */
function upgradeTo(host, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/ws', headers: { host, connection: 'Upgrade', upgrade: 'echo', ...headers } });
    req.on('upgrade', (res, socket) => {
      socket.write('ping');
      let data = '';
      socket.on('data', (d) => (data += d));
      socket.on('close', () => resolve({ status: res.statusCode, data }));
    });
    req.on('response', (res) => resolve({ status: res.statusCode, data: null }));
    req.on('error', reject);
    req.end();
  });
}

test('HTTP and an upgrade to a sandbox\'s ports by their getHost name', async () => {
  const { id, host } = await sandboxWith('');
  expect(host).toBe(`8000-${id}.localhost:${port}`);
  expect(await until(async () => (await get(host)).status === 200, 20000)).toBe(true);
  const r = await get(host, '/index.html', { 'x-kern-token': 'client-sent' });
  expect(r).toMatchObject({ status: 200, body: 'served\n' });
  // The upgrade: bytes both ways once the box said 101.
  const echoed = await upgradeTo(`8001-${id}.localhost:${port}`);
  expect(echoed.status).toBe(101);
  expect(echoed.data.startsWith('PING|GET /ws HTTP/1.1')).toBe(true);

  // Nothing listens on 8002: 502; a sandbox that isn't there: 502.
  expect((await get(`8002-${id}.localhost:${port}`)).status).toBe(502);
  expect((await get(`8000-${uniqueName('nope').replace(/[^a-z0-9]/g, '')}.localhost:${port}`)).status).toBe(502);
  await sdk(`await Sandbox.kill('${id}');`);
  expect((await get(host)).status).toBe(502);
});

test('allowPublicTraffic: false: only with the sandbox\'s traffic token, which the box never sees', async () => {
  const { id, host } = await sandboxWith('network: { allowPublicTraffic: false }');
  const token = srv.serve.sandboxes.byId.get(id).trafficToken;
  expect(await until(async () => (await get(host, '/', { 'e2b-traffic-access-token': token })).status === 200, 20000)).toBe(true);
  expect((await get(host)).status).toBe(403);
  expect((await get(host, '/', { 'e2b-traffic-access-token': 'f'.repeat(48) })).status).toBe(403);
  expect((await get(host, '/index.html', { 'e2b-traffic-access-token': token })).body).toBe('served\n');
  // Upgrades too; and the box's server sees neither the traffic token nor the published port's.
  expect((await upgradeTo(`8001-${id}.localhost:${port}`)).status).toBe(403);
  const up = await upgradeTo(`8001-${id}.localhost:${port}`, { 'e2b-traffic-access-token': token });
  expect(up.status).toBe(101);
  expect(up.data).toMatch(/^PING\|GET \/ws/);
  expect(up.data.toLowerCase()).not.toContain(token);
  expect(up.data.toLowerCase()).not.toContain('x-kern-token');
  expect(up.data.toLowerCase()).not.toContain('e2b-traffic-access-token');
  // A network update that doesn't name it keeps the ports private.
  const put = await fetch(`${srv.url}/sandboxes/${id}/network`, { method: 'PUT', headers: { 'x-api-key': process.env.E2B_API_KEY, 'content-type': 'application/json' }, body: JSON.stringify({ allowOut: [] }) });
  expect(put.status).toBe(204);
  expect((await get(host)).status).toBe(403);
  await sdk(`await Sandbox.kill('${id}');`);
});
