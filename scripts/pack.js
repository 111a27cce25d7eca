// `npm run pack:all`: the npm tarballs this machine can build, into dist/ -- the napi-rs layout:
//   dist/kern-sandbox-<version>.tgz              the main package: JS, types, the `kern` launcher;
//                                                no native file; optionalDependencies on each
//                                                platform package at the same version
//   dist/kern-sandbox-<platform>-<version>.tgz   this target's addon (.node) and its `kern`
//
// Profiles (KERN_PACK_PROFILE=release|dev, or --dev):
//   release (default)  builds the addon and kern with `napi build --release` (same toolchain
//                      for both, the release profile's own target dir: the dev build is untouched)
//   dev                packs what `npm run build:debug` already made (js/*.node and ./kern),
//                      debug info stripped, for the install test: no 20-minute LTO build
// Environment:
//   CARGO_BUILD_TARGET       the target (default: rustc's host), as for scripts/install-kern.js
//   KERN_PACK_NAPI_CROSS=1   release: build with napi's glibc 2.17 toolchain (--use-napi-cross),
//                            as the release workflow does
//   KERN_PACK_MAX_GLIBC=2.17 fail if the addon or kern needs a newer glibc than this
// The glibc each binary needs (its newest GLIBC_ symbol version) is printed and written into the
// platform package's description and README. Packages are staged under target/pack/ and packed
// with `npm pack` there; npm/* and js/ are not touched.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { keyOf, supportedKeys } = require('../js/platform.js');

const root = path.join(__dirname, '..');
const pkg = require('../package.json');
const dist = path.join(root, 'dist');

function fail(message) {
  console.error(`pack: ${message}`);
  process.exit(1);
}

const profile = process.argv.includes('--dev') ? 'dev' : process.env.KERN_PACK_PROFILE || 'release';
if (!['release', 'dev'].includes(profile)) fail(`KERN_PACK_PROFILE=${profile}: use release or dev`);
const host = /host: (\S+)/.exec(execFileSync('rustc', ['-vV'], { encoding: 'utf8' }))[1];
const triple = process.env.CARGO_BUILD_TARGET || host;
const key = keyOf(triple);
if (!supportedKeys().includes(key)) {
  fail(`${triple} (${key}) is not in package.json napi.targets (${supportedKeys().join(', ')})`);
}
const addonName = `${pkg.napi.binaryName}.${key}.node`;
const stage = path.join(root, 'target', 'pack', profile);

function run(cmd, args, opts = {}) {
  console.log(`pack: ${cmd} ${args.join(' ')}`);
  execFileSync(cmd, args, { cwd: root, stdio: 'inherit', ...opts });
}

/** The addon, kern and native.js to pack, built (release) or as build:debug left them (dev). */
function artefacts() {
  if (profile === 'dev') {
    const got = { addon: path.join(root, 'js', addonName), kern: path.join(root, 'kern'), nativeJs: path.join(root, 'js', 'native.js') };
    for (const f of Object.values(got)) {
      if (!fs.existsSync(f)) fail(`${path.relative(root, f)} is missing: run \`npm run build:debug\` first (the dev profile packs its output)`);
    }
    return got;
  }
  const napiOut = path.join(stage, 'napi');
  fs.rmSync(napiOut, { recursive: true, force: true });
  // kern is dynamically linked like the addon, not crt-static: it resolves names (image pulls,
  // the egress proxy: getaddrinfo), and a static glibc then loads the host's NSS modules
  // (systemd-resolved's, mDNS), which only work with the glibc it was linked with. Built by
  // napi too, it gets the addon's toolchain and so the same glibc floor.
  const napi = ['napi', 'build', '--platform', '--release', '--target', triple, '--output-dir', napiOut];
  if (process.env.KERN_PACK_NAPI_CROSS === '1') napi.push('--use-napi-cross');
  else if (process.env.KERN_PACK_NAPI_CROSS) fail(`KERN_PACK_NAPI_CROSS=${process.env.KERN_PACK_NAPI_CROSS}: use 1, or leave it unset`);
  run('npx', [...napi, '--js', 'native.js', '--dts', 'native.d.ts', '--', '--lib']);
  run('npx', [...napi, '--bin', 'kern', '--no-default-features']);
  return { addon: path.join(napiOut, addonName), kern: path.join(napiOut, 'kern'), nativeJs: path.join(napiOut, 'native.js') };
}

/** The newest GLIBC_x.y symbol version a binary needs: the oldest glibc it runs on. */
function glibcFloor(file) {
  const syms = execFileSync('objdump', ['-T', file], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const versions = [...new Set(syms.match(/GLIBC_[0-9.]+/g) || [])].map((v) => v.slice(6));
  return versions.sort((a, b) => a.localeCompare(b, undefined, { numeric: true })).pop() || 'none';
}

function copy(from, to, mode) {
  fs.mkdirSync(path.dirname(to), { recursive: true });
  // A folder in package.json `files` (docs/) is copied whole.
  if (fs.statSync(from).isDirectory()) fs.cpSync(from, to, { recursive: true });
  else fs.copyFileSync(from, to);
  if (mode) fs.chmodSync(to, mode);
}

/** `npm pack` of a staged directory into dist/; returns the tarball's path. */
function npmPack(dir, name) {
  const tgz = path.join(dist, `${name}-${pkg.version}.tgz`);
  fs.rmSync(tgz, { force: true });
  run('npm', ['pack', '--pack-destination', dist], { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] });
  if (!fs.existsSync(tgz)) fail(`npm pack in ${dir} did not write ${tgz}`);
  return tgz;
}

const got = artefacts();
fs.mkdirSync(dist, { recursive: true });

// The platform package: npm/<key>'s package.json and README, the licence, and the two binaries.
const platDir = path.join(stage, `${pkg.name}-${key}`);
fs.rmSync(platDir, { recursive: true, force: true });
const platSrc = path.join(root, 'npm', key);
const platPkg = JSON.parse(fs.readFileSync(path.join(platSrc, 'package.json'), 'utf8'));
if (platPkg.version !== pkg.version) fail(`npm/${key}/package.json is ${platPkg.version}, package.json ${pkg.version}: make them equal`);
copy(path.join(platSrc, 'README.md'), path.join(platDir, 'README.md'));
copy(path.join(root, 'LICENSE'), path.join(platDir, 'LICENSE'));
copy(path.join(root, 'THIRD_PARTY_NOTICES'), path.join(platDir, 'THIRD_PARTY_NOTICES'));
for (const [from, name] of [[got.addon, addonName], [got.kern, 'kern']]) {
  copy(from, path.join(platDir, name), 0o755);
  // The dev build's debug info is 3/4 of its size (110 MB unpacked): the install test would pack,
  // publish and unpack it for nothing. (Release is built with strip = "symbols".)
  if (profile === 'dev') execFileSync('objcopy', ['--strip-debug', path.join(platDir, name)]);
}
const floors = { addon: glibcFloor(path.join(platDir, addonName)), kern: glibcFloor(path.join(platDir, 'kern')) };
const floor = [floors.addon, floors.kern].sort((a, b) => a.localeCompare(b, undefined, { numeric: true })).pop();
console.log(`pack: glibc needed: addon ${floors.addon}, kern ${floors.kern}`);
const max = process.env.KERN_PACK_MAX_GLIBC;
if (max && floor.localeCompare(max, undefined, { numeric: true }) > 0) {
  fail(`the ${key} binaries need glibc ${floor}, above KERN_PACK_MAX_GLIBC=${max} (addon ${floors.addon}, kern ${floors.kern})`);
}
platPkg.description = `kern-sandbox's addon and kern runtime for ${key}; needs glibc >= ${floor}`;
// npm publish --provenance (the release workflow) requires repository.url to name the GitHub
// repository the workflow runs in; GitHub Actions says which in GITHUB_REPOSITORY.
const repository = process.env.GITHUB_REPOSITORY
  ? { type: 'git', url: `git+https://github.com/${process.env.GITHUB_REPOSITORY}.git` }
  : pkg.repository;
if (repository) platPkg.repository = repository;
fs.writeFileSync(path.join(platDir, 'package.json'), `${JSON.stringify(platPkg, null, 2)}\n`);
fs.appendFileSync(path.join(platDir, 'README.md'), `\nThis build (${profile}) needs glibc >= ${floor} (addon ${floors.addon}, kern ${floors.kern}).\n`);

// The main package: what package.json `files` lists, and package.json with optionalDependencies
// on every target's package (napi prepublish adds them the same way), without the dev fields.
const mainDir = path.join(stage, pkg.name);
fs.rmSync(mainDir, { recursive: true, force: true });
for (const f of pkg.files) copy(f === 'js/native.js' ? got.nativeJs : path.join(root, f), path.join(mainDir, f));
copy(path.join(root, 'README.md'), path.join(mainDir, 'README.md'));
copy(path.join(root, 'LICENSE'), path.join(mainDir, 'LICENSE'));
const { scripts, devDependencies, jest, ...published } = pkg; // eslint-disable-line no-unused-vars
if (repository) published.repository = repository;
published.optionalDependencies = Object.fromEntries(supportedKeys().map((k) => [`${pkg.name}-${k}`, pkg.version]));
fs.writeFileSync(path.join(mainDir, 'package.json'), `${JSON.stringify(published, null, 2)}\n`);
fs.chmodSync(path.join(mainDir, 'bin', 'kern.js'), 0o755);

for (const [dir, name] of [[platDir, `${pkg.name}-${key}`], [mainDir, pkg.name]]) {
  console.log(`pack: ${path.relative(root, npmPack(dir, name))} (${profile})`);
}
