'use strict';
// rootless: yes
// Attack suite, `setEgressAllow`. A box that is already running when the list narrows keeps
// trying the address it lost, by every way out it has: through the proxy (absolute-form and
// CONNECT) and straight at the listed loopback address (the way clients that skip the proxy
// for loopback go; the box's relay was told at its start which addresses to take that way).
// Each try after the change must be refused, and the server (on the host) must see none of
// them; an address still listed keeps working (the refusal is the change, not a broken line).

const { requireRootfs, opts } = require('../../helpers');
const { hostGuard } = require('../host');
const { startHttp, stopAll } = require('../../support/tls-servers');
const { Sandbox } = require('../../..');

const suite = { guard: null };
let kept;
let lost;

beforeAll(async () => {
  requireRootfs();
  suite.guard = await hostGuard();
  kept = await startHttp();
  lost = await startHttp();
});

afterAll(async () => {
  stopAll(kept, lost);
  await suite.guard.assertNoLeaks();
  suite.guard.cleanup();
});

const entry = (s) => `127.0.0.1:${s.port}`;
const hits = (srv, tag) => srv.seen.filter((r) => r.url.startsWith(`/${tag}`)).length;

// For each line `tag` on stdin: one request to each port, each way; prints `way:port:status`.
const SCRIPT = [
  'import os, socket, sys',
  'PROXY = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])',
  'def status(s, head):',
  '    try:',
  '        s.sendall(head.encode())',
  '        out = b""',
  '        while b"\\r\\n" not in out:',
  '            c = s.recv(4096)',
  '            if not c: break',
  '            out += c',
  '        return out.split(b" ")[1].decode() if out else "closed"',
  '    except OSError as e:',
  '        return "error"',
  '    finally:',
  '        s.close()',
  'def get(port, path):',
  '    return f"GET {path} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nConnection: close\\r\\n\\r\\n"',
  'def tries(port, tag):',
  '    out = []',
  '    s = socket.create_connection(("127.0.0.1", PROXY), timeout=20)',
  '    out.append("absolute:" + status(s, get(port, f"http://127.0.0.1:{port}/{tag}-absolute")))',
  '    s = socket.create_connection(("127.0.0.1", PROXY), timeout=20)',
  '    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n".encode())',
  '    first = s.recv(4096)',
  '    if first.startswith(b"HTTP/1.1 200"):',
  '        out.append("connect:" + status(s, get(port, f"/{tag}-connect")))',
  '    else:',
  '        s.close(); out.append("connect:" + first.split(b" ")[1].decode())',
  '    try:',
  '        s = socket.create_connection(("127.0.0.1", port), timeout=20)',
  '        out.append("direct:" + status(s, get(port, f"/{tag}-direct")))',
  '    except OSError:',
  '        out.append("direct:refused")',
  '    return " ".join(out)',
  'for line in sys.stdin:',
  '    tag = line.strip()',
  '    print(tag, "kept", tries(0, tag), "lost", tries(1, tag), flush=True)',
].join('\n');

test('a running box loses a narrowed address on every way out, at its next connection', async () => {
  const sb = await new Sandbox(opts({ egressAllow: [entry(kept), entry(lost)] })).open();
  try {
    let out = '';
    const script = SCRIPT.replace('tries(0, tag)', `tries(${kept.port}, tag)`).replace('tries(1, tag)', `tries(${lost.port}, tag)`);
    const p = await sb.spawn(['python3', '-u', '-c', script], { onStdout: (c) => { out += c.toString(); } });
    const line = async (tag) => {
      for (let i = 0; i < 600 && !out.includes(`${tag} `); i += 1) await new Promise((r) => setTimeout(r, 50));
      return out.split('\n').find((l) => l.startsWith(`${tag} `));
    };
    await p.write('before\n');
    const all200 = 'absolute:200 connect:200 direct:200';
    expect(await line('before')).toBe(`before kept ${all200} lost ${all200}`);
    await sb.setEgressAllow([entry(kept)]);
    await p.write('after\n');
    const after = await line('after');
    expect(after.startsWith(`after kept ${all200} lost `)).toBe(true);
    // Each way to the lost address is refused by the proxy (the direct one too: its relay
    // still takes that address to the proxy, which checks the live list).
    expect(after.split(' lost ')[1]).toBe('absolute:403 connect:403 direct:403');
    await p.end();
    expect((await p.wait()).exitCode).toBe(0);
    expect([hits(lost, 'before'), hits(lost, 'after')]).toEqual([3, 0]);
    expect([hits(kept, 'before'), hits(kept, 'after')]).toEqual([3, 3]);
  } finally {
    await sb.close();
  }
  suite.guard.assertUntouched();
});
