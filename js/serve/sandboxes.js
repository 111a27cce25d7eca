'use strict';
// The sandboxes a `kern serve` holds: each E2B sandbox is one library `Sandbox` (its workspace
// is the sandbox's home, `/home/user`, and a second host directory is its `/tmp`, so files
// written there outlive one command, as in E2B's VM), with its own processes, code contexts,
// owner (the API key that made it) and deadline.

const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { Sandbox } = require('../sandbox.js');
const { imageFor, DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S } = require('./config.js');
const { newToken } = require('./auth.js');
const { ApiError } = require('./errors.js');

/** The envd version we report: 0.5.7 is the first with octet-stream uploads, which we serve;
 * below 0.6.2, so the SDK itself refuses file metadata (xattrs), which we don't keep. */
const ENVD_VERSION = '0.5.7';
/** E2B's home and default working directory: the workspace is mounted there. */
const HOME = '/home/user';
/** A finished process stays listed for `Connect` this long after its end. */
const ENDED_KEEP_MS = 30_000;

function validStringMap(v, what) {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new ApiError(400, `${what} must be an object of strings`);
  for (const [k, s] of Object.entries(v)) {
    if (typeof s !== 'string') throw new ApiError(400, `${what}.${k} must be a string`);
  }
  return { ...v };
}

/** Seconds from an E2B `timeout` field, bounded as E2B bounds it. */
function timeoutSeconds(v, fallback) {
  if (v === undefined || v === null) return fallback;
  if (!Number.isInteger(v) || v < 0 || v > MAX_TIMEOUT_S) throw new ApiError(400, `timeout must be a whole number of seconds from 0 to ${MAX_TIMEOUT_S}`);
  return v;
}

/** E2B's "all traffic" selector (`ALL_TRAFFIC` in the SDKs). */
const ALL_TRAFFIC = '0.0.0.0/0';

/** One E2B `allowOut` selector as an `egressAllow` entry: a domain, `*.domain` (our
 * `.domain`, which also admits the domain itself), an address, or a single-address CIDR. */
function egressEntry(sel) {
  if (sel.startsWith('*.')) return sel.slice(1);
  const cidr = /^(.+)\/(\d+)$/.exec(sel);
  if (cidr) {
    const single = cidr[1].includes(':') ? '128' : '32';
    if (cidr[2] !== single) throw new ApiError(400, `network.allowOut ${JSON.stringify(sel)}: address ranges are not supported by kern serve; list single addresses or host names`);
    return cidr[1].includes(':') ? `[${cidr[1]}]` : cidr[1];
  }
  return sel;
}

/** The sandbox's network as E2B states it (create's `allow_internet_access` and `network`, or an
 * update's body), checked, with the `egressAllow` list it means: open internet (`*`, every
 * public host, never a private one) unless internet access is off or `denyOut` holds
 * ALL_TRAFFIC, then only `allowOut`. `--no-internet` takes the open internet away. */
function networkPolicy(cfg, allowInternet, net) {
  net = net ?? {};
  if (typeof net !== 'object' || Array.isArray(net)) throw new ApiError(400, 'network must be an object');
  if (allowInternet !== undefined && allowInternet !== null && typeof allowInternet !== 'boolean') throw new ApiError(400, 'allow_internet_access must be true or false');
  const allowOut = net.allowOut ?? [];
  const denyOut = net.denyOut ?? [];
  if (!Array.isArray(allowOut) || !allowOut.every((s) => typeof s === 'string' && s)) throw new ApiError(400, 'network.allowOut must be a list of host names or addresses');
  if (!Array.isArray(denyOut) || !denyOut.every((s) => typeof s === 'string')) throw new ApiError(400, 'network.denyOut must be a list of strings');
  for (const k of ['rules', 'egressProxy']) {
    if (net[k] !== undefined && net[k] !== null) throw new ApiError(400, `network.${k} is not supported by kern serve`);
  }
  if (net.maskRequestHost) {
    throw new ApiError(400, 'network.maskRequestHost is not supported by kern serve (a request reaches a sandbox\'s port with its own Host)');
  }
  const other = denyOut.find((d) => d !== ALL_TRAFFIC);
  if (other !== undefined) {
    throw new ApiError(400, `network.denyOut ${JSON.stringify(other)}: kern serve denies only all traffic (ALL_TRAFFIC, "${ALL_TRAFFIC}"); deny everything and list what may be reached in allowOut`);
  }
  let open = allowInternet !== false && denyOut.length === 0;
  if (open && cfg.noInternet) {
    if (allowInternet === true) throw new ApiError(400, 'this kern serve gives sandboxes no open internet (--no-internet): list the hosts a sandbox may reach in network.allowOut with denyOut: [ALL_TRAFFIC]');
    open = false;
  }
  const entries = allowOut.map(egressEntry);
  const egressAllow = open ? ['*', ...entries] : entries;
  try {
    // The library's own checks, before any box: a constructed, unopened Sandbox holds nothing.
    new Sandbox({ egressAllow }); // eslint-disable-line no-new
  } catch (e) {
    throw new ApiError(400, `network.allowOut: ${e.message}`);
  }
  if (net.allowPublicTraffic !== undefined && net.allowPublicTraffic !== null && typeof net.allowPublicTraffic !== 'boolean') {
    throw new ApiError(400, 'network.allowPublicTraffic must be true or false');
  }
  return {
    allowInternetAccess: open,
    // false: a request to the sandbox's ports (getHost) needs its traffic token (ports.js).
    network: { allowOut, denyOut, ...(net.allowPublicTraffic === false ? { allowPublicTraffic: false } : {}) },
    egressAllow,
  };
}

/** Opens a library Sandbox for `image` in a new directory of `stateDir` named `id`: its
 * workspace is the sandbox's home (`/home/user` in the box) and a second directory its `/tmp`.
 * It opens deny-all, behind the egress proxy: create then sets the list its request asks for
 * (`setEgressAllow`), so a Sandbox opened ahead serves any network request. */
async function openBox(stateDir, id, image, memoryMb, volumes = null) {
  const dir = path.join(stateDir, id);
  const home = path.join(dir, 'home');
  const tmp = path.join(dir, 'tmp');
  fs.mkdirSync(home, { recursive: true, mode: 0o700 });
  fs.mkdirSync(tmp, { recursive: true, mode: 0o700 });
  const sandbox = new Sandbox({
    image,
    workspace: home,
    workspaceMount: HOME,
    mounts: { [tmp]: ['/tmp', 'rw'] },
    tmpfs: {},
    memoryMb,
    timeoutS: MAX_TIMEOUT_S,
    trackFiles: false,
    env: { HOME, E2B_SANDBOX: 'true' },
    egressAllow: [],
    ...(volumes ? { volumes } : {}),
  });
  try {
    await sandbox.open();
  } catch (e) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return { id, dir, image, sandbox };
}

class ServedProcess {
  constructor(pid, tag, config, pty) {
    this.pid = pid;
    this.tag = tag;
    this.config = config;
    this.pty = pty;
    this.handle = null;
    this.listeners = new Set();
    this.end = null;
  }

  /** Sends `ev` ({ kind: 'stdout'|'stderr'|'pty', data } or { kind: 'end', ... }) to every stream. */
  emit(ev) {
    if (ev.kind === 'end') this.end = ev;
    for (const l of this.listeners) l(ev);
  }

  /** An async iterator of this process's events from now on, ending after its end event; with
   * `keepaliveMs`, a `keepalive` event after that long without another. */
  subscribe(signal, keepaliveMs) {
    const queue = [];
    let wake = null;
    const push = (ev) => {
      queue.push(ev);
      if (wake) wake();
    };
    this.listeners.add(push);
    if (this.end) push(this.end);
    signal?.addEventListener('abort', () => wake && wake(), { once: true });
    const self = this;
    return (async function* events() {
      try {
        for (;;) {
          // A client that went away (a disconnect()) gets nothing more; the process goes on.
          while (queue.length && !(signal && signal.aborted)) {
            const ev = queue.shift();
            yield ev;
            if (ev.kind === 'end') return;
          }
          if (signal && signal.aborted) return;
          let timer = null;
          const idle = await new Promise((resolve) => {
            wake = () => resolve(false);
            if (keepaliveMs) timer = setTimeout(() => resolve(true), keepaliveMs);
          });
          clearTimeout(timer);
          wake = null;
          if (idle && !queue.length) yield { kind: 'keepalive' };
        }
      } finally {
        self.listeners.delete(push);
      }
    })();
  }
}

class ServedSandbox {
  /** `box`: the opened library Sandbox and its directories (`openBox`), named by `id`. */
  constructor({ id, owner, template, metadata, envs, timeoutS, memoryMb, box, net, volumeMounts = [] }) {
    this.id = id;
    this.volumeMounts = volumeMounts;
    this.owner = owner;
    this.template = template;
    this.metadata = metadata;
    this.envs = envs;
    this.memoryMb = memoryMb;
    this.net = net;
    // envd's calls carry `X-Access-Token`; the code interpreter's, `E2B-Traffic-Access-Token`.
    this.accessToken = newToken();
    this.trafficToken = newToken();
    this.startedAt = new Date();
    this.dir = box.dir;
    this.sandbox = box.sandbox;
    this.home = HOME;
    this.processes = new Map();
    this.nextPid = 1000;
    this.contexts = new Map();
    // Directory watches (streamed and polled) and the polled ones by id: closed with the sandbox.
    this.watches = new Set();
    this.watchers = new Map();
    this.ended = null;
    this.timer = null;
    this.setTimeoutS(timeoutS);
  }

  /** E2B's network update (`updateNetwork`): the new policy for every later connection of the
   * sandbox's boxes, running ones included. */
  async setNetwork(cfg, body) {
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, 'the request body must be a JSON object');
    const { allow_internet_access: allowInternet, ...net } = body;
    // An update that doesn't name it never makes private ports public.
    if (net.allowPublicTraffic === undefined && this.net.network.allowPublicTraffic === false) net.allowPublicTraffic = false;
    const next = networkPolicy(cfg, allowInternet, net);
    await this.sandbox.setEgressAllow(next.egressAllow);
    this.net = next;
  }

  setTimeoutS(seconds) {
    this.endAt = new Date(Date.now() + seconds * 1000);
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.onExpire && this.onExpire(this), seconds * 1000);
    this.timer.unref();
  }

  /** The environment of each command, kernel and terminal of this sandbox, under a call's own:
   * per call, not the library Sandbox's `env`, so a Sandbox opened ahead (the pool) serves any. */
  callEnv(own = {}) {
    return { E2B_SANDBOX_ID: this.id, ...this.envs, ...own };
  }

  /** A process of this sandbox by E2B's selector (`pid` or `tag`), or null. */
  findProcess(selector) {
    if (!selector) return null;
    for (const p of this.processes.values()) {
      if (selector.case === 'pid' && p.pid === selector.value) return p;
      if (selector.case === 'tag' && p.tag === selector.value) return p;
    }
    return null;
  }

  addProcess(tag, config, pty) {
    const p = new ServedProcess(this.nextPid++, tag, config, pty);
    this.processes.set(p.pid, p);
    return p;
  }

  /** Forgets `p` a while after its end, so a late `Connect` still gets its end. */
  retire(p) {
    setTimeout(() => this.processes.delete(p.pid), ENDED_KEEP_MS).unref();
  }

  /** Ends everything of this sandbox and removes its files; `reason` is kept for errors. */
  async kill(reason) {
    if (this.ended) return this.ended;
    this.ended = (async () => {
      this.reason = reason;
      clearTimeout(this.timer);
      for (const w of this.watches) w.close();
      for (const c of this.contexts.values()) await c.close().catch(() => {});
      if (this.sandbox) await this.sandbox.close().catch(() => {});
      fs.rmSync(this.dir, { recursive: true, force: true });
    })();
    return this.ended;
  }

  /** The control plane's view (E2B's `SandboxDetail`/`ListedSandbox`). */
  info() {
    return {
      templateID: this.template,
      sandboxID: this.id,
      clientID: 'kern',
      alias: this.template,
      startedAt: this.startedAt.toISOString(),
      endAt: this.endAt.toISOString(),
      cpuCount: os.availableParallelism(),
      memoryMB: this.memoryMb,
      diskSizeMB: 0,
      metadata: this.metadata,
      state: 'running',
      envdVersion: ENVD_VERSION,
      volumeMounts: this.volumeMounts,
      allowInternetAccess: this.net.allowInternetAccess,
      network: this.net.network,
    };
  }

  /** What create and connect answer (E2B's `Sandbox`). */
  created() {
    return {
      templateID: this.template,
      sandboxID: this.id,
      clientID: 'kern',
      alias: this.template,
      envdVersion: ENVD_VERSION,
      envdAccessToken: this.accessToken,
      trafficAccessToken: this.trafficToken,
      domain: null,
    };
  }
}

class Sandboxes {
  constructor(cfg, log, metrics) {
    this.cfg = cfg;
    this.log = log;
    this.metrics = metrics;
    this.byId = new Map();
    /** image -> Sandboxes opened ahead (promises), taken by creates without network options. */
    this.pools = new Map();
    this.closing = false;
    this.stateDir = cfg.stateDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'kern-serve-'));
    this.ownStateDir = !cfg.stateDir;
    fs.mkdirSync(this.stateDir, { recursive: true, mode: 0o700 });
  }

  /** The sandbox `id` if `owner` may reach it; else the same 404 as for one that doesn't exist,
   * so a key learns nothing about another key's sandboxes. */
  get(id, owner) {
    const s = this.byId.get(id);
    if (!s || s.ended || (owner !== undefined && s.owner !== owner)) throw new ApiError(404, `sandbox ${id} not found`);
    return s;
  }

  running() {
    return [...this.byId.values()].filter((s) => !s.ended).length;
  }

  list(owner) {
    return [...this.byId.values()].filter((s) => !s.ended && s.owner === owner);
  }

  async create(owner, body) {
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, 'the request body must be a JSON object');
    const template = body.templateID;
    if (typeof template !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$/.test(template)) throw new ApiError(400, 'templateID must be a template name');
    const timeoutS = timeoutSeconds(body.timeout, DEFAULT_TIMEOUT_S);
    const metadata = validStringMap(body.metadata, 'metadata');
    const envs = validStringMap(body.envVars, 'envVars');
    if (body.autoPause || body.autoResume?.enabled) throw new ApiError(400, 'pausing a sandbox (onTimeout: "pause", autoResume) is not supported by kern serve yet: its sandboxes are killed at their timeout');
    if (body.mcp) throw new ApiError(400, 'the MCP gateway template option is not supported by kern serve');
    if (body.iam) throw new ApiError(400, 'iam tokens are not supported by kern serve');
    const net = networkPolicy(this.cfg, body.allow_internet_access, body.network);

    const mine = this.list(owner);
    if (mine.length >= this.cfg.maxSandboxes) {
      throw new ApiError(429, `this API key already runs ${mine.length} sandboxes, the most kern serve allows (--max-sandboxes); kill one first`);
    }
    const memoryMb = this.cfg.memoryMb;
    const used = mine.reduce((n, s) => n + s.memoryMb, 0);
    if (this.cfg.maxMemoryMb !== null && used + memoryMb > this.cfg.maxMemoryMb) {
      throw new ApiError(429, `this API key's sandboxes hold ${used} MiB of ${this.cfg.maxMemoryMb} (--max-memory-mb); another needs ${memoryMb}`);
    }

    const image = imageFor(this.cfg, template);
    const volumes = await this.volumes.mounts(owner, body.volumeMounts);
    let box;
    try {
      // A pooled box was opened without volumes.
      box = (volumes ? null : await this.takePooled(image)) ?? await openBox(this.stateDir, this.newId(), image, memoryMb, volumes);
      await box.sandbox.setEgressAllow(net.egressAllow);
    } catch (e) {
      if (box) await box.sandbox.close().finally(() => fs.rmSync(box.dir, { recursive: true, force: true }));
      if (e && e.code === 'ERR_INVALID_OPTION') throw new ApiError(400, e.message);
      if (e && (e.code === 'ERR_IMAGE' || e.code === 'ERR_MOUNT_REFUSED')) throw new ApiError(400, `template ${template}: ${e.message}`);
      throw e;
    }
    const volumeMounts = volumes ? body.volumeMounts.map((v) => ({ name: v.name, path: v.path })) : [];
    const s = new ServedSandbox({ id: box.id, owner, template, metadata, envs, timeoutS, memoryMb, box, net, volumeMounts });
    s.onExpire = (sb) => this.kill(sb, 'timeout');
    this.byId.set(s.id, s);
    const id = s.id;
    this.metrics.created.inc();
    this.metrics.sandboxes.set(this.running());
    this.log.info('sandbox created', { sandbox: id, key: owner, template });
    return s;
  }

  async kill(s, reason) {
    if (s.ended) return s.ended;
    const done = s.kill(reason);
    this.metrics.ended.inc({ reason });
    this.log.info('sandbox ended', { sandbox: s.id, key: s.owner, reason });
    await done;
    this.byId.delete(s.id);
    this.metrics.sandboxes.set(this.running());
    return done;
  }

  /** A new sandbox id; with --instance it names the server that holds it (`kern-serve-0-…`). */
  newId() {
    return (this.cfg.instance ? `${this.cfg.instance}-` : 'i') + crypto.randomBytes(10).toString('hex');
  }

  /** A Sandbox of `image` opened ahead, or null; either way the pool of `image` is filled again
   * in the background (`--pool N` of each image a create has asked for). */
  async takePooled(image) {
    const pool = this.pools.get(image) ?? [];
    this.pools.set(image, pool);
    const ready = pool.shift();
    this.refill(image);
    return ready ? ready.catch(() => null) : null;
  }

  refill(image) {
    const pool = this.pools.get(image);
    while (!this.closing && pool.length < this.cfg.pool) {
      const p = openBox(this.stateDir, this.newId(), image, this.cfg.memoryMb);
      p.catch((e) => {
        this.log.error('opening a pooled sandbox failed', { image, error: String(e && e.message) });
        const at = pool.indexOf(p);
        if (at >= 0) pool.splice(at, 1);
      });
      pool.push(p);
    }
  }

  async closeAll(reason) {
    this.closing = true;
    const pooled = [...this.pools.values()].flat();
    this.pools.clear();
    await Promise.all(pooled.map((p) => p.then((box) => box.sandbox.close().finally(() => fs.rmSync(box.dir, { recursive: true, force: true })), () => {})));
    await Promise.all([...this.byId.values()].map((s) => this.kill(s, reason)));
    if (this.ownStateDir) fs.rmSync(this.stateDir, { recursive: true, force: true });
  }
}

module.exports = { Sandboxes, ServedSandbox, ServedProcess, timeoutSeconds, ENVD_VERSION, HOME };
