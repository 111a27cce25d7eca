'use strict';
// rootless: yes
// ADDITION (issue 35): `publish(port)` puts a box's loopback port on a host URL that carries a
// token. Real servers in real boxes (python's http.server family, a hand-written WebSocket echo),
// reached from this process with fetch(), keep-alive agents and raw sockets: the token is
// required on every connection, never reaches the box's server, and the port closes at close(),
// at its process's end and at the Sandbox's close(). Nothing of the host opens to the box.

const http = require('http');
const net = require('net');
const crypto = require('crypto');
const { Sandbox, SandboxError, PublishedPort } = require('../..');
const helpers = require('../helpers');

beforeAll(() => helpers.requireRootfs());

/** An HTTP/1.1 server that answers every request with what it got: method, path, headers,
 * body (chunked bodies decoded), as JSON. */
const ECHO = String.raw`
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            out = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""): pass
                    return out
                out += self.rfile.read(n); self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))
    def answer(self):
        b = json.dumps({"method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": self.body().decode()}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    do_GET = do_POST = do_PUT = answer
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`;

/** A WebSocket echo for one text frame per connection: "echo:" and what came. */
const WS = String.raw`
import socket, hashlib, base64, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 9000)); s.listen()
def one(c):
    data = b""
    while b"\r\n\r\n" not in data: data += c.recv(4096)
    head = data.split(b"\r\n\r\n")[0].decode()
    key = [l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + "\r\n\r\n").encode())
    hdr = c.recv(2); n = hdr[1] & 0x7f; mask = c.recv(4); p = bytearray()
    while len(p) < n: p += c.recv(n - len(p))
    for i in range(n): p[i] ^= mask[i % 4]
    reply = b"echo:" + bytes(p) + b" saw:" + head.split("\r\n")[0].encode()
    c.sendall(bytes([0x81, len(reply)]) + reply)
    c.recv(1)
while True:
    c, _ = s.accept(); threading.Thread(target=one, args=(c,), daemon=True).start()
`;

let sb;
afterEach(async () => {
  if (sb) await sb.close();
  sb = undefined;
});

/** Starts `code` (python) in a process of `sb` and waits until it accepts on `port`. */
async function serve(code, port) {
  const p = await sb.spawn(['python3', '-c', code, String(port)]);
  const s = await p.connect(port, { waitS: 30 });
  s.destroy();
  return p;
}

/** `url` without its token. */
const bare = (url) => url.replace(/\?kern_token=[0-9a-f]+$/, '');

/** One request over a fresh connection, with Node's http: { status, headers, body }. */
function request(url, { method = 'GET', headers = {}, body, agent } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, agent: agent || false }, (res) => {
      const parts = [];
      res.on('data', (c) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString() }));
    });
    req.on('error', reject);
    if (body !== undefined) {
      // Several writes without a length: Node sends them chunked.
      for (const piece of body) req.write(piece);
    }
    req.end();
  });
}

/** A WebSocket round trip through `url` (its path and query kept): the echoed text. */
function websocket(url, text, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      agent: false,
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'),
        ...headers,
      },
    });
    req.on('response', (res) => resolve({ refused: res.statusCode }));
    req.on('error', reject);
    req.on('upgrade', (_res, socket) => {
      const payload = Buffer.from(text);
      const mask = crypto.randomBytes(4);
      const masked = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]));
      socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, masked]));
      let got = Buffer.alloc(0);
      socket.on('data', (d) => {
        got = Buffer.concat([got, d]);
        if (got.length >= 2 && got.length >= 2 + got[1]) {
          socket.destroy();
          resolve({ echoed: got.subarray(2, 2 + got[1]).toString() });
        }
      });
      socket.on('error', reject);
    });
    req.end();
  });
}

test('a process\'s HTTP server, fetched through the URL; refused without the token; the box never sees it', async () => {
  sb = await new Sandbox(helpers.opts()).open();
  const server = await serve(ECHO, 8000);
  const published = await server.publish(8000);
  expect(published).toBeInstanceOf(PublishedPort);
  expect(published.url).toBe(`http://127.0.0.1:${published.port}/?kern_token=${published.token}`);
  expect(published.token).toMatch(/^[0-9a-f]{64}$/);
  expect(published.host).toBe('127.0.0.1');

  // fetch() as is; the first answer sets the cookie the page's own requests carry
  const res = await fetch(published.url);
  expect(res.status).toBe(200);
  const seen = await res.json();
  expect(seen.path).toBe('/');
  const cookie = res.headers.get('set-cookie');
  expect(cookie).toMatch(new RegExp(`^kern_token_${published.port}=${published.token}; Path=/; HttpOnly; SameSite=Strict$`));

  // Without the token, with a wrong one, or someone else's cookie: 403, and the box saw none of them.
  const base = bare(published.url);
  const wrong = published.token.replace(/^./, (c) => (c === '0' ? '1' : '0'));
  for (const attempt of [
    request(`${base}x`),
    request(`${base}?kern_token=${wrong}`),
    request(`${base}`, { headers: { 'X-Kern-Token': wrong } }),
    request(`${base}`, { headers: { Cookie: `kern_token_1=${published.token}` } }),
    request(`${base}`, { headers: { Authorization: `Bearer ${published.token}` } }),
  ]) {
    const r = await attempt;
    expect({ status: r.status, body: r.body }).toEqual({ status: 403, body: expect.stringMatching(/needs its token/) });
  }

  // The header and the cookie work; everything else of the request reaches the box as sent.
  const viaHeader = JSON.parse((await request(`${base}a/b?x=1&y=2`, { headers: { 'X-Kern-Token': published.token, 'X-Other': 'kept' } })).body);
  expect(viaHeader.path).toBe('/a/b?x=1&y=2');
  expect(viaHeader.headers['x-other']).toBe('kept');
  expect(viaHeader.headers['x-kern-token']).toBeUndefined();
  const viaCookie = JSON.parse((await request(`${base}c?kern_token=${published.token}&z=3`, { headers: { Cookie: `theirs=1; ${cookie.split(';')[0]}; more=2` } })).body);
  expect(viaCookie.path).toBe('/c?z=3');
  expect(viaCookie.headers.cookie).toBe('theirs=1; more=2');
  expect(JSON.stringify([seen, viaHeader, viaCookie])).not.toContain(published.token);
});

test('bodies by length and chunked, and many requests on one kept-alive connection, each stripped', async () => {
  sb = await new Sandbox(helpers.opts()).open();
  const server = await serve(ECHO, 8001);
  const { url, token } = await server.publish(8001);
  const base = bare(url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const sockets = new Set();
    agent.on('free', (s) => sockets.add(s));
    const posted = JSON.parse((await request(`${base}p?kern_token=${token}`, { method: 'POST', headers: { 'Content-Length': '5' }, body: ['hello'], agent })).body);
    expect({ method: posted.method, body: posted.body, path: posted.path }).toEqual({ method: 'POST', body: 'hello', path: '/p' });
    const chunked = JSON.parse((await request(`${base}q?kern_token=${token}`, { method: 'PUT', body: ['one,', 'two,', 'three'], agent })).body);
    expect({ method: chunked.method, body: chunked.body, te: chunked.headers['transfer-encoding'] }).toEqual({ method: 'PUT', body: 'one,two,three', te: 'chunked' });
    // Later requests on the connection need no token, and one they carry is stripped too.
    const later = JSON.parse((await request(`${base}r?kern_token=${token}&k=v`, { agent })).body);
    expect(later.path).toBe('/r?k=v');
    const noToken = await request(`${base}s`, { agent });
    expect(noToken.status).toBe(200);
    expect(sockets.size).toBe(1);
  } finally {
    agent.destroy();
  }
  // Framing the box's server could read otherwise (a request smuggled past the stripping) is
  // refused before anything reaches the box.
  const port = Number(new URL(url).port);
  for (const framing of ['Content-Length: 4\r\nTransfer-Encoding: chunked', 'Transfer-Encoding: chunked, identity', 'Content-Length: 4\r\nContent-Length: 5']) {
    const answer = await new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => s.write(`POST /?kern_token=${token} HTTP/1.1\r\nHost: x\r\n${framing}\r\n\r\n0\r\n\r\n`));
      const got = [];
      s.on('data', (d) => got.push(d));
      s.on('end', () => resolve(Buffer.concat(got).toString()));
      s.on('error', reject);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
  }
});

test('a WebSocket through the URL (token in the URL or the cookie); refused without it', async () => {
  sb = await new Sandbox(helpers.opts()).open();
  const server = await serve(WS, 9000);
  const { url, token, port } = await server.publish(9000);
  const base = bare(url);
  expect(await websocket(`${base}chat?kern_token=${token}`, 'hi')).toEqual({ echoed: 'echo:hi saw:GET /chat HTTP/1.1' });
  expect(await websocket(`${base}chat`, 'hi', { Cookie: `kern_token_${port}=${token}` })).toEqual({ echoed: 'echo:hi saw:GET /chat HTTP/1.1' });
  expect(await websocket(`${base}chat`, 'hi')).toEqual({ refused: 403 });
});

test('close() revokes the URL and ends its open connections; a process\'s port closes with the process', async () => {
  sb = await new Sandbox(helpers.opts()).open();
  const server = await serve(WS, 9000);
  const published = await server.publish(9000);
  // An upgraded connection left open through the port:
  const open = await new Promise((resolve, reject) => {
    const req = http.request(published.url, {
      agent: false,
      headers: { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64') },
    });
    req.on('upgrade', (_res, socket) => resolve(socket));
    req.on('error', reject);
    req.end();
  });
  const ended = new Promise((resolve) => open.on('close', resolve));
  await published.close();
  await ended;
  await expect(request(published.url)).rejects.toMatchObject({ code: 'ECONNREFUSED' });

  const echo = await serve(ECHO, 8002);
  const second = await echo.publish(8002);
  expect((await request(second.url)).status).toBe(200);
  await echo.kill('SIGKILL');
  // Its port closes once the process's end is seen (polled: a grace, not a timing).
  let refused = false;
  for (let i = 0; i < 200 && !refused; i++) {
    refused = await request(second.url).then(() => false, (e) => e.code === 'ECONNREFUSED');
    if (!refused) await helpers.sleep(50);
  }
  expect(refused).toBe(true);
  await expect(echo.publish(8002)).rejects.toThrow(/the process has ended/);
});

test('sb.publish() reaches the newest running process that accepts, across a restart; none is a 502', async () => {
  sb = await new Sandbox(helpers.opts()).open();
  const published = await sb.publish(8003);
  const none = await request(published.url);
  expect({ status: none.status, body: none.body }).toEqual({ status: 502, body: expect.stringMatching(/no running process/) });
  const first = await serve(ECHO, 8003);
  // The newest process, which does not listen on the port, is passed over.
  const idle = await sb.spawn(['sleep', '600']);
  const a = JSON.parse((await request(published.url)).body);
  expect(a.path).toBe('/');
  await first.kill('SIGKILL');
  const gone = await request(published.url);
  expect(gone.status).toBe(502);
  expect(gone.body).toMatch(/none of the Sandbox's 1 running processes accepts on 127\.0\.0\.1:8003/);
  await serve(ECHO, 8003);
  expect((await request(published.url)).status).toBe(200);
  await idle.kill('SIGKILL');
  await sb.close();
  sb = undefined;
  await expect(request(published.url)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
});

test('the box cannot reach the published port: nothing of the host opens to it', async () => {
  sb = await new Sandbox(helpers.opts()).open();
  const server = await serve(ECHO, 8004);
  const { port } = await server.publish(8004);
  const r = await sb.run(['python3', '-c', `import socket\ntry:\n    socket.create_connection(("127.0.0.1", ${port}), timeout=5); print("reached")\nexcept OSError as e:\n    print("refused", e.errno)`]);
  expect(r.stdout).toMatch(/^refused \d+\n$/);
  // The host's port is there meanwhile.
  const probe = await new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.destroy();
      resolve('open');
    });
    s.on('error', (e) => resolve(e.code));
  });
  expect(probe).toBe('open');
});

test('bad publish() input is refused before anything listens', async () => {
  sb = await new Sandbox(helpers.opts()).open();
  const p = await sb.spawn(['sleep', '600']);
  for (const [args, msg] of [
    [[0], /port must be a whole number from 1 to 65535, got 0/],
    [[70000], /port must be a whole number/],
    [['8000'], /port must be a whole number/],
    [[8000, { protocol: 'tcp' }], /protocol "tcp" is not offered/],
    [[8000, { host: 'localhost' }], /host must be an IP address/],
    [[8000, { hots: '127.0.0.1' }], /unknown publish\(\) option `hots`; it takes protocol, host/],
    [[8000, { host: 1 }], /publish\(\{ host \}\) takes a string/],
  ]) {
    await expect(p.publish(...args)).rejects.toThrow(SandboxError);
    await expect(p.publish(...args)).rejects.toThrow(msg);
    await expect(sb.publish(...args)).rejects.toThrow(msg);
  }
  const t = await sb.terminal({ argv: ['sleep', '600'] });
  expect(t.publish).toBeUndefined();
  await p.kill('SIGKILL');
  await t.kill('SIGKILL');
});

test('kern run -p publishes the box\'s port the same way, until the box ends', async () => {
  const { spawn } = require('child_process');
  const kern = require('../../js/platform.js').kernPath();
  const child = spawn(kern, ['run', '--image', helpers.opts().image, '--timeout', '120', '-p', '8005', '--', 'python3', '-c', ECHO, '8005'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  try {
    expect(await helpers.waitFor(() => /published at (\S+)/.test(stderr), 30000, 50)).toBe(true);
    const url = /the box's 127\.0\.0\.1:8005 is published at (http:\/\/127\.0\.0\.1:\d+\/\?kern_token=[0-9a-f]{64})\n/.exec(stderr)[1];
    // 502 until the server in the box listens.
    let r;
    for (let i = 0; i < 300; i++) {
      r = await request(url);
      if (r.status !== 502) break;
      await helpers.sleep(100);
    }
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body).path).toBe('/');
    expect((await request(bare(url))).status).toBe(403);
    child.kill('SIGTERM');
    await exited;
    await expect(request(url)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  } finally {
    child.kill('SIGKILL');
  }
});

test('kern run -p refuses a port outside 1 to 65535 before any box starts', () => {
  const { spawnSync } = require('child_process');
  const kern = require('../../js/platform.js').kernPath();
  for (const bad of ['0', '70000', 'http']) {
    const r = spawnSync(kern, ['run', '-p', bad, '--', 'true'], { encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/--publish <PORT>/);
  }
});
