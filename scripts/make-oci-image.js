#!/usr/bin/env node
'use strict';
// Builds the OCI image layouts the image tests pull from (see scripts/build-test-images.sh):
//
//   node scripts/make-oci-image.js --rootfs DIR --out DIR
//
// Plain Node, no npm dependencies. The tar writer is our own (ustar + PAX for what ustar cannot
// hold) because the hostile images need entries no well-behaved tar tool will write
// (`../../x`, hardlinks out of the root, device nodes). Output is deterministic for a given
// rootfs: entries sorted byte-wise, synthetic layers use a fixed mtime, JSON is compact.
// Besides the layouts it writes images.json: digests and the facts tests assert on.

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const crypto = require('crypto');
const { spawn, spawnSync } = require('child_process');
const { once } = require('events');

const MT = {
  layout: '1.0.0',
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  tar: 'application/vnd.oci.image.layer.v1.tar',
  gzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  zstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
  intoto: 'application/vnd.in-toto+json',
};
const REF_NAME = 'org.opencontainers.image.ref.name';
const FIXED_MTIME = 1700000000; // 2023-11-14: synthetic entries, so rebuilds give equal digests
const CREATED = new Date(FIXED_MTIME * 1000).toISOString();
const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const GO_ARCH = { x64: 'amd64', arm64: 'arm64' };
const HOST_ARCH = GO_ARCH[process.arch];
if (!HOST_ARCH) throw new Error(`make-oci-image: unsupported host arch ${process.arch}`);
const OTHER_ARCH = HOST_ARCH === 'amd64' ? 'arm64' : 'amd64';
// Registries publish arm64 with variant v8; keeping it makes platform matching honest.
const platformOf = (arch) => ({ architecture: arch, os: 'linux', ...(arch === 'arm64' ? { variant: 'v8' } : {}) });

const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');

// --- tar writer ---------------------------------------------------------------------------------

const TYPE = { file: '0', hardlink: '1', symlink: '2', char: '3', block: '4', dir: '5', fifo: '6', pax: 'x' };

/** Octal numeric field of `len` bytes (digits + NUL), or null when the value does not fit. */
function octal(n, len) {
  const s = Math.trunc(n).toString(8);
  if (n < 0 || s.length > len - 1) return null;
  return s.padStart(len - 1, '0') + '\0';
}

/** Splits a long name into ustar prefix (<=155) + name (<=100) at a '/', or null. */
function splitUstar(name) {
  const b = Buffer.from(name);
  if (b.length <= 100) return { prefix: '', name };
  for (let i = b.length - 1; i > 0; i--) {
    if (b[i] !== 0x2f) continue;
    if (i <= 155 && b.length - i - 1 <= 100 && b.length - i - 1 > 0) {
      return { prefix: b.subarray(0, i).toString(), name: b.subarray(i + 1).toString() };
    }
  }
  return null;
}

function paxRecord(key, value) {
  // "LEN key=value\n" where LEN counts its own digits too.
  const body = ` ${key}=${value}\n`;
  const n = Buffer.byteLength(body);
  let len = n + String(n).length;
  if (String(len).length !== String(n).length) len = n + String(len).length;
  return `${len}${body}`;
}

function rawHeader(f) {
  const h = Buffer.alloc(512);
  const put = (off, len, v) => {
    const b = Buffer.from(v);
    if (b.length > len) throw new Error(`tar: field too long: ${v}`);
    b.copy(h, off);
  };
  put(0, 100, f.name);
  put(100, 8, f.mode);
  put(108, 8, f.uid);
  put(116, 8, f.gid);
  put(124, 12, f.size);
  put(136, 12, f.mtime);
  h.fill(0x20, 148, 156);
  put(156, 1, f.type);
  put(157, 100, f.linkname || '');
  put(257, 6, 'ustar\0');
  put(263, 2, '00');
  put(265, 32, f.uname || '');
  put(297, 32, f.gname || '');
  put(329, 8, f.devmajor);
  put(337, 8, f.devminor);
  put(345, 155, f.prefix || '');
  let sum = 0;
  for (const byte of h) sum += byte;
  put(148, 8, sum.toString(8).padStart(6, '0') + '\0 ');
  return h;
}

const pad512 = (n) => Buffer.alloc((512 - (n % 512)) % 512);

/**
 * Header block(s) for one entry: a PAX 'x' header first when name, linkname or a number does not
 * fit ustar. Names are written exactly as given (no normalisation: hostile entries rely on it).
 */
function tarHeader(e) {
  const pax = [];
  const size = e.type === 'file' ? e.size : 0;
  let nameF = splitUstar(e.path);
  if (!nameF) {
    pax.push(paxRecord('path', e.path));
    nameF = { prefix: '', name: Buffer.from(e.path).subarray(0, 99).toString('latin1') };
  }
  let linkname = e.linkname || '';
  if (Buffer.byteLength(linkname) > 100) {
    pax.push(paxRecord('linkpath', linkname));
    linkname = Buffer.from(linkname).subarray(0, 99).toString('latin1');
  }
  const num = (key, v, len) => {
    const o = octal(v, len);
    if (o !== null) return o;
    pax.push(paxRecord(key, String(v)));
    return octal(0, len);
  };
  const fields = {
    name: nameF.name,
    prefix: nameF.prefix,
    mode: octal(e.mode & 0o7777, 8),
    uid: num('uid', e.uid || 0, 8),
    gid: num('gid', e.gid || 0, 8),
    size: num('size', size, 12),
    mtime: num('mtime', e.mtime ?? FIXED_MTIME, 12),
    type: TYPE[e.type],
    linkname,
    devmajor: octal(e.devmajor || 0, 8),
    devminor: octal(e.devminor || 0, 8),
  };
  if (!fields.type) throw new Error(`tar: unknown entry type ${e.type}`);
  const out = [];
  if (pax.length) {
    const body = Buffer.from(pax.join(''));
    const base = path.posix.basename(e.path).slice(0, 80) || 'entry';
    out.push(
      rawHeader({
        name: `PaxHeaders/${base}`.slice(0, 99),
        mode: octal(0o644, 8),
        uid: octal(0, 8),
        gid: octal(0, 8),
        size: octal(body.length, 12),
        mtime: octal(e.mtime ?? FIXED_MTIME, 12),
        type: TYPE.pax,
        devmajor: octal(0, 8),
        devminor: octal(0, 8),
      }),
      body,
      pad512(body.length)
    );
  }
  out.push(rawHeader(fields));
  return Buffer.concat(out);
}

// --- layer writing ------------------------------------------------------------------------------

/** { input, output, done }: node:zlib gzip, or the zstd CLI (single-threaded -3: deterministic). */
function compressor(kind) {
  if (kind === 'gzip') {
    const gz = zlib.createGzip({ level: 6 });
    return { input: gz, output: gz, done: Promise.resolve() };
  }
  if (kind === 'zstd') {
    const child = spawn('zstd', ['-q', '-c', '-3', '-T1', '--no-progress'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const done = new Promise((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`zstd exited ${code}`))));
    });
    return { input: child.stdin, output: child.stdout, done };
  }
  throw new Error(`unknown compression ${kind}`);
}

/**
 * Streams the entries of `entries` (an async iterable) as a tar into layout's blobs, compressed
 * with `compression`. Returns the layer descriptor plus its diff_id (sha256 of the plain tar).
 */
async function writeLayer(layout, entries, compression, annotations) {
  const tmp = path.join(layout.blobDir, `.tmp-${process.pid}-${crypto.randomBytes(4).toString('hex')}`);
  const rawHash = crypto.createHash('sha256');
  const zHash = crypto.createHash('sha256');
  const file = fs.createWriteStream(tmp);
  let zSize = 0;
  const c = compressor(compression);
  const { input, output } = c;
  output.on('data', (b) => {
    zHash.update(b);
    zSize += b.length;
    if (!file.write(b)) {
      output.pause();
      file.once('drain', () => output.resume());
    }
  });
  const outputEnded = once(output, 'end');
  const write = async (b) => {
    rawHash.update(b);
    if (!input.write(b)) await once(input, 'drain');
  };
  let count = 0;
  for await (const e of entries) {
    count++;
    await write(tarHeader(e));
    if (e.type !== 'file') continue;
    if (e.content !== undefined) {
      await write(e.content);
    } else {
      // Stream the source file; the header already promised e.size bytes.
      const fd = fs.openSync(e.source, 'r');
      try {
        let off = 0;
        const buf = Buffer.allocUnsafe(1 << 20);
        for (;;) {
          const n = fs.readSync(fd, buf, 0, buf.length, off);
          if (n === 0) break;
          off += n;
          if (off > e.size) throw new Error(`${e.source} grew while archiving`);
          await write(Buffer.from(buf.subarray(0, n)));
        }
        if (off !== e.size) throw new Error(`${e.source} shrank while archiving`);
      } finally {
        fs.closeSync(fd);
      }
    }
    await write(pad512(e.size));
  }
  await write(Buffer.alloc(1024)); // end-of-archive: two zero blocks
  input.end();
  await outputEnded;
  await c.done;
  file.end();
  await once(file, 'close');
  const digest = `sha256:${zHash.digest('hex')}`;
  fs.renameSync(tmp, layout.blobPath(digest));
  return {
    desc: { mediaType: MT[compression], digest, size: zSize, ...(annotations ? { annotations } : {}) },
    diffId: `sha256:${rawHash.digest('hex')}`,
    entries: count,
  };
}

/** What the image tests never run, left out of the image made from the test rootfs: they need
 * python and coreutils, and every test that pulls it pulls these bytes again (Node and ICU, the
 * locales and the docs were half of the layer, and of the image suites' time). */
const TRIMMED = [
  /^usr\/lib\/x86_64-linux-gnu\/(libnode|libicu|libuv)[^/]*$/,
  /^usr\/share\/(nodejs|locale|doc|man|info)(\/|$)/,
  /^usr\/include\/node(\/|$)/,
  /^usr\/bin\/(node|nodejs)$/,
];

/** Entries of a rootfs directory tree, sorted, with hardlinks detected. Skips device nodes/sockets
 * and what `TRIMMED` names. */
async function* walkRootfs(root, skipped) {
  const seen = new Map(); // dev:ino -> first path, for hardlinks
  const skipTop = new Set(['.kern-test-rootfs']); // the rootfs stamp is harness metadata, not image content
  function* walk(rel) {
    const abs = rel ? path.join(root, rel) : root;
    const names = fs.readdirSync(abs).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    for (const n of names) {
      if (!rel && skipTop.has(n)) continue;
      const r = rel ? `${rel}/${n}` : n;
      if (TRIMMED.some((re) => re.test(r))) continue;
      const p = path.join(root, r);
      const st = fs.lstatSync(p);
      const base = { mode: st.mode, uid: st.uid, gid: st.gid, mtime: Math.floor(st.mtimeMs / 1000) };
      if (st.isDirectory()) {
        yield { ...base, path: `${r}/`, type: 'dir' };
        yield* walk(r);
      } else if (st.isSymbolicLink()) {
        yield { ...base, path: r, type: 'symlink', linkname: fs.readlinkSync(p) };
      } else if (st.isFile()) {
        const key = `${st.dev}:${st.ino}`;
        if (st.nlink > 1 && seen.has(key)) {
          yield { ...base, path: r, type: 'hardlink', linkname: seen.get(key) };
        } else {
          if (st.nlink > 1) seen.set(key, r);
          yield { ...base, path: r, type: 'file', size: st.size, source: p };
        }
      } else {
        // Real images ship an empty /dev (the runtime makes its own); mknod would also fail rootless.
        skipped.push(r);
      }
    }
  }
  yield* walk('');
}

async function* fromArray(arr) {
  yield* arr;
}

// --- layouts ------------------------------------------------------------------------------------

class Layout {
  constructor(dir) {
    this.dir = dir;
    this.blobDir = path.join(dir, 'blobs', 'sha256');
    fs.mkdirSync(this.blobDir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: MT.layout }));
  }
  blobPath(digest) {
    return path.join(this.blobDir, digest.replace(/^sha256:/, ''));
  }
  /** Writes a JSON blob; returns its descriptor. */
  json(mediaType, obj, extra = {}) {
    const buf = Buffer.from(JSON.stringify(obj));
    const digest = `sha256:${sha256(buf)}`;
    fs.writeFileSync(this.blobPath(digest), buf);
    return { mediaType, digest, size: buf.length, ...extra };
  }
  /** Makes blobs of another layout available here (hardlink; copy across filesystems). */
  share(from, ...digests) {
    for (const d of digests) {
      const dst = this.blobPath(d);
      if (fs.existsSync(dst)) continue;
      try {
        fs.linkSync(from.blobPath(d), dst);
      } catch {
        fs.copyFileSync(from.blobPath(d), dst);
      }
    }
  }
  /** index.json with one top-level entry tagged `latest` (what `oci:DIR:latest` resolves). */
  tag(desc, ref = 'latest') {
    const entry = { ...desc, annotations: { ...desc.annotations, [REF_NAME]: ref } };
    fs.writeFileSync(
      path.join(this.dir, 'index.json'),
      JSON.stringify({ schemaVersion: 2, mediaType: MT.index, manifests: [entry] })
    );
  }
}

/** Writes config + manifest for `layers` ({desc, diffId}); returns the manifest descriptor. */
function writeImage(layout, { arch, layers, config = {}, history }) {
  const plat = platformOf(arch);
  const cfg = layout.json(MT.config, {
    created: CREATED,
    ...plat,
    config: { Env: [PATH_ENV], ...config },
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
    history: (history || layers.map((_, i) => `layer ${i + 1}`)).map((h) => ({ created: CREATED, created_by: h })),
  });
  const man = layout.json(
    MT.manifest,
    { schemaVersion: 2, mediaType: MT.manifest, config: cfg, layers: layers.map((l) => l.desc) },
    { platform: plat }
  );
  return { manifest: man, config: cfg };
}

function stripPlatform(desc) {
  const { platform: _p, ...rest } = desc;
  return rest;
}

// --- synthetic entries --------------------------------------------------------------------------

const dir = (p, mode = 0o755) => ({ path: p, type: 'dir', mode });
const file = (p, content, mode = 0o644) => {
  const buf = Buffer.from(content);
  return { path: p, type: 'file', mode, content: buf, size: buf.length };
};
const symlink = (p, target) => ({ path: p, type: 'symlink', mode: 0o777, linkname: target });

// --- main ---------------------------------------------------------------------------------------

function parseArgs(argv) {
  const a = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!['--rootfs', '--out'].includes(argv[i]) || argv[i + 1] === undefined) {
      throw new Error('usage: make-oci-image.js --rootfs DIR --out DIR');
    }
    a[argv[i].slice(2)] = argv[i + 1];
  }
  if (!a.rootfs || !a.out) throw new Error('usage: make-oci-image.js --rootfs DIR --out DIR');
  return a;
}

function hasZstd() {
  return spawnSync('zstd', ['--version'], { stdio: 'ignore' }).status === 0;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const out = args.out;
  fs.mkdirSync(out, { recursive: true });
  const info = { hostArch: HOST_ARCH, otherArch: OTHER_ARCH, images: {} };
  const t0 = Date.now();
  const layer2Compression = hasZstd() ? 'zstd' : 'gzip';

  // rootfs: the whole test rootfs as one gzip layer, plus a small layer with whiteouts.
  const rootfs = new Layout(path.join(out, 'rootfs'));
  const skipped = [];
  const l1 = await writeLayer(rootfs, walkRootfs(args.rootfs, skipped), 'gzip');
  const etcSt = fs.statSync(path.join(args.rootfs, 'etc'));
  const motdExists = fs.existsSync(path.join(args.rootfs, 'etc/motd'));
  const opaqueDir = 'etc/update-motd.d';
  if (!motdExists || !fs.existsSync(path.join(args.rootfs, opaqueDir))) {
    throw new Error(`rootfs lacks etc/motd or ${opaqueDir}: the whiteout fixtures need both`);
  }
  const layer2Entries = [
    { ...dir('etc/', etcSt.mode), uid: etcSt.uid, gid: etcSt.gid },
    file('etc/.wh.motd', ''), // whiteout: deletes layer 1's etc/motd
    file('etc/kern-layer2', 'layer2\n'),
    dir(`${opaqueDir}/`),
    file(`${opaqueDir}/.wh..wh..opq`, ''), // opaque: hides everything layer 1 had in this dir
    file(`${opaqueDir}/kern-opaque-kept`, 'kept\n', 0o755),
  ];
  const l2 = await writeLayer(rootfs, fromArray(layer2Entries), layer2Compression);
  const rootfsConfig = { Env: [PATH_ENV, 'KERN_IMAGE_MARK=from-config'], WorkingDir: '/srv' };
  const rootfsHistory = ['kern-sandbox test rootfs (debootstrap bookworm)', 'kern-sandbox layer 2 (whiteouts)'];
  const rootImg = writeImage(rootfs, { arch: HOST_ARCH, layers: [l1, l2], config: rootfsConfig, history: rootfsHistory });
  rootfs.tag(stripPlatform(rootImg.manifest));
  const layerInfo = (l) => ({ ...l.desc, diffId: l.diffId, entries: l.entries });
  info.images.rootfs = {
    layout: 'rootfs',
    ref: 'latest',
    manifest: rootImg.manifest.digest,
    config: rootImg.config.digest,
    layers: [layerInfo(l1), layerInfo(l2)],
    skippedFromRootfs: skipped,
    facts: {
      env: rootfsConfig.Env,
      workingDir: rootfsConfig.WorkingDir,
      added: { 'etc/kern-layer2': 'layer2\n', [`${opaqueDir}/kern-opaque-kept`]: 'kept\n' },
      whiteouts: ['etc/motd'],
      opaqueDirs: [opaqueDir],
      hiddenByOpaque: fs.readdirSync(path.join(args.rootfs, opaqueDir)).map((n) => `${opaqueDir}/${n}`),
    },
  };
  console.log(`make-oci-image: rootfs layer ${l1.entries} entries, ${(l1.desc.size / 1e6).toFixed(1)} MB gzip (${((Date.now() - t0) / 1000).toFixed(1)} s); layer 2 ${layer2Compression}`);

  // rootfs-gzip: the same image with layer 2 gzip-compressed. Same config (same diff_ids), so the
  // same image ID; this is the one to push as Docker v2s2 or save as docker-archive, which have no
  // zstd media type (skopeo 1.9 refuses the conversion).
  const gz = new Layout(path.join(out, 'rootfs-gzip'));
  gz.share(rootfs, l1.desc.digest);
  const l2gz = await writeLayer(gz, fromArray(layer2Entries), 'gzip');
  const gzImg = writeImage(gz, { arch: HOST_ARCH, layers: [l1, l2gz], config: rootfsConfig, history: rootfsHistory });
  gz.tag(stripPlatform(gzImg.manifest));
  info.images['rootfs-gzip'] = {
    ...info.images.rootfs,
    layout: 'rootfs-gzip',
    manifest: gzImg.manifest.digest,
    config: gzImg.config.digest,
    layers: [layerInfo(l1), layerInfo(l2gz)],
  };

  // user-image: the same layers, config says USER nobody.
  const user = new Layout(path.join(out, 'user-image'));
  user.share(rootfs, l1.desc.digest, l2.desc.digest);
  const userImg = writeImage(user, {
    arch: HOST_ARCH,
    layers: [l1, l2],
    config: { ...rootfsConfig, User: 'nobody' },
    history: rootfsHistory,
  });
  user.tag(stripPlatform(userImg.manifest));
  info.images['user-image'] = { layout: 'user-image', ref: 'latest', manifest: userImg.manifest.digest, config: userImg.config.digest, facts: { user: 'nobody' } };

  // The other-arch tiny image, written into each layout that needs it.
  const tinyOther = async (layout) => {
    const l = await writeLayer(layout, fromArray([file('ARCH', `${OTHER_ARCH}\n`)]), 'gzip');
    return writeImage(layout, { arch: OTHER_ARCH, layers: [l], config: { Cmd: ['/ARCH'] }, history: ['ARCH marker'] });
  };

  // multiarch: index of host (= rootfs image), other arch, and a buildx-style attestation manifest.
  const multi = new Layout(path.join(out, 'multiarch'));
  multi.share(rootfs, l1.desc.digest, l2.desc.digest, rootImg.config.digest, rootImg.manifest.digest);
  const other = await tinyOther(multi);
  const intoto = {
    _type: 'https://in-toto.io/Statement/v0.1',
    predicateType: 'https://spdx.dev/Document',
    subject: [{ name: 'kern/test', digest: { sha256: rootImg.manifest.digest.slice(7) } }],
    predicate: { spdxVersion: 'SPDX-2.3', name: 'kern-sandbox test attestation' },
  };
  const intotoDesc = multi.json(MT.intoto, intoto, { annotations: { 'in-toto.io/predicate-type': intoto.predicateType } });
  const attCfg = multi.json(MT.config, {
    architecture: 'unknown',
    os: 'unknown',
    config: {},
    rootfs: { type: 'layers', diff_ids: [intotoDesc.digest] },
  });
  const attMan = multi.json(
    MT.manifest,
    { schemaVersion: 2, mediaType: MT.manifest, config: attCfg, layers: [intotoDesc] },
    {
      platform: { architecture: 'unknown', os: 'unknown' },
      annotations: {
        'vnd.docker.reference.digest': rootImg.manifest.digest,
        'vnd.docker.reference.type': 'attestation-manifest',
      },
    }
  );
  const multiIndex = multi.json(MT.index, {
    schemaVersion: 2,
    mediaType: MT.index,
    manifests: [rootImg.manifest, other.manifest, attMan],
  });
  multi.tag(multiIndex);
  info.images.multiarch = {
    layout: 'multiarch',
    ref: 'latest',
    index: multiIndex.digest,
    manifests: {
      [`linux/${HOST_ARCH}`]: rootImg.manifest.digest,
      [`linux/${OTHER_ARCH}`]: other.manifest.digest,
      attestation: attMan.digest,
    },
  };

  // tiny-other-arch: an index holding only the other arch (no linux/<host> variant).
  const tiny = new Layout(path.join(out, 'tiny-other-arch'));
  const tinyImg = await tinyOther(tiny);
  const tinyIndex = tiny.json(MT.index, { schemaVersion: 2, mediaType: MT.index, manifests: [tinyImg.manifest] });
  tiny.tag(tinyIndex);
  info.images['tiny-other-arch'] = {
    layout: 'tiny-other-arch',
    ref: 'latest',
    index: tinyIndex.digest,
    manifests: { [`linux/${OTHER_ARCH}`]: tinyImg.manifest.digest },
  };

  // Hostile images: a harmless base layer, then one layer that tries to write outside the root.
  const baseEntries = [dir('etc/'), file('etc/kern-base', 'base\n'), dir('tmp/', 0o1777)];
  const hostile = {
    'hostile-dotdot': {
      base: [],
      evil: [file('../../kern-escape-dotdot', 'escaped\n')],
      escapes: ['../../kern-escape-dotdot'],
    },
    'hostile-symlink-parent': {
      base: [symlink('evil', '../../../../../../tmp')],
      evil: [file('evil/kern-escape-symlink', 'escaped\n')],
      escapes: ['/tmp/kern-escape-symlink'],
    },
    'hostile-symlink-abs': {
      base: [],
      evil: [symlink('evil-abs', '/tmp'), file('evil-abs/kern-escape-symlink-abs', 'escaped\n')],
      escapes: ['/tmp/kern-escape-symlink-abs'],
    },
    'hostile-hardlink': {
      base: [],
      evil: [{ path: 'h', type: 'hardlink', mode: 0o644, linkname: '../../../../etc/passwd' }],
      escapes: ['hardlink h -> ../../../../etc/passwd (host /etc/passwd must not become reachable or writable)'],
    },
    'hostile-device': {
      base: [],
      evil: [dir('dev/'), { path: 'dev/kern-mem', type: 'char', mode: 0o666, devmajor: 1, devminor: 1 }],
      escapes: ['char device dev/kern-mem 1:1 (/dev/mem) must not be created'],
    },
  };
  for (const [name, h] of Object.entries(hostile)) {
    const lay = new Layout(path.join(out, name));
    const b = await writeLayer(lay, fromArray([...baseEntries, ...h.base]), 'gzip');
    const e = await writeLayer(lay, fromArray(h.evil), 'gzip');
    const img = writeImage(lay, { arch: HOST_ARCH, layers: [b, e], history: ['base', 'hostile'] });
    lay.tag(stripPlatform(img.manifest));
    info.images[name] = {
      layout: name,
      ref: 'latest',
      manifest: img.manifest.digest,
      hostileEntries: h.evil.map((x) => ({ path: x.path, type: x.type, linkname: x.linkname })),
      escapes: h.escapes,
      facts: { added: { 'etc/kern-base': 'base\n' } },
    };
  }

  fs.writeFileSync(path.join(out, 'images.json'), `${JSON.stringify(info, null, 1)}\n`);
  console.log(`make-oci-image: ${Object.keys(info.images).length} layouts in ${out} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
}

if (require.main === module) {
  main().catch((e) => {
    console.error(`make-oci-image: ${e.stack || e}`);
    process.exit(1);
  });
}

// For tests that want their own odd layers (e.g. a hand-made hostile entry).
module.exports = { tarHeader, writeLayer, writeImage, Layout, MT, HOST_ARCH, OTHER_ARCH };
