'use strict';
// rootless: yes
// The package cache (an addition, issue 35): the egress proxy keeps the package files boxes
// download from PyPI and npm, and serves them to later boxes of any Sandbox; only a file the host
// fetched itself, and for PyPI whose BLAKE2b-256 equals the digest in its URL, is ever kept.
// Against the real PyPI and npm registry (reachable from this project's machines). Every
// check of the cache is made on the host, from its files; what a box gets is hashed in the box.

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { requireRootfs, tempDirs, expectOk, expectRefusedBeforeAnyBox } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

// The addon reads the process's real environment, not Jest's copy of it.
const realEnv = require('vm').runInThisContext('process').env;
const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const { temp, removeAll } = tempDirs();

// six 1.16.0's wheel: PyPI's path names the file's BLAKE2b-256.
const SIX_DIGEST = 'd95ae7c31adbe875f2abbb91bd84cf2dc52d792b5a01506781dbcf25c91daf11';
const SIX_NAME = 'six-1.16.0-py2.py3-none-any.whl';
const SIX_PATH = `/packages/${SIX_DIGEST.slice(0, 2)}/${SIX_DIGEST.slice(2, 4)}/${SIX_DIGEST.slice(4)}/${SIX_NAME}`;
const OURS = 'kern-sandbox egress proxy (per Sandbox)';

beforeAll(() => requireRootfs());
afterAll(() => removeAll());

/** BLAKE2b-256 of a host file (Node's crypto has only BLAKE2b-512). */
function blake(file) {
  return execFileSync('python3', ['-c', 'import hashlib,sys; print(hashlib.blake2b(open(sys.argv[1],"rb").read(), digest_size=32).hexdigest())', file], { encoding: 'utf8' }).trim();
}

/** Every regular file in the cache, relative to it (its scratch directory excluded). */
function cached(dir) {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(path.relative(dir, p));
    }
  };
  for (const sub of ['pypi', 'npm']) if (fs.existsSync(path.join(dir, sub))) walk(path.join(dir, sub));
  return out.sort();
}

/** Asserts each PyPI file in the cache is the file its directory's digest names. */
function expectAllVerified(dir) {
  for (const rel of cached(dir).filter((r) => r.startsWith('pypi/'))) {
    expect({ rel, blake: blake(path.join(dir, rel)) }).toEqual({ rel, blake: rel.split('/')[1] });
  }
}

/**
 * Python for a box with `egressAllow`: `get(host, path, ...)` makes one HTTPS request through
 * the proxy and gives its status, size, hashes and the certificate issuer the box saw;
 * `plain(...)` one plain-HTTP request.
 */
const GET = `
import base64, hashlib, http.client, json, os, ssl
PROXY = os.environ["HTTPS_PROXY"].split("//")[1].rsplit(":", 1)
def get(host, path, method="GET", headers=None, body=None, text=False):
    c = http.client.HTTPSConnection(PROXY[0], int(PROXY[1]), timeout=120, context=ssl.create_default_context())
    c.set_tunnel(host, 443)
    c.request(method, path, body=body, headers=headers or {})
    # Before the answer: an answer with Connection: close lets the socket go.
    issuer = dict(x[0] for x in c.sock.getpeercert()["issuer"]).get("commonName")
    r = c.getresponse()
    data = r.read()
    c.close()
    return {"status": r.status, "bytes": len(data), "issuer": issuer,
            "blake": hashlib.blake2b(data, digest_size=32).hexdigest(),
            "sha512": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode(),
            "body": data.decode("utf-8", "replace") if text else ""}
def plain(host, path):
    c = http.client.HTTPConnection(PROXY[0], int(PROXY[1]), timeout=60)
    c.request("GET", f"http://{host}{path}", headers={"Host": host})
    r = c.getresponse()
    r.read()
    return r.status
`;

/** Runs `code` (after GET) in `sb` and gives what it printed as JSON. */
async function py(sb, code) {
  const r = await sb.runCode(`${GET}\n${code}`, { language: 'python' });
  expectOk(r);
  return { out: JSON.parse(r.stdout), notes: r.runtimeNotes };
}

const cacheNote = (notes) => notes.filter((n) => n.includes('package cache')).join('\n');

test('setup: the second Sandbox installs from the cache what the first one fetched, checked and kept', async () => {
  const dir = path.join(temp('kern-pkgcache-'), 'cache');
  const notes = [];
  for (let i = 0; i < 2; i++) {
    const lines = [];
    const sb = await new Sandbox({
      image: SCI,
      setup: 'pip install --no-deps six==1.16.0',
      packageCache: dir,
      onStderr: (c) => lines.push(String(c)),
    }).open();
    try {
      const r = await sb.runCode('import six; print(six.__version__)', { language: 'python' });
      expectOk(r);
      expect(r.stdout).toBe('1.16.0\n');
      notes.push(cacheNote(r.runtimeNotes));
      // The same note streams to open()'s onStderr, where setup's own output goes.
      expect(lines.join('')).toContain(notes[i]);
    } finally {
      await sb.close();
    }
    // On the host after each Sandbox: the wheel, whole and checked, and nothing else.
    expect(cached(dir)).toEqual([`pypi/${SIX_DIGEST}/${SIX_NAME}`]);
    expectAllVerified(dir);
  }
  expect(notes[0]).toMatch(/note: setup: package cache \(.*\): 0 file\(s\) sent from it .*, 1 fetched, checked and kept/);
  expect(notes[1]).toMatch(/note: setup: package cache \(.*\): 1 file\(s\) sent from it .*, 0 fetched/);
}, 300_000);

describe('calls with egressAllow', () => {
  let dir;
  beforeAll(() => {
    dir = path.join(temp('kern-pkgcache-'), 'cache');
  });

  test('a box gets the real file, and cannot make the cache keep anything else', async () => {
    const sb = await new Sandbox({ image: SCI, egressAllow: ['files.pythonhosted.org', 'pypi.org'], packageCache: dir }).open();
    try {
      const { out, notes } = await py(
        sb,
        `
import re
six = get("files.pythonhosted.org", ${JSON.stringify(SIX_PATH)})
wrong = ${JSON.stringify(SIX_PATH)}.replace("${SIX_DIGEST.slice(4, 8)}", "0000")
index = get("pypi.org", "/simple/six/", text=True)["body"]
other = re.search(r'href="https://files.pythonhosted.org(/packages/[^"#]*six-1\\.15\\.0-py2\\.py3-none-any\\.whl)', index).group(1)
print(json.dumps({
  "six": {k: six[k] for k in ("status", "blake", "issuer")},
  "wrongDigest": get("files.pythonhosted.org", wrong)["status"],
  "ranged": get("files.pythonhosted.org", other, headers={"Range": "bytes=0-99"})["status"],
  "posted": get("files.pythonhosted.org", other, method="POST", body=b"evil")["status"],
  "plain": plain("files.pythonhosted.org", other),
  "other": other,
}))`
      );
      // The real wheel, through the proxy's own TLS (the box trusts its CA).
      expect(out.six).toEqual({ status: 200, blake: SIX_DIGEST, issuer: OURS });
      // A path whose digest names no file: PyPI's 404, passed on; a ranged read, a POST, and
      // plain HTTP: forwarded as they are, never kept.
      expect(out.wrongDigest).toBe(404);
      expect(out.ranged).toBe(206);
      expect(out.posted).not.toBe(200);
      expect(out.plain).not.toBe(200);
      expect(cacheNote(notes)).toMatch(/0 file\(s\) sent from it .*, 1 fetched, checked and kept/);
      expect(cached(dir)).toEqual([`pypi/${SIX_DIGEST}/${SIX_NAME}`]);
      expectAllVerified(dir);

      // The same box asks for six again: sent from the cache.
      const again = await py(sb, `print(json.dumps(get("files.pythonhosted.org", ${JSON.stringify(SIX_PATH)})["blake"]))`);
      expect(again.out).toBe(SIX_DIGEST);
      expect(cacheNote(again.notes)).toMatch(/1 file\(s\) sent from it .*, 0 fetched/);
    } finally {
      await sb.close();
    }
    expect(cached(dir)).toEqual([`pypi/${SIX_DIGEST}/${SIX_NAME}`]);
  }, 300_000);

  test('another Sandbox gets the kept file from the cache, unchanged', async () => {
    const sb = await new Sandbox({ image: SCI, egressAllow: ['files.pythonhosted.org'], packageCache: dir }).open();
    try {
      const { out, notes } = await py(sb, `print(json.dumps(get("files.pythonhosted.org", ${JSON.stringify(SIX_PATH)})))`);
      expect({ status: out.status, blake: out.blake }).toEqual({ status: 200, blake: SIX_DIGEST });
      expect(cacheNote(notes)).toMatch(/1 file\(s\) sent from it/);
    } finally {
      await sb.close();
    }
    expectAllVerified(dir);
  }, 120_000);

  test('an npm tarball is kept from the host\'s own fetch and matches the registry\'s integrity', async () => {
    const fetchBoth = `
meta = json.loads(get("registry.npmjs.org", "/is-number", text=True)["body"])
dist = meta["versions"]["7.0.0"]["dist"]
tgz = get("registry.npmjs.org", "/is-number/-/is-number-7.0.0.tgz")
print(json.dumps({"integrity": dist["integrity"], "sha512": tgz["sha512"], "status": tgz["status"], "issuer": tgz["issuer"]}))`;
    const results = [];
    for (let i = 0; i < 2; i++) {
      const sb = await new Sandbox({ image: SCI, egressAllow: ['registry.npmjs.org'], packageCache: dir }).open();
      try {
        results.push(await py(sb, fetchBoth));
      } finally {
        await sb.close();
      }
      expect(cached(dir).filter((r) => r.startsWith('npm/'))).toHaveLength(1);
    }
    for (const { out } of results) {
      expect(out.status).toBe(200);
      expect(out.issuer).toBe(OURS);
      expect(out.sha512).toBe(out.integrity);
    }
    expect(cacheNote(results[0].notes)).toMatch(/0 file\(s\) sent from it .*, 1 fetched/);
    expect(cacheNote(results[1].notes)).toMatch(/1 file\(s\) sent from it .*, 0 fetched/);
  }, 300_000);

  test('one connection carries request after request to a package host, each head checked', async () => {
    const sb = await new Sandbox({ image: SCI, egressAllow: ['registry.npmjs.org'], packageCache: dir }).open();
    try {
      const { out, notes } = await py(
        sb,
        `
c = http.client.HTTPSConnection(PROXY[0], int(PROXY[1]), timeout=120, context=ssl.create_default_context())
c.set_tunnel("registry.npmjs.org", 443)
seen = []
for path in ("/is-number/-/is-number-7.0.0.tgz", "/is-number"):
    c.request("GET", path)
    r = c.getresponse()
    seen.append([r.status, len(r.read()) > 0])
# A request naming another host on the same connection: refused, and the connection ends.
c.putrequest("GET", "/is-number", skip_host=True)
c.putheader("Host", "example.com")
c.endheaders()
r = c.getresponse()
seen.append([r.status, r.getheader("Connection")])
print(json.dumps(seen))`
      );
      expect(out).toEqual([
        [200, true],
        [200, true],
        [400, 'close'],
      ]);
      // One connection through the proxy (a second would be "(2x)"); its file went through the
      // cache (sent from it after the test before; fetched when run alone).
      expect(notes).toContain('note: egress allowed: registry.npmjs.org:443');
      expect(cacheNote(notes)).toMatch(/: (1 file\(s\) sent from it .*, 0 fetched|0 file\(s\) sent from it .*, 1 fetched)/);
    } finally {
      await sb.close();
    }
  }, 120_000);
});

test('packageCache: false leaves the TLS of those hosts end to end', async () => {
  const sb = await new Sandbox({ image: SCI, egressAllow: ['files.pythonhosted.org'], packageCache: false }).open();
  try {
    const { out, notes } = await py(sb, `print(json.dumps(get("files.pythonhosted.org", ${JSON.stringify(SIX_PATH)})))`);
    expect({ status: out.status, blake: out.blake }).toEqual({ status: 200, blake: SIX_DIGEST });
    expect(out.issuer).not.toBe(OURS);
    expect(cacheNote(notes)).toBe('');
  } finally {
    await sb.close();
  }
}, 120_000);

test('with no host CA bundle to add its CA to (KERN_HOST_CA=0) the cache is off, and a note says so', async () => {
  const dir = path.join(temp('kern-pkgcache-'), 'cache');
  realEnv.KERN_HOST_CA = '0';
  let sb;
  try {
    sb = await new Sandbox({ image: SCI, egressAllow: ['files.pythonhosted.org'], packageCache: dir }).open();
  } finally {
    delete realEnv.KERN_HOST_CA;
  }
  try {
    const r = await sb.run(['sh', '-c', 'echo "${SSL_CERT_FILE:-none}"']);
    expectOk(r);
    expect(r.stdout).toBe('none\n');
    expect(r.runtimeNotes.join('\n')).toMatch(/note: package cache off: the boxes trust no host CA bundle \(KERN_HOST_CA=0/);
  } finally {
    await sb.close();
  }
  expect(fs.existsSync(dir)).toBe(false);
});

test('a packageCache that is not a boolean or an absolute path is refused before any box', async () => {
  const base = { image: SCI, egressAllow: ['files.pythonhosted.org'] };
  const err = await expectRefusedBeforeAnyBox(Sandbox, SandboxError, { ...base, packageCache: 'cache/dir' }, /packageCache.*not an absolute path/);
  expect(err.code).toBe('ERR_INVALID_OPTION');
  await expectRefusedBeforeAnyBox(Sandbox, SandboxError, { ...base, packageCache: 1 }, /packageCache.*a boolean/);
  // A read-write mount of the cache, or of a directory holding it, would let a box write it.
  const outer = temp('kern-pkgcache-');
  const dir = path.join(outer, 'cache');
  const mounted = await expectRefusedBeforeAnyBox(Sandbox, SandboxError, { ...base, packageCache: dir, mounts: { [outer]: ['/data', 'rw'] } }, /is mounted read-write, and the package cache is/);
  expect(mounted.code).toBe('ERR_INVALID_OPTION');
  expect(fs.existsSync(dir)).toBe(false);
});
