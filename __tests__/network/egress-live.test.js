'use strict';
// rootless: yes
// `setEgressAllow` (an addition): the allowlist changes while the Sandbox lives, for later calls
// and for the next connection of boxes already running (a kernel, a spawn()ed process); a
// connection opened before the change keeps going. Real HTTP servers on 127.0.0.1 count what
// reached them; the box asks the proxy directly (absolute-form and CONNECT), as clients that
// honour HTTP_PROXY do.

const { requireRootfs, opts } = require('../helpers');
const { startHttp, stopAll } = require('../support/tls-servers');
const { Sandbox, SandboxError } = require('../..');

let a;
let b;

beforeAll(async () => {
  requireRootfs();
  a = await startHttp();
  b = await startHttp();
});

afterAll(() => stopAll(a, b));

const entry = (s) => `127.0.0.1:${s.port}`;

/** Python: one request through the proxy to each `127.0.0.1:port/path`; prints `port status`. */
const FETCH_FN = [
  'import os, socket',
  'PROXY = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
  'def fetch(port, path):',
  '    s = socket.create_connection(("127.0.0.1", PROXY), timeout=20)',
  '    s.sendall(f"GET http://127.0.0.1:{port}{path} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n".encode())',
  '    out = b""',
  '    while b"\\r\\n" not in out:',
  '        c = s.recv(4096)',
  '        if not c: break',
  '        out += c',
  '    s.close()',
  '    return out.split(b" ")[1].decode() if out else "closed"',
].join('\n');

const fetchBoth = (tag) => `${FETCH_FN}\nprint(fetch(${a.port}, "/${tag}"), fetch(${b.port}, "/${tag}"))`;

const hits = (srv, tag) => srv.seen.filter((r) => r.url === `/${tag}`).length;

describe('setEgressAllow', () => {
  test('widens, narrows and empties the list for later calls', async () => {
    const sb = await new Sandbox(opts({ egressAllow: [entry(a)] })).open();
    try {
      expect((await sb.runCode(fetchBoth('w1'))).stdout.trim()).toBe('200 403');
      await sb.setEgressAllow([entry(a), entry(b)]);
      expect((await sb.runCode(fetchBoth('w2'))).stdout.trim()).toBe('200 200');
      await sb.setEgressAllow([entry(b)]);
      const narrowed = await sb.runCode(fetchBoth('w3'));
      expect(narrowed.stdout.trim()).toBe('403 200');
      expect(narrowed.runtimeNotes.join('\n')).toContain(`egress denied: 127.0.0.1:${a.port}`);
      await sb.setEgressAllow([]);
      expect((await sb.runCode(fetchBoth('w4'))).stdout.trim()).toBe('403 403');
      // On the host: exactly the allowed requests arrived.
      expect([hits(a, 'w1'), hits(b, 'w1'), hits(a, 'w2'), hits(b, 'w2'), hits(a, 'w3'), hits(b, 'w3'), hits(a, 'w4'), hits(b, 'w4')])
        .toEqual([1, 0, 1, 1, 0, 1, 0, 0]);
    } finally {
      await sb.close();
    }
  });

  test('a running kernel sees the change on its next connection; a connection opened before keeps going', async () => {
    const sb = await new Sandbox(opts({ egressAllow: [entry(a)] })).open();
    try {
      const k = await sb.kernel();
      try {
        // Cell 1: a CONNECT tunnel to `a` opened (its one HTTP request comes later: plain HTTP
        // in a tunnel is one request per connection), `a` fetched, and `b` refused.
        const open = [
          FETCH_FN,
          'kept = socket.create_connection(("127.0.0.1", PROXY), timeout=20)',
          `kept.sendall(b"CONNECT 127.0.0.1:${a.port} HTTP/1.1\\r\\nHost: 127.0.0.1:${a.port}\\r\\n\\r\\n")`,
          'def until(sock, marker):',
          '    out = b""',
          '    while marker not in out:',
          '        c = sock.recv(4096)',
          '        if not c: return out + b" [closed]"',
          '        out += c',
          '    return out',
          'print(until(kept, b"\\r\\n\\r\\n").split(b"\\r\\n")[0].decode())',
          `print(fetch(${a.port}, "/k1"))`,
          `print(fetch(${b.port}, "/k1"))`,
        ].join('\n');
        const r1 = await k.runCode(open);
        expect(r1.stdout.trim().split('\n')).toEqual(['HTTP/1.1 200 Connection established', '200', '403']);
        await sb.setEgressAllow([entry(b)]);
        // Cell 2, same box: the tunnel opened before goes on; new connections see the new list.
        const r2 = await k.runCode([
          `kept.sendall(b"GET /k2 HTTP/1.1\\r\\nHost: 127.0.0.1:${a.port}\\r\\n\\r\\n")`,
          'print(until(kept, b"hello /k2\\n").split(b"\\r\\n")[0].decode())',
          `print(fetch(${a.port}, "/k3"), fetch(${b.port}, "/k3"))`,
        ].join('\n'));
        expect(r2.stdout.trim().split('\n')).toEqual(['HTTP/1.1 200 OK', '403 200']);
        expect([hits(a, 'k1'), hits(a, 'k2'), hits(a, 'k3'), hits(b, 'k1'), hits(b, 'k3')]).toEqual([1, 1, 0, 0, 1]);
      } finally {
        await k.close();
      }
    } finally {
      await sb.close();
    }
  });

  test('a spawned process sees the change on its next connection', async () => {
    const sb = await new Sandbox(opts({ egressAllow: [entry(a)] })).open();
    try {
      let out = '';
      const script = `${FETCH_FN}\nimport sys\nfor line in sys.stdin:\n    print(fetch(${b.port}, "/" + line.strip()), flush=True)`;
      const p = await sb.spawn(['python3', '-u', '-c', script], { onStdout: (c) => { out += c.toString(); } });
      const next = async (n) => {
        for (let i = 0; i < 600 && out.trim().split('\n').filter(Boolean).length < n; i += 1) {
          await new Promise((r) => setTimeout(r, 50));
        }
        return out.trim().split('\n');
      };
      await p.write('s1\n');
      expect(await next(1)).toEqual(['403']);
      await sb.setEgressAllow([entry(b)]);
      await p.write('s2\n');
      expect(await next(2)).toEqual(['403', '200']);
      await p.end();
      expect((await p.wait()).exitCode).toBe(0);
      expect([hits(b, 's1'), hits(b, 's2')]).toEqual([0, 1]);
    } finally {
      await sb.close();
    }
  });

  test('a Sandbox opened deny-all (egressAllow: []) is widened later, its running kernel too', async () => {
    const sb = await new Sandbox(opts({ egressAllow: [] })).open();
    try {
      const k = await sb.kernel();
      try {
        expect((await k.runCode(fetchBoth('d1'))).stdout.trim()).toBe('403 403');
        await sb.setEgressAllow([entry(b)]);
        expect((await k.runCode(`print(fetch(${a.port}, "/d2"), fetch(${b.port}, "/d2"))`)).stdout.trim()).toBe('403 200');
        expect((await sb.runCode(fetchBoth('d3'))).stdout.trim()).toBe('403 200');
      } finally {
        await k.close();
      }
      expect([hits(a, 'd1'), hits(b, 'd1'), hits(a, 'd2'), hits(b, 'd2'), hits(a, 'd3'), hits(b, 'd3')]).toEqual([0, 0, 0, 1, 0, 1]);
    } finally {
      await sb.close();
    }
  });

  test('is refused without egressAllow, before open(), and for a bad list', async () => {
    const none = await new Sandbox(opts()).open();
    try {
      await expect(none.setEgressAllow([entry(a)])).rejects.toThrow(/needs a Sandbox opened with `egressAllow`.*`egressAllow: \[\]`/);
      await expect(none.setEgressAllow([entry(a)])).rejects.toHaveProperty('code', 'ERR_INVALID_OPTION');
    } finally {
      await none.close();
    }
    const sb = new Sandbox(opts({ egressAllow: [entry(a)] }));
    await expect(sb.setEgressAllow([entry(b)])).rejects.toThrow(/not open/);
    await expect(sb.setEgressAllow([entry(b)])).rejects.toHaveProperty('code', 'ERR_NOT_OPEN');
    await sb.open();
    try {
      await expect(sb.setEgressAllow('pypi.org')).rejects.toThrow(/takes an array of strings/);
      await expect(sb.setEgressAllow(['https://pypi.org/simple'])).rejects.toThrow(/egressAllow entry "https:\/\/pypi\.org\/simple"/);
      await expect(sb.setEgressAllow(['*.example.com'])).rejects.toHaveProperty('code', 'ERR_INVALID_OPTION');
      await expect(sb.setEgressAllow(['*:443'])).rejects.toThrow(SandboxError);
      await expect(sb.setEgressAllow('pypi.org')).rejects.toHaveProperty('code', 'ERR_INVALID_OPTION');
      // A refused list leaves the previous one in force.
      expect((await sb.runCode(fetchBoth('r1'))).stdout.trim()).toBe('200 403');
    } finally {
      await sb.close();
    }
  });
});
