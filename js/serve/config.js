'use strict';
// `kern serve`'s command line and template file, read into one checked config. Every mistake
// is a ServeConfigError naming the flag and what to do, raised before anything listens.

const fs = require('fs');
const net = require('net');
const path = require('path');

class ServeConfigError extends Error {}

const DEFAULT_LISTEN = '127.0.0.1:49982';
const DEFAULT_IMAGE = 'python:3.12-slim';
/** E2B's default sandbox lifetime (the SDK's own default is also 300 s). */
const DEFAULT_TIMEOUT_S = 300;
/** E2B's limit on a sandbox's lifetime (24 h, Pro tier). */
const MAX_TIMEOUT_S = 86400;
const USAGE = `usage: kern serve [--listen HOST:PORT] [--api-keys FILE] [--template NAME=IMAGE]...
                  [--image IMAGE] [--templates FILE] [--tls-cert FILE --tls-key FILE]
                  [--insecure-no-auth] [--max-sandboxes N] [--max-memory-mb N]
                  [--memory-mb N] [--pool N] [--state-dir DIR] [--instance NAME]
                  [--peers NAME=URL,...] [--no-internet]
                  [--log-level info|debug|error]

Speaks E2B's API: point the E2B SDKs at it with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
(printed at start). API keys: --api-keys FILE (one per line) or KERN_API_KEYS (comma-separated).
See docs/serve.md.`;

function takeValue(argv, i, flag) {
  const v = argv[i + 1];
  if (v === undefined || v.startsWith('--')) throw new ServeConfigError(`${flag} needs a value\n${USAGE}`);
  return v;
}

function positiveInt(v, flag, max) {
  if (!/^[0-9]+$/.test(v) || Number(v) < 1 || Number(v) > max) {
    throw new ServeConfigError(`${flag} ${JSON.stringify(v)}: give a whole number from 1 to ${max}`);
  }
  return Number(v);
}

function parseListen(v) {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+):([0-9]{1,5})$/.exec(v);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new ServeConfigError(`--listen ${JSON.stringify(v)}: give HOST:PORT, such as ${DEFAULT_LISTEN} or [::1]:49982`);
  const host = m[1].replace(/^\[|\]$/g, '');
  return { host, port };
}

/** True for an address only this machine reaches. */
function isLoopback(host) {
  if (host === 'localhost') return true;
  if (net.isIPv4(host)) return host.startsWith('127.');
  return host === '::1';
}

function parseTemplate(v, flag) {
  const eq = v.indexOf('=');
  const name = eq > 0 ? v.slice(0, eq) : '';
  const image = eq > 0 ? v.slice(eq + 1) : '';
  if (!/^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$/.test(name) || !image) {
    throw new ServeConfigError(`${flag} ${JSON.stringify(v)}: give NAME=IMAGE, such as code-interpreter-v1=python:3.12-slim`);
  }
  return [name, image];
}

/** `--peers NAME=URL,...`: every server of a fleet (this one may be among them). */
function parsePeers(v) {
  return v.split(',').filter(Boolean).map((item) => {
    const eq = item.indexOf('=');
    const name = item.slice(0, eq);
    const url = item.slice(eq + 1).replace(/\/+$/, '');
    if (eq < 1 || !/^https?:\/\/[^/\s]+$/.test(url)) throw new ServeConfigError(`--peers ${JSON.stringify(item)}: give NAME=URL, such as kern-serve-1=http://kern-serve-1.kern-serve:49982`);
    return { name, url };
  });
}

/** API keys from `file` (one per line, `#` comments) and/or the KERN_API_KEYS variable. */
function readKeys(file, envValue) {
  const keys = [];
  if (file) {
    let text;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (e) {
      throw new ServeConfigError(`--api-keys ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
    }
    for (const line of text.split('\n')) {
      const k = line.trim();
      if (k && !k.startsWith('#')) keys.push(k);
    }
  }
  if (envValue) for (const k of envValue.split(',')) if (k.trim()) keys.push(k.trim());
  for (const k of keys) {
    if (k.length < 16 || !/^[\x21-\x7e]+$/.test(k)) {
      throw new ServeConfigError('an API key is shorter than 16 characters or holds a space or control character: use long random keys (openssl rand -hex 24)');
    }
  }
  return [...new Set(keys)];
}

/** The template file: JSON `{ "templates": { NAME: IMAGE | { image, memoryMb } } }`. */
function readTemplateFile(file) {
  let doc;
  try {
    doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new ServeConfigError(`--templates ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
  }
  const out = [];
  const t = doc && doc.templates;
  if (!t || typeof t !== 'object' || Array.isArray(t)) throw new ServeConfigError(`--templates ${file}: expected {"templates": {"NAME": "IMAGE"}}`);
  for (const [name, v] of Object.entries(t)) {
    const image = typeof v === 'string' ? v : v && v.image;
    if (typeof image !== 'string') throw new ServeConfigError(`--templates ${file}: template ${JSON.stringify(name)} has no "image"`);
    out.push(parseTemplate(`${name}=${image}`, '--templates'));
  }
  return out;
}

/** Reads `argv` (after `serve`) and `env` into the server's config. */
function parseArgs(argv, env = process.env) {
  const cfg = {
    listen: parseListen(DEFAULT_LISTEN),
    templates: new Map(),
    image: DEFAULT_IMAGE,
    keysFile: null,
    insecureNoAuth: false,
    tlsCert: null,
    tlsKey: null,
    maxSandboxes: 64,
    maxMemoryMb: null,
    memoryMb: 512,
    pool: 2,
    stateDir: null,
    logLevel: 'info',
    instance: env.KERN_SERVE_INSTANCE || null,
    peers: [],
    noInternet: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a.startsWith('--') && a.includes('=') && !a.startsWith('--template=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = () => {
      if (inline !== undefined) return inline;
      const v = takeValue(argv, i, flag);
      i++;
      return v;
    };
    switch (flag) {
      case '--listen': cfg.listen = parseListen(value()); break;
      case '--api-keys': cfg.keysFile = value(); break;
      case '--template': {
        const [n, img] = parseTemplate(a.startsWith('--template=') ? a.slice(11) : value(), '--template');
        cfg.templates.set(n, img);
        break;
      }
      case '--templates': for (const [n, img] of readTemplateFile(value())) if (!cfg.templates.has(n)) cfg.templates.set(n, img); break;
      case '--image': cfg.image = value(); break;
      case '--insecure-no-auth': cfg.insecureNoAuth = true; break;
      case '--no-internet': cfg.noInternet = true; break;
      case '--tls-cert': cfg.tlsCert = value(); break;
      case '--tls-key': cfg.tlsKey = value(); break;
      case '--max-sandboxes': cfg.maxSandboxes = positiveInt(value(), flag, 100000); break;
      case '--max-memory-mb': cfg.maxMemoryMb = positiveInt(value(), flag, 16777216); break;
      case '--memory-mb': cfg.memoryMb = positiveInt(value(), flag, 16777216); break;
      case '--pool': {
        const v = value();
        cfg.pool = v === '0' ? 0 : positiveInt(v, flag, 64);
        break;
      }
      case '--state-dir': cfg.stateDir = path.resolve(value()); break;
      case '--instance': cfg.instance = value(); break;
      case '--peers': cfg.peers = parsePeers(value()); break;
      case '--log-level': {
        const v = value();
        if (!['debug', 'info', 'error'].includes(v)) throw new ServeConfigError(`--log-level ${JSON.stringify(v)}: give debug, info or error`);
        cfg.logLevel = v;
        break;
      }
      case '-h':
      case '--help': throw new ServeConfigError(USAGE);
      default: throw new ServeConfigError(`unknown argument ${JSON.stringify(a)}\n${USAGE}`);
    }
  }
  if (cfg.memoryMb < 32) throw new ServeConfigError('--memory-mb: at least 32');
  if (cfg.maxMemoryMb !== null && cfg.maxMemoryMb < cfg.memoryMb) {
    throw new ServeConfigError(`--max-memory-mb ${cfg.maxMemoryMb} is below one sandbox's --memory-mb ${cfg.memoryMb}: no sandbox could start`);
  }
  if (!!cfg.tlsCert !== !!cfg.tlsKey) throw new ServeConfigError('--tls-cert and --tls-key go together: give both or neither');
  if (cfg.tlsCert) {
    for (const f of [cfg.tlsCert, cfg.tlsKey]) {
      try {
        fs.accessSync(f, fs.constants.R_OK);
      } catch {
        throw new ServeConfigError(`TLS file ${f} can't be read`);
      }
    }
  }
  // In a fleet each sandbox id starts with its server's name, so a load balancer can send its
  // traffic to the server that holds it (deploy/k8s/serve.yaml).
  if (cfg.instance !== null && !/^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/.test(cfg.instance)) {
    throw new ServeConfigError(`--instance ${JSON.stringify(cfg.instance)}: 1-40 lowercase letters, digits or '-', such as a pod's name (kern-serve-0)`);
  }
  if (cfg.peers.length && cfg.instance === null) throw new ServeConfigError('--peers needs --instance: this server\'s own name among them');
  cfg.keys = readKeys(cfg.keysFile, env.KERN_API_KEYS);
  if (cfg.keys.length === 0 && !cfg.insecureNoAuth) {
    throw new ServeConfigError('no API key: give --api-keys FILE or KERN_API_KEYS=key1,key2 (or --insecure-no-auth, on a loopback address only)');
  }
  if (cfg.insecureNoAuth && cfg.keys.length > 0) throw new ServeConfigError('--insecure-no-auth with API keys: choose one');
  if (cfg.insecureNoAuth && !isLoopback(cfg.listen.host)) {
    throw new ServeConfigError(`--insecure-no-auth listens only on a loopback address, not ${cfg.listen.host}: give API keys to listen there`);
  }
  return cfg;
}

/** The image a template name runs. */
function imageFor(cfg, template) {
  return cfg.templates.get(template) ?? cfg.image;
}

module.exports = { parseArgs, imageFor, ServeConfigError, isLoopback, DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, USAGE };
