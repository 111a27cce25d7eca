'use strict';
// rootless: yes
// Images through the public API, against a REAL registry (Debian's docker-registry on loopback),
// fed by skopeo from OCI layouts built from the test rootfs (scripts/build-test-images.sh).
// Every pull goes into a store of its own (KERN_HOME), so each test sees a cold cache unless it
// says otherwise.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { spawn, spawnSync } = require('child_process');
const { Sandbox, withSandbox, SandboxError } = require('../..');
const { makeTempDir, isRoot } = require('../helpers');
const reg = require('../support/registry');

const KERN = process.env.KERN_BIN || path.join(__dirname, '..', '..', 'kern');

let registry;
let info;
const digests = {};

beforeAll(async () => {
  reg.ensureImages();
  info = reg.imagesInfo();
  registry = await reg.startRegistry({ auth: 'none' });
  digests.oci = await reg.push(registry, 'rootfs', 'kern/test:oci');
  digests.v2 = await reg.push(registry, 'rootfs-gzip', 'kern/test:v2', { format: 'v2s2' });
  digests.multi = await reg.push(registry, 'multiarch', 'kern/multi:latest', { all: true });
  digests.other = await reg.push(registry, 'tiny-other-arch', 'kern/other:latest', { all: true });
  digests.user = await reg.push(registry, 'user-image', 'kern/user:latest');
  digests.device = await reg.push(registry, 'hostile-device', 'kern/device:latest');
  for (const h of ['hostile-dotdot', 'hostile-symlink-parent', 'hostile-symlink-abs', 'hostile-hardlink']) {
    await reg.push(registry, h, `kern/${h}:latest`);
  }
}, 600000);

afterAll(async () => {
  if (registry) await registry.stop();
});

// The addon reads KERN_HOME, KERN_PULL and friends from the real environment at open(). Jest
// gives each test file a copy of `process`, whose env writes never reach it: write both.
const realEnv = require('vm').runInThisContext('process').env;
// Every store here holds an unpacked image (a few hundred MB): each test's temp dirs go when it
// ends, or a run leaves gigabytes behind.
const temps = [];
function tempDir(prefix) {
  const d = makeTempDir(prefix);
  temps.push(d);
  return d;
}
afterEach(() => {
  for (const d of temps.splice(0)) {
    // Unpacked images keep their modes; an unprivileged owner reopens 0555 dirs to delete them.
    spawnSync('chmod', ['-R', 'u+rwX', d]);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

const saved = {};
function putEnv(k, v) {
  for (const env of [process.env, realEnv]) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
}
function setEnv(vars) {
  for (const [k, v] of Object.entries(vars)) {
    if (!(k in saved)) saved[k] = realEnv[k];
    putEnv(k, v);
  }
}
afterEach(() => {
  for (const [k, v] of Object.entries(saved)) {
    putEnv(k, v);
    delete saved[k];
  }
});

/** A fresh, empty image store for this test. */
function freshStore() {
  const home = tempDir('kern-home-');
  setEnv({ KERN_HOME: home });
  return home;
}

/** What the store holds, as relative paths of images/, tmp/ and blobs/. */
function storeState(home) {
  const ls = (d) => (fs.existsSync(path.join(home, d)) ? fs.readdirSync(path.join(home, d)).sort() : []);
  return { images: ls('images'), tmp: ls('tmp'), blobs: ls('blobs/sha256') };
}

/** After a refused pull: no image, no work in progress, and not the offending blob. */
function expectNothingKept(home, blob) {
  const s = storeState(home);
  expect(s.images).toEqual([]);
  expect(s.tmp).toEqual([]);
  if (blob) expect(s.blobs).not.toContain(blob.slice(7));
}

const sha = (b) => 'sha256:' + crypto.createHash('sha256').update(b).digest('hex');

/**
 * A copy of a test layout with its manifest and config edited by `edit(manifest, config, dir)`;
 * the changed config and manifest are stored under their new digests and index.json re-pointed,
 * so the layout is consistent except for what `edit` broke on purpose.
 */
function editedLayout(name, edit) {
  const dir = tempDir('kern-layout-');
  fs.cpSync(reg.layout(name), dir, { recursive: true });
  const blob = (d) => path.join(dir, 'blobs/sha256', d.slice(7));
  const put = (bytes) => {
    fs.writeFileSync(blob(sha(bytes)), bytes);
    return sha(bytes);
  };
  const index = JSON.parse(fs.readFileSync(path.join(dir, 'index.json')));
  const man = JSON.parse(fs.readFileSync(blob(index.manifests[0].digest)));
  const config = JSON.parse(fs.readFileSync(blob(man.config.digest)));
  edit(man, config, put);
  const cb = Buffer.from(JSON.stringify(config));
  man.config = { ...man.config, digest: put(cb), size: cb.length };
  const mb = Buffer.from(JSON.stringify(man));
  index.manifests[0] = { ...index.manifests[0], digest: put(mb), size: mb.length };
  fs.writeFileSync(path.join(dir, 'index.json'), JSON.stringify(index));
  return dir;
}

const PROBE = [
  'import os, json',
  'print(json.dumps({',
  '  "layer2": open("/etc/kern-layer2").read(),',
  '  "motd": os.path.exists("/etc/motd"),',
  '  "motd_d": sorted(os.listdir("/etc/update-motd.d")),',
  '  "mark": os.environ.get("KERN_IMAGE_MARK"),',
  '  "path": os.environ.get("PATH"),',
  '  "cwd": os.getcwd(),',
  '}))',
].join('\n');

async function probe(image) {
  return withSandbox({ image }, async (sb) => {
    const r = await sb.runCode(PROBE);
    expect(r.exitCode).toBe(0);
    return JSON.parse(r.stdout);
  });
}

function expectTestImage(p) {
  expect(p.layer2).toBe('layer2\n'); // layer 2 applied on top of layer 1
  expect(p.motd).toBe(false); // its whiteout removed a file of layer 1
  expect(p.motd_d).toEqual(['kern-opaque-kept']); // its opaque marker hid the rest of the dir
  expect(p.mark).toBe('from-config'); // the config's Env reaches the workload
  expect(p.path).toBe('/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
  expect(p.cwd).toBe('/workspace'); // WorkingDir (/srv) is overridden by the workspace
}

function kern(args, env = {}) {
  const r = spawnSync(KERN, args, { encoding: 'utf8', timeout: 120000, env: { ...process.env, ...env } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Rejects with a SandboxError whose message matches every pattern. */
async function expectOpenError(options, ...patterns) {
  const sb = new Sandbox(options);
  let err;
  try {
    await sb.open();
  } catch (e) {
    err = e;
  } finally {
    await sb.close();
  }
  expect(err).toBeInstanceOf(SandboxError);
  for (const p of patterns) expect(err.message).toMatch(p);
  return err;
}

describe('pulling from a registry', () => {
  test('an OCI image by tag: layers, whiteouts, opaque dirs and config Env applied', async () => {
    const home = freshStore();
    expectTestImage(await probe(`${registry.host}/kern/test:oci`));
    const s = storeState(home);
    expect(s.images).toEqual([digests.oci.slice(7)]);
    expect(s.tmp).toEqual([]);
    // Both layers and the manifest and config are kept by digest.
    for (const l of info.images.rootfs.layers) expect(s.blobs).toContain(l.digest.slice(7));
  });

  test('a Docker v2 schema 2 image by tag', async () => {
    freshStore();
    const raw = await reg.inspectRaw(registry, 'kern/test:v2');
    expect(raw.mediaType).toBe('application/vnd.docker.distribution.manifest.v2+json');
    expectTestImage(await probe(`${registry.host}/kern/test:v2`));
  });

  test('by digest, and by tag plus digest', async () => {
    freshStore();
    expectTestImage(await probe(`${registry.host}/kern/test@${digests.oci}`));
    expectTestImage(await probe(`${registry.host}/kern/test:oci@${digests.oci}`));
  });

  test('a digest the registry does not have is refused as not found', async () => {
    freshStore();
    const missing = 'sha256:' + '0'.repeat(64);
    await expectOpenError({ image: `${registry.host}/kern/test@${missing}` }, /no manifest/, new RegExp(registry.host.replace(/\./g, '\\.')));
  });

  test('a multi-arch index resolves to linux/<this arch>, skipping the attestation', async () => {
    freshStore();
    const raw = await reg.inspectRaw(registry, 'kern/multi:latest');
    expect(raw.manifests.map((m) => m.platform.architecture)).toEqual(expect.arrayContaining(['amd64', 'arm64', 'unknown']));
    const p = await probe(`${registry.host}/kern/multi:latest`);
    expectTestImage(p);
    const arch = await withSandbox({ image: `${registry.host}/kern/multi:latest` }, (sb) => sb.run(['ls', '/ARCH']));
    expect(arch.exitCode).not.toBe(0); // /ARCH only exists in the other architecture's image
  });

  test('an index with no variant for this machine is refused, naming what it offers', async () => {
    const home = freshStore();
    await expectOpenError({ image: `${registry.host}/kern/other:latest` }, new RegExp(`no linux/${info.hostArch} variant`), new RegExp(`linux/${info.otherArch}`));
    expectNothingKept(home);
  });

  test('a cached image reopens with the registry stopped; KERN_PULL=always then fails', async () => {
    freshStore();
    const own = await reg.startRegistry({ auth: 'none' });
    try {
      await reg.push(own, 'rootfs', 'kern/test:cached');
      const ref = `${own.host}/kern/test:cached`;
      expectTestImage(await probe(ref));
      await own.stop();
      expectTestImage(await probe(ref)); // no network at all
      setEnv({ KERN_PULL: 'always' });
      await expectOpenError({ image: ref }, /cannot reach/, /connection was refused|refused/);
      setEnv({ KERN_PULL: 'never' });
      expectTestImage(await probe(ref));
      await expectOpenError({ image: `${own.host}/kern/test:other` }, /not in the image store/, /KERN_PULL=never/);
    } finally {
      await own.stop();
    }
  });

  test('KERN_PULL=always follows a moved tag; the old image stays cached', async () => {
    const home = freshStore();
    const own = await reg.startRegistry({ auth: 'none' });
    try {
      const ref = `${own.host}/kern/test:moving`;
      const first = await reg.push(own, 'rootfs', 'kern/test:moving');
      await probe(ref);
      const second = await reg.push(own, 'rootfs-gzip', 'kern/test:moving');
      expect(second).not.toBe(first);
      await probe(ref); // default policy: the cached tag, no network
      expect(storeState(home).images).toEqual([first.slice(7)]);
      setEnv({ KERN_PULL: 'always' });
      await probe(ref);
      expect(storeState(home).images.sort()).toEqual([first.slice(7), second.slice(7)].sort());
      // Unmoved, the tag costs one HEAD and no manifest GET (Docker Hub counts GETs).
      const log = () => fs.readFileSync(own.logFile, 'utf8');
      // The registry's access log: "GET /v2/kern/test/manifests/moving HTTP/1.1" 200 ...
      const count = (text, m) => text.split('\n').filter((l) => l.includes(`"${m} /v2/kern/test/manifests/moving HTTP`)).length;
      const gets = (text) => count(text, 'GET');
      const heads = (text) => count(text, 'HEAD');
      const before = log();
      await probe(ref);
      const after = log();
      expect(heads(after)).toBeGreaterThan(heads(before));
      expect(gets(after)).toBe(gets(before));
    } finally {
      await own.stop();
    }
  });

  test('two processes opening the same uncached image download each blob once and both run', async () => {
    const home = tempDir('kern-home-');
    const front = await reg.startTokenFront(registry);
    try {
      const ref = `${front.host}/kern/test:oci`;
      const run = () =>
        new Promise((resolve) => {
          const child = spawn(KERN, ['run', '--image', ref, '--', 'cat', '/etc/kern-layer2'], {
            env: { ...process.env, KERN_HOME: home },
          });
          let out = '';
          let err = '';
          child.stdout.on('data', (d) => (out += d));
          child.stderr.on('data', (d) => (err += d));
          child.on('close', (code) => resolve({ code, out, err }));
        });
      const [a, b] = await Promise.all([run(), run()]);
      expect(a).toMatchObject({ code: 0, out: 'layer2\n' });
      expect(b).toMatchObject({ code: 0, out: 'layer2\n' });
      const big = info.images.rootfs.layers[0].digest;
      const gets = front.log.requests.filter((r) => r.server === 'blob' && r.method === 'GET' && r.url.includes(big));
      expect(gets).toHaveLength(1);
      expect(storeState(home).tmp).toEqual([]);
    } finally {
      await front.stop();
    }
  });

  test('bearer tokens: the anonymous token flow, and blob redirects never carry the token', async () => {
    freshStore();
    const front = await reg.startTokenFront(registry);
    try {
      expectTestImage(await probe(`${front.host}/kern/test:oci`));
      expect(front.log.unauthorized).toBeGreaterThan(0); // it was challenged first
      expect(front.log.tokensIssued).toBeGreaterThan(0);
      expect(front.log.tokenRequests[0].scope).toBe('repository:kern/test:pull');
      expect(front.log.tokenRequests[0].service).toBe('kern-test');
      expect(front.log.blobRequests).toBeGreaterThan(0); // blobs came through the redirect
      expect(front.log.blobRequestsWithAuth).toBe(0);
    } finally {
      await front.stop();
    }
  });

  test('transient 503s are retried', async () => {
    freshStore();
    const flaky = await reg.startFlaky(registry, { failFirst: 2, status: 503 });
    try {
      expectTestImage(await probe(`${flaky.host}/kern/test:oci`));
      expect(flaky.log.failed).toBe(2);
    } finally {
      await flaky.stop();
    }
  });
});

describe('verification', () => {
  test('a corrupted layer blob is refused and nothing of it stays in the store', async () => {
    const home = freshStore();
    const own = await reg.startRegistry({ auth: 'none' });
    try {
      await reg.push(own, 'rootfs', 'kern/test:corrupt');
      const big = info.images.rootfs.layers[0].digest;
      reg.corruptBlob(own, big, { offset: 1000 });
      await expectOpenError({ image: `${own.host}/kern/test:corrupt` }, new RegExp(big), /corrupt|digest/);
      expectNothingKept(home, big);
    } finally {
      await own.stop();
    }
  });

  test('a layout whose layer does not match the config diff_id is refused', async () => {
    const home = freshStore();
    // Layer 2 swapped for another valid gzip blob: its digest matches the (rewritten) manifest,
    // its content not the config's diff_id.
    const fake = require('zlib').gzipSync(Buffer.alloc(1024));
    let fakeDigest;
    const dir = editedLayout('rootfs', (man, _config, put) => {
      fakeDigest = put(fake);
      man.layers[1] = { mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: fakeDigest, size: fake.length };
    });
    await expectOpenError({ image: dir }, /diff_id|uncompresses to/, new RegExp(fakeDigest));
    expectNothingKept(home);
  });
});

describe('hostile layers', () => {
  // Each is refused with nothing written outside the store (and no image left in it).
  const cases = [
    ['hostile-dotdot', /\.\./, 'kern-escape-dotdot'],
    ['hostile-symlink-parent', /symlink/, 'kern-escape-symlink'],
    ['hostile-symlink-abs', /symlink/, 'kern-escape-symlink-abs'],
    ['hostile-hardlink', /\.\.|outside|escap/, null],
  ];
  test.each(cases)('%s is refused and the host is untouched', async (name, why, canary) => {
    const parent = tempDir('kern-hostile-');
    const home = path.join(parent, 'a', 'b', 'store');
    fs.mkdirSync(home, { recursive: true });
    setEnv({ KERN_HOME: home });
    const passwd = fs.readFileSync('/etc/passwd');
    const before = new Set(fs.readdirSync('/tmp'));
    await expectOpenError({ image: `${registry.host}/kern/${name}:latest` }, /refus/, why);
    expectNothingKept(home);
    expect(fs.readFileSync('/etc/passwd').equals(passwd)).toBe(true);
    if (canary) {
      // Anywhere the hostile entry could have landed: /tmp, the store's parents, the cwd.
      const after = fs.readdirSync('/tmp').filter((n) => !before.has(n));
      expect(after.filter((n) => n.includes('kern-escape'))).toEqual([]);
      for (const dir of ['/tmp', parent, path.join(parent, 'a'), path.join(parent, 'a', 'b'), process.cwd(), '/']) {
        expect(fs.existsSync(path.join(dir, canary))).toBe(false);
      }
    }
  });

  test('device nodes in a layer are skipped, not created', async () => {
    const home = freshStore();
    // The image holds no programs: opening it is the whole test.
    await withSandbox({ image: `${registry.host}/kern/device:latest` }, async () => {});
    const rootfs = path.join(home, 'images', digests.device.slice(7), 'rootfs');
    expect(fs.existsSync(rootfs)).toBe(true);
    expect(fs.existsSync(path.join(rootfs, 'dev/kern-mem'))).toBe(false);
  });
});

describe('credentials', () => {
  let basic;
  beforeAll(async () => {
    basic = await reg.startRegistry({ auth: 'basic' });
    await reg.push(basic, 'rootfs', 'kern/private:latest');
  }, 300000);
  afterAll(async () => {
    if (basic) await basic.stop();
  });
  const ref = () => `${basic.host}/kern/private:latest`;

  test('without credentials: an auth error that says how to log in', async () => {
    freshStore();
    setEnv({ KERN_REGISTRY_AUTH: undefined, DOCKER_CONFIG: tempDir('kern-docker-') });
    await expectOpenError({ image: ref() }, /access denied/, /docker login/, /KERN_REGISTRY_AUTH/, new RegExp(basic.host.replace(/\./g, '\\.')));
  });

  test('from KERN_REGISTRY_AUTH', async () => {
    freshStore();
    setEnv({
      DOCKER_CONFIG: tempDir('kern-docker-'),
      KERN_REGISTRY_AUTH: JSON.stringify({ [basic.host]: { username: reg.BASIC_USER, password: reg.BASIC_PASSWORD } }),
    });
    expectTestImage(await probe(ref()));
  });

  test('from ~/.docker/config.json auths (base64 auth)', async () => {
    freshStore();
    const dir = tempDir('kern-docker-');
    const auth = Buffer.from(`${reg.BASIC_USER}:${reg.BASIC_PASSWORD}`).toString('base64');
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ auths: { [`http://${basic.host}`]: { auth } } }));
    setEnv({ DOCKER_CONFIG: dir, KERN_REGISTRY_AUTH: undefined });
    expectTestImage(await probe(ref()));
  });

  test('from a docker credential helper (credHelpers)', async () => {
    freshStore();
    const dir = tempDir('kern-docker-');
    const bin = tempDir('kern-helper-');
    const helper = path.join(bin, 'docker-credential-kerntest');
    // Docker's helper protocol: the server name on stdin, {Username, Secret} on stdout.
    fs.writeFileSync(
      helper,
      `#!/bin/sh\nread server\n[ "$1" = get ] && [ "$server" = "${basic.host}" ] || exit 1\n` +
        `printf '{"Username":"${reg.BASIC_USER}","Secret":"${reg.BASIC_PASSWORD}"}'\n`,
      { mode: 0o755 }
    );
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ credHelpers: { [basic.host]: 'kerntest' } }));
    setEnv({ DOCKER_CONFIG: dir, KERN_REGISTRY_AUTH: undefined, PATH: `${bin}:${realEnv.PATH}` });
    expectTestImage(await probe(ref()));
  });

  test('wrong credentials are reported as refused', async () => {
    freshStore();
    setEnv({
      DOCKER_CONFIG: tempDir('kern-docker-'),
      KERN_REGISTRY_AUTH: JSON.stringify({ [basic.host]: { username: reg.BASIC_USER, password: 'wrong' } }),
    });
    await expectOpenError({ image: ref() }, /credentials found for it were refused/);
  });

  test('a malformed KERN_REGISTRY_AUTH is a clear error', async () => {
    freshStore();
    setEnv({ KERN_REGISTRY_AUTH: '{not json' });
    await expectOpenError({ image: ref() }, /KERN_REGISTRY_AUTH is not JSON/);
  });
});

describe('errors name the image, the registry and what to do', () => {
  test('a malformed reference fails before any network traffic', async () => {
    freshStore();
    const hole = await reg.startBlackhole();
    try {
      await expectOpenError({ image: `${hole.host}/Kern/Test:latest` }, /not a valid image reference/);
      await expectOpenError({ image: 'python:3.12 slim' }, /not a valid image reference/);
      expect(hole.connections()).toBe(0);
    } finally {
      await hole.stop();
    }
  });

  test('unknown repository and unknown tag', async () => {
    freshStore();
    await expectOpenError({ image: `${registry.host}/kern/nope:latest` }, /kern\/nope/, /no manifest "latest"|access denied/);
    await expectOpenError({ image: `${registry.host}/kern/test:nope` }, /no manifest "nope"/, /check the tag/);
  });

  test('an unreachable registry', async () => {
    freshStore();
    const addr = await reg.refusedAddress();
    await expectOpenError({ image: `${addr}/kern/test:latest` }, /cannot reach/, new RegExp(addr.replace(/\./g, '\\.')), /cached image opens offline/, /image: "host"/, /docker save/, /KERN_PULL=never/, /HTTPS_PROXY/, /KERN_REGISTRY_MIRRORS/);
  });

  test('a registry that never answers times out instead of hanging', async () => {
    freshStore();
    setEnv({ KERN_REGISTRY_TIMEOUT_S: '0.5' });
    const hole = await reg.startBlackhole();
    try {
      await expectOpenError({ image: `${hole.host}/kern/test:latest` }, /timed out/, /KERN_REGISTRY_TIMEOUT_S/);
    } finally {
      await hole.stop();
    }
  });

  test('a download that stalls mid-blob times out, and nothing half-written stays', async () => {
    const home = freshStore();
    setEnv({ KERN_REGISTRY_TIMEOUT_S: '1' });
    const big = info.images.rootfs.layers[0].digest;
    const flaky = await reg.startFlaky(registry, { failFirst: 10, action: 'stall', stallAfterBytes: 100000, match: new RegExp(`GET .*blobs/${big}`) });
    try {
      await expectOpenError({ image: `${flaky.host}/kern/test:oci` }, /broke off|timed out/, new RegExp(big));
      expectNothingKept(home, big);
    } finally {
      await flaky.stop();
    }
  });

  test('the default image needs Docker Hub, and says so when it is unreachable', async () => {
    freshStore();
    setEnv({ KERN_REGISTRY_TIMEOUT_S: '2' });
    const err = await expectOpenError({}, /docker\.io\/library\/python:3\.12-slim/, /registry-1\.docker\.io/);
    expect(err.message).toMatch(/cannot reach|access denied/);
  });

  (isRoot ? test : test.skip)('a full disk is reported as such, and nothing half-written stays', async () => {
    const home = tempDir('kern-full-');
    // A 40 MiB tmpfs: the 248 MB image cannot fit.
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=40m', 'kern-full', home]).status).toBe(0);
    try {
      setEnv({ KERN_HOME: home });
      await expectOpenError({ image: `${registry.host}/kern/test:oci` }, /disk .* is full/, /KERN_HOME/);
      expectNothingKept(home);
    } finally {
      spawnSync('umount', ['-l', home]);
    }
  });

  test('an unknown USER in the image config is refused, naming it', async () => {
    freshStore();
    const dir = editedLayout('user-image', (_man, config) => {
      config.config.User = 'ghost';
    });
    await expectOpenError({ image: dir }, /USER "ghost"/, /no user "ghost" in the image's \/etc\/passwd/);
  });
});

describe("the image's USER", () => {
  test('the workload runs as the image USER, which owns the workspace; files land as its owner', async () => {
    freshStore();
    const ws = tempDir('kern-ws-');
    const owner = fs.statSync(ws);
    const r = await withSandbox({ image: `${registry.host}/kern/user:latest`, workspace: ws }, (sb) =>
      sb.run(['sh', '-c', 'id -un; id -u; stat -c %U /workspace; echo hi > /workspace/made; cat /etc/shadow >/dev/null 2>&1 || echo no-shadow'])
    );
    expect(r.exitCode).toBe(0);
    // Root-owned image files stay root's only where the box has an id range (kern run as root).
    // Unprivileged, one id is all there is: every image file belongs to that account, shadow too.
    expect(r.stdout).toBe(`nobody\n65534\nnobody\n${isRoot ? 'no-shadow\n' : ''}`);
    const made = fs.statSync(path.join(ws, 'made'));
    expect([made.uid, made.gid]).toEqual([owner.uid, owner.gid]);
  });
});

describe('local images', () => {
  test('an OCI layout directory', async () => {
    const home = freshStore();
    expectTestImage(await probe(reg.layout('rootfs')));
    expect(storeState(home).images).toEqual([digests.oci.slice(7)]);
    // Nothing was written into the layout.
    expect(fs.readdirSync(reg.layout('rootfs')).sort()).toEqual(['blobs', 'index.json', 'oci-layout']);
  });

  test('an image open in one Sandbox opens in another, by path and by registry reference', async () => {
    freshStore();
    const first = new Sandbox({ image: reg.layout('rootfs') });
    await first.open();
    try {
      // Same image (same manifest digest), reached three ways while the first holds it.
      for (const image of [reg.layout('rootfs'), `${registry.host}/kern/test:oci`, `${registry.host}/kern/test@${digests.oci}`]) {
        const r = await withSandbox({ image }, (sb) => sb.run(['cat', '/etc/kern-layer2']));
        expect(r.stdout).toBe('layer2\n');
      }
      expect((await first.run(['cat', '/etc/kern-layer2'])).stdout).toBe('layer2\n');
    } finally {
      await first.close();
    }
  });

  test('a multi-arch OCI layout picks this machine', async () => {
    freshStore();
    expectTestImage(await probe(reg.layout('multiarch')));
  });

  test('a docker save archive', async () => {
    freshStore();
    expectTestImage(await probe(path.join(reg.IMAGES, 'rootfs-docker.tar')));
  });

  test('an OCI archive (a tar of a layout)', async () => {
    freshStore();
    const tarFile = path.join(tempDir('kern-ociar-'), 'image.tar');
    expect(spawnSync('tar', ['-cf', tarFile, '-C', reg.layout('rootfs'), '.']).status).toBe(0);
    expectTestImage(await probe(tarFile));
  });

  test('a file that is no image archive is refused', async () => {
    freshStore();
    const f = path.join(tempDir('kern-notimg-'), 'x.tar');
    fs.writeFileSync(f, 'hello');
    await expectOpenError({ image: f }, /x\.tar/);
  });
});

describe('kern pull / images / rmi / prune', () => {
  test('the store from a terminal', async () => {
    const home = tempDir('kern-home-');
    const env = { KERN_HOME: home };
    const ref = `${registry.host}/kern/test:oci`;
    const pulled = kern(['pull', ref], env);
    expect(pulled.code).toBe(0);
    expect(pulled.stdout.trim()).toBe(digests.oci);
    // Not a terminal: one line per layer instead of bars.
    expect(pulled.stderr).toMatch(new RegExp(`${info.images.rootfs.layers[0].digest.slice(7, 19)}: downloaded ${info.images.rootfs.layers[0].size} bytes`));
    const again = kern(['pull', ref], env);
    expect(again.code).toBe(0);
    const listed = kern(['images'], env);
    expect(listed.stdout).toMatch(new RegExp(`${ref.replace(/\./g, '\\.')}\\s+${digests.oci.slice(7, 19)}\\s+\\d+(\\.\\d)? MiB`));
    // rmi refuses an image an open sandbox uses.
    const sb = new Sandbox({ image: ref });
    setEnv({ KERN_HOME: home });
    await sb.open();
    try {
      const busy = kern(['rmi', ref], env);
      expect(busy.code).not.toBe(0);
      expect(busy.stderr).toMatch(/in use/);
    } finally {
      await sb.close();
    }
    const rm = kern(['rmi', digests.oci.slice(7, 19)], env);
    expect(rm.code).toBe(0);
    expect(storeState(home).images).toEqual([]);
    const pruned = kern(['prune'], env);
    expect(pruned.code).toBe(0);
    expect(pruned.stdout).toMatch(/removed [1-9]\d* unused blobs/);
    expect(storeState(home).blobs).toEqual([]);
    const missing = kern(['rmi', 'kern/nothing:here'], env);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/no such image/);
  });

  test('kern run --image pulls a registry image', () => {
    const home = tempDir('kern-home-');
    const r = kern(['run', '--image', `${registry.host}/kern/test:oci`, '--', 'sh', '-c', 'cat /etc/kern-layer2; echo $KERN_IMAGE_MARK'], { KERN_HOME: home });
    expect(r).toMatchObject({ code: 0, stdout: 'layer2\nfrom-config\n' });
  });
});
