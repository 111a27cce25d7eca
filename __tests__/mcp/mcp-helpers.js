'use strict';
// What the kern mcp suites share: starting `kern mcp` as a user does (`node bin/kern.js mcp`),
// the SDK's own Client over stdio and Streamable HTTP, and looking at the host afterwards.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const REPO = path.join(__dirname, '..', '..');
const KERN_JS = path.join(REPO, 'bin', 'kern.js');
/** The test rootfs with matplotlib (scripts/build-test-rootfs-sci.sh). */
const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

/** A TMPDIR of the test's own for a kern mcp process, so its temp workspaces can be counted. */
function tmpDir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'kern-mcp-test-'));
}

/** The temp workspaces (`kern-ws-*`) left in `dir`. */
function workspacesIn(dir) {
  return fs.readdirSync(dir).filter((n) => n.startsWith('kern-ws-'));
}

/** A Client connected over stdio to `kern mcp args` (the SDK spawns it); `stderr` collects its
 * stderr. */
async function connectStdio(args, { env = {}, tmp } = {}) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [KERN_JS, 'mcp', ...args],
    env: { ...process.env, ...(tmp ? { TMPDIR: tmp } : {}), ...env },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (c) => (stderr += c));
  const client = new Client({ name: 'kern-mcp-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport, stderr: () => stderr };
}

/** Starts `kern mcp --http 127.0.0.1:0 args`; resolves once it listens, with its URL. */
function startHttp(args, { env = {}, tmp } = {}) {
  const child = spawn(process.execPath, [KERN_JS, 'mcp', '--http', '127.0.0.1:0', ...args], {
    env: { ...process.env, ...(tmp ? { TMPDIR: tmp } : {}), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  return new Promise((resolve, reject) => {
    child.stderr.on('data', (c) => {
      err += c;
      const m = /listening on (http:\/\/\S+\/mcp)/.exec(err);
      if (m) resolve({ child, url: m[1], stderr: () => err });
    });
    child.on('exit', (code) => reject(new Error(`kern mcp exited ${code}: ${err}`)));
  });
}

/** A Client over Streamable HTTP at `url`, sending `token` as its bearer token. */
async function connectHttp(url, token) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'kern-mcp-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

/** Resolves with `child`'s exit code once it has exited. */
function exited(child) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** The text of a tool result's text content, joined. */
function textOf(r) {
  return r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

module.exports = { REPO, KERN_JS, SCI, tmpDir, workspacesIn, connectStdio, startHttp, connectHttp, exited, textOf };
