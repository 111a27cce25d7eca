'use strict';
// Runs a framework driver (drivers/*.mjs) in a plain Node process and returns what it printed,
// parsed. The AI SDK is ESM-only and Jest's module system cannot load ESM without
// --experimental-vm-modules, so a framework is driven outside Jest, for real, and the test
// asserts on its report and on the host workspace.

const path = require('path');
const { execFile } = require('child_process');

function drive(name, args) {
  const script = path.join(__dirname, 'drivers', `${name}.mjs`);
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [script, JSON.stringify(args)], { maxBuffer: 64 << 20, timeout: 110000 }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`driver ${name} failed: ${err.message}\n--- stderr\n${stderr.slice(-4000)}`));
        return;
      }
      try {
        resolve(JSON.parse(stdout));
      } catch {
        reject(new Error(`driver ${name} printed no JSON:\n${stdout.slice(-2000)}\n--- stderr\n${stderr.slice(-4000)}`));
      }
    });
  });
}

module.exports = { drive };
