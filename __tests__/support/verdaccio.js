'use strict';
// A real local npm registry for the install test: Verdaccio, pinned with its own lock file
// (scripts/verdaccio/), installed once into a cache directory, run on 127.0.0.1 with its storage
// in a temp dir and no uplinks, so whatever installs from it was published to it.

const fs = require('fs');
const os = require('os');
const net = require('net');
const path = require('path');
const crypto = require('crypto');
const { spawn, execFileSync } = require('child_process');

const SPEC = path.join(__dirname, '..', '..', 'scripts', 'verdaccio');

function cacheRoot() {
  if (process.getuid() === 0) return '/var/cache/kern-sandbox-test/tools';
  return path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'kern-sandbox-test', 'tools');
}

/** Path to the verdaccio CLI, installed with `npm ci` from the lock file on first use. */
function ensureVerdaccio() {
  const lock = fs.readFileSync(path.join(SPEC, 'package-lock.json'));
  const dir = path.join(cacheRoot(), `verdaccio-${crypto.createHash('sha256').update(lock).digest('hex').slice(0, 12)}`);
  const bin = path.join(dir, 'node_modules', 'verdaccio', 'bin', 'verdaccio');
  if (fs.existsSync(bin)) return bin;
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp, { recursive: true });
  for (const f of ['package.json', 'package-lock.json']) fs.copyFileSync(path.join(SPEC, f), path.join(tmp, f));
  execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: tmp, stdio: ['ignore', 'ignore', 'inherit'] });
  fs.rmSync(dir, { recursive: true, force: true });
  fs.renameSync(tmp, dir);
  return bin;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * Starts Verdaccio in `dir` (its config, storage and log live there) and makes a user that may
 * publish. Returns { url, npmrc, stop(), log() }; npmrc is a userconfig file holding the token.
 */
async function startRegistry(dir) {
  const bin = ensureVerdaccio();
  // freePort() closes its probe before Verdaccio binds, so another process can take the port in
  // between: a start that fails with EADDRINUSE is retried on a new port.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return await startOn(bin, dir, port);
    } catch (e) {
      if (!(e.addressInUse && attempt < 3)) throw e;
    }
  }
}

async function startOn(bin, dir, port) {
  const url = `http://127.0.0.1:${port}/`;
  const config = path.join(dir, 'config.yaml');
  fs.writeFileSync(
    config,
    [
      `storage: ${path.join(dir, 'storage')}`,
      'auth:',
      '  htpasswd:',
      `    file: ${path.join(dir, 'htpasswd')}`,
      // No uplinks at all: nothing is fetched from npmjs.org, only what was published here.
      'uplinks: {}',
      'packages:',
      "  '**':",
      '    access: $all',
      '    publish: $authenticated',
      'max_body_size: 500mb',
      'log: { type: stdout, format: pretty, level: warn }',
      '',
    ].join('\n')
  );
  const logFile = path.join(dir, 'verdaccio.log');
  const out = fs.openSync(logFile, 'w');
  const child = spawn(process.execPath, [bin, '--config', config, '--listen', `127.0.0.1:${port}`], {
    stdio: ['ignore', out, out],
  });
  fs.closeSync(out);
  let exited = null;
  child.on('exit', (code, signal) => {
    exited = `exited (${signal || code})`;
  });
  const log = () => fs.readFileSync(logFile, 'utf8');
  const stop = () =>
    new Promise((resolve) => {
      if (exited) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  const deadline = Date.now() + 60000;
  for (;;) {
    if (exited) {
      const text = log();
      const err = new Error(`verdaccio ${exited} before it answered on ${url}:\n${text}`);
      err.addressInUse = text.includes('EADDRINUSE');
      throw err;
    }
    try {
      if ((await fetch(`${url}-/ping`)).ok) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`verdaccio did not answer on ${url} within 60 s:\n${log()}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  // A user to publish as (htpasswd auth registers on first login).
  const res = await fetch(`${url}-/user/org.couchdb.user:kern`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'kern', password: crypto.randomBytes(12).toString('hex') }),
  });
  const { token } = await res.json();
  if (!res.ok || !token) {
    await stop();
    throw new Error(`verdaccio refused to make a user (${res.status}):\n${log()}`);
  }
  const npmrc = path.join(dir, 'npmrc');
  fs.writeFileSync(npmrc, `registry=${url}\n//127.0.0.1:${port}/:_authToken=${token}\n`);
  return { url, npmrc, stop, log };
}

/**
 * Publishes to `registry` the packages kern-sandbox itself depends on at run time (the
 * non-dev entries of `lockfile`, at their locked versions), packed from npm's cache as `npm ci`
 * left it: the registry has no uplink, and a user's `npm install kern-sandbox` needs them.
 */
function publishRuntimeDependencies(registry, lockfile, work) {
  const { spawnSync } = require('child_process');
  const lock = JSON.parse(fs.readFileSync(lockfile, 'utf8'));
  const wanted = Object.entries(lock.packages)
    .filter(([k, p]) => k.startsWith('node_modules/') && !p.dev && !p.devOptional)
    .map(([k, p]) => `${k.slice(k.lastIndexOf('node_modules/') + 'node_modules/'.length)}@${p.version}`);
  fs.mkdirSync(work, { recursive: true });
  for (const spec of wanted) {
    const pack = spawnSync('npm', ['pack', spec, '--offline', '--pack-destination', work, '--silent'], { cwd: work, encoding: 'utf8' });
    if (pack.status !== 0) throw new Error(`npm pack ${spec} (from npm's cache) failed: run npm ci first\n${pack.stderr}`);
    const tarball = path.join(work, pack.stdout.trim().split('\n').pop());
    const pub = spawnSync('npm', ['publish', tarball, '--userconfig', registry.npmrc, '--registry', registry.url, '--ignore-scripts'], { encoding: 'utf8' });
    if (pub.status !== 0) throw new Error(`npm publish ${spec} failed:\n${pub.stdout}\n${pub.stderr}`);
  }
  return wanted;
}

module.exports = { startRegistry, ensureVerdaccio, publishRuntimeDependencies };
