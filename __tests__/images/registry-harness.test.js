'use strict';
// rootless: no — no box: checks the test registry harness itself
// The registry harness itself (__tests__/support/registry.js): if these fail, image-pull test
// failures say nothing about the client. Real docker-registry, real skopeo, real HTTP.

const fs = require('fs');
const os = require('os');
const path = require('path');
const net = require('net');
const reg = require('../support/registry');
const { hostProcessesMatching, isAlive } = require('../helpers');

const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
const V2S2 = 'application/vnd.docker.distribution.manifest.v2+json';
const ACCEPT = [OCI_MANIFEST, OCI_INDEX, V2S2].join(', ');

let registry;
let info;
beforeAll(async () => {
  reg.ensureImages();
  info = reg.imagesInfo();
  registry = await reg.startRegistry();
});
afterAll(async () => {
  if (registry) await registry.stop();
});

test('pushes OCI, Docker v2s2 and multi-arch images that read back with the right media types', async () => {
  const ociDigest = await reg.push(registry, 'rootfs', 'kern/rootfs:oci');
  // An OCI-to-OCI push keeps the manifest bytes: the digest is the layout's.
  expect(ociDigest).toBe(info.images.rootfs.manifest);
  const oci = await reg.inspectRaw(registry, 'kern/rootfs:oci');
  expect(oci.mediaType).toBe(OCI_MANIFEST);
  expect(oci.layers.map((l) => l.mediaType)).toEqual(info.images.rootfs.layers.map((l) => l.mediaType));
  expect(oci.layers[1].mediaType).toMatch(/tar\+(zstd|gzip)$/);

  const v2Digest = await reg.push(registry, 'rootfs-gzip', 'kern/rootfs:v2s2', { format: 'v2s2' });
  const v2 = await reg.inspectRaw(registry, 'kern/rootfs:v2s2');
  expect(v2.mediaType).toBe(V2S2);
  expect(v2Digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  expect(v2.config.mediaType).toBe('application/vnd.docker.container.image.v1+json');
  expect(v2.config.digest).toBe(info.images.rootfs.config); // same config blob: same image
  expect(v2.layers.every((l) => l.mediaType === 'application/vnd.docker.image.rootfs.diff.tar.gzip')).toBe(true);

  const indexDigest = await reg.push(registry, 'multiarch', 'kern/multi:latest', { all: true });
  expect(indexDigest).toBe(info.images.multiarch.index);
  const index = await reg.inspectRaw(registry, 'kern/multi:latest');
  expect(index.mediaType).toBe(OCI_INDEX);
  const plats = index.manifests.map((m) => `${m.platform.os}/${m.platform.architecture}`);
  expect(plats).toEqual([`linux/${info.hostArch}`, `linux/${info.otherArch}`, 'unknown/unknown']);
  expect(index.manifests[2].annotations['vnd.docker.reference.type']).toBe('attestation-manifest');
  // Every child manifest arrived, not only the index.
  for (const m of index.manifests) {
    const child = await reg.inspectRaw(registry, `kern/multi@${m.digest}`);
    expect(child.mediaType).toBe(OCI_MANIFEST);
  }

  // Stored where corruptBlob() looks.
  expect(fs.existsSync(reg.blobPath(registry, info.images.rootfs.layers[0].digest))).toBe(true);
});

test('basic-auth registry: 401 without credentials, push and inspect with kern/s3cret', async () => {
  const basic = await reg.startRegistry({ auth: 'basic' });
  try {
    const anon = await reg.request(`${basic.url}/v2/`);
    expect(anon.status).toBe(401);
    expect(anon.headers['www-authenticate']).toMatch(/^Basic realm=/);
    const digest = await reg.push(basic, 'hostile-dotdot', 'kern/tiny:1');
    expect(digest).toBe(info.images['hostile-dotdot'].manifest);
    expect((await reg.inspectRaw(basic, 'kern/tiny:1')).mediaType).toBe(OCI_MANIFEST);
    await expect(reg.inspectRaw(basic, 'kern/tiny:1', { creds: 'kern:wrong' })).rejects.toThrow(/unauthorized|401/i);
  } finally {
    await basic.stop();
  }
});

test('token front: Bearer challenge, anonymous token, blobs redirected to another origin', async () => {
  await reg.push(registry, 'hostile-dotdot', 'kern/tok:latest');
  const front = await reg.startTokenFront(registry);
  try {
    const m = info.images['hostile-dotdot'].manifest;
    const unauth = await reg.request(`${front.url}/v2/kern/tok/manifests/latest`, { headers: { accept: ACCEPT } });
    expect(unauth.status).toBe(401);
    expect(unauth.headers['www-authenticate']).toBe(
      `Bearer realm="${front.url}/token",service="kern-test",scope="repository:kern/tok:pull"`
    );

    const tok = await reg.request(`${front.url}/token?service=kern-test&scope=repository:kern/tok:pull`);
    const { token, expires_in: expiresIn } = JSON.parse(tok.body);
    expect(expiresIn).toBe(300);
    const auth = { authorization: `Bearer ${token}`, accept: ACCEPT };
    const man = await reg.request(`${front.url}/v2/kern/tok/manifests/latest`, { headers: auth });
    expect(man.status).toBe(200);
    expect(man.headers['docker-content-digest']).toBe(m);
    const layer = JSON.parse(man.body).layers[0];

    const redirect = await reg.request(`${front.url}/v2/kern/tok/blobs/${layer.digest}`, { headers: auth });
    expect(redirect.status).toBe(307);
    expect(redirect.headers.location).toBe(`${front.blobUrl}/blobdata/${layer.digest}?repo=kern%2Ftok`);
    const blob = await reg.request(redirect.headers.location);
    expect(blob.status).toBe(200);
    expect(blob.body.length).toBe(layer.size);
    expect(front.log.blobRequestsWithAuth).toBe(0);
    await reg.request(redirect.headers.location, { headers: { authorization: `Bearer ${token}` } });
    expect(front.log.blobRequestsWithAuth).toBe(1); // the counter tests rely on does count

    // A real client end to end: skopeo does the token dance and follows the redirects.
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-harness-'));
    try {
      await reg.skopeo(['copy', '-q', '--src-tls-verify=false', `docker://${front.host}/kern/tok:latest`, `oci:${out}:x`]);
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
    expect(front.log.tokenRequests.length).toBeGreaterThanOrEqual(2);
    expect(front.log.blobRequests).toBeGreaterThanOrEqual(4);
    expect(front.log.blobRequestsWithAuth).toBe(1); // skopeo did not leak its token either
  } finally {
    await front.stop();
  }
});

test('corruptBlob: same length, different bytes, served under the old digest', async () => {
  await reg.push(registry, 'hostile-hardlink', 'kern/corrupt:latest');
  const man = await reg.inspectRaw(registry, 'kern/corrupt:latest');
  const layer = man.layers[0];
  const before = fs.readFileSync(reg.blobPath(registry, layer.digest));
  reg.corruptBlob(registry, layer.digest);
  const r = await reg.request(`${registry.url}/v2/kern/corrupt/blobs/${layer.digest}`);
  expect(r.status).toBe(200);
  expect(r.body.length).toBe(before.length);
  expect(r.body.equals(before)).toBe(false);
});

test('flaky front fails the first N requests, then proxies; blackhole and refused addresses', async () => {
  await reg.push(registry, 'hostile-symlink-parent', 'kern/flaky:latest');
  const flaky = await reg.startFlaky(registry, { failFirst: 2, status: 503 });
  try {
    const url = `${flaky.url}/v2/kern/flaky/manifests/latest`;
    const headers = { accept: ACCEPT };
    expect((await reg.request(url, { headers })).status).toBe(503);
    expect((await reg.request(url, { headers })).status).toBe(503);
    const ok = await reg.request(url, { headers });
    expect(ok.status).toBe(200);
    expect(ok.headers['docker-content-digest']).toBe(info.images['hostile-symlink-parent'].manifest);
    expect(flaky.log.failed).toBe(2);
  } finally {
    await flaky.stop();
  }

  const stall = await reg.startFlaky(registry, { action: 'stall', stallAfterBytes: 10, match: /\/blobs\// });
  try {
    const man = await reg.inspectRaw(registry, 'kern/flaky:latest');
    await expect(
      reg.request(`${stall.url}/v2/kern/flaky/blobs/${man.layers[0].digest}`, { timeout: 1000 })
    ).rejects.toThrow(/timeout/);
  } finally {
    await stall.stop();
  }

  const hole = await reg.startBlackhole();
  try {
    await expect(reg.request(`${hole.url}/v2/`, { timeout: 500 })).rejects.toThrow(/timeout/);
    expect(hole.connections()).toBe(1);
  } finally {
    await hole.stop();
  }

  const refused = await reg.refusedAddress();
  const err = await new Promise((resolve) => {
    const s = net.connect(Number(refused.split(':')[1]), '127.0.0.1');
    s.on('error', resolve);
    s.on('connect', () => resolve(new Error('connected')));
  });
  expect(err.code).toBe('ECONNREFUSED');
});

test('stop() ends the registry process and removes its storage', async () => {
  const r = await reg.startRegistry();
  expect(isAlive(r.pid)).toBe(true);
  expect(hostProcessesMatching(r.dir).length).toBe(1);
  await r.stop();
  await r.stop(); // idempotent
  expect(isAlive(r.pid)).toBe(false);
  expect(hostProcessesMatching(r.dir)).toEqual([]);
  expect(fs.existsSync(r.dir)).toBe(false);
});
