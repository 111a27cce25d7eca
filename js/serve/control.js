'use strict';
// The control plane: E2B's REST routes the SDKs call at E2B_API_URL (their OpenAPI spec,
// `spec/openapi.yml` in e2b-dev/E2B). Every route but /health and /metrics needs an API key in
// `X-API-KEY`, and a key sees and reaches only the sandboxes it created.

const { ApiError } = require('./errors.js');
const { timeoutSeconds } = require('./sandboxes.js');

/** Routes E2B has that kern serve does not serve yet: each answers 501 with E2B's error body. */
const NOT_YET = [
  [/^\/sandboxes\/[^/]+\/pause$/, 'pausing a sandbox'],
  [/^\/sandboxes\/[^/]+\/resume$/, 'resuming a sandbox'],
  [/^\/sandboxes\/[^/]+\/fork$/, 'forking a sandbox'],
  [/^\/sandboxes\/[^/]+\/snapshots$/, 'snapshots'],
  [/^\/snapshots/, 'snapshots'],
  [/^\/sandboxes\/[^/]+\/metrics$/, 'sandbox metrics'],
  [/^\/sandboxes\/metrics$/, 'sandbox metrics'],
  [/^\/(v[0-9]+\/)?templates/, 'building templates (map template names to images with --template NAME=IMAGE)'],
  [/^\/secrets/, 'secrets'],
];

/** `metadata=k%3Dv%26k2%3Dv2` (the SDK's encoding) as an object. */
function metadataFilter(q) {
  if (!q) return null;
  const out = {};
  for (const [k, v] of new URLSearchParams(q)) out[decodeURIComponent(k)] = decodeURIComponent(v);
  return out;
}

/** The other servers' own sandboxes for the same key and filters (not paginated). A peer that
 * does not answer makes the list fail: a partial list would read as sandboxes gone. */
async function peerLists(ctx, url, key) {
  const q = new URLSearchParams(url.searchParams);
  q.delete('limit');
  q.delete('nextToken');
  const lists = await Promise.all(ctx.cfg.peers.filter((peer) => peer.name !== ctx.cfg.instance).map(async (peer) => {
    let res;
    try {
      res = await fetch(`${peer.url}/v2/sandboxes?${q}`, { headers: { 'x-api-key': key, 'x-kern-serve-peer': '1' }, signal: AbortSignal.timeout(10_000) });
    } catch (e) {
      throw new ApiError(503, `the fleet's server ${peer.name} did not answer the list (${e.message})`);
    }
    if (!res.ok) throw new ApiError(503, `the fleet's server ${peer.name} answered the list with ${res.status}`);
    return res.json();
  }));
  return lists.flat();
}

async function handle(ctx, req, res) {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname.replace(/\/+$/, '') || '/';
  const m = req.method;

  if (p === '/health' && m === 'GET') {
    ctx.sendJson(res, 200, { status: 'ok', sandboxes: ctx.sandboxes.byId.size });
    return 'GET /health';
  }
  if (p === '/metrics' && m === 'GET') {
    const text = await ctx.metrics.registry.metrics();
    res.writeHead(200, { 'content-type': ctx.metrics.registry.contentType });
    res.end(text);
    return 'GET /metrics';
  }

  // A volume's content routes take the volume's own token, not an API key.
  if (p.startsWith('/volumecontent/')) return ctx.volumes.content(ctx, req, res, url);

  const header = req.headers['x-api-key'] ?? (req.headers.authorization || '').replace(/^Bearer\s+/i, '');
  const owner = ctx.keys.check(header);
  if (owner === null) {
    ctx.log.info('refused: no valid API key', { path: p });
    throw new ApiError(401, 'Invalid API key: give one of kern serve\'s keys in E2B_API_KEY');
  }

  if (p === '/volumes' && m === 'POST') {
    ctx.sendJson(res, 201, await ctx.volumes.create(owner, await ctx.readJson(req)));
    return 'POST /volumes';
  }
  if (p === '/volumes' && m === 'GET') {
    ctx.sendJson(res, 200, await ctx.volumes.list(owner));
    return 'GET /volumes';
  }
  const volume = /^\/volumes\/([^/]+)$/.exec(p);
  if (volume && m === 'GET') {
    ctx.sendJson(res, 200, await ctx.volumes.get(decodeURIComponent(volume[1]), owner));
    return 'GET /volumes/:id';
  }
  if (volume && m === 'DELETE') {
    await ctx.volumes.remove(decodeURIComponent(volume[1]), owner);
    res.writeHead(204).end();
    return 'DELETE /volumes/:id';
  }

  const sandbox = /^(?:\/v2)?\/sandboxes\/([^/]+)(\/[a-z]+)?$/.exec(p);
  if ((p === '/sandboxes' || p === '/v2/sandboxes') && m === 'POST') {
    const s = await ctx.sandboxes.create(owner, await ctx.readJson(req));
    ctx.sendJson(res, 201, s.created());
    return 'POST /sandboxes';
  }
  if ((p === '/sandboxes' || p === '/v2/sandboxes') && m === 'GET') {
    const meta = metadataFilter(url.searchParams.get('metadata'));
    const states = url.searchParams.getAll('state').flatMap((s) => s.split(','));
    const template = url.searchParams.get('template');
    const limit = Number(url.searchParams.get('limit') || 0);
    const from = Number(url.searchParams.get('nextToken') || 0);
    if (!Number.isInteger(limit) || limit < 0 || !Number.isInteger(from) || from < 0) throw new ApiError(400, 'limit and nextToken must be whole numbers');
    let list = ctx.sandboxes.list(owner)
      .filter((s) => !meta || Object.entries(meta).every(([k, v]) => s.metadata[k] === v))
      .filter(() => states.length === 0 || states.includes('running'))
      .filter((s) => !template || s.template === template)
      .map((s) => s.info());
    // In a fleet (--peers), a list asked of one server is the whole fleet's: it asks the others
    // for theirs (marked, so they answer with their own only).
    if (ctx.cfg.peers.length && !req.headers['x-kern-serve-peer']) list = list.concat(await peerLists(ctx, url, header));
    // One order whichever server answers, so pages over the fleet hold together.
    const order = (x) => `${x.startedAt} ${x.sandboxID}`;
    list.sort((a, b) => (order(a) < order(b) ? -1 : order(a) > order(b) ? 1 : 0));
    list = list.slice(from);
    if (limit > 0 && list.length > limit) {
      res.setHeader('x-next-token', String(from + limit));
      list = list.slice(0, limit);
    }
    ctx.sendJson(res, 200, list);
    return 'GET /sandboxes';
  }
  if (sandbox) {
    const [, id, action = ''] = sandbox;
    const s = ctx.sandboxes.get(id, owner);
    if (action === '' && m === 'GET') {
      ctx.sendJson(res, 200, s.info());
      return 'GET /sandboxes/:id';
    }
    if (action === '' && m === 'DELETE') {
      await ctx.sandboxes.kill(s, 'killed');
      res.writeHead(204).end();
      return 'DELETE /sandboxes/:id';
    }
    if (action === '/timeout' && m === 'POST') {
      const body = await ctx.readJson(req);
      s.setTimeoutS(timeoutSeconds(body.timeout, 0));
      res.writeHead(204).end();
      return 'POST /sandboxes/:id/timeout';
    }
    if (action === '/refreshes' && m === 'POST') {
      const body = await ctx.readJson(req);
      if (body.duration !== undefined) s.setTimeoutS(timeoutSeconds(body.duration, 0));
      res.writeHead(204).end();
      return 'POST /sandboxes/:id/refreshes';
    }
    if (action === '/network' && m === 'PUT') {
      await s.setNetwork(ctx.cfg, await ctx.readJson(req));
      res.writeHead(204).end();
      return 'PUT /sandboxes/:id/network';
    }
    if (action === '/connect' && m === 'POST') {
      const body = await ctx.readJson(req);
      if (body.memory === false) throw new ApiError(400, 'resuming with a reboot is not supported by kern serve: its sandboxes are never paused');
      // Connecting never shortens a sandbox's life, as in E2B.
      if (body.timeout !== undefined) {
        const t = timeoutSeconds(body.timeout, 0);
        if (Date.now() + t * 1000 > s.endAt.getTime()) s.setTimeoutS(t);
      }
      ctx.sendJson(res, 200, s.created());
      return 'POST /sandboxes/:id/connect';
    }
  }
  for (const [re, what] of NOT_YET) {
    if (re.test(p)) throw new ApiError(501, `${what} is not supported by kern serve yet`);
  }
  throw new ApiError(404, `no route ${m} ${p}`);
}

module.exports = { handle };
