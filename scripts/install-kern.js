// Builds the `kern` runtime binary and puts it next to the addon, where js/platform.js looks for
// it. It is built without the crate's `napi-binding` feature (a plain executable can't link
// Node's symbols), for the same target triple `napi build` used, so the two builds share every
// compiled dependency.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const debug = process.argv[2] === 'debug';
const root = path.join(__dirname, '..');
const host = /host: (\S+)/.exec(execFileSync('rustc', ['-vV'], { encoding: 'utf8' }))[1];
const triple = process.env.CARGO_BUILD_TARGET || host;
const args = ['build', '--bin', 'kern', '--no-default-features', '--target', triple];
if (!debug) args.push('--release');
execFileSync('cargo', args, { cwd: root, stdio: 'inherit' });

const built = path.join(root, 'target', triple, debug ? 'debug' : 'release', 'kern');
const dest = path.join(root, 'kern');
fs.copyFileSync(built, `${dest}.tmp`);
fs.chmodSync(`${dest}.tmp`, 0o755);
fs.renameSync(`${dest}.tmp`, dest);
console.log(`install-kern: ${path.relative(root, built)} -> kern`);
