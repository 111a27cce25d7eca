#!/usr/bin/env node
// Egress proxy overhead per request: a small HTTPS GET from a box to a server on this host,
// directly (`network: true`), through the `egressAllow` proxy as a plain tunnel, and through the
// proxy to a `secrets` host, where it terminates TLS, substitutes the header and opens TLS again.
//
//   npm run bench:egress                # N = 10 rounds of 50 requests per case
//   BENCH_N=20 BENCH_REQUESTS=100 npm run bench:egress
//
// Needs: a build (`npm run build`, or `npm run build:debug`: the section says which), the test
// rootfs and the openssl CLI. Writes its section between the bench-egress markers of
// BENCHMARKS.md and prints it. Measurements only: nothing passes or fails on a number.
//
// Method: two HTTPS servers in this process on 127.0.0.1 (one certificate, from a test CA made
// with openssl; the proxy trusts it through KERN_REGISTRY_CA) answer `ok`. In the box, python
// times (perf_counter) each request from just before it connects to the end of the response:
// a new TCP connection, a TLS 1.3 handshake verified against the CA the box trusts, `GET /` with
// `Authorization: Bearer $KEY`, the response read to the close. Tunnel: the box's listener for
// the listed address hands the connection to the proxy, which relays the bytes (TLS runs end to
// end). Terminated: the same, to the secret's host: the proxy answers the handshake with a
// certificate from the per-Sandbox CA, reads the request head, writes the value in, and makes
// its own TLS connection to the server. Cases alternate, one untimed round each first.
'use strict';

const os = require('os');
const fs = require('fs');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, median, writeSection, requireBuilt } = require('./common');
const { makeTestCa, trustTestCa, startHttps, stopAll } = require('../__tests__/tls-servers');

const die = dieFor('bench-egress');
const N = positiveInt(process.env.BENCH_N, 10, 'BENCH_N', die);
const REQUESTS = positiveInt(process.env.BENCH_REQUESTS, 50, 'BENCH_REQUESTS', die);
const START = '<!-- bench-egress:start -->';
const END = '<!-- bench-egress:end -->';

if (!fs.existsSync(path.join(ROOTFS, '.kern-test-rootfs'))) die(`no test rootfs at ${ROOTFS}: run scripts/build-test-rootfs.sh`);
const { Sandbox } = requireBuilt(REPO, KERN, die);

const client = (port, cafile) =>
  [
    'import json, os, socket, ssl, time',
    `ctx = ssl.create_default_context(cafile=${cafile})`,
    'key = os.environ.get("KEY", "none")',
    'ms = []',
    `for i in range(${REQUESTS}):`,
    '    t = time.perf_counter()',
    `    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", ${port})), server_hostname="127.0.0.1")`,
    `    s.sendall(f"GET / HTTP/1.1\\r\\nHost: 127.0.0.1:${port}\\r\\nAuthorization: Bearer {key}\\r\\nConnection: close\\r\\n\\r\\n".encode())`,
    '    out = b""',
    '    while True:',
    '        c = s.recv(65536)',
    '        if not c: break',
    '        out += c',
    '    s.close()',
    '    ms.append((time.perf_counter() - t) * 1000)',
    '    assert out.startswith(b"HTTP/1.1 200"), out[:100]',
    'print(json.dumps(ms))',
  ].join('\n');

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-egress-'));
  const tls = makeTestCa(dir);
  trustTestCa(tls.caFile);
  const secretSrv = await startHttps(tls);
  const tunnelSrv = await startHttps(tls);
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-egress-ws-'));
  fs.copyFileSync(tls.caFile, path.join(ws, 'test-ca.crt'));
  const allow = [`127.0.0.1:${secretSrv.port}`, `127.0.0.1:${tunnelSrv.port}`];
  const proxied = await new Sandbox({
    image: ROOTFS,
    workspace: ws,
    egressAllow: allow,
    secrets: { KEY: { value: 'bench-value', hosts: [allow[0]] } },
    timeoutS: 300,
  }).open();
  const direct = await new Sandbox({ image: ROOTFS, workspace: ws, network: true, timeoutS: 300 }).open();
  const testCa = '"/workspace/test-ca.crt"';
  const cases = [
    { name: 'direct (`network: true`)', sb: direct, code: client(tunnelSrv.port, testCa), ms: [] },
    { name: 'through the proxy, tunnelled (TLS end to end)', sb: proxied, code: client(tunnelSrv.port, testCa), ms: [] },
    { name: 'through the proxy, terminated (`secrets` host)', sb: proxied, code: client(secretSrv.port, 'os.environ["SSL_CERT_FILE"]'), ms: [] },
  ];
  try {
    for (let i = 0; i <= N; i++) {
      for (const c of cases) {
        const r = await c.sb.runCode(c.code);
        if (r.exitCode !== 0 || r.fault) die(`a round failed: ${JSON.stringify({ fault: r.fault, stdout: r.stdout.slice(-500), stderr: r.stderr.slice(-1000) })}`);
        if (i > 0) c.ms.push(...JSON.parse(r.stdout.trim().split('\n').pop()));
      }
    }
  } finally {
    await proxied.close();
    await direct.close();
    stopAll(secretSrv, tunnelSrv);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.rmSync(ws, { recursive: true, force: true });
  }
  if (secretSrv.seen.some((r) => r.headers.authorization !== 'Bearer bench-value')) die('the secret host did not get the value');
  for (const c of cases) c.ms.sort((a, b) => a - b);
  const p90 = (s) => s[Math.min(s.length - 1, Math.floor(s.length * 0.9))];
  const base = median(cases[0].ms);
  const tunnel = median(cases[1].ms);
  // install-kern copies the binary: a dev build's carries its debug info (tens of MB), a release build is stripped.
  const profile = fs.statSync(KERN).size > 20 * 2 ** 20 ? 'dev build (`npm run build:debug`)' : 'release build';
  const lines = [
    START,
    '<!-- Generated by bench/egress.js (`npm run bench:egress`); everything between these markers is overwritten. -->',
    '',
    '## Network: egress proxy overhead per HTTPS request, tunnelled and terminated (`secrets`)',
    '',
    `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`,
    `- Machine: ${os.cpus().length} CPU(s), ${Math.round(os.totalmem() / 2 ** 30)} GiB; running as ${process.getuid() === 0 ? 'root' : 'uid ' + process.getuid()}; Node ${process.version}; ${profile}`,
    '- Reproduce: `npm run build && npm run bench:egress` (BENCH_N rounds, default 10; BENCH_REQUESTS per round, default 50)',
    `- Each request: a new connection, a TLS handshake verified in the box, \`GET /\` with an \`Authorization\` header, the response read to the close; timed in the box. N = ${N} rounds of ${REQUESTS} requests per case after one untimed round each, cases alternating.`,
    '',
    '| case | median ms | p90 ms | vs direct | vs tunnelled |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...cases.map((c) => `| ${c.name} | ${median(c.ms).toFixed(2)} | ${p90(c.ms).toFixed(2)} | ${(median(c.ms) / base).toFixed(2)}× | ${(median(c.ms) / tunnel).toFixed(2)}× |`),
    '',
    END,
  ];
  const block = lines.join('\n');
  writeSection(OUT, START, END, block);
  console.log(block);
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
