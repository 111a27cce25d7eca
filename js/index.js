'use strict';
// The public JS layer over the private native binding (js/addon.js). It owns what napi-rs
// can't do well: real error classes (mapped from the stable code the Rust side puts in front of
// each message), result getters, user-callback safety, and the helpers.
//
// This file is the library's entry and only re-exports; the code is one module per class:
//   errors.js     SandboxError, MountRefused, the native codes mapped to them
//   results.js    ExecutionResult, Result
//   sandbox.js    Sandbox, withSandbox, runCode
//   kernel.js     Kernel
//   processes.js  SandboxProcess, Terminal
//   streams.js    output chunks, workspace read/write streams
//   watch.js      WorkspaceWatch (sandbox.watch())
//   publish.js    PublishedPort (sandbox.publish(), process.publish())
//   volume.js     Volume (named volumes, the `volumes` option)
//   calls.js      what every call shares (checks, options as JSON, callbacks, signal)
//   addon.js      the native binding, loaded once
// Another surface (a server, an MCP endpoint) is another entry beside this one, built on
// sandbox.js as this is.

const native = require('./addon.js');
const { SandboxError, MountRefused } = require('./errors.js');
const { Result, ExecutionResult } = require('./results.js');
const { Sandbox, withSandbox, runCode } = require('./sandbox.js');
const { Kernel } = require('./kernel.js');
const { SandboxProcess, Terminal } = require('./processes.js');
const { WorkspaceWatch } = require('./watch.js');
const { PublishedPort } = require('./publish.js');
const { Volume } = require('./volume.js');

/** MiB of the default /tmp scratch; mirrors DEFAULT_TMPFS_MB in src/config/mod.rs. */
const DEFAULT_TMPFS_MB = 64;

const version = native.version();

module.exports = {
  Sandbox,
  Kernel,
  SandboxProcess,
  Terminal,
  WorkspaceWatch,
  PublishedPort,
  Volume,
  Result,
  ExecutionResult,
  SandboxError,
  MountRefused,
  withSandbox,
  runCode,
  version,
  DEFAULT_TMPFS_MB,
};
