'use strict';
// The option names the JS layer takes, one list per place. js/sandbox.js and js/kernel.js check
// calls against them; __tests__/sandbox/option-names.test.js holds index.d.ts and `kern run
// --help` to them. (The Sandbox's own options are checked on the native side: KNOWN in
// src/session/options/mod.rs.)

const PER_CALL = ['timeoutS', 'onStdout', 'onStderr', 'env', 'cwd', 'user', 'stdin', 'signal', 'onAbort', 'onResult', 'lineBuffered'];

module.exports = {
  /** `run()`: PerCallOptions. */
  run: PER_CALL,
  /** `runCode()`: PerCallOptions and `language` (in the order the error message lists them). */
  runCode: ['language', ...PER_CALL],
  /** `readFile()` (`offset` and `length`: an addition). */
  readFile: ['maxBytes', 'offset', 'length'],
  /** `createReadStream()` (an addition). */
  readStream: ['offset', 'length'],
  /** `kernel()`. */
  kernel: ['timeoutS', 'jupyter', 'language', 'cwd', 'env', 'onTimeout'],
  /** `spawn()` (an addition). */
  spawn: ['env', 'cwd', 'user', 'signal', 'onStdout', 'onStderr', 'timeoutS', 'lineBuffered'],
  /** `terminal()` (an addition). */
  terminal: ['argv', 'cols', 'rows', 'env', 'cwd', 'user'],
  /** `watch()` (an addition). */
  watch: ['recursive', 'include', 'exclude'],
  /** `publish()` (an addition). */
  publish: ['protocol', 'host'],
  /** `Volume.create()` (an addition). */
  volumeCreate: ['sizeMb', 'from'],
  /** A kernel's `runCode()`. */
  cell: ['timeoutS', 'signal', 'onAbort', 'onResult', 'lineBuffered', 'env', 'onStdout', 'onStderr'],
};
