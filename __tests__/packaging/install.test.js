'use strict';
// rootless: no — packs and installs the package from a local registry; once, as root, is enough
// `npm install kern-sandbox` as a user gets it: dist/*.tgz (`npm run pack:all`; built here with
// --dev when missing or older than the build) are published to a real local registry
// (Verdaccio, no uplinks), then installed BY NAME into a fresh directory with a fresh HOME and
// no cargo or rustc on PATH, and used: a python box and `npx kern doctor`.

const fs = require('fs');
const path = require('path');
const { spawnSync, execFileSync } = require('child_process');
const { requireRootfs, makeTempDir, isRoot } = require('../helpers');
const { startRegistry, publishRuntimeDependencies } = require('../support/verdaccio');

const repo = path.join(__dirname, '..', '..');
const pkg = require('../../package.json');
const { platformKey, keyOf, supportedKeys } = require('../../js/platform.js');

const key = platformKey();
const platformName = `${pkg.name}-${key}`;
const dist = path.join(repo, 'dist');
const tarballs = [`${platformName}-${pkg.version}.tgz`, `${pkg.name}-${pkg.version}.tgz`].map((f) => path.join(dist, f));
/** The JS layer's modules (native.js, generated, aside): each must ship in the main package. */
const JS_MODULES = fs.readdirSync(path.join(repo, 'js')).filter((f) => f.endsWith('.js') && f !== 'native.js').map((f) => `js/${f}`);
const CHECKS = ['userns', 'idmap', 'cgroup', 'caps', 'seccomp', 'landlock', 'openat2', 'store', 'proxy', 'ca'];

let tmp, registry, env, project, rootfs;

/** dist/ as `npm run pack:all` left it, or packed now (dev profile) if missing or stale. */
function ensureDist() {
  const built = ['kern', `js/${pkg.napi.binaryName}.${key}.node`, ...JS_MODULES, 'bin/kern.js', 'package.json']
    .map((f) => path.join(repo, f))
    .filter((f) => fs.existsSync(f))
    .map((f) => fs.statSync(f).mtimeMs);
  const stale = tarballs.some((t) => !fs.existsSync(t) || fs.statSync(t).mtimeMs < Math.max(...built));
  if (stale) execFileSync(process.execPath, [path.join(repo, 'scripts', 'pack.js'), '--dev'], { cwd: repo, stdio: ['ignore', 'ignore', 'inherit'] });
}

/** Runs a command as the fresh user would: env is the fresh HOME, the bare PATH, the registry. */
function sh(cwd, cmd, args, extraEnv = {}) {
  const r = spawnSync(cmd, args, { cwd, env: { ...env, ...extraEnv }, encoding: 'utf8', timeout: 300000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, error: r.error };
}

function newProject(name) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name, private: true }));
  return dir;
}

function npmInstall(dir, ...flags) {
  const r = sh(dir, 'npm', ['install', 'kern-sandbox', '--no-audit', '--no-fund', ...flags]);
  if (r.code !== 0) throw new Error(`npm install kern-sandbox failed (${r.code}):\n${r.stdout}\n${r.stderr}\nregistry log:\n${registry.log()}`);
  return r;
}

/** Every file under dir, relative to it. */
function walk(dir, rel = '') {
  return fs.readdirSync(path.join(dir, rel), { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? walk(dir, path.join(rel, d.name)) : [path.join(rel, d.name)]);
}

beforeAll(async () => {
  rootfs = requireRootfs();
  ensureDist();
  tmp = makeTempDir('kern-install-');
  fs.mkdirSync(path.join(tmp, 'registry'));
  registry = await startRegistry(path.join(tmp, 'registry'));
  // What kern-sandbox needs at run time (kern serve's Connect and metrics libraries), as a
  // public registry would have them.
  publishRuntimeDependencies(registry, path.join(repo, 'package-lock.json'), path.join(tmp, 'deps'));
  // Platform package first: the main one names it in optionalDependencies.
  for (const t of tarballs) {
    const r = spawnSync('npm', ['publish', t, '--userconfig', registry.npmrc, '--registry', registry.url], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`npm publish ${path.basename(t)} failed:\n${r.stdout}\n${r.stderr}\n${registry.log()}`);
  }
  const home = path.join(tmp, 'home');
  fs.mkdirSync(home);
  // A new user's shell: no KERN_BIN, no repo, no Rust toolchain; only node's own directory.
  env = {
    HOME: home,
    PATH: [...new Set([path.dirname(process.execPath), '/usr/bin', '/bin'])].join(':'),
    LANG: process.env.LANG || 'C.UTF-8',
    npm_config_registry: registry.url,
    npm_config_update_notifier: 'false',
  };
  project = newProject('app');
  npmInstall(project);
}, 600000);

afterAll(async () => {
  if (registry) await registry.stop();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('npm install kern-sandbox by name from the registry, with no cargo or rustc on PATH', () => {
  // No kern on PATH either: `npx kern` below can only be the installed launcher and its kern.
  for (const tool of ['cargo', 'rustc', 'kern']) expect(sh(project, 'sh', ['-c', `command -v ${tool}`]).code).not.toBe(0);
  // Both packages came from the local registry (its storage holds them; the lock points at it).
  const lock = JSON.parse(fs.readFileSync(path.join(project, 'package-lock.json'), 'utf8'));
  for (const name of [pkg.name, platformName]) {
    expect(lock.packages[`node_modules/${name}`]).toMatchObject({ version: pkg.version, resolved: expect.stringMatching(`^${registry.url}`) });
  }
  // The main package is platform-neutral: JS, types, the launcher; no addon, no kern.
  const main = path.join(project, 'node_modules', pkg.name);
  const mainFiles = walk(main);
  expect(mainFiles).toEqual(expect.arrayContaining([...JS_MODULES, 'js/native.js', 'bin/kern.js', 'index.d.ts', 'LICENSE']));
  expect(mainFiles.filter((f) => f.endsWith('.node') || path.basename(f) === 'kern')).toEqual([]);
  expect(require(path.join(main, 'package.json')).optionalDependencies).toMatchObject({ [platformName]: pkg.version });
  // The platform package carries both, executable.
  const plat = path.join(project, 'node_modules', platformName);
  expect(walk(plat).sort()).toEqual([`${pkg.napi.binaryName}.${key}.node`, 'LICENSE', 'README.md', 'THIRD_PARTY_NOTICES', 'kern', 'package.json'].sort());
  fs.accessSync(path.join(plat, 'kern'), fs.constants.X_OK);
  expect(fs.realpathSync(path.join(project, 'node_modules', '.bin', 'kern'))).toBe(path.join(main, 'bin', 'kern.js'));
});

test("a python box runs through the installed package, on the platform package's kern", () => {
  const script = `
    const fs = require('fs');
    const { Sandbox } = require('kern-sandbox');
    (async () => {
      const sb = await new Sandbox({ image: process.argv[1] }).open();
      // The kern processes this Sandbox started: which file each runs.
      const kerns = fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p)).filter((p) => {
        try { return fs.readFileSync('/proc/' + p + '/stat', 'utf8').replace(/^.*\\) /, '').split(' ')[1] === String(process.pid); } catch { return false; }
      }).map((p) => fs.readlinkSync('/proc/' + p + '/exe'))
        // A child caught between fork and exec still shows node itself.
        .filter((exe) => exe !== process.execPath);
      const r = await sb.runCode('import sys; print("hello from", sys.version_info[0], 6 * 7)');
      await sb.close();
      console.log(JSON.stringify({ stdout: r.stdout, exitCode: r.exitCode, kerns }));
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const boxKerns = (extraEnv) => {
    const r = sh(project, 'node', ['-e', script, rootfs], extraEnv);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({ stdout: 'hello from 3 42\n', exitCode: 0 });
    expect(out.kerns.length).toBeGreaterThan(0);
    return [...new Set(out.kerns)];
  };
  expect(boxKerns()).toEqual([fs.realpathSync(path.join(project, 'node_modules', platformName, 'kern'))]);
  // KERN_BIN, the explicit override, still wins over the package's.
  const own = path.join(tmp, 'kern-override');
  fs.copyFileSync(path.join(project, 'node_modules', platformName, 'kern'), own);
  fs.chmodSync(own, 0o755);
  expect(boxKerns({ KERN_BIN: own })).toEqual([own]);
});

test('npx kern doctor runs the platform kern and answers as doctor.test.js expects here', () => {
  const r = sh(project, 'npx', ['kern', 'doctor']);
  for (const name of CHECKS) expect(r.stdout).toMatch(new RegExp(`^(ok|degraded|missing|info) +${name} `, 'm'));
  expect(r.stdout).toMatch(/^kern doctor: boxes can/m);
  const json = sh(project, 'npx', ['kern', 'doctor', '--json']);
  const report = JSON.parse(json.stdout);
  expect(json.code).toBe(report.ok ? 0 : 1);
  // The two runs agree; where they don't, the first run's report shows which check changed.
  expect({ code: r.code, report: r.code === json.code ? '' : r.stdout + r.stderr }).toEqual({ code: json.code, report: '' });
  if (isRoot) expect(r.code).toBe(0);
});

test('npx kern serve runs from the installed package, with its dependencies, and so does the platform kern\'s serve', () => {
  const js = sh(project, 'npx', ['kern', 'serve', '--help']);
  expect(js.code).toBe(0);
  expect(js.stderr).toMatch(/^kern serve: usage: kern serve \[--listen HOST:PORT\]/);
  const refused = sh(project, 'npx', ['kern', 'serve'], { KERN_API_KEYS: '' });
  expect(refused.code).toBe(2);
  expect(refused.stderr).toMatch(/no API key/);
  // The native kern of the platform package finds the main package's server beside it.
  const native = sh(project, path.join(project, 'node_modules', `${pkg.name}-${key}`, 'kern'), ['serve', '--help']);
  expect(native.code).toBe(0);
  expect(native.stderr).toMatch(/^kern serve: usage/);
});

test('without the platform package (--omit=optional), require and npx kern name it and what to do', () => {
  const bare = newProject('bare');
  npmInstall(bare, '--omit=optional');
  expect(fs.existsSync(path.join(bare, 'node_modules', platformName))).toBe(false);
  const r = sh(bare, 'node', ['-e', "require('kern-sandbox')"]);
  expect(r.code).not.toBe(0);
  const says = new RegExp(`${platformName}@${pkg.version.replace(/\./g, '\\.')}, the package with this platform's addon and kern, is not installed.*npm install ${platformName}@`);
  expect(r.stderr).toMatch(new RegExp(`SandboxError: kern-sandbox: ${says.source}`));
  expect(r.stderr).not.toMatch(/Cannot find native binding/);
  const cli = sh(bare, 'npx', ['kern', 'doctor']);
  expect(cli.code).toBe(127);
  expect(cli.stderr).toMatch(says);
});

test('a platform package of another version is refused at require time', () => {
  const stale = path.join(tmp, 'stale');
  fs.cpSync(project, stale, { recursive: true, verbatimSymlinks: true });
  const pj = path.join(stale, 'node_modules', platformName, 'package.json');
  fs.writeFileSync(pj, JSON.stringify({ ...JSON.parse(fs.readFileSync(pj, 'utf8')), version: '0.0.1' }));
  const r = sh(stale, 'node', ['-e', "require('kern-sandbox')"]);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toMatch(new RegExp(`SandboxError: kern-sandbox ${pkg.version.replace(/\./g, '\\.')} found ${platformName} 0\\.0\\.1 .*Reinstall so they match`));
});

test('on a platform with no package, require names it, the ones there are, and how to build from source', () => {
  // This machine's platform made one without a package: a main package that lists only another
  // target (as if published for arm64 alone), and no platform package installed.
  const other = supportedKeys().find((k) => k !== key);
  const alone = path.join(tmp, 'alone');
  fs.cpSync(project, alone, { recursive: true, verbatimSymlinks: true });
  fs.rmSync(path.join(alone, 'node_modules', platformName), { recursive: true });
  const pj = path.join(alone, 'node_modules', pkg.name, 'package.json');
  const main = JSON.parse(fs.readFileSync(pj, 'utf8'));
  main.napi.targets = main.napi.targets.filter((t) => keyOf(t) === other);
  fs.writeFileSync(pj, JSON.stringify(main));
  const r = sh(alone, 'node', ['-e', "require('kern-sandbox')"]);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toMatch(new RegExp(`SandboxError: kern-sandbox has no package for this platform, ${key} \\(Linux on ${process.arch} with gnu libc\\); there are packages for ${other}\\. To build it from source .*npm ci && npm run build:debug`));
});
