'use strict';
// rootless: yes
// The two ways out of a box: `network: true` (the host's network) and `egressAllow` (a proxy that
// admits only the listed hosts). Real servers on this machine only: HTTP servers on 127.0.0.1 in
// this process, and, as root, HTTP/TLS "test hosts" in a network namespace this file creates
// (198.51.100.2 behind a veth pair), which the proxy reaches by name through a hosts file
// (KERN_EGRESS_HOSTS). The one outside address is PyPI, for a real `pip download`.

const fs = require('fs');
const http = require('http');
const path = require('path');
const { execFileSync, spawn } = require('child_process');
const { isRoot, requireRootfs, opts, tempDirs, summary } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const realEnv = require('vm').runInThisContext('process').env;
const { temp, removeAll } = tempDirs();

/** An HTTP server on 127.0.0.1 answering every request with its method, url and Host header. */
function startServer() {
  return new Promise((resolve) => {
    const seen = [];
    const server = http.createServer((req, res) => {
      seen.push({ method: req.method, url: req.url, host: req.headers.host, connection: req.headers.connection });
      res.end(`hello from ${req.headers.host} ${req.url}`);
    });
    server.listen(0, '127.0.0.1', () => resolve({ server, port: server.address().port, seen }));
  });
}

/** Python run in the box: fetch `url` with urllib (which honours HTTP_PROXY/HTTPS_PROXY). */
const fetchPy = (url) =>
  [
    'import urllib.request, urllib.error, sys',
    'try:',
    `    r = urllib.request.urlopen(${JSON.stringify(url)}, timeout=15)`,
    '    print("STATUS", r.status, r.read().decode())',
    'except urllib.error.HTTPError as e:',
    '    print("STATUS", e.code, e.read().decode())',
    'except Exception as e:',
    '    print("ERROR", type(e).__name__, e)',
  ].join('\n');

/** As `fetchPy`, through the proxy even for a loopback URL (which NO_PROXY sends to the box's
 * own loopback): what the proxy decides about the host's. */
const viaProxyPy = (url) => `import os\nfor k in ("NO_PROXY", "no_proxy"):\n    os.environ.pop(k, None)\n${fetchPy(url)}`;

/** Python run in the box: a raw request to the proxy, for what urllib would not send. */
const rawPy = (payload) =>
  [
    'import os, socket',
    'port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
    's = socket.create_connection(("127.0.0.1", port), timeout=15)',
    `s.sendall(${JSON.stringify(payload)}.encode())`,
    'out = b""',
    'while True:',
    '    b = s.recv(65536)',
    '    if not b: break',
    '    out += b',
    'print(out.decode(errors="replace"))',
  ].join('\n');

let local; // an HTTP server on 127.0.0.1

beforeAll(async () => {
  requireRootfs();
  local = await startServer();
});

afterAll(async () => {
  if (local) local.server.close();
  removeAll();
});

describe('bad input is refused when the Sandbox is constructed', () => {
  test.each([
    ['an empty entry', ['']],
    ['a URL', ['https://pypi.org/simple']],
    ['a wildcard with a port', ['*:443']],
    ['a glob', ['*.example.com']],
    ['port 0', ['example.com:0']],
    ['port 70000', ['example.com:70000']],
    ['a non-numeric port', ['example.com:http']],
    ['whitespace', ['exa mple.com']],
    ['a user@host', ['user@example.com']],
  ])('%s', (_what, egressAllow) => {
    expect(() => new Sandbox(opts({ egressAllow }))).toThrow(SandboxError);
  });

  test('network: true and egressAllow together', () => {
    expect(() => new Sandbox(opts({ network: true, egressAllow: ['pypi.org'] }))).toThrow(/mutually exclusive/);
  });

  test('no egressAllow is no network and no proxy; an empty list is the proxy allowing nothing', async () => {
    const none = await new Sandbox(opts()).open();
    try {
      const r = await none.run(['sh', '-c', 'echo "[$HTTP_PROXY]"']);
      expect(r.stdout).toBe('[]\n');
    } finally {
      await none.close();
    }
    const sb = await new Sandbox(opts({ egressAllow: [] })).open();
    try {
      const r = await sb.runCode(viaProxyPy(`http://127.0.0.1:${local.port}/empty`));
      expect(r.stdout).toMatch(/^STATUS 403/);
      expect(local.seen.filter((s) => s.url === '/empty')).toEqual([]);
    } finally {
      await sb.close();
    }
  });
});

describe('network: true', () => {
  test("the box shares the host's network: it reaches a server on the host's loopback, with a warning", async () => {
    const sb = await new Sandbox(opts({ network: true })).open();
    try {
      const r = await sb.runCode(fetchPy(`http://127.0.0.1:${local.port}/direct`));
      expect(r.stdout).toMatch(/^STATUS 200 hello from 127\.0\.0\.1:\d+ \/direct/);
      expect(r.runtimeNotes.join('\n')).toMatch(/network: true.*host's network/);
      // The host's interfaces, not just lo.
      const ifs = await sb.run(['cat', '/proc/net/dev']);
      expect(ifs.stdout.split('\n').filter((l) => /:/.test(l) && !/^\s*lo:/.test(l)).length).toBeGreaterThan(1);
      // Names resolve (the host's resolver configuration) and the host CA bundle is trusted.
      const env = await sb.run(['sh', '-c', 'echo "$SSL_CERT_FILE"; test -s /etc/resolv.conf && echo resolv']);
      expect(env.stdout).toBe('/etc/kern-host-ca.crt\nresolv\n');
    } finally {
      await sb.close();
    }
  });

  test('without it, the same fetch fails: the box has only lo', async () => {
    const sb = await new Sandbox(opts()).open();
    try {
      const r = await sb.runCode(fetchPy(`http://127.0.0.1:${local.port}/nonet`));
      expect(r.stdout).toMatch(/^ERROR/);
      expect(local.seen.filter((s) => s.url === '/nonet')).toEqual([]);
    } finally {
      await sb.close();
    }
  });
});

describe('egressAllow through the proxy (127.0.0.1 servers, named as literals)', () => {
  let sb;
  beforeAll(async () => {
    sb = await new Sandbox(opts({ egressAllow: [`127.0.0.1:${local.port}`] })).open();
  });
  afterAll(async () => {
    if (sb) await sb.close();
  });

  test('the proxy variables point at the relay, and the box has no resolver', async () => {
    const r = await sb.run(['sh', '-c', 'echo "$HTTP_PROXY $HTTPS_PROXY $NO_PROXY"; grep -c nameserver /etc/resolv.conf || true']);
    expect(r.stdout).toBe('http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1\n0\n');
  });

  test('plain HTTP to a listed literal goes through in origin form, with Connection: close', async () => {
    const before = local.seen.length;
    // NO_PROXY lists 127.0.0.1 for in-box servers: clear it so urllib asks the proxy.
    const r = await sb.runCode(`import os\nos.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")\n${fetchPy(`http://127.0.0.1:${local.port}/via-proxy?q=1`)}`);
    expect(r.stdout).toMatch(/^STATUS 200 hello from 127\.0\.0\.1:\d+ \/via-proxy\?q=1/);
    const req = local.seen.slice(before).find((s) => s.url === '/via-proxy?q=1');
    expect(req).toMatchObject({ method: 'GET', host: `127.0.0.1:${local.port}`, connection: 'close' });
    expect(r.runtimeNotes.join('\n')).toMatch(new RegExp(`egress allowed: 127\\.0\\.0\\.1:${local.port}`));
  });

  test('a CONNECT tunnel to a listed literal carries bytes both ways', async () => {
    const r = await sb.runCode(
      rawPy(`CONNECT 127.0.0.1:${local.port} HTTP/1.1\r\nHost: 127.0.0.1:${local.port}\r\n\r\nGET /tunnel HTTP/1.1\r\nHost: 127.0.0.1:${local.port}\r\nConnection: close\r\n\r\n`)
    );
    expect(r.stdout).toMatch(/^HTTP\/1\.1 200/);
    // Plain HTTP in a tunnel must name the tunnel's host (attack/net.test.js tries others).
    expect(r.stdout).toContain(`hello from 127.0.0.1:${local.port} /tunnel`);
  });

  test('the same server on another port, or under another spelling of an unlisted address, is refused', async () => {
    const other = await startServer();
    try {
      for (const url of [
        `http://127.0.0.1:${other.port}/other-port`,
        `http://127.0.0.2:${local.port}/other-address`,
        `http://localhost:${local.port}/by-name`,
      ]) {
        const r = await sb.runCode(`import os\nos.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")\n${fetchPy(url)}`);
        expect(r.stdout).toMatch(/^STATUS 403 blocked by kern-sandbox egress policy/);
        expect(r.runtimeNotes.join('\n')).toMatch(/egress denied/);
      }
      expect(other.seen).toEqual([]);
    } finally {
      other.server.close();
    }
  });

  test('origin-form requests and https:// absolute-form are refused by the proxy', async () => {
    const origin = await sb.runCode(rawPy('GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'));
    expect(origin.stdout).toMatch(/^HTTP\/1\.1 400/);
  });

  test('kernels and prewarmed boxes go through the same proxy', async () => {
    const pre = await new Sandbox(opts({ egressAllow: [`127.0.0.1:${local.port}`], prewarm: 1 })).open();
    try {
      const code = `import os\nos.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")\n${fetchPy(`http://127.0.0.1:${local.port}/warm`)}`;
      const r = await pre.runCode(code);
      expect(r.stdout).toMatch(/^STATUS 200 hello from .* \/warm/);
      const denied = await pre.runCode(fetchPy('http://example.com/'));
      expect(denied.stdout).toMatch(/^STATUS 403/);
      const k = await pre.kernel();
      try {
        const cell = await k.runCode(code);
        expect(cell.stdout).toMatch(/^STATUS 200 hello from .* \/warm/);
      } finally {
        await k.close();
      }
    } finally {
      await pre.close();
    }
  });

  test('setupNetwork "host" gives the setup box the host network: no proxy variables, direct connections work', async () => {
    const ws = temp('kern-egress-setup-');
    const sb2 = await new Sandbox({
      image: SCI,
      workspace: ws,
      egressAllow: ['pypi.org'],
      setupNetwork: 'host',
      setup: `env > /workspace/env.txt; python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:${local.port}/from-setup").status)' > /workspace/setup.txt`,
    }).open();
    await sb2.close();
    expect(fs.readFileSync(path.join(ws, 'setup.txt'), 'utf8')).toBe('200\n');
    expect(fs.readFileSync(path.join(ws, 'env.txt'), 'utf8')).not.toMatch(/^(HTTP_PROXY|https_proxy|ALL_PROXY)=/m);
  });

  test('a box holds at most 256 connections open through the proxy; more are closed at once', async () => {
    const r = await sb.runCode(
      [
        'import os, socket, select, time',
        'port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
        'socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(300)]',
        'time.sleep(1.0)',
        'ready, _, _ = select.select(socks, [], [], 0.5)',
        'closed = sum(1 for s in ready if s.recv(1) == b"")',
        'print("closed", closed, "open", len(socks) - closed)',
      ].join('\n'),
      { timeoutS: 60 }
    );
    expect(r.exitCode).toBe(0);
    const [, closed, open] = /closed (\d+) open (\d+)/.exec(r.stdout).map(Number);
    expect(open).toBeLessThanOrEqual(256);
    expect(closed).toBeGreaterThanOrEqual(44);
  });

  test('a listed loopback address is reachable with the default environment (NO_PROXY sends clients straight to loopback)', async () => {
    const before = local.seen.length;
    const r = await sb.runCode(
      [
        fetchPy(`http://127.0.0.1:${local.port}/default-env`),
        'import socket',
        `s = socket.create_connection(("127.0.0.1", ${local.port}), timeout=15)`,
        `s.sendall(b"GET /raw HTTP/1.0\\r\\nHost: 127.0.0.1:${local.port}\\r\\n\\r\\n")`,
        'print(s.recv(4096).split(b"\\r\\n")[0].decode())',
      ].join('\n')
    );
    expect(r.stdout).toMatch(/^STATUS 200 hello from \S+ \/default-env$/m);
    expect(r.stdout).toMatch(/^HTTP\/1\.[01] 200/m);
    expect(local.seen.slice(before).map((q) => q.url)).toEqual(['/default-env', '/raw']);
    expect(r.stderr).toMatch(new RegExp(`egress allowed: 127\\.0\\.0\\.1:${local.port}`));
  });

  test('UDP, raw sockets and direct connections fail: the proxy is the only way out', async () => {
    const r = await sb.runCode(
      [
        'import socket',
        'def attempt(name, f):',
        '    try:',
        '        f(); print(name, "OK")',
        '    except OSError as e:',
        '        print(name, "failed", e.errno)',
        'attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("198.51.100.2", 53)))',
        'attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))',
        // The listed port is reachable on the box's loopback (below); any other is not.
        `attempt("direct", lambda: socket.create_connection(("127.0.0.1", ${local.port === 9 ? 10 : 9}), timeout=3))`,
        'attempt("v6", lambda: socket.create_connection(("2001:db8::1", 80), timeout=3))',
      ].join('\n')
    );
    expect(r.stdout).toMatch(/^udp failed/m);
    expect(r.stdout).toMatch(/^raw failed/m);
    expect(r.stdout).toMatch(/^direct failed/m);
    expect(r.stdout).toMatch(/^v6 failed/m);
  });
});

describe('egressAllow with test hosts behind a veth pair (root only)', () => {
  const ns = `kt${process.pid}`;
  let hostsFile;
  let servers;
  let sb;
  let savedHosts;

  beforeAll(async () => {
    if (!isRoot) return;
    const dir = temp('kern-egress-');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=allowed.test', '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem')], { stdio: 'ignore' });
    const ip = (...a) => execFileSync('ip', a, { stdio: 'pipe' });
    ip('netns', 'add', ns);
    ip('link', 'add', `${ns}h`, 'type', 'veth', 'peer', 'name', `${ns}n`, 'netns', ns);
    ip('addr', 'add', '198.51.100.1/24', 'dev', `${ns}h`);
    ip('link', 'set', `${ns}h`, 'up');
    ip('netns', 'exec', ns, 'ip', 'addr', 'add', '198.51.100.2/24', 'dev', `${ns}n`);
    ip('netns', 'exec', ns, 'ip', 'link', 'set', `${ns}n`, 'up');
    ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
    const script = path.join(dir, 'servers.js');
    fs.writeFileSync(
      script,
      `const http = require('http'), https = require('https'), fs = require('fs');
const h = (req, res) => res.end('test host ' + req.headers.host + ' ' + req.url + ' sni=' + (req.socket.servername || ''));
for (const p of [80, 8080]) http.createServer(h).listen(p, '0.0.0.0');
https.createServer({ key: fs.readFileSync(${JSON.stringify(path.join(dir, 'key.pem'))}), cert: fs.readFileSync(${JSON.stringify(path.join(dir, 'cert.pem'))}) }, h).listen(443, '0.0.0.0', () => console.log('ready'));`
    );
    servers = spawn('ip', ['netns', 'exec', ns, process.execPath, script], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((resolve) => servers.stdout.once('data', resolve));
    hostsFile = path.join(dir, 'hosts');
    fs.writeFileSync(
      hostsFile,
      ['198.51.100.2 allowed.test www.allowed.test allowed.test.attacker.test denied.test', '127.0.0.1 rebind.test', '169.254.169.254 meta.test', ''].join('\n')
    );
    savedHosts = realEnv.KERN_EGRESS_HOSTS;
    realEnv.KERN_EGRESS_HOSTS = hostsFile;
    sb = await new Sandbox({ image: SCI, egressAllow: ['.allowed.test', 'rebind.test', 'meta.test'] }).open();
  }, 60_000);

  afterAll(async () => {
    if (!isRoot) return;
    if (sb) await sb.close();
    if (savedHosts === undefined) delete realEnv.KERN_EGRESS_HOSTS;
    else realEnv.KERN_EGRESS_HOSTS = savedHosts;
    if (servers) servers.kill('SIGKILL');
    try {
      execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    } catch {
      /* already gone */
    }
  });

  const rootOnly = isRoot ? test : test.skip;

  rootOnly('an allowed name (and its subdomain) over plain HTTP and over CONNECT+TLS', async () => {
    const r = await sb.runCode(fetchPy('http://www.allowed.test/plain'));
    expect(r.stdout).toMatch(/^STATUS 200 test host www\.allowed\.test \/plain/);
    const tls = await sb.runCode(
      `import ssl, urllib.request\nctx = ssl._create_unverified_context()\nr = urllib.request.urlopen("https://allowed.test/tls", context=ctx, timeout=15)\nprint(r.status, r.read().decode())`
    );
    expect(tls.stdout).toMatch(/^200 test host allowed\.test \/tls sni=allowed\.test/);
    expect(tls.runtimeNotes.join('\n')).toMatch(/egress allowed: allowed\.test:443/);
  });

  rootOnly('a denied name is refused and never resolved; a substring is not a suffix', async () => {
    for (const host of ['denied.test', 'allowed.test.attacker.test']) {
      const r = await sb.runCode(fetchPy(`http://${host}/x`));
      expect(r.stdout).toMatch(/^STATUS 403 blocked by kern-sandbox egress policy/);
      const note = r.runtimeNotes.find((n) => n.includes(host));
      expect(note).toMatch(/egress denied/);
      expect(note).toMatch(/not resolved/);
    }
  });

  rootOnly('IP literals in every encoding are refused unless listed', async () => {
    for (const host of ['198.51.100.2', '3325256706', '0xc6.0x33.0x64.0x2', '0306.063.0144.02', '[::ffff:198.51.100.2]']) {
      const r = await sb.runCode(fetchPy(`http://${host}/lit`));
      expect(r.stdout).toMatch(/^STATUS (403|400)/);
    }
  });

  rootOnly('allowed names that resolve to loopback or the metadata address are refused (rebinding)', async () => {
    const a = await sb.runCode(fetchPy(`http://rebind.test:${local.port}/rebind`));
    expect(a.stdout).toMatch(/^STATUS 403/);
    const b = await sb.runCode(fetchPy('http://meta.test/latest/meta-data/'));
    expect(b.stdout).toMatch(/^STATUS 403/);
    expect(b.runtimeNotes.join('\n')).toMatch(/169\.254\.169\.254/);
    expect(local.seen.filter((s) => s.url === '/rebind')).toEqual([]);
  });

  rootOnly('["*"] reaches every public host, name or address, on any port, never a private one; narrowed later', async () => {
    const open = await new Sandbox({ image: SCI, egressAllow: ['*'] }).open();
    try {
      for (const url of ['http://denied.test/star', 'http://www.allowed.test:8080/star', 'http://198.51.100.2/star']) {
        const r = await open.runCode(fetchPy(url));
        expect(r.stdout).toMatch(/^STATUS 200 test host /);
      }
      // Names that resolve to loopback or metadata, and private literals, stay out.
      for (const url of [`http://rebind.test:${local.port}/star`, 'http://meta.test/latest/meta-data/', `http://127.0.0.1:${local.port}/star`, 'http://169.254.169.254/latest/']) {
        const r = await open.runCode(viaProxyPy(url));
        expect(r.stdout).toMatch(/^STATUS 403/);
      }
      expect(local.seen.filter((s) => s.url === '/star')).toEqual([]);
      await open.setEgressAllow(['allowed.test']);
      expect((await open.runCode(fetchPy('http://allowed.test/narrow'))).stdout).toMatch(/^STATUS 200/);
      expect((await open.runCode(fetchPy('http://denied.test/narrow'))).stdout).toMatch(/^STATUS 403/);
    } finally {
      await open.close();
    }
  });

  rootOnly('a port that is not listed is refused', async () => {
    const r = await sb.runCode(fetchPy('http://allowed.test:8080/port'));
    expect(r.stdout).toMatch(/^STATUS 403/);
  });

  rootOnly('plain HTTP whose Host header differs from the target is refused', async () => {
    const r = await sb.runCode(rawPy('GET http://allowed.test/h HTTP/1.1\r\nHost: denied.test\r\n\r\n'));
    expect(r.stdout).toMatch(/^HTTP\/1\.1 400/);
  });

  rootOnly('a CONNECT whose TLS ClientHello names another host is cut off', async () => {
    const r = await sb.runCode(
      [
        'import os, socket, ssl',
        'port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
        's = socket.create_connection(("127.0.0.1", port), timeout=15)',
        's.sendall(b"CONNECT allowed.test:443 HTTP/1.1\\r\\nHost: allowed.test:443\\r\\n\\r\\n")',
        'print(s.recv(4096).split(b"\\r\\n")[0].decode())',
        'ctx = ssl._create_unverified_context()',
        'try:',
        '    t = ctx.wrap_socket(s, server_hostname="denied.test")',
        '    print("handshake OK")',
        'except (OSError, ssl.SSLError) as e:',
        '    print("handshake failed")',
      ].join('\n')
    );
    expect(r.stdout).toMatch(/^HTTP\/1\.1 200/);
    expect(r.stdout).toMatch(/handshake failed/);
    expect(r.runtimeNotes.join('\n')).toMatch(/SNI/);
  });
});

test('pip download of a real package from PyPI through the proxy', async () => {
  const sb = await new Sandbox({ image: SCI, egressAllow: ['pypi.org', 'files.pythonhosted.org'] }).open();
  try {
    const r = await sb.run(['python3', '-m', 'pip', 'download', '--no-deps', '--no-cache-dir', '-d', '/workspace/dl', 'six==1.16.0'], { timeoutS: 120 });
    expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
    expect((await sb.listFiles('dl')).map((f) => f.path)).toEqual(['dl/six-1.16.0-py2.py3-none-any.whl']);
    expect(r.runtimeNotes.join('\n')).toMatch(/egress allowed: .*pypi\.org:443/);
    // Anything else is still closed.
    const other = await sb.runCode(fetchPy('https://example.com/'));
    expect(other.stdout).toMatch(/^(STATUS 403|ERROR)/);
  } finally {
    await sb.close();
  }
}, 180_000);

test('pip download from PyPI with the open internet (egressAllow: ["*"])', async () => {
  const sb = await new Sandbox({ image: SCI, egressAllow: ['*'] }).open();
  try {
    const r = await sb.run(['python3', '-m', 'pip', 'download', '--no-deps', '--no-cache-dir', '-d', '/workspace/dl', 'six==1.16.0'], { timeoutS: 120 });
    expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
    expect(r.runtimeNotes.join('\n')).toMatch(/egress allowed: .*pypi\.org:443/);
    // Open is the public internet only: the host's loopback stays out.
    const lo = await sb.runCode(viaProxyPy(`http://127.0.0.1:${local.port}/star-lo`));
    expect(lo.stdout).toMatch(/^STATUS 403/);
    expect(local.seen.filter((s) => s.url === '/star-lo')).toEqual([]);
  } finally {
    await sb.close();
  }
}, 180_000);
