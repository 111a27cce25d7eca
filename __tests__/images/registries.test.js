'use strict';
// rootless: yes
// Registries the way users meet them: an HTTPS registry signed by a private CA (made here with
// openssl), the system CA store and KERN_REGISTRY_CA, a real forward proxy (Debian's tinyproxy,
// its log read back), and Docker Hub mirrors (KERN_REGISTRY_MIRRORS). Real docker-registry
// processes, real TLS, real proxy; pulls through `kern pull` and the addon.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { spawnSync, execFile } = require('child_process');
const { Sandbox } = require('../..');
const { makeTempDir } = require('../helpers');
const reg = require('../support/registry');

const KERN = process.env.KERN_BIN || path.join(__dirname, '..', '..', 'kern');
// What a user's shell may carry that would change these pulls: each test states its own.
const NET_VARS = ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy', 'ALL_PROXY', 'all_proxy', 'NO_PROXY', 'no_proxy',
  'SSL_CERT_FILE', 'SSL_CERT_DIR', 'KERN_REGISTRY_CA', 'KERN_REGISTRY_MIRRORS', 'KERN_REGISTRY_AUTH', 'KERN_PULL'];

let dir;
let ca;
let tlsReg; // HTTPS, on this machine's non-loopback address, signed by the test CA
let digest; // of kern/tiny:latest there
const temps = [];

beforeAll(async () => {
  reg.ensureImages();
  dir = makeTempDir('kern-registries-');
  const address = reg.hostAddress();
  ca = reg.makeTestCA(dir, address);
  tlsReg = await reg.startRegistry({ tls: ca, address });
  // A small image with no programs: opening it is enough to prove the pull.
  digest = await reg.push(tlsReg, 'hostile-device', 'kern/tiny:latest');
}, 300000);

afterAll(async () => {
  if (tlsReg) await tlsReg.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

afterEach(() => {
  for (const d of temps.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function home() {
  const d = makeTempDir('kern-home-');
  temps.push(d);
  return d;
}

/**
 * `kern pull ref` with a fresh store and exactly `env` for the network settings. Asynchronous:
 * the token front and the black hole answer from this process's event loop.
 */
function pull(ref, env = {}) {
  const base = { ...process.env };
  for (const k of NET_VARS) delete base[k];
  return new Promise((resolve) => {
    execFile(KERN, ['pull', ref], { encoding: 'utf8', timeout: 120000, env: { ...base, KERN_HOME: home(), ...env } }, (err, stdout, stderr) =>
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr })
    );
  });
}

const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('HTTPS registries and CAs', () => {
  test('a registry signed by a private CA: refused naming KERN_REGISTRY_CA and the system store, pulled with KERN_REGISTRY_CA', async () => {
    const ref = `${tlsReg.host}/kern/tiny:latest`;
    const refused = await pull(ref);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/not trusted/);
    expect(refused.stderr).toMatch(/the system CA store \(\d+ certificates from [^)]*\/etc\/ssl\/certs/);
    expect(refused.stderr).toMatch(/KERN_REGISTRY_CA/);
    const ok = await pull(ref, { KERN_REGISTRY_CA: ca.ca });
    expect({ code: ok.code, digest: ok.stdout.trim(), stderr: ok.code ? ok.stderr : '' }).toEqual({ code: 0, digest, stderr: '' });
  });

  test('the system store is read as curl reads it: SSL_CERT_FILE naming the test CA is trusted', async () => {
    const ok = await pull(`${tlsReg.host}/kern/tiny:latest`, { SSL_CERT_FILE: ca.ca });
    expect({ code: ok.code, digest: ok.stdout.trim(), stderr: ok.code ? ok.stderr : '' }).toEqual({ code: 0, digest, stderr: '' });
    // The same variable naming the distro bundle (which lacks the test CA) is refused.
    const refused = await pull(`${tlsReg.host}/kern/tiny:latest`, { SSL_CERT_FILE: '/etc/ssl/certs/ca-certificates.crt' });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/not trusted.*SSL_CERT_FILE=\/etc\/ssl\/certs\/ca-certificates\.crt/s);
  });

  test('the addon pulls with KERN_REGISTRY_CA from its environment', async () => {
    const realEnv = require('vm').runInThisContext('process').env;
    const saved = {};
    const set = (vars) => {
      for (const [k, v] of Object.entries(vars)) {
        if (!(k in saved)) saved[k] = realEnv[k];
        for (const env of [process.env, realEnv]) if (v === undefined) delete env[k]; else env[k] = v;
      }
    };
    try {
      set({ KERN_HOME: home(), KERN_REGISTRY_CA: ca.ca });
      const sb = new Sandbox({ image: `${tlsReg.host}/kern/tiny:latest` });
      try {
        await sb.open();
      } finally {
        await sb.close();
      }
      expect(fs.readdirSync(path.join(realEnv.KERN_HOME, 'images'))).toEqual([digest.slice(7)]);
    } finally {
      for (const [k, v] of Object.entries(saved)) set({ [k]: v });
    }
  });

  test('a KERN_REGISTRY_CA that cannot be read or holds no certificate fails before any traffic', async () => {
    const hole = await reg.startBlackhole();
    try {
      const ref = `${hole.host}/kern/tiny:latest`;
      const missing = await pull(ref, { KERN_REGISTRY_CA: path.join(dir, 'nope.pem'), KERN_REGISTRY_TIMEOUT_S: '2' });
      expect(missing.code).not.toBe(0);
      expect(missing.stderr).toMatch(/KERN_REGISTRY_CA=.*nope\.pem: cannot read it/);
      fs.writeFileSync(path.join(dir, 'empty.pem'), 'no certificate here\n');
      const empty = await pull(ref, { KERN_REGISTRY_CA: path.join(dir, 'empty.pem'), KERN_REGISTRY_TIMEOUT_S: '2' });
      expect(empty.code).not.toBe(0);
      expect(empty.stderr).toMatch(/KERN_REGISTRY_CA=.*empty\.pem: holds no PEM certificate/);
      expect(hole.connections()).toBe(0);
    } finally {
      await hole.stop();
    }
  });
});

describe('proxies', () => {
  let proxy;
  beforeAll(async () => {
    proxy = await reg.startTinyproxy();
  });
  afterAll(async () => {
    if (proxy) await proxy.stop();
  });

  test('HTTPS_PROXY carries the pull (the proxy logs the CONNECT); NO_PROXY, and HTTP_PROXY alone, go direct', async () => {
    const ref = `${tlsReg.host}/kern/tiny:latest`;
    const trust = { KERN_REGISTRY_CA: ca.ca };
    const before = proxy.connects(tlsReg.host);
    const via = await pull(ref, { ...trust, HTTPS_PROXY: proxy.url });
    expect({ code: via.code, stderr: via.code ? via.stderr : '' }).toEqual({ code: 0, stderr: '' });
    expect(proxy.connects(tlsReg.host)).toBeGreaterThan(before);

    // curl's NO_PROXY: a space after the comma, a domain suffix and the registry's address.
    const seen = proxy.connects(tlsReg.host);
    const bypass = await pull(ref, { ...trust, https_proxy: proxy.url, NO_PROXY: `.corp.example, ${tlsReg.host.split(':')[0]}` });
    expect({ code: bypass.code, stderr: bypass.code ? bypass.stderr : '' }).toEqual({ code: 0, stderr: '' });
    // An http:// proxy variable does not carry https URLs (as curl).
    const httpOnly = await pull(ref, { ...trust, HTTP_PROXY: proxy.url });
    expect(httpOnly.code).toBe(0);
    expect(proxy.connects(tlsReg.host)).toBe(seen);
  });

  test('proxy credentials in the URL are used and never printed', async () => {
    const authed = await reg.startTinyproxy({ basicAuth: { username: 'kern', password: 'pr0xy-s3cret' } });
    try {
      const ref = `${tlsReg.host}/kern/tiny:latest`;
      const trust = { KERN_REGISTRY_CA: ca.ca };
      const ok = await pull(ref, { ...trust, HTTPS_PROXY: `http://kern:pr0xy-s3cret@127.0.0.1:${authed.port}` });
      expect({ code: ok.code, stderr: ok.code ? ok.stderr : '' }).toEqual({ code: 0, stderr: '' });
      expect(authed.connects(tlsReg.host)).toBeGreaterThan(0);
      const wrong = await pull(ref, { ...trust, HTTPS_PROXY: `http://kern:wr0ng-pw@127.0.0.1:${authed.port}` });
      expect(wrong.code).not.toBe(0);
      expect(wrong.stderr).toMatch(new RegExp(`through proxy http://\\*\\*\\*@127\\.0\\.0\\.1:${authed.port} \\(HTTPS_PROXY\\)`));
      expect(wrong.stderr).not.toMatch(/wr0ng-pw/);
      const bad = await pull(ref, { HTTPS_PROXY: 'socks5://kern:pr0xy-s3cret@127.0.0.1:1' });
      expect(bad.code).not.toBe(0);
      expect(bad.stderr).toMatch(/HTTPS_PROXY=socks5:\/\/\*\*\*@127\.0\.0\.1:1: a SOCKS5 proxy is not supported/);
      expect(bad.stderr).not.toMatch(/pr0xy-s3cret/);
    } finally {
      await authed.stop();
    }
  });

  test('a loopback registry is reached directly with proxies set', async () => {
    const local = await reg.startRegistry();
    try {
      const d = await reg.push(local, 'hostile-device', 'kern/tiny:latest');
      const dead = `http://${await reg.refusedAddress()}`;
      const r = await pull(`${local.host}/kern/tiny:latest`, { HTTP_PROXY: dead, HTTPS_PROXY: dead, ALL_PROXY: dead });
      expect({ code: r.code, digest: r.stdout.trim(), stderr: r.code ? r.stderr : '' }).toEqual({ code: 0, digest: d, stderr: '' });
    } finally {
      await local.stop();
    }
  });
});

describe('Docker Hub mirrors (KERN_REGISTRY_MIRRORS)', () => {
  let empty; // a mirror without the image
  let full; // a registry with it, behind a Docker-Hub-like token front
  let front;
  beforeAll(async () => {
    empty = await reg.startRegistry();
    full = await reg.startRegistry();
    await reg.push(full, 'hostile-device', 'library/kerntest:latest');
    front = await reg.startTokenFront(full);
  });
  afterAll(async () => {
    for (const r of [front, empty, full]) if (r) await r.stop();
  });

  test('tried in order: one down, one without the image, then the one that has it; Docker Hub credentials stay home', async () => {
    const down = `http://${await reg.refusedAddress()}`;
    const dockerHub = JSON.stringify({ 'docker.io': { username: 'hub-user', password: 'hub-s3cret' } });
    const r = await pull('kerntest:latest', {
      KERN_REGISTRY_MIRRORS: `${down}, ${empty.url} ${front.url}`,
      KERN_REGISTRY_AUTH: dockerHub,
    });
    expect({ code: r.code, digest: r.stdout.trim() }).toEqual({ code: 0, digest });
    expect(r.stderr).toMatch(new RegExp(`\\(mirror ${esc(down)}\\): cannot reach.*trying the next source`));
    expect(r.stderr).toMatch(new RegExp(`\\(mirror ${esc(empty.url)}\\): the registry has no manifest "latest".*trying the next source`));
    expect(r.stderr).toMatch(new RegExp(`docker\\.io/library/kerntest:latest: served by mirror ${esc(front.url)}`));
    // The empty mirror was asked for the docker.io repository, and the one that had it served it.
    expect(fs.readFileSync(empty.logFile, 'utf8')).toMatch(/\/v2\/library\/kerntest\/manifests\/latest/);
    expect(front.log.requests.some((q) => q.server === 'front' && /manifests\/latest/.test(q.url) && q.status === 200)).toBe(true);
    // Its token came anonymously: docker.io's credentials are never sent to a mirror.
    expect(front.log.tokenRequests.length).toBeGreaterThan(0);
    expect(front.log.tokenRequests.every((t) => t.auth === null)).toBe(true);
  });

  test("a mirror whose copy lacks this machine's platform is passed over, and named as the source", async () => {
    const partial = await reg.startRegistry(); // holds the tag with an index of another platform only
    try {
      await reg.push(partial, 'tiny-other-arch', 'library/kerntest:latest', { all: true });
      const { hostArch } = reg.imagesInfo();
      const r = await pull('kerntest:latest', { KERN_REGISTRY_MIRRORS: `${partial.url} ${front.url}` });
      expect({ code: r.code, digest: r.stdout.trim() }).toEqual({ code: 0, digest });
      expect(r.stderr).toMatch(new RegExp(`\\(mirror ${esc(partial.url)}\\): it has no linux/${hostArch} variant.*trying the next source`));
      // The mirror's answer is not laid at Docker Hub's door.
      expect(r.stderr).not.toMatch(/registry docker\.io/);
      expect(r.stderr).toMatch(new RegExp(`docker\\.io/library/kerntest:latest: served by mirror ${esc(front.url)}`));
      expect(fs.readFileSync(partial.logFile, 'utf8')).toMatch(/\/v2\/library\/kerntest\/manifests\/latest/);
    } finally {
      await partial.stop();
    }
  });

  test('when no mirror has it, Docker Hub itself is asked (seen at the proxy), and the error lists the mirrors', async () => {
    const proxy = await reg.startTinyproxy();
    try {
      const repo = `kern-sandbox-test/absent-${crypto.randomBytes(4).toString('hex')}`;
      const r = await pull(`${repo}:latest`, {
        KERN_REGISTRY_MIRRORS: empty.url,
        HTTPS_PROXY: proxy.url,
        KERN_REGISTRY_TIMEOUT_S: '5',
      });
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/registry-1\.docker\.io/);
      expect(r.stderr).toMatch(new RegExp(`tried first, from KERN_REGISTRY_MIRRORS: image [^ ]+ \\(mirror ${esc(empty.url)}\\): the registry has no manifest "latest"`));
      expect(fs.readFileSync(empty.logFile, 'utf8')).toMatch(new RegExp(`/v2/${esc(repo)}/manifests/latest`));
      expect(proxy.connects('registry-1.docker.io:443')).toBeGreaterThan(0);
    } finally {
      await proxy.stop();
    }
  });

  test('a malformed mirror list is refused for any pull, before any traffic', async () => {
    const hole = await reg.startBlackhole();
    try {
      for (const bad of ['ftp://mirror.example', 'https://u:p@mirror.example', 'https://mirror.example/v2/', 'http://mirror.example']) {
        const r = await pull(`${hole.host}/kern/tiny:latest`, { KERN_REGISTRY_MIRRORS: bad, KERN_REGISTRY_TIMEOUT_S: '2' });
        expect(r.code).not.toBe(0);
        expect(r.stderr).toMatch(/KERN_REGISTRY_MIRRORS: .* like https:\/\/mirror\.example\.com/);
      }
      expect(hole.connections()).toBe(0);
    } finally {
      await hole.stop();
    }
  });
});

test('kern doctor shows what pulls use: the CA store and KERN_REGISTRY_CA, proxies, mirrors', () => {
  const base = { ...process.env };
  for (const k of NET_VARS) delete base[k];
  const r = spawnSync(KERN, ['doctor'], {
    encoding: 'utf8',
    env: { ...base, KERN_REGISTRY_CA: ca.ca, HTTPS_PROXY: 'http://u:pw-s3cret@proxy.example:3128', NO_PROXY: '.corp', KERN_REGISTRY_MIRRORS: 'https://mirror.example' },
  });
  expect(r.stdout).toMatch(new RegExp(`registry-ca .*the system CA store \\(\\d+ certificates from .*\\) and KERN_REGISTRY_CA=${esc(ca.ca)} \\(1\\)`));
  expect(r.stdout).toMatch(/registry-net .*https via proxy http:\/\/\*\*\*@proxy\.example:3128 \(HTTPS_PROXY\); http direct; NO_PROXY=\.corp direct; loopback always direct/);
  expect(r.stdout).toMatch(/mirrors .*docker\.io pulls try https:\/\/mirror\.example, then Docker Hub/);
  expect(r.stdout).not.toMatch(/pw-s3cret/);
  // A password holding `/` (so the URL may not even parse) is hidden in every line too.
  const slash = spawnSync(KERN, ['doctor'], { encoding: 'utf8', env: { ...base, HTTPS_PROXY: 'http://u:pw/s3cret@proxy.example:3128' } });
  expect(slash.stdout).toMatch(/proxy\.example:3128/);
  expect(slash.stdout + slash.stderr).not.toMatch(/s3cret/);
  const broken = spawnSync(KERN, ['doctor'], { encoding: 'utf8', env: { ...base, KERN_REGISTRY_CA: path.join(dir, 'nope.pem') } });
  expect(broken.stdout).toMatch(/missing\s+registry-ca .*KERN_REGISTRY_CA=.*cannot read it/);
});
