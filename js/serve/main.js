'use strict';
// `kern serve` / `npx kern-sandbox serve`: parses the command line, starts the server, prints
// the three variables the E2B SDKs read, and on SIGTERM or SIGINT ends every sandbox and exits.

const { parseArgs, ServeConfigError, isLoopback } = require('./config.js');
const { createServe } = require('./server.js');
const { createLogger } = require('./log.js');

async function main(argv) {
  let cfg;
  try {
    cfg = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof ServeConfigError)) throw e;
    process.stderr.write(`kern serve: ${e.message}\n`);
    return e.message.startsWith('usage:') ? 0 : 2;
  }
  const log = createLogger(cfg.logLevel);
  const serve = createServe(cfg, { log });
  let addr;
  try {
    addr = await serve.listen();
  } catch (e) {
    process.stderr.write(`kern serve: can't listen on ${cfg.listen.host}:${cfg.listen.port}: ${e.message}\n`);
    await serve.close('failed');
    return 1;
  }
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const shown = host === '0.0.0.0' || host === '[::]' ? 'HOST' : host;
  const base = `${cfg.tlsCert ? 'https' : 'http'}://${shown}:${addr.port}`;
  process.stdout.write(`kern serve: listening on ${host}:${addr.port}${isLoopback(addr.address) ? '' : ' (reachable from other machines)'}\n`
    + 'Point the E2B SDKs here with:\n'
    + `  export E2B_API_URL=${base}\n`
    + `  export E2B_SANDBOX_URL=${base}\n`
    + `  export E2B_API_KEY=${cfg.insecureNoAuth ? 'anything' : '<one of your --api-keys>'}\n`);
  log.info('listening', { address: `${host}:${addr.port}`, tls: !!cfg.tlsCert, auth: !cfg.insecureNoAuth });
  await new Promise((resolve) => {
    const stop = (sig) => {
      log.info('stopping', { signal: sig });
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  await serve.close('shutdown');
  log.info('stopped', {});
  return 0;
}

module.exports = { main };

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => process.exit(code), (e) => {
    process.stderr.write(`kern serve: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  });
}
