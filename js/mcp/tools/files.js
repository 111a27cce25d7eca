'use strict';
// The workspace's files: read_file (a byte or line range), write_file, list_files, remove_file,
// and the same files as MCP resources (file:///workspace/...). Reads, writes and listings go
// through the library's workspace calls (no symlink followed on the host); a removal runs `rm`
// in a box, so the host never follows a path the box controls.

const path = require('path');
const { text, cut, ToolError } = require('../results.js');

/** The most bytes read_file returns at once, and the most a resource read returns. */
const MAX_READ = 1 << 20;
/** The most entries list_files and resources/list return. */
const MAX_LIST = 1000;
const IMAGE_TYPES = { '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.gif': 'image/gif', '.webp': 'image/webp', '.svg': 'image/svg+xml' };
const TEXT_DECODER = new TextDecoder('utf-8', { fatal: true });

function utf8(buf) {
  try {
    return TEXT_DECODER.decode(buf);
  } catch {
    return null;
  }
}

/** The byte offset where line `n` (1-based) of `rel` starts, found by reading the file a MiB
 * at a time; null when the file has fewer lines. */
async function lineStart(session, rel, n) {
  let line = 1;
  let offset = 0;
  while (line < n) {
    const buf = await readWorkspace(session, rel, { offset, length: MAX_READ });
    if (buf.length === 0) return null;
    let at = -1;
    while (line < n && (at = buf.indexOf(10, at + 1)) !== -1) line++;
    if (line === n) return offset + at + 1;
    offset += buf.length;
  }
  return offset;
}

/** Lines `start`..`end` (1-based, inclusive) of `rel`, anywhere in it, at most MAX_READ bytes of
 * them: `{ text, from, to, more }` (`more`: the range went on past what one read returns), or
 * null when the file has fewer than `start` lines. */
async function lineRange(session, rel, start, end) {
  const from = start ?? 1;
  const at = await lineStart(session, rel, from);
  if (at === null) return null;
  const buf = await readWorkspace(session, rel, { offset: at, length: MAX_READ + 1 });
  if (buf.length === 0 && from > 1) return null;
  const whole = buf.length <= MAX_READ;
  let body = whole ? buf : buf.subarray(0, MAX_READ);
  if (!whole) {
    const cutAt = body.lastIndexOf(10);
    if (cutAt >= 0) body = body.subarray(0, cutAt + 1);
  }
  const s = utf8(body);
  if (s === null) return { binary: true };
  const lines = s.split('\n');
  if (lines[lines.length - 1] === '' && (whole || s.endsWith('\n'))) lines.pop();
  const want = end === undefined ? lines.length : end - from + 1;
  const got = lines.slice(0, want);
  return { text: got.join('\n'), from, to: from + got.length - 1, more: got.length < want && !whole };
}

async function readWorkspace(session, rel, opts) {
  const sb = await session.sandbox();
  try {
    return await sb.readFile(rel, opts);
  } catch (e) {
    if (e.code === 'ERR_FILE' || e.code === 'ERR_INVALID_OPTION') throw new ToolError(e.message);
    throw e;
  }
}

const tools = [
  {
    name: 'read_file',
    title: 'Read a file',
    description: 'Read a file of the workspace (a path relative to it, or absolute under it such as /workspace/data.csv). Text comes back as text; '
      + 'png, jpeg, gif, webp and svg files as images; other binary files as a summary. Give offset/length (bytes) or start_line/end_line '
      + `(1-based, inclusive) to read part of a large file; at most ${MAX_READ} bytes are read at once.`,
    inputSchema: {
      type: 'object',
      properties: {
        path: { type: 'string', description: 'The file, relative to the workspace or absolute under it.' },
        offset: { type: 'integer', minimum: 0, description: 'First byte to read (default 0).' },
        length: { type: 'integer', minimum: 1, maximum: MAX_READ, description: `How many bytes to read (default: to the end, at most ${MAX_READ}).` },
        start_line: { type: 'integer', minimum: 1, description: 'First line to return (1-based).' },
        end_line: { type: 'integer', minimum: 1, description: 'Last line to return (inclusive).' },
      },
      required: ['path'],
      additionalProperties: false,
    },
    annotations: { title: 'Read a file', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    async handler(session, args) {
      const rel = session.workspacePath(args.path);
      const lines = args.start_line !== undefined || args.end_line !== undefined;
      if (lines && (args.offset !== undefined || args.length !== undefined)) throw new ToolError('read_file: give offset/length or start_line/end_line, not both');
      if (lines && args.start_line !== undefined && args.end_line !== undefined && args.end_line < args.start_line) {
        throw new ToolError('read_file: end_line is before start_line');
      }
      const ranged = args.offset !== undefined || args.length !== undefined;
      if (lines) {
        const r = await lineRange(session, rel, args.start_line, args.end_line);
        if (r === null) throw new ToolError(`read_file: ${args.path} has fewer than ${args.start_line} lines`);
        if (r.binary) {
          return { content: [text(`${args.path}: binary data (not UTF-8 text); use run_command (xxd, file, python) to inspect it`)], structuredContent: { path: rel, binary: true } };
        }
        const tail = r.more ? `\n[lines ${r.from}-${r.to} are ${MAX_READ} bytes at most; ask from start_line ${r.to + 1} for the rest]` : '';
        return { content: [text(cut(r.text) + tail)], structuredContent: { path: rel, startLine: r.from, endLine: r.to } };
      }
      let buf;
      if (ranged) {
        buf = await readWorkspace(session, rel, { offset: args.offset ?? 0, length: args.length ?? MAX_READ });
      } else {
        // One byte over the cap says the file is larger, without reading it all.
        buf = await readWorkspace(session, rel, { offset: 0, length: MAX_READ + 1 });
        if (buf.length > MAX_READ) {
          throw new ToolError(`read_file: ${args.path} is larger than ${MAX_READ} bytes: read it in parts with offset and length, or a line range`);
        }
      }
      const mime = IMAGE_TYPES[path.extname(rel).toLowerCase()];
      if (mime && !ranged) {
        return { content: [{ type: 'image', data: buf.toString('base64'), mimeType: mime }], structuredContent: { path: rel, size: buf.length } };
      }
      let s = utf8(buf);
      // A range may end inside a character: drop up to 3 trailing bytes before calling it binary.
      for (let k = 1; s === null && ranged && k <= 3 && k < buf.length; k++) s = utf8(buf.subarray(0, buf.length - k));
      if (s === null) {
        return { content: [text(`${args.path}: ${buf.length} bytes of binary data (not UTF-8 text); use run_command (xxd, file, python) to inspect it`)], structuredContent: { path: rel, size: buf.length, binary: true } };
      }
      return { content: [text(cut(s))], structuredContent: { path: rel, bytes: buf.length } };
    },
  },
  {
    name: 'write_file',
    title: 'Write a file',
    description: 'Create or replace a file of the workspace, atomically, making its parent directories. Code run later in this session sees it '
      + 'in its working directory.',
    inputSchema: {
      type: 'object',
      properties: {
        path: { type: 'string', description: 'The file, relative to the workspace or absolute under it.' },
        content: { type: 'string', description: 'The new content.' },
        encoding: { type: 'string', enum: ['utf8', 'base64'], description: 'How content is encoded (default utf8; base64 for binary data).' },
      },
      required: ['path', 'content'],
      additionalProperties: false,
    },
    annotations: { title: 'Write a file', readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    async handler(session, args) {
      const rel = session.workspacePath(args.path);
      let data = args.content;
      if (args.encoding === 'base64') {
        if (!/^[A-Za-z0-9+/]*={0,2}$/.test(args.content.replace(/\s+/g, ''))) throw new ToolError('write_file: content is not valid base64');
        data = Buffer.from(args.content, 'base64');
      }
      const sb = await session.sandbox();
      try {
        await sb.writeFile(rel, data);
      } catch (e) {
        if (e.code === 'ERR_FILE' || e.code === 'ERR_INVALID_OPTION') throw new ToolError(e.message);
        throw e;
      }
      const size = Buffer.byteLength(data);
      return { content: [text(`wrote ${size} bytes to ${session.mount}/${rel}`)], structuredContent: { path: rel, size } };
    },
  },
  {
    name: 'list_files',
    title: 'List files',
    description: `List the regular files of the workspace, or of a directory in it, recursively, with their sizes (at most ${MAX_LIST}).`,
    inputSchema: {
      type: 'object',
      properties: { path: { type: 'string', description: 'A directory relative to the workspace or absolute under it (default: the whole workspace).' } },
      additionalProperties: false,
    },
    annotations: { title: 'List files', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    async handler(session, args) {
      const rel = args.path === undefined ? '' : session.workspacePath(args.path, { allowRoot: true });
      const files = await listWorkspace(session, rel);
      const shown = files.slice(0, MAX_LIST);
      const lines = shown.map((f) => `${f.path}\t${f.size}`);
      if (files.length > MAX_LIST) lines.push(`[... ${files.length - MAX_LIST} more files not listed]`);
      return {
        content: [text(lines.length ? lines.join('\n') : '(no files)')],
        structuredContent: { files: shown.map((f) => ({ path: f.path, size: f.size })), total: files.length },
      };
    },
  },
  {
    name: 'remove_file',
    title: 'Remove a file',
    description: 'Delete a file or a directory (with everything in it) from the workspace.',
    inputSchema: {
      type: 'object',
      properties: { path: { type: 'string', description: 'The file or directory, relative to the workspace or absolute under it.' } },
      required: ['path'],
      additionalProperties: false,
    },
    annotations: { title: 'Remove a file', readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    async handler(session, args) {
      const rel = session.workspacePath(args.path);
      const sb = await session.sandbox();
      // In a box: the box resolves the path in its own view, so a symlink the code planted
      // can't point the removal at the host.
      const r = await sb.run(['sh', '-c', '[ -e "$1" ] || [ -L "$1" ] || { echo "no such file or directory" >&2; exit 2; }; exec rm -rf -- "$1"', 'sh', `./${rel}`], { cwd: session.mount, timeoutS: 60 });
      if (!r.success) throw new ToolError(`remove_file ${args.path}: ${r.codeStderr.trim() || (r.fault && r.fault.message) || `exit ${r.exitCode}`}`);
      return { content: [text(`removed ${session.mount}/${rel}`)] };
    },
  },
];

async function listWorkspace(session, rel) {
  const sb = await session.sandbox();
  try {
    return await sb.listFiles(rel || undefined);
  } catch (e) {
    if (e.code === 'ERR_FILE' || e.code === 'ERR_INVALID_OPTION') throw new ToolError(e.message);
    throw e;
  }
}

/** resources/list: the workspace's files, bounded. */
async function listResources(session) {
  const files = await listWorkspace(session, '');
  return files.slice(0, MAX_LIST).map((f) => ({
    uri: `file://${encodeURI(`${session.mount}/${f.path}`)}`,
    name: f.path,
    mimeType: IMAGE_TYPES[path.extname(f.path).toLowerCase()],
    size: f.size,
  }));
}

/** resources/read of a `file:///workspace/...` URI. */
async function readResource(session, uri) {
  let p;
  try {
    const u = new URL(uri);
    if (u.protocol !== 'file:' || u.host !== '') throw new Error('not a file URI');
    p = decodeURIComponent(u.pathname);
  } catch {
    throw new ToolError(`${uri}: not a file:// URI of this workspace (resources/list gives them)`);
  }
  const rel = session.workspacePath(p);
  const buf = await readWorkspace(session, rel, { offset: 0, length: MAX_READ + 1 });
  if (buf.length > MAX_READ) throw new ToolError(`${uri} is larger than ${MAX_READ} bytes: use read_file with offset and length`);
  const s = utf8(buf);
  const mime = IMAGE_TYPES[path.extname(rel).toLowerCase()];
  if (s !== null && !mime) return [{ uri, mimeType: 'text/plain', text: s }];
  return [{ uri, mimeType: mime || 'application/octet-stream', blob: buf.toString('base64') }];
}

module.exports = { tools, listResources, readResource };
