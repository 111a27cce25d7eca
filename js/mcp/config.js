'use strict';
// `kern mcp`'s command line, read into one checked config. Every mistake is a McpConfigError
// naming the flag and what to do, raised before anything starts (main.js exits 2 on it).

const fs = require('fs');
const { isLoopback } = require('../serve/config.js');

class McpConfigError extends Error {}

const USAGE = `usage: kern mcp [--http [HOST:]PORT] [--token-file FILE] [--config FILE]
                [--image IMAGE] [--network] [--egress-allow HOST]... [--memory-mb N]
                [--timeout-s N] [--mount HOST:BOX[:ro|:rw]]... [--volume NAME:BOX[:ro|:shared]]...
                [--secret NAME=HOST[,HOST]]...
                [--workspace DIR] [--session-idle-s N] [--max-sessions N]
       kern mcp --wrap [sandbox flags] -- CMD [ARGS...]

A Model Context Protocol server whose tools run code, commands, kernels, files and background
processes in kern boxes: one Sandbox per MCP session. Over stdio by default; --http serves
Streamable HTTP at http://HOST:PORT/mcp (127.0.0.1 by default) behind a bearer token
(--token-file FILE or KERN_MCP_TOKEN, else a random one printed on stderr).
--wrap runs an untrusted stdio MCP server CMD inside a box of the same flags and relays its stdio.
See docs/mcp.md.`;

/** Options only the file may give: they take a callback or make no sense for a session. */
const FILE_REFUSED = ['onStdout', 'onStderr', 'persist', 'name', 'persistTtlS'];

function positiveNumber(v, flag, max, whole) {
  const ok = whole ? /^[0-9]+$/.test(v) : /^[0-9]+(\.[0-9]+)?$/.test(v);
  if (!ok || Number(v) <= 0 || Number(v) > max) {
    throw new McpConfigError(`${flag} ${JSON.stringify(v)}: give a ${whole ? 'whole ' : ''}number above 0, at most ${max}`);
  }
  return Number(v);
}

/** `--http [HOST:]PORT`: a bare port listens on 127.0.0.1. */
function parseHttp(v) {
  const m = /^(?:(\[[0-9a-fA-F:.]+\]|[^:[\]]+):)?([0-9]{1,5})$/.exec(v);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new McpConfigError(`--http ${JSON.stringify(v)}: give PORT or HOST:PORT, such as 8808 or 127.0.0.1:8808 (0: any free port)`);
  return { host: m[1] ? m[1].replace(/^\[|\]$/g, '') : '127.0.0.1', port };
}

/** `--mount HOST:BOX[:ro|:rw]` -> [host, [box, mode]]; read-only unless `:rw`, as the library. */
function parseMount(v) {
  const parts = v.split(':');
  let mode = 'ro';
  if (parts.length === 3 && (parts[2] === 'ro' || parts[2] === 'rw')) mode = parts.pop();
  if (parts.length !== 2 || !parts[0].startsWith('/') || !parts[1].startsWith('/')) {
    throw new McpConfigError(`--mount ${JSON.stringify(v)}: give HOST:BOX, HOST:BOX:ro or HOST:BOX:rw with absolute paths, such as /data:/data:ro`);
  }
  return [parts[0], [parts[1], mode]];
}

/** `--volume NAME:BOX[:ro|:shared]` -> [name, spec] of the `volumes` option (as `kern run -v`):
 * read-write as the only writer unless `:ro` or `:shared`. */
function parseVolume(v) {
  const parts = v.split(':');
  let how = null;
  if (parts.length === 3 && (parts[2] === 'ro' || parts[2] === 'shared')) how = parts.pop();
  if (parts.length !== 2 || !parts[0] || !parts[1].startsWith('/')) {
    throw new McpConfigError(`--volume ${JSON.stringify(v)}: give NAME:BOX, NAME:BOX:ro or NAME:BOX:shared, such as data:/data (make the volume first: kern volume create data)`);
  }
  const [name, box] = parts;
  if (how === 'ro') return [name, { path: box, readonly: true }];
  if (how === 'shared') return [name, { path: box, shared: true }];
  return [name, box];
}

/** `--secret NAME=HOST[,HOST]`: the value is the host's environment variable NAME. */
function parseSecret(v, env) {
  const eq = v.indexOf('=');
  const name = eq > 0 ? v.slice(0, eq) : '';
  const hosts = eq > 0 ? v.slice(eq + 1).split(',').filter(Boolean) : [];
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) || hosts.length === 0) {
    throw new McpConfigError(`--secret ${JSON.stringify(v)}: give NAME=HOST[,HOST], such as OPENAI_API_KEY=api.openai.com (the value is read from $NAME)`);
  }
  const value = env[name];
  if (!value) throw new McpConfigError(`--secret ${name}: the environment variable ${name} is not set: export it before starting kern mcp`);
  return [name, { value, hosts }];
}

/** The `--config FILE` JSON: Sandbox options (see index.d.ts, SandboxOptions). */
function readConfigFile(file) {
  let doc;
  try {
    doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new McpConfigError(`--config ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new McpConfigError(`--config ${file}: expected a JSON object of Sandbox options, such as {"image": "python:3.12-slim", "memoryMb": 512}`);
  }
  for (const k of FILE_REFUSED) {
    if (Object.hasOwn(doc, k)) throw new McpConfigError(`--config ${file}: "${k}" is not for kern mcp (each session gets its own Sandbox)`);
  }
  return doc;
}

/** Reads `argv` (after `mcp`) and `env` into { mode, sandbox, http, token, wrap, ... }. */
function parseArgs(argv, env = process.env) {
  const cfg = { http: null, tokenFile: null, token: null, tokenGiven: false, wrap: null, sessionIdleS: 1800, maxSessions: 64 };
  const flags = {};
  const mounts = [];
  const volumes = [];
  const egress = [];
  const secrets = [];
  let configFile = null;
  let wrap = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') {
      if (!wrap) throw new McpConfigError(`"--" is for --wrap: kern mcp --wrap [flags] -- CMD ARGS...\n${USAGE}`);
      cfg.wrap = argv.slice(i + 1);
      break;
    }
    const eq = a.startsWith('--') ? a.indexOf('=') : -1;
    const flag = eq > 0 ? a.slice(0, eq) : a;
    const value = () => {
      if (eq > 0) return a.slice(eq + 1);
      const v = argv[i + 1];
      if (v === undefined || v.startsWith('--')) throw new McpConfigError(`${flag} needs a value\n${USAGE}`);
      i++;
      return v;
    };
    switch (flag) {
      case '--http': cfg.http = parseHttp(value()); break;
      case '--token-file': cfg.tokenFile = value(); break;
      case '--config': configFile = value(); break;
      case '--image': flags.image = value(); break;
      case '--network': flags.network = true; break;
      case '--egress-allow': egress.push(value()); break;
      case '--memory-mb':
        flags.memoryMb = positiveNumber(value(), flag, 16777216, true);
        if (flags.memoryMb < 32) throw new McpConfigError('--memory-mb: at least 32');
        break;
      case '--timeout-s': flags.timeoutS = positiveNumber(value(), flag, 604800, false); break;
      case '--mount': mounts.push(parseMount(value())); break;
      case '--volume': volumes.push(parseVolume(value())); break;
      case '--secret': secrets.push(parseSecret(value(), env)); break;
      case '--workspace': {
        const v = value();
        if (!v.startsWith('/')) throw new McpConfigError(`--workspace ${JSON.stringify(v)}: give an absolute directory`);
        flags.workspace = v;
        break;
      }
      case '--session-idle-s': cfg.sessionIdleS = positiveNumber(value(), flag, 604800, true); break;
      case '--max-sessions': cfg.maxSessions = positiveNumber(value(), flag, 100000, true); break;
      case '--wrap': wrap = true; break;
      case '-h':
      case '--help': throw new McpConfigError(USAGE);
      default: throw new McpConfigError(`unknown argument ${JSON.stringify(a)}\n${USAGE}`);
    }
  }
  if (wrap && (!cfg.wrap || cfg.wrap.length === 0)) throw new McpConfigError(`--wrap needs the server's command after "--": kern mcp --wrap -- npx -y some-mcp-server\n${USAGE}`);
  if (wrap && cfg.http) throw new McpConfigError('--wrap relays stdio: it does not take --http');
  const sandbox = configFile ? readConfigFile(configFile) : {};
  Object.assign(sandbox, flags);
  if (mounts.length) sandbox.mounts = { ...sandbox.mounts, ...Object.fromEntries(mounts) };
  if (volumes.length) sandbox.volumes = { ...sandbox.volumes, ...Object.fromEntries(volumes) };
  if (egress.length) sandbox.egressAllow = egress;
  if (secrets.length) sandbox.secrets = { ...sandbox.secrets, ...Object.fromEntries(secrets) };
  cfg.sandbox = sandbox;

  if (cfg.http) {
    let token = null;
    if (cfg.tokenFile) {
      try {
        token = fs.readFileSync(cfg.tokenFile, 'utf8').trim();
      } catch (e) {
        throw new McpConfigError(`--token-file ${cfg.tokenFile}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
      }
    } else if (env.KERN_MCP_TOKEN) {
      token = env.KERN_MCP_TOKEN.trim();
    }
    if (token !== null && (token.length < 16 || !/^[\x21-\x7e]+$/.test(token))) {
      throw new McpConfigError('the token is shorter than 16 characters or holds a space or control character: use a long random one (openssl rand -hex 24)');
    }
    if (token === null && !isLoopback(cfg.http.host)) {
      throw new McpConfigError(`--http on ${cfg.http.host} (not a loopback address) needs a token you chose: --token-file FILE or KERN_MCP_TOKEN`);
    }
    cfg.tokenGiven = token !== null;
    cfg.token = token;
  } else if (cfg.tokenFile) {
    throw new McpConfigError('--token-file is for --http (stdio needs no token)');
  }
  return cfg;
}

module.exports = { parseArgs, McpConfigError, USAGE };
