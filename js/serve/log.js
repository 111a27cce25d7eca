'use strict';
// Structured logs: one JSON object per line on stderr. Callers pass fields, never a request's
// headers or bodies, so neither keys, tokens, env values nor code reach the log.

const LEVELS = { debug: 10, info: 20, error: 30 };

function createLogger(level = 'info', out = process.stderr) {
  const min = LEVELS[level] ?? LEVELS.info;
  const write = (lvl, msg, fields) => {
    if (LEVELS[lvl] < min) return;
    out.write(JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields }) + '\n');
  };
  return {
    debug: (msg, fields) => write('debug', msg, fields),
    info: (msg, fields) => write('info', msg, fields),
    error: (msg, fields) => write('error', msg, fields),
  };
}

module.exports = { createLogger };
