'use strict';
// `kern mcp` / `npx kern-sandbox mcp`: a Model Context Protocol server over the library (stdio,
// or Streamable HTTP with --http), or with --wrap a box around another stdio MCP server.
// Flags are checked, and the Sandbox options tried, before anything starts: a mistake exits 2.
// stdout is the protocol's (stdio): everything we say goes to stderr.

const { parseArgs, McpConfigError } = require('./config.js');
const { loadSdk, SdkMissing } = require('./sdk.js');

/** How long calls still running when stdin ends may take to answer before the session ends. */
const EOF_GRACE_MS = 5000;

const log = (msg) => process.stderr.write(`kern mcp: ${msg}\n`);

/** Resolves at SIGTERM, SIGINT or (stdio) the end of stdin. */
function stopped(onStdinEnd) {
  return new Promise((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
    if (onStdinEnd) {
      process.stdin.once('end', () => resolve('stdin ended'));
      process.stdin.once('close', () => resolve('stdin closed'));
    }
  });
}

async function serveStdio(sdk, cfg) {
  const { Session } = require('./session.js');
  const { createServer } = require('./server.js');
  const session = new Session(cfg.sandbox);
  const refused = await checkSandboxOptions(session);
  if (refused !== null) return refused;
  const inflight = new Set();
  const server = createServer(sdk, session, inflight);
  const transport = new sdk.StdioServerTransport();
  let ended;
  const closed = new Promise((resolve) => (ended = resolve));
  // oxlint-disable-next-line unicorn/prefer-add-event-listener -- the SDK has only this hook
  server.onclose = () => ended('transport closed');
  // A client that died closes our stdout: a write then fails with EPIPE, which is its end.
  process.stdout.on('error', () => ended('stdout closed'));
  await server.connect(transport);
  const why = await Promise.race([stopped(true), closed]);
  // stdin ended (`printf ... | kern mcp`): the calls it asked for may still answer, for a while;
  // a client that died gets no longer than that either.
  if (why.startsWith('stdin') && inflight.size) {
    let timer;
    const grace = new Promise((resolve) => (timer = setTimeout(resolve, EOF_GRACE_MS)));
    await Promise.race([Promise.allSettled(inflight), grace, closed]);
    clearTimeout(timer);
  }
  // The client went away or we were told to stop: every box of the session ends with it.
  await session.close();
  await server.close().catch(() => {});
  return 0;
}

async function serveHttpMain(sdk, cfg) {
  const crypto = require('crypto');
  const { serveHttp } = require('./http.js');
  const { Session } = require('./session.js');
  // Each session opens its own Sandbox; this one only checks the options (and pulls the image).
  const probe = new Session(cfg.sandbox);
  const refused = await checkSandboxOptions(probe);
  if (refused !== null) return refused;
  await probe.close();
  if (!cfg.token) cfg.token = crypto.randomBytes(24).toString('hex');
  let srv;
  try {
    srv = await serveHttp(sdk, cfg, log);
  } catch (e) {
    log(`can't listen on ${cfg.http.host}:${cfg.http.port}: ${e.message}`);
    return 1;
  }
  const a = srv.address;
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  // One write: a reader that waits for "listening" has the token with it.
  process.stderr.write((cfg.tokenGiven ? '' : `kern mcp: token (send as Authorization: Bearer <token>): ${cfg.token}\n`)
    + `kern mcp: listening on http://${host}:${a.port}/mcp\n`);
  await stopped(false);
  await srv.close();
  return 0;
}

/** Codes of a SandboxError that mean the flags or the config file are wrong. */
const BAD_OPTION_CODES = ['ERR_INVALID_OPTION', 'ERR_MOUNT_REFUSED', 'ERR_IMAGE', 'ERR_FILE'];

/** The Sandbox options checked now, by opening one Sandbox of them (an image is pulled here,
 * once), so a bad one is a startup error, not every tool call's. Returns the exit status for
 * a refusal, or null. */
async function checkSandboxOptions(session) {
  const { SandboxError } = require('../index.js');
  try {
    await session.sandbox();
    return null;
  } catch (e) {
    if (!(e instanceof SandboxError)) throw e;
    log(e.message);
    await session.close();
    return BAD_OPTION_CODES.includes(e.code) ? 2 : 1;
  }
}

async function main(argv) {
  let cfg;
  try {
    cfg = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof McpConfigError)) throw e;
    log(e.message);
    return e.message.startsWith('usage:') ? 0 : 2;
  }
  // The SDK first: without it nothing else is worth checking (--wrap does not use it).
  let sdk = null;
  if (!cfg.wrap) {
    try {
      sdk = loadSdk();
    } catch (e) {
      if (!(e instanceof SdkMissing)) throw e;
      log(e.message);
      return 2;
    }
  }
  if (cfg.wrap) {
    const { wrap } = require('./wrap.js');
    const { SandboxError } = require('../index.js');
    try {
      return await wrap(cfg, log);
    } catch (e) {
      if (!(e instanceof SandboxError)) throw e;
      log(`can't start ${cfg.wrap[0]} in a box: ${e.message}`);
      return BAD_OPTION_CODES.includes(e.code) ? 2 : 1;
    }
  }
  return cfg.http ? serveHttpMain(sdk, cfg) : serveStdio(sdk, cfg);
}

module.exports = { main };

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => process.exit(code), (e) => {
    process.stderr.write(`kern mcp: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  });
}
