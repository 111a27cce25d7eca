'use strict';
// rootless: yes
// A served sandbox's network, as E2B states it: internet access by default (through kern's
// egress proxy: every public host, never the host's own or private addresses), turned off or
// narrowed to `allowOut` at create, changed later with `updateNetwork` (running contexts too),
// and taken away server-wide with --no-internet. The public host is PyPI (the one outside
// address the test machine reaches); the private one an HTTP server on this host's loopback,
// which counts what reached it.

const http = require('http');
const { startServe, sdk } = require('./serve-helpers');

let srv;
let local;
const seen = [];

beforeAll(async () => {
  srv = await startServe();
  local = http.createServer((req, res) => {
    seen.push(req.url);
    res.end('local');
  });
  await new Promise((r) => local.listen(0, '127.0.0.1', r));
}, 60_000);

afterAll(async () => {
  if (srv) await srv.close();
  if (local) local.close();
});

const hits = (tag) => seen.filter((u) => u === `/${tag}`).length;

/** The SDK program's helper: prints each URL's HTTP status (a refused CONNECT counts as its
 * status), or `ERR` and the reason, fetched with Python's urllib through HTTP(S)_PROXY. */
const FETCH = `
const FETCH_PY = [
  'import sys, urllib.request, urllib.error, re',
  'for url in sys.argv[1:]:',
  '    try:',
  '        print(urllib.request.urlopen(url, timeout=30).status)',
  '    except urllib.error.HTTPError as e:',
  '        print(e.code)',
  '    except Exception as e:',
  '        m = re.search(r"Tunnel connection failed: (\\\\d+)", str(e))',
  '        print(m.group(1) if m else "ERR " + str(e))',
].join('\\n');
const fetchAll = async (sbx, urls) => {
  await sbx.files.write('/tmp/fetch.py', FETCH_PY);
  const r = await sbx.commands.run('python3 /tmp/fetch.py ' + urls.join(' '), { timeoutMs: 90000 });
  return r.stdout.trim().split('\\n');
};`;

const PYPI = 'https://pypi.org/simple/six/';
/** The host's loopback, unlisted, is not reached: the proxy refuses it (403), or the box's own
 * loopback answers (NO_PROXY is loopback, and nothing listens there). */
const NOT_REACHED = expect.stringMatching(/^(403|ERR .*Connection refused)/);

test('internet by default: a public host is reached, the host\'s loopback never', async () => {
  const lo = `http://127.0.0.1:${local.address().port}/default`;
  const r = await sdk(`${FETCH}
    const sbx = await Sandbox.create('base', { timeoutMs: 120000 });
    try {
      const info = await Sandbox.getInfo(sbx.sandboxId);
      return { statuses: await fetchAll(sbx, [${JSON.stringify(PYPI)}, ${JSON.stringify(lo)}]), open: info.allowInternetAccess };
    } finally { await sbx.kill(); }`);
  expect(r).toEqual({ statuses: ['200', NOT_REACHED], open: true });
  expect(hits('default')).toBe(0);
}, 180_000);

test('allowInternetAccess: false, then allowOut, then updateNetwork: commands and a running context follow', async () => {
  const port = local.address().port;
  const url = (tag) => `http://127.0.0.1:${port}/${tag}`;
  const r = await sdk(`${FETCH}
    const out = {};
    const sbx = await CISandbox.create('base', { timeoutMs: 120000, allowInternetAccess: false });
    try {
      out.off = await fetchAll(sbx, [${JSON.stringify(PYPI)}, ${JSON.stringify(url('off'))}]);
      out.offInfo = (await Sandbox.getInfo(sbx.sandboxId)).allowInternetAccess;
      const ctx = await sbx.createCodeContext({ language: 'python' });
      // A context started before a change sees it on its next connection (to PyPI: a loopback
      // address listed later is reached by boxes started after the change).
      const cell = () => sbx.runCode('import re, urllib.request\\ntry:\\n    print(urllib.request.urlopen(${JSON.stringify(PYPI)}, timeout=30).status)\\nexcept Exception as e:\\n    m = re.search(r"(\\\\d{3})", str(e))\\n    print(m.group(1) if m else "ERR " + str(e))', { context: ctx });
      out.ctxBefore = (await cell()).logs.stdout.join('').trim();
      // Only the listed address: the loopback server itself, as a literal.
      await sbx.updateNetwork({ denyOut: [e2b.ALL_TRAFFIC], allowOut: ['127.0.0.1:${port}'] });
      out.listed = await fetchAll(sbx, [${JSON.stringify(PYPI)}, ${JSON.stringify(url('listed'))}]);
      // The open internet again: the loopback address (not listed any more) is out.
      await sbx.updateNetwork({ allowInternetAccess: true });
      out.open = await fetchAll(sbx, [${JSON.stringify(PYPI)}, ${JSON.stringify(url('open'))}]);
      out.openInfo = (await Sandbox.getInfo(sbx.sandboxId)).allowInternetAccess;
      out.ctxAfter = (await cell()).logs.stdout.join('').trim();
      try { await sbx.updateNetwork({ denyOut: ['1.2.3.4'] }); out.bad = 'accepted'; } catch (e) { out.bad = e.message; }
      out.afterBad = await fetchAll(sbx, [${JSON.stringify(PYPI)}]);
    } finally { await sbx.kill(); }
    return out;`);
  expect(r.off).toEqual(['403', NOT_REACHED]);
  expect(r.offInfo).toBe(false);
  expect(r.ctxBefore).toBe('403');
  expect(r.listed).toEqual(['403', '200']);
  expect(r.ctxAfter).toBe('200');
  expect(r.open).toEqual(['200', NOT_REACHED]);
  expect(r.openInfo).toBe(true);
  expect(r.bad).toMatch(/denyOut "1\.2\.3\.4": kern serve denies only all traffic/);
  // A refused update leaves the policy as it was.
  expect(r.afterBad).toEqual(['200']);
  expect([hits('off'), hits('listed'), hits('open')]).toEqual([0, 1, 0]);
}, 240_000);

test('--no-internet: no open internet by default, asking for it is refused, allowOut still works', async () => {
  const s2 = await startServe(['--no-internet']);
  const port = local.address().port;
  try {
    const r = await sdk(`${FETCH}
      const out = {};
      try { await Sandbox.create('base', { allowInternetAccess: true }); out.asked = 'made'; } catch (e) { out.asked = e.message; }
      const sbx = await Sandbox.create('base', { timeoutMs: 120000, network: { allowOut: ['127.0.0.1:${port}'] } });
      try {
        out.statuses = await fetchAll(sbx, [${JSON.stringify(PYPI)}, 'http://127.0.0.1:${port}/noinet']);
        out.open = (await Sandbox.getInfo(sbx.sandboxId)).allowInternetAccess;
      } finally { await sbx.kill(); }
      return out;`, { E2B_API_URL: s2.url, E2B_SANDBOX_URL: s2.url });
    expect(r.asked).toMatch(/--no-internet/);
    expect(r.statuses).toEqual(['403', '200']);
    expect(r.open).toBe(false);
    expect(hits('noinet')).toBe(1);
  } finally {
    await s2.close();
    process.env.E2B_API_URL = srv.url;
    process.env.E2B_SANDBOX_URL = srv.url;
  }
}, 180_000);
