'use strict';
// A tiny tar writer (and reader) for the snapshot/restore tests. The writer builds HOSTILE archives
// on purpose: names are written raw (`../x`, `/etc/x`, duplicates, anything), and it can emit the
// member types restore() must refuse (symlink, hardlink, devices, FIFO) and the two long-name
// mechanisms an attacker can use to smuggle a name past a naive check (a PAX `x` header carrying
// `path=` and a GNU `L` longname member). Headers are ustar, filled in by hand with a correct
// checksum, so any tar reader accepts them. The reader lists what an archive made by snapshot()
// holds (PAX `path`/`linkpath` and GNU `L`/`K` names applied), to check what went in.
//
//   const tar = require('./support/tar');
//   const buf = tar.tgz([
//     { name: 'a/', type: 'dir' },
//     { name: 'a/f.txt', data: 'hello', mode: 0o600 },
//     { name: 'l', type: 'symlink', linkname: '/etc' },
//     { name: 'h', type: 'hardlink', linkname: '/etc/passwd' },
//     { name: 'dev', type: 'chardev', devmajor: 1, devminor: 3 },
//     { name: 'p', type: 'fifo' },
//     { name: 'innocent.txt', data: 'x', pax: { path: '../../evil' } }, // PAX header before it
//     { name: 'short', data: 'x', longname: '../../evil' },             // GNU 'L' member before it
//   ]);

const zlib = require('zlib');

const BLOCK = 512;
const TYPES = {
  file: '0',
  hardlink: '1',
  symlink: '2',
  chardev: '3',
  blockdev: '4',
  dir: '5',
  fifo: '6',
  pax: 'x',
  paxGlobal: 'g',
  gnuLongname: 'L',
  gnuLonglink: 'K',
};

const toBuf = (v) => (Buffer.isBuffer(v) ? v : Buffer.from(v === undefined || v === null ? '' : String(v), 'utf8'));

/** Writes `value` as zero-padded octal of `width - 1` digits plus a NUL into `buf` at `off`. */
function octal(buf, off, width, value) {
  const s = Math.floor(value).toString(8);
  if (s.length > width - 1) throw new Error(`tar writer: ${value} does not fit an octal field of ${width}`);
  buf.write(s.padStart(width - 1, '0') + '\0', off, width, 'latin1');
}

/** Copies raw bytes into a fixed-width field; throws if they do not fit (no silent truncation). */
function field(buf, off, width, bytes, what) {
  if (bytes.length > width) throw new Error(`tar writer: ${what} is ${bytes.length} bytes, the field holds ${width}`);
  bytes.copy(buf, off);
}

/**
 * One 512-byte header. `name` (string or Buffer) goes in raw: when over 100 bytes it is split into
 * ustar prefix + name at a '/', unless `prefix` is given explicitly. `format: 'gnu'` writes the GNU
 * magic ("ustar  \0") instead of POSIX ustar ("ustar\0" "00").
 */
function header(h) {
  const buf = Buffer.alloc(BLOCK, 0);
  let name = toBuf(h.name);
  let prefix = h.prefix !== undefined ? toBuf(h.prefix) : Buffer.alloc(0);
  if (h.prefix === undefined && name.length > 100) {
    // Split at the last '/' that leaves <= 100 bytes of name and <= 155 of prefix.
    let cut = -1;
    for (let i = name.length - 1; i >= 0; i--) {
      if (name[i] === 0x2f && name.length - i - 1 <= 100 && i <= 155 && name.length - i - 1 > 0) {
        cut = i;
        break;
      }
    }
    if (cut < 0) throw new Error(`tar writer: name of ${name.length} bytes needs a PAX or GNU long name`);
    prefix = name.subarray(0, cut);
    name = name.subarray(cut + 1);
  }
  const typeflag = h.typeflag || TYPES[h.type || 'file'];
  if (!typeflag) throw new Error(`tar writer: unknown type ${h.type}`);
  const mode = h.mode !== undefined ? h.mode : typeflag === '5' ? 0o755 : 0o644;

  field(buf, 0, 100, name, 'name');
  octal(buf, 100, 8, mode);
  octal(buf, 108, 8, h.uid || 0);
  octal(buf, 116, 8, h.gid || 0);
  octal(buf, 124, 12, h.size || 0);
  octal(buf, 136, 12, h.mtime !== undefined ? h.mtime : 1700000000);
  buf.write('        ', 148, 8, 'latin1'); // checksum is computed with this field as spaces
  buf.write(typeflag, 156, 1, 'latin1');
  field(buf, 157, 100, toBuf(h.linkname), 'linkname');
  if (h.format === 'gnu') {
    buf.write('ustar  \0', 257, 8, 'latin1');
  } else {
    buf.write('ustar\0', 257, 6, 'latin1');
    buf.write('00', 263, 2, 'latin1');
  }
  field(buf, 265, 32, toBuf(h.uname !== undefined ? h.uname : 'root'), 'uname');
  field(buf, 297, 32, toBuf(h.gname !== undefined ? h.gname : 'root'), 'gname');
  octal(buf, 329, 8, h.devmajor || 0);
  octal(buf, 337, 8, h.devminor || 0);
  field(buf, 345, 155, prefix, 'prefix');

  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += buf[i];
  buf.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'latin1');
  return buf;
}

function pad(data) {
  const rest = data.length % BLOCK;
  return rest === 0 ? data : Buffer.concat([data, Buffer.alloc(BLOCK - rest, 0)]);
}

/** PAX records "<len> <key>=<value>\n", where <len> counts the whole record including itself. */
function paxRecords(records) {
  const parts = [];
  for (const [key, value] of Object.entries(records)) {
    const body = Buffer.concat([Buffer.from(` ${key}=`, 'utf8'), toBuf(value), Buffer.from('\n')]);
    let len = body.length + 1;
    while (String(len).length + body.length !== len) len = String(len).length + body.length;
    parts.push(Buffer.concat([Buffer.from(String(len), 'latin1'), body]));
  }
  return Buffer.concat(parts);
}

/** The blocks of one entry (its own header and data), without any long-name helper members. */
function entryBlocks(e) {
  const type = e.type || 'file';
  const data = type === 'file' || e.typeflag ? toBuf(e.data) : Buffer.alloc(0);
  const size = e.size !== undefined ? e.size : data.length; // `size` may lie on purpose
  return [header({ ...e, type, size }), pad(data)];
}

/**
 * Builds an uncompressed tar from `entries`. Each entry: `{ name, type?, data?, mode?, linkname?,
 * devmajor?, devminor?, uid?, gid?, mtime?, prefix?, format?, size?, typeflag? }`, plus optionally
 * `pax: { key: value }` (a PAX 'x' member is emitted right before it) and `longname` / `longlink`
 * (a GNU 'L' / 'K' member is emitted right before it; the entry's own header is then GNU format).
 * `type` is one of file, dir, symlink, hardlink, chardev, blockdev, fifo; a raw `typeflag` overrides
 * it and writes `data` as the member's body. `end: false` leaves out the two zero end blocks.
 */
function tar(entries, { end = true } = {}) {
  const out = [];
  for (const e of entries) {
    if (e.pax) {
      const body = paxRecords(e.pax);
      const pname = e.paxName || `PaxHeaders.0/${String(e.name).replace(/^.*\//, '').slice(0, 80) || 'x'}`;
      out.push(header({ name: pname, typeflag: 'x', size: body.length, mode: 0o644 }), pad(body));
    }
    if (e.longlink !== undefined) {
      const body = Buffer.concat([toBuf(e.longlink), Buffer.alloc(1)]);
      out.push(header({ name: '././@LongLink', typeflag: 'K', size: body.length, format: 'gnu' }), pad(body));
    }
    if (e.longname !== undefined) {
      const body = Buffer.concat([toBuf(e.longname), Buffer.alloc(1)]);
      out.push(header({ name: '././@LongLink', typeflag: 'L', size: body.length, format: 'gnu' }), pad(body));
    }
    const own = { ...e };
    delete own.pax;
    delete own.longname;
    delete own.longlink;
    if ((e.longname !== undefined || e.longlink !== undefined) && !own.format) own.format = 'gnu';
    out.push(...entryBlocks(own));
  }
  if (end) out.push(Buffer.alloc(2 * BLOCK, 0));
  return Buffer.concat(out);
}

/** `tar(entries)` gzipped: what restore() reads. */
function tgz(entries, options) {
  return zlib.gzipSync(tar(entries, options));
}

const cstr = (buf, off, width) => {
  const b = buf.subarray(off, off + width);
  const nul = b.indexOf(0);
  return nul < 0 ? b : b.subarray(0, nul);
};
const readOctal = (buf, off, width) => {
  const s = cstr(buf, off, width).toString('latin1').trim();
  return s === '' ? 0 : parseInt(s, 8);
};

/**
 * Lists a tar (gzipped or not): [{ name, type, typeflag, mode, size, linkname, data }] with PAX
 * `path`/`linkpath` and GNU long names applied (the helper members themselves are not listed).
 */
function list(archive) {
  let buf = archive;
  if (buf.length >= 2 && buf[0] === 0x1f && buf[1] === 0x8b) buf = zlib.gunzipSync(buf);
  const byFlag = Object.fromEntries(Object.entries(TYPES).map(([k, v]) => [v, k]));
  byFlag['\0'] = 'file';
  byFlag['7'] = 'file';
  const out = [];
  let pax = {};
  let longname = null;
  let longlink = null;
  for (let off = 0; off + BLOCK <= buf.length; ) {
    const h = buf.subarray(off, off + BLOCK);
    if (h.every((b) => b === 0)) break;
    const typeflag = String.fromCharCode(h[156] || 0x30);
    const size = readOctal(h, 124, 12);
    const data = buf.subarray(off + BLOCK, off + BLOCK + size);
    off += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
    if (typeflag === 'x') {
      for (let i = 0; i < data.length; ) {
        const sp = data.indexOf(0x20, i);
        if (sp < 0) break;
        const len = parseInt(data.subarray(i, sp).toString('latin1'), 10);
        if (!(len > 0)) break;
        const kv = data.subarray(sp + 1, i + len - 1).toString('utf8'); // drop the trailing '\n'
        const eq = kv.indexOf('=');
        pax[kv.slice(0, eq)] = kv.slice(eq + 1);
        i += len;
      }
      continue;
    }
    if (typeflag === 'g') continue;
    if (typeflag === 'L') {
      longname = cstr(data, 0, data.length).toString('utf8');
      continue;
    }
    if (typeflag === 'K') {
      longlink = cstr(data, 0, data.length).toString('utf8');
      continue;
    }
    const magic = h.subarray(257, 263).toString('latin1');
    const prefix = magic === 'ustar\0' ? cstr(h, 345, 155).toString('utf8') : '';
    const base = cstr(h, 0, 100).toString('utf8');
    const name = pax.path || longname || (prefix ? `${prefix}/${base}` : base);
    const linkname = pax.linkpath || longlink || cstr(h, 157, 100).toString('utf8');
    out.push({
      name,
      type: byFlag[typeflag] || typeflag,
      typeflag,
      mode: readOctal(h, 100, 8),
      size: pax.size !== undefined ? Number(pax.size) : size,
      linkname,
      data: Buffer.from(data),
    });
    pax = {};
    longname = null;
    longlink = null;
  }
  return out;
}

module.exports = { tar, tgz, list, header, paxRecords, TYPES, BLOCK };
