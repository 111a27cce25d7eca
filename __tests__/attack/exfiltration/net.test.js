'use strict';
// rootless: yes
// Attack suite, network. Host listeners on this machine count every connection/datagram they get:
// a TCP server on 0.0.0.0 (reachable on the host's loopback and its external address), a UDP
// socket, and an abstract unix socket. The box, with no network and then with an `egressAllow`
// proxy, tries to reach them directly, through the proxy under every spelling of a host address,
// and through allowlisted names that resolve (KERN_EGRESS_HOSTS) to loopback, 0.0.0.0, the host's
// own external address and the metadata address. Every listener must have seen nothing.

const fs = require('fs');
const os = require('os');
const net = require('net');
const path = require('path');
const dgram = require('dgram');
const { KEEP_ALL_CAPS, requireRootfs, opts, tempDirs } = require('../../helpers');
const { hostGuard, runJson, PY_PRELUDE, realEnv } = require('../host');
const { Sandbox } = require('../../..');

const { temp, removeAll } = tempDirs();

const EXT_IP = (() => {
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs || []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return null;
})();

let guard;
let tcp;
let udp;
let abstract;
const seen = { tcp: 0, udp: 0, abstract: 0 };
let port;
let uport;
let abstractName;

/** Names (KERN_EGRESS_HOSTS) that resolve into the less common non-public blocks. */
const SPECIAL = ['bench.test', 'bench2.test', 'ietf.test', 'relay.test', 'nat64.test', 'bench6.test', 'discard.test'];

const listen = (srv, ...a) => new Promise((res) => srv.listen(...a, res));

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  tcp = net.createServer((c) => {
    seen.tcp += 1;
    c.destroy();
  });
  await listen(tcp, 0, '0.0.0.0');
  port = tcp.address().port;
  udp = dgram.createSocket('udp4');
  udp.on('message', () => {
    seen.udp += 1;
  });
  await new Promise((res) => udp.bind(0, '0.0.0.0', res));
  uport = udp.address().port;
  abstractName = `kern-atk-${guard.token}`;
  abstract = net.createServer((c) => {
    seen.abstract += 1;
    c.destroy();
  });
  await listen(abstract, `\0${abstractName}`);
});

afterAll(async () => {
  if (tcp) tcp.close();
  if (udp) udp.close();
  if (abstract) abstract.close();
  if (guard) guard.cleanup();
  removeAll();
});

test('control: the host listeners do count connections (from the host itself)', async () => {
  const before = { ...seen };
  await new Promise((res, rej) => net.connect(port, '127.0.0.1', res).on('error', rej));
  await new Promise((res, rej) => net.connect(`\0${abstractName}`, res).on('error', rej));
  const client = dgram.createSocket('udp4');
  await new Promise((res) => client.send('x', uport, '127.0.0.1', () => res()));
  client.close();
  await new Promise((r) => setTimeout(r, 200));
  expect(seen.tcp - before.tcp).toBe(1);
  expect(seen.abstract - before.abstract).toBe(1);
  expect(seen.udp - before.udp).toBe(1);
  Object.assign(seen, { tcp: 0, udp: 0, abstract: 0 });
});

const CONNECTS = (targets) =>
  PY_PRELUDE +
  [
    `targets = ${JSON.stringify(targets)}`,
    'out = {}',
    'for name, fam, addr in targets:',
    '    def go():',
    '        s = socket.socket(getattr(socket, fam), socket.SOCK_STREAM); s.settimeout(3)',
    '        s.connect(tuple(addr) if isinstance(addr, list) else addr); s.close()',
    '    out[name] = try_(go)',
    'print(json.dumps(out))',
  ].join('\n');

describe('no network (the default)', () => {
  let sb;
  beforeAll(async () => {
    sb = await new Sandbox(opts()).open();
  });
  afterAll(async () => {
    if (sb) await sb.close();
  });

  test('TCP to the host\'s loopback listener (127.0.0.1, ::1, 0.0.0.0, 127.1.2.3) reaches only the box\'s own lo', async () => {
    const { j } = await runJson(
      sb,
      CONNECTS([
        ['v4', 'AF_INET', ['127.0.0.1', port]],
        ['any', 'AF_INET', ['0.0.0.0', port]],
        ['other127', 'AF_INET', ['127.1.2.3', port]],
        ['v6', 'AF_INET6', ['::1', port]],
      ])
    );
    expect(j.v4).toBe('ECONNREFUSED');
    expect(j.any).toBe('ECONNREFUSED');
    expect(j.other127).toBe('ECONNREFUSED');
    expect(j.v6).toMatch(/^(ECONNREFUSED|EADDRNOTAVAIL|ENETUNREACH)$/);
    expect(seen.tcp).toBe(0);
    guard.assertUntouched();
  });

  test('TCP and UDP to the host\'s external address: no route; the host got nothing', async () => {
    if (!EXT_IP) throw new Error('this host has no external IPv4 address to aim at');
    const { j } = await runJson(
      sb,
      CONNECTS([['ext', 'AF_INET', [EXT_IP, port]]]).replace(
        'print(json.dumps(out))',
        `out["udp-ext"] = try_(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("${EXT_IP}", ${uport})))\n` +
          `out["udp-lo"] = try_(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", ${uport})))\n` +
          'print(json.dumps(out))'
      )
    );
    expect(j.ext).toBe('ENETUNREACH');
    expect(j['udp-ext']).toBe('ENETUNREACH');
    expect(j['udp-lo']).toMatch(/^ok/); // sent — to the box's own lo, where nobody listens
    await new Promise((r) => setTimeout(r, 200));
    expect(seen).toEqual({ tcp: 0, udp: 0, abstract: 0 });
    guard.assertUntouched();
  });

  test('the host\'s abstract unix socket is unreachable (abstract names are per network namespace)', async () => {
    const { j } = await runJson(
      sb,
      PY_PRELUDE +
        [
          'def go():',
          '    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)',
          `    s.connect("\\0${abstractName}")`,
          `out = {"abstract": try_(go), "path": try_(lambda: socket.socket(socket.AF_UNIX).connect(${JSON.stringify(path.join(guard.dir, 'x.sock'))}))}`,
          'print(json.dumps(out))',
        ].join('\n')
    );
    expect(j).toEqual({ abstract: 'ECONNREFUSED', path: 'ENOENT' });
    expect(seen.abstract).toBe(0);
    guard.assertUntouched();
  });

  test('raw and packet sockets are refused (no CAP_NET_RAW)', async () => {
    const { j } = await runJson(
      sb,
      PY_PRELUDE +
        [
          'out = {',
          '  "raw_icmp": try_(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),',
          '  "raw_tcp": try_(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)),',
          '  "raw_v6": try_(lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)),',
          '  "packet": try_(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))),',
          '  "packet_dgram": try_(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3)))}',
          'print(json.dumps(out))',
        ].join('\n')
    );
    expect(j).toEqual({ raw_icmp: 'EPERM', raw_tcp: 'EPERM', raw_v6: 'EPERM', packet: 'EPERM', packet_dgram: 'EPERM' });
    guard.assertUntouched();
  });

  test('route and address changes over rtnetlink and ioctl are refused; the host\'s routes and addresses are unchanged', async () => {
    const routes = fs.readFileSync('/proc/net/route', 'utf8');
    const ifs = JSON.stringify(os.networkInterfaces());
    const { j } = await runJson(
      sb,
      PY_PRELUDE +
        [
          'import fcntl',
          'def nl(msgtype, payload):',
          '    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)',
          '    s.bind((0, 0))',
          '    hdr = struct.pack("=IHHII", 16 + len(payload), msgtype, 1 | 4 | 0x400 | 0x200, 1, 0)',
          '    s.send(hdr + payload)',
          '    ack = s.recv(4096)',
          '    err = struct.unpack("=i", ack[16:20])[0]',
          '    return "ok" if err == 0 else ename(-err)',
          '# RTM_NEWADDR 10.9.9.9/32 on lo',
          'addr = struct.pack("=BBBBI", 2, 32, 0, 0, 1) + struct.pack("=HH", 8, 2) + socket.inet_aton("10.9.9.9")',
          '# RTM_NEWROUTE default via 10.9.9.1',
          'route = struct.pack("=BBBBBBBBI", 2, 0, 0, 0, 254, 4, 0, 1, 0) + struct.pack("=HH", 8, 5) + socket.inet_aton("10.9.9.1")',
          '# RTM_NEWLINK: a dummy interface',
          'link = struct.pack("=BBHiII", 0, 0, 0, 0, 0, 0) + struct.pack("=HH", 10, 3) + b"evil0\\0\\0\\0" + struct.pack("=HH", 16, 18) + struct.pack("=HH", 10, 1) + b"dummy\\0\\0\\0"',
          'def lo_down():',
          '    s = socket.socket(); ifr = struct.pack("16sH14x", b"lo", 0)',
          '    fcntl.ioctl(s, 0x8914, ifr)',
          'out = {"newaddr": nl(20, addr), "newroute": nl(24, route), "newlink": nl(16, link), "lo_down": try_(lo_down),',
          '       "ifaces": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])}',
          'print(json.dumps(out))',
        ].join('\n')
    );
    expect(j).toEqual({ newaddr: 'EPERM', newroute: 'EPERM', newlink: 'EPERM', lo_down: 'EPERM', ifaces: ['lo'] });
    expect(fs.readFileSync('/proc/net/route', 'utf8')).toBe(routes);
    expect(JSON.stringify(os.networkInterfaces())).toBe(ifs);
    guard.assertUntouched();
  });

  test('with every capability kept (capDrop []): a raw socket exists but sees only the box\'s lo; the host got nothing', async () => {
    if (!EXT_IP) throw new Error('this host has no external IPv4 address to aim at');
    const s = await new Sandbox(opts({ capDrop: KEEP_ALL_CAPS })).open();
    try {
      const { j } = await runJson(
        s,
        PY_PRELUDE +
          [
            'def raw_send():',
            '    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)',
            `    r.sendto(struct.pack("!HHHH", 1234, ${uport}, 9, 0) + b"x", ("${EXT_IP}", 0))`,
            'def pkt_ifaces():',
            '    p = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))',
            '    return [i[1] for i in socket.if_nameindex()]',
            'print(json.dumps({"raw_send": try_(raw_send), "ifaces": try_(pkt_ifaces)}))',
          ].join('\n')
      );
      expect(j.raw_send).toBe('ENETUNREACH');
      expect(j.ifaces).toBe("ok:['lo']");
    } finally {
      await s.close();
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(seen).toEqual({ tcp: 0, udp: 0, abstract: 0 });
    guard.assertUntouched();
  });
});

describe('egressAllow: the proxy is the only way out, and it never leads back to the host', () => {
  let eg;
  let savedHosts;
  beforeAll(async () => {
    const dir = temp('kern-atk-net-');
    const hosts = path.join(dir, 'hosts');
    fs.writeFileSync(
      hosts,
      [
        '127.0.0.1 rebind.test',
        '0.0.0.0 zero.test',
        `${EXT_IP || '192.0.2.254'} ext.test`,
        '169.254.169.254 meta.test',
        '::1 rebind6.test',
        '::ffff:127.0.0.1 mapped.test',
        // IANA special-purpose blocks that are not public (benchmarking, IETF protocol
        // assignments, the 6to4 relay, NAT64 of a private address, 2001::/23, discard-only).
        '198.18.0.1 bench.test',
        '198.19.255.254 bench2.test',
        '192.0.0.8 ietf.test',
        '192.88.99.1 relay.test',
        '64:ff9b::a00:1 nat64.test',
        '2001:2::1 bench6.test',
        '100::1 discard.test',
        '',
      ].join('\n')
    );
    savedHosts = realEnv.KERN_EGRESS_HOSTS;
    realEnv.KERN_EGRESS_HOSTS = hosts;
    eg = await new Sandbox(
      opts({
        egressAllow: [
          'allowed.invalid', `rebind.test:${port}`, `zero.test:${port}`, `ext.test:${port}`, 'meta.test', `rebind6.test:${port}`, `mapped.test:${port}`,
          ...SPECIAL.map((n) => `${n}:${port}`),
          // Listing the address a name resolves to does not let the name reach it.
          `198.18.0.1:${port}`,
        ],
      })
    ).open();
  });
  afterAll(async () => {
    if (eg) await eg.close();
    if (savedHosts === undefined) delete realEnv.KERN_EGRESS_HOSTS;
    else realEnv.KERN_EGRESS_HOSTS = savedHosts;
  });

  test('names resolving into every other non-public IANA block are refused, with a hint that works', async () => {
    const targets = SPECIAL.map((n) => `${n}:${port}`);
    const { j, r } = await runJson(eg, connectPy(targets));
    // 403, decided on the address: never dialled (a dialled one would be a 502 here).
    for (const t of targets) expect({ [t]: j[t] }).toEqual({ [t]: expect.stringMatching(/^HTTP\/1\.1 403/) });
    const notes = r.runtimeNotes.join('\n');
    for (const range of ['198.18.0.0/15', '192.0.0.0/24', '192.88.99.0/24', 'NAT64', '2001::/23', '100::/64']) {
      expect(notes).toContain(range);
    }
    // The hint says what works (the address itself, listed), not what does not.
    expect(notes).toContain(`connect to 198.18.0.1:${port} itself instead of bench.test`);
    expect(notes).not.toMatch(/list an address itself to allow it/);
    expect(seen.tcp).toBe(0);
    guard.assertUntouched();
  });

  /** Sends raw CONNECT requests to the proxy; returns each status line. */
  const connectPy = (targets) =>
    PY_PRELUDE +
    [
      'pport = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
      `targets = ${JSON.stringify(targets)}`,
      'out = {}',
      'for t in targets:',
      '    s = socket.create_connection(("127.0.0.1", pport), timeout=10)',
      '    s.sendall(f"CONNECT {t} HTTP/1.1\\r\\nHost: {t}\\r\\n\\r\\n".encode())',
      '    try: out[t] = s.recv(4096).split(b"\\r\\n")[0].decode()',
      '    except OSError as e: out[t] = ename(e.errno)',
      '    s.close()',
      'print(json.dumps(out))',
    ].join('\n');

  test('direct connections that skip the proxy fail: host loopback, host external address, v6', async () => {
    const targets = [
      ['lo', 'AF_INET', ['127.0.0.1', port]],
      ['v6', 'AF_INET6', ['::1', port]],
    ];
    if (EXT_IP) targets.push(['ext', 'AF_INET', [EXT_IP, port]]);
    const { j } = await runJson(eg, CONNECTS(targets));
    expect(j.lo).toBe('ECONNREFUSED');
    expect(j.v6).toMatch(/^(ECONNREFUSED|EADDRNOTAVAIL|ENETUNREACH)$/);
    if (EXT_IP) expect(j.ext).toBe('ENETUNREACH');
    expect(seen.tcp).toBe(0);
    guard.assertUntouched();
  });

  test('CONNECT to the host\'s loopback in every spelling (literal, decimal, hex, short, v6, mapped, localhost) is refused', async () => {
    const targets = [
      `127.0.0.1:${port}`,
      `127.1:${port}`,
      `2130706433:${port}`,
      `0x7f000001:${port}`,
      `0177.0.0.1:${port}`,
      `0.0.0.0:${port}`,
      `[::1]:${port}`,
      `[::ffff:127.0.0.1]:${port}`,
      `localhost:${port}`,
      `127.0.0.1:3128`,
    ];
    if (EXT_IP) targets.push(`${EXT_IP}:${port}`);
    const { j } = await runJson(eg, connectPy(targets));
    for (const t of targets) expect({ [t]: j[t] }).toEqual({ [t]: expect.stringMatching(/^HTTP\/1\.1 (400|403)/) });
    expect(seen.tcp).toBe(0);
    guard.assertUntouched();
  });

  test('allowlisted names that resolve to loopback, 0.0.0.0, ::1, a mapped loopback, the host\'s own address or 169.254.169.254 are refused', async () => {
    const targets = [`rebind.test:${port}`, `zero.test:${port}`, `rebind6.test:${port}`, `mapped.test:${port}`, 'meta.test:80'];
    if (EXT_IP) targets.push(`ext.test:${port}`);
    const { j, r } = await runJson(eg, connectPy(targets));
    for (const t of targets) expect({ [t]: j[t] }).toEqual({ [t]: expect.stringMatching(/^HTTP\/1\.1 (400|403)/) });
    expect(r.runtimeNotes.join('\n')).toMatch(/egress denied/);
    expect(seen.tcp).toBe(0);
    guard.assertUntouched();
  });

  test('plain-HTTP (absolute-form) requests to the host\'s addresses are refused the same way', async () => {
    const { j } = await runJson(
      eg,
      PY_PRELUDE +
        [
          'pport = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
          `urls = ["http://127.0.0.1:${port}/x", "http://rebind.test:${port}/x", "http://[::1]:${port}/x"${EXT_IP ? `, "http://ext.test:${port}/x"` : ''}]`,
          'out = {}',
          'for u in urls:',
          '    s = socket.create_connection(("127.0.0.1", pport), timeout=10)',
          '    host = u.split("/")[2]',
          '    s.sendall(f"GET {u} HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n".encode())',
          '    out[u] = s.recv(4096).split(b"\\r\\n")[0].decode()',
          'print(json.dumps(out))',
        ].join('\n')
    );
    for (const [u, status] of Object.entries(j)) expect({ [u]: status }).toEqual({ [u]: expect.stringMatching(/^HTTP\/1\.1 (400|403)/) });
    expect(seen.tcp).toBe(0);
    guard.assertUntouched();
  });

  test('the abstract unix socket and raw sockets stay unreachable in egress mode too', async () => {
    const { j } = await runJson(
      eg,
      PY_PRELUDE +
        [
          'def go():',
          '    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)',
          `    s.connect("\\0${abstractName}")`,
          'print(json.dumps({"abstract": try_(go), "raw": try_(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))}))',
        ].join('\n')
    );
    expect(j).toEqual({ abstract: 'ECONNREFUSED', raw: 'EPERM' });
    expect(seen.abstract).toBe(0);
    guard.assertUntouched();
  });
});

describe('Host-header fronting: a plaintext tunnel or the in-box loopback listener reaches only the listed host', () => {
  // A server with virtual hosts on 127.0.0.1 (one of them not listed anywhere): the box reaches
  // the listed address and names the other site in `Host`, first thing or on a kept-alive
  // connection after an honest request. The server records the Host of every request it got.
  let vhost;
  let vport;
  let vsb;
  const hosts = [];
  beforeAll(async () => {
    vhost = require('http').createServer((req, res) => {
      hosts.push(`${req.headers.host} ${req.url}`);
      res.end(`site ${req.headers.host}\n`);
    });
    await listen(vhost, 0, '127.0.0.1');
    vport = vhost.address().port;
    vsb = await new Sandbox(opts({ egressAllow: [`127.0.0.1:${vport}`] })).open();
  });
  afterAll(async () => {
    if (vsb) await vsb.close();
    if (vhost) {
      vhost.closeAllConnections();
      vhost.close();
    }
  });

  test('another Host, first or after an honest request, through CONNECT or straight to the listener, never arrives', async () => {
    const { j, r } = await runJson(
      vsb,
      PY_PRELUDE +
        [
          'pport = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
          `VP = ${vport}`,
          'def conn(way):',
          '    if way == "direct":',
          '        return socket.create_connection(("127.0.0.1", VP), timeout=10)',
          '    s = socket.create_connection(("127.0.0.1", pport), timeout=10)',
          '    s.sendall(f"CONNECT 127.0.0.1:{VP} HTTP/1.1\\r\\nHost: 127.0.0.1:{VP}\\r\\n\\r\\n".encode())',
          '    assert s.recv(4096).startswith(b"HTTP/1.1 200")',
          '    return s',
          'def answer(s):',
          '    out = b""',
          '    try:',
          '        while True:',
          '            c = s.recv(65536)',
          '            if not c: break',
          '            out += c',
          '            if b"site " in out and out.endswith(b"\\n"): break',
          '    except OSError as e:',
          '        return ename(e.errno)',
          '    return out.split(b"\\r\\n")[0].decode() if out else "closed"',
          'def req(host, path):',
          '    return f"GET {path} HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n".encode()',
          'honest = f"127.0.0.1:{VP}"',
          'out = {}',
          'for way in ("connect", "direct"):',
          '    s = conn(way); s.sendall(req("other.example", f"/front-{way}")); out[f"{way}_first"] = answer(s); s.close()',
          '    s = conn(way); s.sendall(b"\\r\\n" + req("other.example", f"/crlf-{way}")); out[f"{way}_crlf"] = answer(s); s.close()',
          '    s = conn(way); s.sendall(req(honest, f"/ok-{way}")); out[f"{way}_honest"] = answer(s)',
          '    try:',
          '        s.sendall(req("other.example", f"/later-{way}")); out[f"{way}_later"] = answer(s)',
          '    except OSError as e:',
          '        out[f"{way}_later"] = ename(e.errno)',
          '    s.close()',
          '    s = conn(way); s.sendall(req(honest, f"/a-{way}") + req("other.example", f"/piped-{way}")); out[f"{way}_piped"] = answer(s); s.close()',
          'print(json.dumps(out))',
        ].join('\n')
    );
    for (const way of ['connect', 'direct']) {
      expect(j[`${way}_first`]).toMatch(/^HTTP\/1\.1 400/);
      expect(j[`${way}_crlf`]).toMatch(/^HTTP\/1\.1 400/);
      expect(j[`${way}_honest`]).toBe('HTTP/1.1 200 OK');
      expect(j[`${way}_later`]).not.toMatch(/^HTTP\/1\.1 200/);
      expect(j[`${way}_piped`]).toBe('HTTP/1.1 200 OK');
    }
    // On the host: only the honest requests, each naming the listed address.
    expect(hosts.filter((h) => !h.startsWith(`127.0.0.1:${vport} `))).toEqual([]);
    expect(hosts.sort()).toEqual([`/a-connect`, `/a-direct`, `/ok-connect`, `/ok-direct`].map((p) => `127.0.0.1:${vport} ${p}`).sort());
    expect(r.runtimeNotes.join('\n')).toMatch(/Host header "other\.example" does not match/);
    guard.assertUntouched();
  });
});

test('after every attack: no process, cgroup or mount left behind on the host', async () => {
  await guard.assertNoLeaks();
  guard.assertUntouched();
});
