'use strict';
// Local container registries for the image tests: Debian's docker-registry (distribution 2.8) on a
// free loopback port, skopeo to push the OCI layouts from scripts/build-test-images.sh into it, and
// small node:http fronts that act like the hard parts of real registries: Docker Hub's bearer-token
// dance with blobs redirected to another origin, transient errors, stalls and dead addresses.
// No mocks of the client: the Rust registry client talks real HTTP to all of these.
//
// Everything started here is stopped by its stop(); an exit handler kills what a test forgot.

const fs = require('fs');
const os = require('os');
const net = require('net');
const path = require('path');
const http = require('http');
const https = require('https');
const crypto = require('crypto');
const { spawn, execFile, execFileSync } = require('child_process');

/** The OCI layouts built by scripts/build-test-images.sh. */
const IMAGES = process.env.KERN_TEST_IMAGES || '/var/cache/kern-sandbox-test/images';
const IMAGES_STAMP = path.join(IMAGES, '.kern-test-images');
const REGISTRY_BIN = process.env.KERN_DOCKER_REGISTRY || '/usr/bin/docker-registry';
const BASIC_USER = 'kern';
const BASIC_PASSWORD = 's3cret';

// --- cleanup on exit ----------------------------------------------------------------------------

const liveChildren = new Map(); // pid -> temp dir to remove
let exitHookInstalled = false;
function installExitHook() {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Under Jest, `process` is a per-file copy whose 'exit' never fires; vm.runInThisContext
  // evaluates in Node's main context, which has the real one. Handlers must be synchronous.
  let realProcess = process;
  try {
    realProcess = require('vm').runInThisContext('process');
  } catch {
    /* keep the one we have */
  }
  realProcess.on('exit', () => {
    for (const [pid, dir] of liveChildren) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

/** Removes registry dirs left by a test process that was SIGKILLed (its exit hook never ran). */
function sweepStaleDirs() {
  for (const name of fs.readdirSync(os.tmpdir())) {
    if (!name.startsWith('kern-registry-')) continue;
    const dir = path.join(os.tmpdir(), name);
    let owner;
    try {
      owner = Number(fs.readFileSync(path.join(dir, 'owner.pid'), 'utf8'));
    } catch {
      continue; // not ours, or being created right now
    }
    try {
      process.kill(owner, 0);
    } catch (e) {
      if (e.code === 'ESRCH') fs.rmSync(dir, { recursive: true, force: true });
    }
  }
}

// --- images -------------------------------------------------------------------------------------

function imagesReady() {
  return fs.existsSync(IMAGES_STAMP);
}

/** Throws a clear message when the test images are missing (instead of a skopeo error later). */
function requireImages() {
  if (!imagesReady()) {
    throw new Error(
      `test images missing: ${IMAGES_STAMP} not found. Build them with scripts/build-test-images.sh ` +
        '(or point KERN_TEST_IMAGES at them).'
    );
  }
  return IMAGES;
}

/**
 * Builds (or finds cached) the test images by running scripts/build-test-images.sh: a no-op in
 * milliseconds when the stamp matches, ~15 s cold. Needs the test rootfs (build-test-rootfs.sh).
 */
function ensureImages() {
  const script = path.join(__dirname, '..', '..', 'scripts', 'build-test-images.sh');
  try {
    execFileSync('bash', [script], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 600000 });
  } catch (e) {
    throw new Error(`scripts/build-test-images.sh failed:\n${e.stdout || ''}${e.stderr || e.message}`, { cause: e });
  }
  return requireImages();
}

/** Path of one OCI layout, e.g. layout('rootfs'). */
function layout(name) {
  return path.join(requireImages(), name);
}

/** images.json: per image its digests and the facts tests assert on (see make-oci-image.js). */
function imagesInfo() {
  return JSON.parse(fs.readFileSync(path.join(requireImages(), 'images.json'), 'utf8'));
}

// --- small utilities ----------------------------------------------------------------------------

/** A loopback port nothing listens on right now (bind to 0, read, close). */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One HTTP(S) request (`ca`: PEM to trust); resolves { status, headers, body: Buffer }. */
function request(url, { method = 'GET', headers = {}, timeout = 5000, ca } = {}) {
  return new Promise((resolve, reject) => {
    const mod = url.startsWith('https:') ? https : http;
    const req = mod.request(url, { method, headers, timeout, ...(ca ? { ca } : {}) }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`timeout: ${method} ${url}`)));
    req.on('error', reject);
    req.end();
  });
}

function basicHeader(creds) {
  return `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;
}

function tail(file, n = 30) {
  try {
    return fs.readFileSync(file, 'utf8').split('\n').slice(-n).join('\n');
  } catch {
    return '(no log)';
  }
}

// skopeo (containers/image) keeps a host-wide blob-info cache (/var/lib/containers/cache for root)
// and uses it to substitute "equivalent" blobs: after the zstd rootfs went into a registry, a
// v2s2 push of rootfs-gzip reuses the zstd layer (same diff_id) and then fails the conversion.
// Each skopeo run gets an empty cache of its own: XDG_DATA_HOME for non-root; for root (whose
// path is fixed) a private mount namespace with a temp dir bind-mounted over the cache dir.
const ROOT_BIC = '/var/lib/containers/cache';
let privateCacheWorks = null;
function skopeoCommand(args, cacheDir) {
  // Its own (empty) credentials too: without XDG_RUNTIME_DIR an unprivileged skopeo reads
  // /run/containers/<uid>/auth.json, and fails on EACCES once root's podman has made
  // /run/containers (0700) on this machine.
  const auth = path.join(cacheDir, 'auth.json');
  fs.writeFileSync(auth, '{}');
  const env = { ...process.env, XDG_DATA_HOME: cacheDir, REGISTRY_AUTH_FILE: auth };
  if (process.getuid() !== 0) return { cmd: 'skopeo', argv: args, env };
  if (privateCacheWorks === null) {
    try {
      fs.mkdirSync(ROOT_BIC, { recursive: true, mode: 0o700 });
      execFileSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', `mount --bind "$1" ${ROOT_BIC}`, 'sh', cacheDir], {
        stdio: 'ignore',
      });
      privateCacheWorks = true;
    } catch {
      privateCacheWorks = false; // no mount namespaces here: share the host cache (and its quirks)
    }
  }
  if (!privateCacheWorks) return { cmd: 'skopeo', argv: args, env };
  return {
    cmd: 'unshare',
    argv: ['-m', '--propagation', 'private', 'sh', '-c', `mount --bind "$1" ${ROOT_BIC} && shift && exec skopeo "$@"`, 'sh', cacheDir, ...args],
    env,
  };
}

/** Runs skopeo (with a private blob-info cache); resolves stdout, rejects with its stderr. */
function skopeo(args, { timeout = 300000 } = {}) {
  const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-skopeo-cache-'));
  const all = ['--insecure-policy', ...args];
  const { cmd, argv, env } = skopeoCommand(all, cacheDir);
  return new Promise((resolve, reject) => {
    execFile(cmd, argv, { timeout, env, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      fs.rmSync(cacheDir, { recursive: true, force: true });
      if (err) reject(new Error(`skopeo ${all.join(' ')} failed: ${stderr || err.message}`));
      else resolve(stdout);
    });
  });
}

// --- the registry -------------------------------------------------------------------------------

/**
 * Starts docker-registry on 127.0.0.1:<free port> with filesystem storage in a temp dir.
 * auth 'basic': htpasswd (bcrypt) with user kern / password s3cret; plain HTTP is fine for it.
 * tls { cert, key, ca } (PEM file paths, see makeTestCA) serves HTTPS on `address` (an IP of
 * this machine; the client treats loopback as plain HTTP, so a TLS test needs another one).
 * Returns { host, url, storageDir, dir, logFile, auth, creds, pid, stop() }.
 */
async function startRegistry({ auth = 'none', tls = null, address = '127.0.0.1' } = {}) {
  if (!['none', 'basic'].includes(auth)) throw new Error(`startRegistry: auth must be 'none' or 'basic', not ${auth}`);
  if (!fs.existsSync(REGISTRY_BIN)) {
    throw new Error(`${REGISTRY_BIN} missing: install the Debian package docker-registry (scripts/setup-deps.sh)`);
  }
  installExitHook();
  sweepStaleDirs();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-registry-'));
  fs.writeFileSync(path.join(dir, 'owner.pid'), String(process.pid));
  const storageDir = path.join(dir, 'storage');
  const logFile = path.join(dir, 'registry.log');
  const configFile = path.join(dir, 'config.yml');
  let creds = null;
  let authYaml = '';
  if (auth === 'basic') {
    creds = { username: BASIC_USER, password: BASIC_PASSWORD };
    const htpasswd = path.join(dir, 'htpasswd');
    // The registry only accepts bcrypt entries (-B).
    fs.writeFileSync(htpasswd, execFileSync('htpasswd', ['-Bbn', BASIC_USER, BASIC_PASSWORD]));
    authYaml = `auth:\n  htpasswd:\n    realm: kern-test\n    path: ${htpasswd}\n`;
  }
  fs.mkdirSync(storageDir);

  // The free port can be taken between our probe and the registry's bind: retry a few times.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const host = `${address}:${port}`;
    const scheme = tls ? 'https' : 'http';
    const tlsYaml = tls ? `  tls:\n    certificate: ${tls.cert}\n    key: ${tls.key}\n` : '';
    // No blob-descriptor cache: corruptBlob() edits storage behind the registry's back.
    fs.writeFileSync(
      configFile,
      `version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: ${storageDir}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: ${host}
  secret: ${crypto.randomBytes(16).toString('hex')}
${tlsYaml}${authYaml}`
    );
    const logFd = fs.openSync(logFile, 'a');
    // setpriv --pdeathsig: the registry dies with us even if we are SIGKILLed (no exit handler runs).
    const [cmd, args] = fs.existsSync('/usr/bin/setpriv')
      ? ['/usr/bin/setpriv', ['--pdeathsig', 'SIGKILL', '--', REGISTRY_BIN, 'serve', configFile]]
      : [REGISTRY_BIN, ['serve', configFile]];
    const child = spawn(cmd, args, { stdio: ['ignore', logFd, logFd] });
    fs.closeSync(logFd);
    child.unref(); // a forgotten stop() must not keep Jest alive; the exit hook kills it
    liveChildren.set(child.pid, dir);
    let exited = null;
    const exitPromise = new Promise((resolve) =>
      child.once('exit', (code, sig) => {
        exited = { code, sig };
        liveChildren.delete(child.pid);
        resolve();
      })
    );

    const want = auth === 'basic' ? 401 : 200;
    const deadline = Date.now() + 15000;
    let up = false;
    while (!exited && Date.now() < deadline) {
      try {
        const r = await request(`${scheme}://${host}/v2/`, { timeout: 1000, ca: tls && fs.readFileSync(tls.ca) });
        if (r.status === want) {
          up = true;
          break;
        }
      } catch {
        /* not listening yet */
      }
      await sleep(50);
    }
    if (!up) {
      const log = tail(logFile);
      if (!exited) child.kill('SIGKILL');
      await exitPromise;
      if (attempt < 3 && /address already in use/.test(log)) continue;
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(`docker-registry did not come up on ${host} (${JSON.stringify(exited)}); log:\n${log}`);
    }

    let stopped = null;
    return {
      host,
      url: `${scheme}://${host}`,
      storageDir,
      dir,
      logFile,
      auth,
      creds,
      pid: child.pid,
      /** Stops the registry (TERM, then KILL after 5 s) and removes its storage. Idempotent. */
      stop() {
        if (!stopped) {
          stopped = (async () => {
            if (!exited) {
              child.kill('SIGTERM');
              const t = setTimeout(() => child.kill('SIGKILL'), 5000);
              await exitPromise;
              clearTimeout(t);
            }
            liveChildren.delete(child.pid);
            fs.rmSync(dir, { recursive: true, force: true });
          })();
        }
        return stopped;
      },
    };
  }
}

function normaliseCreds(creds) {
  if (!creds) return null;
  if (typeof creds === 'string') {
    const i = creds.indexOf(':');
    return { username: creds.slice(0, i), password: creds.slice(i + 1) };
  }
  return creds;
}

/** True when a layout's manifests (any in its index, one level of nesting) use zstd layers. */
function layoutHasZstd(layoutDir) {
  const blob = (d) => JSON.parse(fs.readFileSync(path.join(layoutDir, 'blobs', 'sha256', d.slice(7)), 'utf8'));
  const visit = (desc) => {
    const m = blob(desc.digest);
    if (m.manifests) return m.manifests.some(visit);
    return (m.layers || []).some((l) => /zstd/.test(l.mediaType));
  };
  const index = JSON.parse(fs.readFileSync(path.join(layoutDir, 'index.json'), 'utf8'));
  return index.manifests.some(visit);
}

/**
 * Pushes an OCI layout (a path, or a name from images: 'rootfs') to `registry` as repo:tag with
 * skopeo; resolves the pushed manifest digest (of the index with all: true).
 *   format 'oci' (default) keeps OCI media types; 'v2s2' converts to Docker schema 2.
 *   all: true pushes every manifest of an index; false picks the host platform's one.
 *   creds: 'user:pass' | { username, password } | false; default: the registry's own (basic).
 *   tag: the layout's ref name (default 'latest').
 * Docker v2s2 has no zstd media type and skopeo 1.9 will not convert, so a zstd layout pushed as
 * v2s2 goes through a temporary `dir:` copy with decompressed layers (skopeo then gzips them; the
 * layer digests change). Pushing 'rootfs-gzip' instead keeps the layout's layer digests.
 */
async function push(registry, layoutDir, repoTag, { format = 'oci', all = false, creds, tag = 'latest' } = {}) {
  if (!['oci', 'v2s2'].includes(format)) throw new Error(`push: format must be 'oci' or 'v2s2', not ${format}`);
  if (!layoutDir.includes('/')) layoutDir = layout(layoutDir);
  const c = creds === false ? null : normaliseCreds(creds === undefined ? registry.creds : creds);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-push-'));
  try {
    const digestFile = path.join(tmp, 'digest');
    let src = `oci:${layoutDir}:${tag}`;
    if (format === 'v2s2' && layoutHasZstd(layoutDir)) {
      if (all) throw new Error('push: a zstd layout cannot be pushed as v2s2 with all: true');
      await skopeo(['copy', '-q', '--dest-decompress', src, `dir:${tmp}/dir`]);
      src = `dir:${tmp}/dir`;
    }
    const args = ['copy', '-q', '--dest-tls-verify=false', '--format', format, '--digestfile', digestFile];
    if (all) args.push('--all');
    if (c) args.push('--dest-creds', `${c.username}:${c.password}`);
    else args.push('--dest-no-creds');
    await skopeo([...args, src, `docker://${registry.host}/${repoTag}`]);
    return fs.readFileSync(digestFile, 'utf8').trim();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

/** `skopeo inspect --raw` of HOST/repo:tag (or @digest); resolves the parsed manifest/index. */
async function inspectRaw(registry, ref, { creds } = {}) {
  const c = creds === false ? null : normaliseCreds(creds === undefined ? registry.creds : creds);
  const args = ['inspect', '--raw', '--tls-verify=false'];
  if (c) args.push('--creds', `${c.username}:${c.password}`);
  return JSON.parse(await skopeo([...args, `docker://${registry.host}/${ref}`]));
}

/** Filesystem path of a blob inside the registry's storage. */
function blobPath(registry, digest) {
  const hex = digest.replace(/^sha256:/, '');
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new Error(`not a sha256 digest: ${digest}`);
  return path.join(registry.storageDir, 'docker/registry/v2/blobs/sha256', hex.slice(0, 2), hex, 'data');
}

/**
 * Overwrites a stored blob with different bytes of the same length (every byte inverted, or only
 * the one at `offset`), so the registry serves it under its old digest. Returns the file path.
 */
function corruptBlob(registry, digest, { offset } = {}) {
  const p = blobPath(registry, digest);
  const data = fs.readFileSync(p);
  if (offset === undefined) {
    for (let i = 0; i < data.length; i++) data[i] ^= 0xff;
  } else {
    data[offset] ^= 0xff;
  }
  fs.writeFileSync(p, data);
  return p;
}

// --- HTTP fronts --------------------------------------------------------------------------------

/** Listens on 127.0.0.1:<port or 0>; tracks sockets so stop() can cut stalled connections. */
function listen(handler, port = 0, host = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    const server = http.createServer(handler);
    const sockets = new Set();
    server.on('connection', (s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    server.on('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      server.unref(); // a forgotten stop() must not keep Jest alive
      resolve({
        server,
        port: server.address().port,
        close: () =>
          new Promise((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}

function authKind(h) {
  if (!h) return null;
  return h.split(' ')[0];
}

/** /v2/<repo>/(manifests|blobs|tags)/...: the repository name, or null for /v2/ and the like. */
function repoOf(pathname) {
  const m = /^\/v2\/(.+?)\/(manifests|blobs|tags)\//.exec(pathname);
  return m ? m[1] : null;
}

/**
 * Forwards req to the registry and streams the answer back. Authorization from the client is
 * dropped when `dropAuth` (the registry's own creds are used instead). Location headers that
 * point at the registry are rewritten to `selfUrl`. `onBody(res, upstream)` may take over the
 * body (for stalls).
 */
function proxy(registry, req, res, { selfUrl, dropAuth = false, onBody } = {}) {
  const headers = { ...req.headers, host: registry.host };
  delete headers.connection;
  delete headers['keep-alive'];
  if (dropAuth) {
    delete headers.authorization;
    if (registry.creds) headers.authorization = basicHeader(registry.creds);
  }
  const up = http.request(
    { host: '127.0.0.1', port: Number(registry.host.split(':')[1]), method: req.method, path: req.url, headers },
    (upRes) => {
      const h = { ...upRes.headers };
      delete h.connection;
      delete h['keep-alive'];
      if (selfUrl && h.location && h.location.startsWith(registry.url)) {
        h.location = selfUrl + h.location.slice(registry.url.length);
      }
      res.writeHead(upRes.statusCode, h);
      if (onBody) onBody(res, upRes);
      else upRes.pipe(res);
    }
  );
  up.on('error', (e) => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
    res.end(`kern test proxy: upstream error: ${e.message}`);
  });
  req.pipe(up);
}

/** A registry-style JSON error answer (no body for HEAD). */
function registryError(req, res, status, code, message, headers = {}) {
  const body = JSON.stringify({ errors: [{ code, message, detail: null }] });
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'docker-distribution-api-version': 'registry/2.0',
    'content-length': Buffer.byteLength(body),
    ...headers,
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

/**
 * A Docker-Hub-like front for `registry`: /v2/... needs `Authorization: Bearer <token>` from its
 * own /token endpoint (anonymous), else 401 with a Bearer challenge. Authorised requests are
 * proxied, except blob GETs: 307 to http://localhost:<blob port>/blobdata/<digest>?repo=<repo>,
 * a second listener (another origin) that serves the bytes and records whether the client sent
 * it an Authorization header (it must not: the token belongs to the registry's origin).
 * Returns { host, url, blobUrl, log, stop() }; log = { requests: [{ server, method, url, auth,
 * status }], tokenRequests: [{ service, scope, auth }], tokensIssued, unauthorized,
 * blobRequests, blobRequestsWithAuth }.
 */
async function startTokenFront(registry, { service = 'kern-test' } = {}) {
  const tokens = new Set();
  const log = { requests: [], tokenRequests: [], tokensIssued: 0, unauthorized: 0, blobRequests: 0, blobRequestsWithAuth: 0 };
  const record = (server, req, status) =>
    log.requests.push({ server, method: req.method, url: req.url, auth: authKind(req.headers.authorization), status });

  const blobHandler = (req, res) => {
    const u = new URL(req.url, 'http://localhost');
    const m = /^\/blobdata\/(sha256:[0-9a-f]{64})$/.exec(u.pathname);
    const repo = u.searchParams.get('repo');
    log.blobRequests++;
    if (req.headers.authorization) log.blobRequestsWithAuth++;
    if (!m || !repo) {
      record('blob', req, 404);
      res.writeHead(404).end();
      return;
    }
    // Fetch from the registry the way a CDN would: no registry headers in the answer.
    const headers = {};
    if (req.headers.range) headers.range = req.headers.range;
    if (registry.creds) headers.authorization = basicHeader(registry.creds);
    const up = http.request(`${registry.url}/v2/${repo}/blobs/${m[1]}`, { method: req.method, headers }, (upRes) => {
      record('blob', req, upRes.statusCode);
      const h = { 'content-type': 'application/octet-stream' };
      for (const k of ['content-length', 'content-range', 'accept-ranges', 'etag']) if (upRes.headers[k]) h[k] = upRes.headers[k];
      res.writeHead(upRes.statusCode, h);
      upRes.pipe(res);
    });
    up.on('error', (e) => {
      record('blob', req, 502);
      if (!res.headersSent) res.writeHead(502);
      res.end(e.message);
    });
    up.end();
  };
  const blob = await listen(blobHandler);
  // "localhost" may resolve to ::1 first on some hosts: serve the same port there too if we can.
  const blob6 = await listen(blobHandler, blob.port, '::1').catch(() => null);

  let front;
  const frontHandler = (req, res) => {
    const u = new URL(req.url, 'http://localhost');
    const self = `http://127.0.0.1:${front.port}`;
    if (u.pathname === '/token') {
      const token = `kt-${crypto.randomBytes(16).toString('hex')}`;
      tokens.add(token);
      log.tokensIssued++;
      log.tokenRequests.push({
        service: u.searchParams.get('service'),
        scope: u.searchParams.getAll('scope').join(' ') || null,
        auth: authKind(req.headers.authorization),
      });
      record('front', req, 200);
      const body = JSON.stringify({ token, expires_in: 300 });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    if (!u.pathname.startsWith('/v2')) {
      record('front', req, 404);
      res.writeHead(404).end();
      return;
    }
    const m = /^Bearer (.+)$/.exec(req.headers.authorization || '');
    if (!m || !tokens.has(m[1])) {
      const repo = repoOf(u.pathname);
      const actions = ['GET', 'HEAD'].includes(req.method) ? 'pull' : 'pull,push';
      let challenge = `Bearer realm="${self}/token",service="${service}"`;
      if (repo) challenge += `,scope="repository:${repo}:${actions}"`;
      log.unauthorized++;
      record('front', req, 401);
      req.resume();
      registryError(req, res, 401, 'UNAUTHORIZED', 'authentication required', { 'www-authenticate': challenge });
      return;
    }
    const bm = /^\/v2\/(.+)\/blobs\/(sha256:[0-9a-f]{64})$/.exec(u.pathname);
    if (req.method === 'GET' && bm) {
      const location = `http://localhost:${blob.port}/blobdata/${bm[2]}?repo=${encodeURIComponent(bm[1])}`;
      record('front', req, 307);
      res.writeHead(307, { location, 'content-length': 0, 'docker-distribution-api-version': 'registry/2.0' });
      res.end();
      return;
    }
    res.on('finish', () => record('front', req, res.statusCode));
    proxy(registry, req, res, { selfUrl: self, dropAuth: true });
  };
  front = await listen(frontHandler);
  const host = `127.0.0.1:${front.port}`;
  return {
    host,
    url: `http://${host}`,
    blobUrl: `http://localhost:${blob.port}`,
    log,
    stop: () => Promise.all([front.close(), blob.close(), blob6 && blob6.close()]).then(() => undefined),
  };
}

/**
 * A front for `registry` that misbehaves for the first `failFirst` requests matching `match`
 * (a RegExp tested against "METHOD /path", default all), then proxies normally.
 *   action 'status' (default): answer `status` (default 503) with `headers` and a registry error.
 *   action 'reset': destroy the connection without an answer.
 *   action 'stall': proxy, but stop the body after `stallAfterBytes` bytes and never finish.
 * Authorization passes through (a basic-auth registry sees the client's own credentials).
 * Returns { host, url, log: { requests: [{ method, url, failed }], failed }, stop() }.
 */
async function startFlaky(
  registry,
  { failFirst = 1, status = 503, action = 'status', match = null, headers = {}, stallAfterBytes = 0 } = {}
) {
  const log = { requests: [], failed: 0 };
  let front;
  front = await listen((req, res) => {
    const self = `http://127.0.0.1:${front.port}`;
    const matches = !match || match.test(`${req.method} ${req.url}`);
    const fail = matches && log.failed < failFirst;
    log.requests.push({ method: req.method, url: req.url, failed: fail });
    if (!fail) {
      proxy(registry, req, res, { selfUrl: self });
      return;
    }
    log.failed++;
    if (action === 'reset') {
      req.socket.destroy();
    } else if (action === 'stall') {
      proxy(registry, req, res, {
        selfUrl: self,
        onBody: (out, upRes) => {
          let sent = 0;
          upRes.on('data', (chunk) => {
            if (sent >= stallAfterBytes) return;
            const part = chunk.subarray(0, stallAfterBytes - sent);
            sent += part.length;
            out.write(part);
          });
          // Never end `out`: the client sees a body that stops arriving.
        },
      });
    } else {
      req.resume();
      registryError(req, res, status, status === 429 ? 'TOOMANYREQUESTS' : 'UNAVAILABLE', `kern test: injected ${status}`, headers);
    }
  });
  const host = `127.0.0.1:${front.port}`;
  return { host, url: `http://${host}`, log, stop: front.close };
}

/**
 * A TCP listener that accepts connections and never answers a byte (connect succeeds, reads time
 * out). Returns { host, url, connections: () => number, stop() }.
 */
function startBlackhole() {
  return new Promise((resolve, reject) => {
    const sockets = new Set();
    let total = 0;
    const server = net.createServer((s) => {
      total++;
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    });
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.unref();
      const host = `127.0.0.1:${server.address().port}`;
      resolve({
        host,
        url: `http://${host}`,
        connections: () => total,
        stop: () =>
          new Promise((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}

/**
 * A non-loopback IPv4 address of this machine (the registry client treats loopback as plain
 * HTTP, so HTTPS tests serve here). Throws, saying so, when the machine has none.
 */
function hostAddress() {
  for (const list of Object.values(os.networkInterfaces())) {
    for (const a of list || []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  throw new Error('this machine has no non-loopback IPv4 address: the HTTPS registry tests need one to serve on');
}

/**
 * A throw-away CA and a server certificate it signs for `address` (IP SAN), made with openssl
 * in `dir`. Returns { ca, cert, key } (PEM file paths).
 */
function makeTestCA(dir, address) {
  const f = (n) => path.join(dir, n);
  const ossl = (args) => execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ossl(['req', '-x509', ...ec, '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '2', '-subj', '/CN=kern-sandbox test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  ossl(['req', ...ec, '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=kern-sandbox test registry']);
  fs.writeFileSync(f('server.ext'), `subjectAltName=IP:${address}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  ossl(['x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial',
    '-out', f('server.pem'), '-days', '2', '-extfile', f('server.ext')]);
  return { ca: f('ca.pem'), cert: f('server.pem'), key: f('server.key') };
}

/**
 * Debian's tinyproxy on 127.0.0.1:<free port>, foreground, logging every connection and request
 * line to its log. basicAuth { username, password } makes it demand Proxy-Authorization.
 * Returns { url, port, logFile, log() (its text), connects(target) (CONNECT lines for host:port),
 * stop() }.
 */
async function startTinyproxy({ basicAuth = null } = {}) {
  const bin = process.env.KERN_TINYPROXY || '/usr/bin/tinyproxy';
  if (!fs.existsSync(bin)) throw new Error(`${bin} missing: install the Debian package tinyproxy-bin (scripts/setup-deps.sh)`);
  installExitHook();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-tinyproxy-'));
  const logFile = path.join(dir, 'tinyproxy.log');
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    fs.writeFileSync(
      path.join(dir, 'tinyproxy.conf'),
      [`Port ${port}`, 'Listen 127.0.0.1', 'Timeout 30', `LogFile "${logFile}"`, 'LogLevel Connect', 'MaxClients 64',
        ...(basicAuth ? [`BasicAuth ${basicAuth.username} ${basicAuth.password}`] : [])].join('\n') + '\n'
    );
    const [cmd, args] = fs.existsSync('/usr/bin/setpriv')
      ? ['/usr/bin/setpriv', ['--pdeathsig', 'SIGKILL', '--', bin, '-d', '-c', path.join(dir, 'tinyproxy.conf')]]
      : [bin, ['-d', '-c', path.join(dir, 'tinyproxy.conf')]];
    const child = spawn(cmd, args, { stdio: 'ignore' });
    child.unref();
    liveChildren.set(child.pid, dir);
    let exited = false;
    const exitPromise = new Promise((resolve) => child.once('exit', () => { exited = true; liveChildren.delete(child.pid); resolve(); }));
    let up = false;
    for (const deadline = Date.now() + 10000; !exited && Date.now() < deadline; await sleep(50)) {
      up = await new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
        s.on('error', () => resolve(false));
      });
      if (up) break;
    }
    if (!up) {
      if (!exited) child.kill('SIGKILL');
      await exitPromise;
      if (attempt < 3) continue;
      const log = tail(logFile);
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(`tinyproxy did not come up on 127.0.0.1:${port}; log:\n${log}`);
    }
    const log = () => (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : '');
    let stopped = null;
    return {
      port,
      url: `http://127.0.0.1:${port}`,
      logFile,
      log,
      connects: (target) => log().split('\n').filter((l) => l.includes(`CONNECT ${target} `)).length,
      stop() {
        if (!stopped) {
          stopped = (async () => {
            if (!exited) {
              child.kill('SIGKILL');
              await exitPromise;
            }
            fs.rmSync(dir, { recursive: true, force: true });
          })();
        }
        return stopped;
      },
    };
  }
}

/** host:port on loopback where nothing listens (connections are refused). */
async function refusedAddress() {
  return `127.0.0.1:${await freePort()}`;
}

module.exports = {
  IMAGES,
  IMAGES_STAMP,
  BASIC_USER,
  BASIC_PASSWORD,
  imagesReady,
  requireImages,
  ensureImages,
  layout,
  imagesInfo,
  startRegistry,
  push,
  inspectRaw,
  skopeo,
  blobPath,
  corruptBlob,
  startTokenFront,
  startFlaky,
  startBlackhole,
  refusedAddress,
  request,
  hostAddress,
  makeTestCA,
  startTinyproxy,
};
