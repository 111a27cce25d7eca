'use strict';
// rootless: yes
// `secrets` (an addition): the box sees a placeholder; the egress proxy writes the value into
// the request line and headers of requests to the secret's hosts, over HTTPS too (it terminates
// TLS with a per-Sandbox CA the box trusts, and verifies the real host). Real servers on
// 127.0.0.1 (tls-servers.js) record what arrived; python `requests` (pip's vendored copy, in the
// sci rootfs) and `curl` (the host image's) send `Authorization: Bearer $KEY`.

const fs = require('fs');
const { requireRootfs, opts, tempDirs } = require('../helpers');
const { makeTestCa, trustTestCa, untrustTestCa, startHttps, startHttp, stopAll } = require('../support/tls-servers');
const { Sandbox, SandboxError } = require('../..');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const { temp, removeAll } = tempDirs();
const VALUE = `sk-test-${require('crypto').randomBytes(16).toString('hex')}`;

let tls;
let api; // the secret's host (HTTPS)
let plain; // the secret's host too, plain HTTP

beforeAll(async () => {
  requireRootfs();
  tls = makeTestCa(temp('kern-secrets-ca-'));
  trustTestCa(tls.caFile);
  api = await startHttps(tls);
  plain = await startHttp();
});

afterAll(() => {
  stopAll(api, plain);
  untrustTestCa();
  removeAll();
});

const hostsOf = () => [`127.0.0.1:${api.port}`, `127.0.0.1:${plain.port}`];
const secretOpts = (extra = {}) => ({
  egressAllow: hostsOf(),
  secrets: { KEY: { value: VALUE, hosts: hostsOf() } },
  ...extra,
});

/** The requests that reached `srv` since `from`, with the given path prefix. */
const arrived = (srv, prefix) => srv.seen.filter((r) => r.url.startsWith(prefix));

describe('bad secrets are refused when the Sandbox is constructed, never quoting the value', () => {
  const cases = [
    ['without egressAllow', { secrets: { KEY: { value: VALUE, hosts: ['api.example.com'] } } }, /needs `egressAllow`/],
    ['a host egressAllow does not allow', { egressAllow: ['api.example.com'], secrets: { KEY: { value: VALUE, hosts: ['other.example.com'] } } }, /"other\.example\.com".*not allowed by `egressAllow`/],
    ['a port egressAllow does not allow', { egressAllow: ['api.example.com'], secrets: { KEY: { value: VALUE, hosts: ['api.example.com:8443'] } } }, /not allowed by `egressAllow`/],
    ['a name that is not a variable', { egressAllow: ['a.test'], secrets: { 'MY-KEY': { value: VALUE, hosts: ['a.test'] } } }, /"MY-KEY" is not a variable name/],
    ['a name `env` also sets', { egressAllow: ['a.test'], env: { KEY: 'x' }, secrets: { KEY: { value: VALUE, hosts: ['a.test'] } } }, /"KEY" is also set by option `env`/],
    ['an empty value', { egressAllow: ['a.test'], secrets: { KEY: { value: '', hosts: ['a.test'] } } }, /`value` is empty/],
    ['a value with CR LF', { egressAllow: ['a.test'], secrets: { KEY: { value: `${VALUE}\r\nX-Evil: 1`, hosts: ['a.test'] } } }, /CR, LF or NUL/],
    ['no hosts', { egressAllow: ['a.test'], secrets: { KEY: { value: VALUE, hosts: [] } } }, /`hosts` is empty/],
    ['a domain instead of a host', { egressAllow: ['.a.test'], secrets: { KEY: { value: VALUE, hosts: ['.a.test'] } } }, /exactly, not domains/],
    ['a value that is not a string', { egressAllow: ['a.test'], secrets: { KEY: { value: 42, hosts: ['a.test'] } } }, /\{ value: string, hosts: string\[\], headers\?: string\[\] \}/],
    ['an unknown field', { egressAllow: ['a.test'], secrets: { KEY: { value: VALUE, hosts: ['a.test'], header: 'x' } } }, /and nothing else/],
    ['headers naming a header servers reflect', { egressAllow: ['a.test'], secrets: { KEY: { value: VALUE, hosts: ['a.test'], headers: ['Authorization', 'Origin'] } } }, /`headers`: "Origin" is a header servers reflect/],
    ['headers naming no header', { egressAllow: ['a.test'], secrets: { KEY: { value: VALUE, hosts: ['a.test'], headers: ['X Token'] } } }, /`headers`: "X Token" is not a header name/],
    ['empty headers', { egressAllow: ['a.test'], secrets: { KEY: { value: VALUE, hosts: ['a.test'], headers: [] } } }, /`headers` is empty/],
    ['headers that are not strings', { egressAllow: ['a.test'], secrets: { KEY: { value: VALUE, hosts: ['a.test'], headers: [1] } } }, /headers\?: string\[\]/],
    ['not an object', { egressAllow: ['a.test'], secrets: ['KEY'] }, /option `secrets` must be an object/],
  ];
  test.each(cases)('%s', (_name, o, re) => {
    let err;
    try {
      new Sandbox(opts(o));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect(err.code).toBe('ERR_INVALID_OPTION');
    expect(err.message).toMatch(re);
    expect(err.message).not.toContain(VALUE);
  });
});

describe('the value reaches the secret host, the box only ever sees the placeholder', () => {
  test('python requests over HTTPS, directly and through the proxy (CONNECT), and urllib over plain HTTP', async () => {
    const sb = await new Sandbox(opts(secretOpts({ image: SCI }))).open();
    try {
      const code = [
        'import os, json, urllib.request',
        'from pip._vendor import requests',
        'key = os.environ["KEY"]',
        'h = {"Authorization": f"Bearer {key}"}',
        'out = {"key": key}',
        `r = requests.get("https://127.0.0.1:${api.port}/py-direct", headers=h, timeout=30)`,
        'out["direct"] = [r.status_code, r.text]',
        `r = requests.get("https://127.0.0.1:${api.port}/py-connect", headers=h, timeout=30, proxies={"https": os.environ["HTTPS_PROXY"]})`,
        'out["connect"] = [r.status_code, r.text]',
        `r = requests.post("https://127.0.0.1:${api.port}/py-body", headers=h, data="a body", timeout=30)`,
        'out["body"] = [r.status_code, r.text]',
        `req = urllib.request.Request("http://127.0.0.1:${plain.port}/py-plain", headers=h)`,
        'out["plain"] = urllib.request.urlopen(req, timeout=30).status',
        'print(json.dumps(out))',
      ].join('\n');
      const r = await sb.runCode(code);
      expect(r.exitCode).toBe(0);
      const out = JSON.parse(r.stdout.trim().split('\n').pop());
      expect(out.key).toMatch(/^kern-secret-[0-9a-f]{32,34}$/);
      expect(out.direct).toEqual([200, 'hello /py-direct\n']);
      expect(out.connect[0]).toBe(200);
      expect(out.body[0]).toBe(200);
      expect(out.plain).toBe(200);
      // On the host: the server got the value, in the header and in the request line.
      for (const prefix of ['/py-direct', '/py-connect', '/py-body']) {
        const got = arrived(api, prefix);
        expect(got).toHaveLength(1);
        expect(got[0].headers.authorization).toBe(`Bearer ${VALUE}`);
        expect(got[0].headers.connection).toBe('close');
      }
      expect(arrived(api, '/py-body')[0].headers['content-length']).toBe('6');
      expect(arrived(plain, '/py-plain')[0].headers.authorization).toBe(`Bearer ${VALUE}`);
      // Nothing the call returns holds the value.
      expect(JSON.stringify({ o: r.stdout, e: r.stderr, n: r.runtimeNotes })).not.toContain(VALUE);
      expect(r.runtimeNotes.join('\n')).toMatch(/egress allowed: 127\.0\.0\.1/);
    } finally {
      await sb.close();
    }
  });

  test('curl over HTTPS, directly and through the proxy (CONNECT)', async () => {
    const sb = await new Sandbox(secretOpts({ image: 'host' })).open();
    try {
      const r = await sb.run(['sh', '-c', [
        `curl -sS -H "Authorization: Bearer $KEY" -w ' %{http_code}\\n' https://127.0.0.1:${api.port}/curl-direct`,
        `curl -sS -x "$HTTPS_PROXY" -H "Authorization: Bearer $KEY" -w ' %{http_code}\\n' https://127.0.0.1:${api.port}/curl-connect`,
        'echo "KEY=$KEY"',
      ].join(' && ')]);
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toMatch(/hello \/curl-direct\n 200\n/);
      expect(r.stdout).toMatch(/hello \/curl-connect\n 200\n/);
      expect(r.stdout).toMatch(/KEY=kern-secret-[0-9a-f]{32,34}\n/);
      for (const prefix of ['/curl-direct', '/curl-connect']) {
        const got = arrived(api, prefix);
        expect(got).toHaveLength(1);
        expect(got[0].headers.authorization).toBe(`Bearer ${VALUE}`);
      }
      expect(JSON.stringify({ o: r.stdout, e: r.stderr, n: r.runtimeNotes })).not.toContain(VALUE);
    } finally {
      await sb.close();
    }
  });

  test('each Sandbox draws its own placeholder; a call\'s env cannot replace it', async () => {
    const keys = [];
    for (let i = 0; i < 2; i += 1) {
      const sb = await new Sandbox(opts(secretOpts())).open();
      try {
        const r = await sb.run(['sh', '-c', 'echo "$KEY"'], { env: { KEY: 'mine' } });
        keys.push(r.stdout.trim());
      } finally {
        await sb.close();
      }
    }
    expect(keys[0]).toMatch(/^kern-secret-[0-9a-f]{32,34}$/);
    expect(keys[1]).toMatch(/^kern-secret-[0-9a-f]{32,34}$/);
    expect(keys[0]).not.toBe(keys[1]);
  });

  test('a secret whose host setEgressAllow removed is simply unreachable', async () => {
    const sb = await new Sandbox(opts(secretOpts())).open();
    try {
      await sb.setEgressAllow([`127.0.0.1:${plain.port}`]);
      const before = api.seen.length;
      const r = await sb.runCode([
        'import os, ssl, urllib.request, urllib.error',
        'ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])',
        // Through the proxy: the box's own loopback listener for that port went with the list.
        'os.environ["no_proxy"] = os.environ["NO_PROXY"] = ""',
        'opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": os.environ["HTTPS_PROXY"]}), urllib.request.HTTPSHandler(context=ctx))',
        `req = urllib.request.Request("https://127.0.0.1:${api.port}/removed", headers={"Authorization": "Bearer " + os.environ["KEY"]})`,
        'try:',
        '    print("STATUS", opener.open(req, timeout=20).status)',
        'except Exception as e:',
        '    print("ERROR", type(e).__name__)',
      ].join('\n'));
      expect(r.stdout).toMatch(/^ERROR /);
      expect(api.seen.length).toBe(before);
      expect(r.runtimeNotes.join('\n')).toMatch(/egress denied: 127\.0\.0\.1:\d+/);
    } finally {
      await sb.close();
    }
  });
});

test('a header the secret names carries the value; the default credential headers then do not', async () => {
  const sb = await new Sandbox({
    image: 'host',
    egressAllow: hostsOf(),
    secrets: { KEY: { value: VALUE, hosts: hostsOf(), headers: ['X-Token'] } },
  }).open();
  try {
    const r = await sb.run(['sh', '-c', [
      `curl -sS -H "X-Token: $KEY" -w ' %{http_code}\\n' https://127.0.0.1:${api.port}/named-ok`,
      `curl -sS -H "Authorization: Bearer $KEY" -w ' %{http_code}\\n' https://127.0.0.1:${api.port}/named-refused`,
    ].join('; ')]);
    expect(r.stdout).toMatch(/hello \/named-ok\n 200\n/);
    expect(r.stdout).toMatch(/ 403\n/);
    expect(arrived(api, '/named-ok')[0].headers['x-token']).toBe(VALUE);
    expect(arrived(api, '/named-refused')).toEqual([]);
    expect(r.runtimeNotes.join('\n')).toMatch(/in header "Authorization", which is not one its value may go into \(x-token\)/);
    expect(JSON.stringify({ o: r.stdout, e: r.stderr, n: r.runtimeNotes })).not.toContain(VALUE);
  } finally {
    await sb.close();
  }
});

test('a TLS failure to a secret\'s host is a runtime note naming the CA variable to set', async () => {
  // Opened while the proxy does not trust the test CA (KERN_REGISTRY_CA unset): the box only
  // sees a 502; the note says why, and what fixes it.
  untrustTestCa();
  let sb;
  try {
    sb = await new Sandbox(secretOpts({ image: 'host' })).open();
  } finally {
    trustTestCa(tls.caFile);
  }
  try {
    const before = api.seen.length;
    const r = await sb.run(['sh', '-c', `curl -sS -H "Authorization: Bearer $KEY" -w ' %{http_code}\\n' https://127.0.0.1:${api.port}/untrusted`]);
    expect(r.stdout).toMatch(/ 502\n/);
    expect(api.seen.length).toBe(before);
    expect(r.runtimeNotes.join('\n')).toMatch(new RegExp(`egress to 127\\.0\\.0\\.1:${api.port} failed: TLS to 127\\.0\\.0\\.1:${api.port} failed: .*set KERN_REGISTRY_CA`));
  } finally {
    await sb.close();
  }
});

test('the bundle the box trusts holds certificates only', async () => {
  const sb = await new Sandbox(opts(secretOpts())).open();
  try {
    const r = await sb.run(['sh', '-c', 'cat "$SSL_CERT_FILE"; for v in REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS PIP_CERT CURL_CA_BUNDLE; do eval "echo $v=\\$$v"; done']);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain('-----BEGIN CERTIFICATE-----');
    expect(r.stdout).not.toMatch(/PRIVATE KEY/);
    for (const v of ['REQUESTS_CA_BUNDLE', 'NODE_EXTRA_CA_CERTS', 'PIP_CERT', 'CURL_CA_BUNDLE']) {
      expect(r.stdout).toContain(`${v}=/etc/kern-host-ca.crt`);
    }
    expect(fs.existsSync('/etc/kern-host-ca.crt')).toBe(false);
  } finally {
    await sb.close();
  }
});
