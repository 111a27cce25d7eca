'use strict';
// `kern mcp --wrap [flags] -- CMD ARGS...`: an untrusted stdio MCP server run inside a box of
// the given posture (network policy, mounts, limits) with the library's `spawn`. Our stdin is
// written to its stdin, its stdout relayed to ours line by line (a JSON-RPC message is one
// line), its stderr to ours. It ends when either side ends: the server exiting ends us with
// its exit status; our stdin ending closes its stdin, and a server that does not then exit is
// stopped.

const { Sandbox } = require('../index.js');

/** How long a server may take to exit by itself once its stdin closed, before it is stopped. */
const EOF_GRACE_MS = 5000;

/** Writes `chunk` to `stream`, resolving once it was taken (so a slow reader slows the box). */
function writeTo(stream, chunk) {
  return new Promise((resolve) => {
    if (stream.write(chunk)) resolve();
    else stream.once('drain', resolve);
  });
}

/** Runs the relay; resolves with the exit status for kern mcp. */
async function wrap(cfg, log) {
  // Output only through the relay: the Sandbox's own callbacks would send it twice.
  const sb = new Sandbox(cfg.sandbox);
  await sb.open();
  let proc;
  try {
    proc = await sb.spawn(cfg.wrap, {
      lineBuffered: true,
      onStdout: (c) => writeTo(process.stdout, c),
      onStderr: (c) => writeTo(process.stderr, c),
    });
  } catch (e) {
    await sb.close();
    throw e;
  }
  let stopping = null;
  const stop = (why) => {
    if (stopping) return;
    log(`${why}: stopping the wrapped server`);
    stopping = proc.kill('SIGTERM').catch(() => {});
  };
  // Writes go in order: a message never overtakes the one before it.
  let chain = Promise.resolve();
  const onData = (c) => {
    chain = chain.then(() => proc.write(c)).catch(() => {});
  };
  let graceTimer = null;
  const onEnd = () => {
    chain = chain.then(() => proc.end()).catch(() => {});
    graceTimer = setTimeout(() => stop('stdin ended and the server did not exit'), EOF_GRACE_MS);
    graceTimer.unref();
  };
  process.stdin.on('data', onData);
  process.stdin.once('end', onEnd);
  const onSignal = (sig) => stop(sig);
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  let r;
  try {
    r = await proc.wait();
  } finally {
    clearTimeout(graceTimer);
    process.stdin.off('data', onData);
    process.stdin.off('end', onEnd);
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    process.stdin.pause();
    await sb.close();
  }
  if (r.fault) log(`the wrapped server ended: ${r.fault.type}: ${r.fault.message}`);
  return r.exitCode;
}

module.exports = { wrap };
