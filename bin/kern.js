#!/usr/bin/env node
'use strict';
// `npx kern …`: runs this platform's `kern` (js/platform.js finds it) with the same arguments,
// stdio, exit status and signals, as if it had been run directly.

const { spawn } = require('child_process');
const platform = require('../js/platform.js');

// Subcommands written in JS run here, in this Node process.
const JS_COMMANDS = { serve: '../js/serve/main.js', mcp: '../js/mcp/main.js' };
if (Object.hasOwn(JS_COMMANDS, process.argv[2])) {
  require(JS_COMMANDS[process.argv[2]]).main(process.argv.slice(3)).then((code) => process.exit(code), (e) => {
    process.stderr.write(`kern ${process.argv[2]}: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  });
  return;
}

let kern;
try {
  kern = platform.kernPath();
} catch (e) {
  process.stderr.write(`kern: ${e.message}\n`);
  process.exit(127);
}

const child = spawn(kern, process.argv.slice(2), { stdio: 'inherit' });
// A signal sent to this launcher (kill, a supervisor, a timeout) goes on to kern. From a
// terminal kern also gets Ctrl-C itself (same process group), so it may see SIGINT twice.
const FORWARD = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];
const forward = (sig) => child.kill(sig);
for (const sig of FORWARD) process.on(sig, forward);

child.on('error', (e) => {
  process.stderr.write(`kern: cannot run ${kern}: ${e.message}\n`);
  process.exit(e.code === 'ENOENT' ? 127 : 126);
});
child.on('exit', (code, signal) => {
  if (signal) {
    // Die of the same signal, so the caller sees what killed kern (e.g. 137 in a shell).
    for (const sig of FORWARD) process.removeListener(sig, forward);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code);
});
