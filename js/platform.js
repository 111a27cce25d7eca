'use strict';
// Where this machine's native parts come from: the addon (.node) and the `kern` runtime.
// Published, the main package is platform-neutral and each target's parts live in one package,
// `kern-sandbox-<platform>-<arch>-<libc>` (an optionalDependency npm installs only on a matching
// machine). In a source checkout both sit in the repo: js/kern-sandbox.<key>.node and ./kern.
// napi's generated loader (js/native.js) finds the addon but, on a machine with no package, says
// only "Cannot find native binding" and checks versions only under an env var, so this module
// answers first, at require time, with what to do.

const fs = require('fs');
const path = require('path');

const root = path.join(__dirname, '..');
const pkg = require('../package.json');

const ARCH = { x86_64: 'x64', aarch64: 'arm64' };

/** A Rust target triple's key in napi's naming: x86_64-unknown-linux-gnu -> linux-x64-gnu. */
function keyOf(triple) {
  const [arch, , os, abi] = triple.split('-');
  return `${os}-${ARCH[arch] || arch}-${abi}`;
}

/** The platform keys there are packages for, from napi's target list (one source of truth). */
function supportedKeys() {
  return pkg.napi.targets.map(keyOf);
}

/** 'gnu' or 'musl': /usr/bin/ldd names musl on musl systems (napi's own first test); else
 * Node's report says which glibc it runs with (slower: ~20 ms, only when ldd is absent). */
function libc() {
  try {
    return fs.readFileSync('/usr/bin/ldd', 'utf8').includes('musl') ? 'musl' : 'gnu';
  } catch {
    return process.report.getReport().header.glibcVersionRuntime ? 'gnu' : 'musl';
  }
}

/** This machine's key, e.g. linux-x64-gnu (napi's naming: the .node suffix and the package). */
function platformKey() {
  if (process.platform !== 'linux') return `${process.platform}-${process.arch}`;
  return `linux-${process.arch}-${libc()}`;
}

function buildFromSource() {
  return (
    'To build it from source on this machine (Rust >= 1.88, Node >= 20.17): ' +
    'git clone the repository, then `npm ci && npm run build:debug` (README: Install).'
  );
}

let located = null;

/**
 * Where the native parts are: { key, packageDir } with packageDir null in a source checkout (the
 * addon beside this file), else the installed platform package. Throws an Error that
 * names the platform and what to do when there is neither, or when the installed package's
 * version is not ours.
 */
function locate() {
  if (located) return located;
  const key = platformKey();
  const name = `${pkg.name}-${key}`;
  // A source checkout's own build comes first, as in napi's loader (js/native.js tries
  // ./<name>.<key>.node before the package): kern must come from where the addon does.
  if (fs.existsSync(path.join(__dirname, `${pkg.napi.binaryName}.${key}.node`))) {
    located = { key, packageDir: null };
    return located;
  }
  let packageJson = null;
  try {
    packageJson = require.resolve(`${name}/package.json`);
  } catch {
    // Not installed: a platform with no package, or npm left the optional dependency out.
  }
  if (packageJson) {
    const { version } = JSON.parse(fs.readFileSync(packageJson, 'utf8'));
    if (version !== pkg.version) {
      throw new Error(
        `kern-sandbox ${pkg.version} found ${name} ${version} (${path.dirname(packageJson)}): ` +
          'the addon and kern must be the same version as the package. Reinstall so they match: ' +
          `npm install kern-sandbox@${pkg.version} (or remove node_modules and package-lock.json and run npm install).`
      );
    }
    located = { key, packageDir: path.dirname(packageJson) };
    return located;
  }
  const supported = supportedKeys();
  if (process.platform !== 'linux') {
    throw new Error(
      `kern-sandbox does not run on ${process.platform} (${process.arch}): its boxes are Linux ` +
        `namespaces, so it runs on Linux only (packages: ${supported.join(', ')}). ` +
        'Run it inside a Linux VM or container.'
    );
  }
  if (!supported.includes(key)) {
    throw new Error(
      `kern-sandbox has no package for this platform, ${key} (Linux on ${process.arch} with ${libc()} libc); ` +
        `there are packages for ${supported.join(', ')}. ${buildFromSource()}`
    );
  }
  throw new Error(
    `kern-sandbox: ${name}@${pkg.version}, the package with this platform's addon and kern, is not ` +
      'installed (npm skips optional dependencies with --omit=optional, and sometimes after a lock ' +
      `file made elsewhere: https://github.com/npm/cli/issues/4828). Install it: npm install ${name}@${pkg.version} ` +
      `-- or remove node_modules and package-lock.json and run npm install. ${buildFromSource()}`
  );
}

/** The `kern` runtime: KERN_BIN when set (an explicit override), else the one beside the addon:
 * the source checkout's ./kern (scripts/install-kern.js puts it there) or the platform package's. */
function kernPath() {
  if (process.env.KERN_BIN) return process.env.KERN_BIN;
  const { packageDir } = locate();
  return packageDir ? path.join(packageDir, 'kern') : path.join(root, 'kern');
}

module.exports = { locate, kernPath, platformKey, keyOf, supportedKeys };
