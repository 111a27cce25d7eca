'use strict';
// Jest runs the suites in band (maxWorkers 1), so a handle one of them leaves open (a child
// process it never ended, a server, a timer) keeps Jest alive after its report is written,
// until CI's own limit kills the whole run. Here such a hang becomes a failure that names what
// was left: if the process is still alive GRACE_MS after the run, list the handles and exit 1.
const GRACE_MS = 20000;

function describe(h) {
  const name = h && h.constructor ? h.constructor.name : typeof h;
  if (name === 'ChildProcess') return `a child process (pid ${h.pid}): ${(h.spawnargs || []).join(' ').slice(0, 200)}`;
  if (name === 'Server' && typeof h.address === 'function') return `a server listening on ${JSON.stringify(h.address())}`;
  if (name === 'Socket') return `a socket${h.remoteAddress ? ` to ${h.remoteAddress}:${h.remotePort}` : ''}`;
  return name;
}

module.exports = async () => {
  const timer = setTimeout(() => {
    // Only Node's own private list names the handles; getActiveResourcesInfo() gives types.
    // oxlint-disable-next-line no-underscore-dangle
    const handles = process._getActiveHandles().filter((h) => h !== timer && (typeof h.hasRef !== 'function' || h.hasRef()));
    const lines = handles.map(describe);
    console.error(`\nJest was kept alive ${GRACE_MS / 1000} s after the run by what a suite left open ` +
      `(${process.getActiveResourcesInfo().join(', ')}):\n  ${lines.join('\n  ')}\n` +
      'exiting 1: a suite must end what it starts (in a finally, or afterAll)');
    process.exit(1);
  }, GRACE_MS);
  timer.unref();
};
