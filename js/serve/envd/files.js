'use strict';
// envd's HTTP file routes: `GET /files?path=` downloads a file, `POST /files?path=` uploads one
// (a raw `application/octet-stream` body, streamed, or `multipart/form-data` with one part per
// file). A file in the sandbox's home goes through the library's own workspace streams (no
// symlink followed, writes atomic); anywhere else in the box, a command in a box reads or
// writes it, so the host never opens a path the box controls.

const zlib = require('zlib');
const { pipeline } = require('stream/promises');
const { ApiError } = require('../errors.js');
const { resolvePath, keptTree, requestUser } = require('./paths.js');
const { stat } = require('./filesystem.js');

/** The most a multipart upload may hold (it is parsed whole); a stream has no such cap. */
const MULTIPART_MAX_BYTES = 100 << 20;

function boxPath(s, p) {
  try {
    return resolvePath(s, p);
  } catch (e) {
    throw new ApiError(400, e.rawMessage || e.message);
  }
}


/** A ConnectError from a box's file command, as an HTTP error. */
function httpFromConnect(e) {
  const status = { 5: 404, 6: 409, 3: 400, 7: 403 }[e.code] ?? 500;
  return new ApiError(status, e.rawMessage || e.message);
}

async function download(s, req, res, url, user) {
  const p = boxPath(s, url.searchParams.get('path'));
  const kept = keptTree(s, p);
  if (kept && kept.tree === 'home' && kept.rel) {
    const stream = s.sandbox.createReadStream(kept.rel);
    const opened = await new Promise((resolve) => {
      stream.once('readable', () => resolve(true));
      stream.once('end', () => resolve(true));
      // A symlink, a directory or a special file in the home: read as any other path is.
      stream.once('error', () => resolve(false));
    });
    if (opened) {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      await pipeline(stream, res);
      return;
    }
    stream.destroy();
  }
  let entry;
  try {
    entry = await stat(s, p, user);
  } catch (e) {
    throw httpFromConnect(e);
  }
  if (entry.type === 2) throw new ApiError(400, `${p} is a directory`);
  res.writeHead(200, { 'content-type': 'application/octet-stream' });
  const proc = await s.sandbox.spawn(['cat', '--', p], { cwd: '/', user, onStdout: (c) => res.write(c) });
  const r = await proc.wait();
  if (r.exitCode !== 0) res.destroy(new Error(r.codeStderr));
  else res.end();
}

/** Writes `body` (a stream of Buffers) to box path `p` of `s`. */
async function writeOne(s, p, body, user) {
  const kept = keptTree(s, p);
  if (kept && kept.tree === 'home' && kept.rel) {
    try {
      await pipeline(body, s.sandbox.createWriteStream(kept.rel));
      return;
    } catch (e) {
      if (e.code !== 'ERR_FILE') throw e;
      throw new ApiError(400, e.message);
    }
  }
  const script = 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"';
  const proc = await s.sandbox.spawn(['sh', '-c', script, 'sh', p], { cwd: '/', user });
  // A command that fails at once (a read-only path) ends before it has read its input: what it
  // said is the answer, not the refused write.
  let fed = null;
  try {
    for await (const chunk of body) await proc.write(chunk);
    await proc.end();
  } catch (e) {
    fed = e;
  }
  const r = await proc.wait();
  if (r.exitCode !== 0) {
    const msg = r.codeStderr.trim() || `writing ${p} failed`;
    throw new ApiError(/Permission denied|Read-only/.test(msg) ? 403 : 400, msg);
  }
  if (fed) throw fed;
}

function entryOf(p) {
  return { name: p.slice(p.lastIndexOf('/') + 1), type: 'file', path: p };
}

async function upload(s, req, res, url, user) {
  const type = (req.headers['content-type'] || '').toLowerCase();
  const gzip = (req.headers['content-encoding'] || '').toLowerCase() === 'gzip';
  for (const h of Object.keys(req.headers)) {
    if (h.startsWith('x-e2b-metadata') || h.startsWith('x-file-metadata')) throw new ApiError(400, 'file metadata is not kept by kern serve');
  }
  const written = [];
  if (type.startsWith('multipart/form-data')) {
    const n = Number(req.headers['content-length'] || 0);
    if (n > MULTIPART_MAX_BYTES) throw new ApiError(413, `a multipart upload is at most ${MULTIPART_MAX_BYTES} bytes: send a stream (useOctetStream) for more`);
    let form;
    try {
      form = await new Request('http://kern.invalid/', { method: 'POST', headers: { 'content-type': req.headers['content-type'] }, body: req, duplex: 'half' }).formData();
    } catch {
      throw new ApiError(400, 'the multipart body could not be read');
    }
    for (const [, file] of form) {
      if (typeof file === 'string') continue;
      const p = boxPath(s, url.searchParams.get('path') || file.name);
      await writeOne(s, p, [Buffer.from(await file.arrayBuffer())], user);
      written.push(entryOf(p));
    }
    if (written.length === 0) throw new ApiError(400, 'the multipart body has no file');
  } else {
    const p = boxPath(s, url.searchParams.get('path'));
    await writeOne(s, p, gzip ? req.pipe(zlib.createGunzip()) : req, user);
    written.push(entryOf(p));
  }
  const text = JSON.stringify(written);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function handle(ctx, s, req, res, url) {
  // The account in-box reads and writes run as; the home and /tmp are read and written from the
  // host, as the workspace's owner, whoever asks.
  const user = requestUser(req.headers);
  if (req.method === 'GET') return download(s, req, res, url, user);
  if (req.method === 'POST') return upload(s, req, res, url, user);
  throw new ApiError(405, `${req.method} /files: use GET or POST`);
}

module.exports = { handle };
