'use strict';
// Streams of bytes: a process's output (Chunks, on line boundaries with LineSplitter) and
// workspace files as Node streams (createReadStream, createWriteStream).

const stream = require('stream');
const { callNative } = require('./errors.js');

/** Holds a stream's bytes back to the last newline, so each chunk handed on is whole lines
 * (`lineBuffered`); `flush()` gives what is left (a last line without its newline). */
class LineSplitter {
  #pending = null;

  push(chunk) {
    const buf = this.#pending ? Buffer.concat([this.#pending, chunk]) : chunk;
    const end = buf.lastIndexOf(0x0a) + 1;
    this.#pending = end < buf.length ? buf.subarray(end) : null;
    return end > 0 ? buf.subarray(0, end) : null;
  }

  flush() {
    const rest = this.#pending;
    this.#pending = null;
    return rest;
  }
}

/** `fn` (a guarded chunk callback) on line boundaries when `lineBuffered`; `flush` hands on the
 * rest at the end of the call. */
function byLines(fn, lineBuffered) {
  if (!fn || !lineBuffered) return { fn, flush: () => {} };
  const lines = new LineSplitter();
  const give = (b) => (b ? fn(b) : undefined);
  return { fn: (chunk) => give(lines.push(chunk)), flush: () => give(lines.flush()) };
}

/** Addition: createReadStream(). The file is opened (same rules as readFile) when the stream
 * is constructed, then read a chunk of at most highWaterMark bytes at a time at its offset, so
 * memory stays bounded whatever the file's size; destroy() or the end closes the fd. */
class WorkspaceReadStream extends stream.Readable {
  #native;
  #path;
  #reader = null;
  #pos;
  #left;

  constructor(nativeSandbox, filePath, offset, length) {
    super();
    this.#native = nativeSandbox;
    this.#path = filePath;
    this.#pos = offset;
    this.#left = length;
  }

  _construct(cb) {
    callNative(() => this.#native.openRead(this.#path)).then((r) => {
      this.#reader = r;
      cb();
    }, cb);
  }

  _read(n) {
    const want = Math.min(n, this.#left);
    if (want <= 0) {
      this.push(null);
      return;
    }
    callNative(() => this.#reader.read(this.#pos, want)).then((buf) => {
      if (buf.length === 0) {
        this.push(null);
        return;
      }
      this.#pos += buf.length;
      this.#left -= buf.length;
      this.push(buf);
    }, (e) => this.destroy(e));
  }

  _destroy(err, cb) {
    if (this.#reader) this.#reader.close();
    cb(err);
  }
}

/** Addition: createWriteStream(). A temp file next to the path takes the bytes; end() renames
 * it over the path (one atomic step); destroy() or an error removes it, the path untouched. */
class WorkspaceWriteStream extends stream.Writable {
  #native;
  #path;
  #writer = null;

  constructor(nativeSandbox, filePath) {
    super();
    this.#native = nativeSandbox;
    this.#path = filePath;
  }

  _construct(cb) {
    callNative(() => this.#native.beginWrite(this.#path)).then((w) => {
      this.#writer = w;
      cb();
    }, cb);
  }

  _write(chunk, _encoding, cb) {
    callNative(() => this.#writer.write(chunk)).then(() => cb(), cb);
  }

  _final(cb) {
    callNative(() => this.#writer.commit()).then(() => cb(), cb);
  }

  _destroy(err, cb) {
    // After a commit there is nothing left to remove.
    if (this.#writer) this.#writer.abort();
    cb(err);
  }
}

/** A stream's chunks, in order: to a callback as they come, and to one async iterator, which
 * ends when the process has ended. What waits in it is bounded by `maxOutputBytes`: no more
 * than that per stream is ever delivered. */
class Chunks {
  #queue = [];
  #waiting = null;
  #ended = false;
  #listeners;
  #lines;
  #unheard;

  /** `lineBuffered`: chunks are handed on at line boundaries, the rest when the stream ends. */
  constructor(listener, lineBuffered = false) {
    this.#listeners = listener ? [listener] : [];
    // Kept for a first listener only while there has been none (the same Buffers the queue
    // holds, so bounded like it).
    this.#unheard = listener ? null : [];
    this.#lines = lineBuffered ? new LineSplitter() : null;
  }

  listen(fn) {
    this.#listeners.push(fn);
    // What came before the first listener (output can cross from the native side before the
    // promise that hands this object over resolves) goes to it first, before any later chunk
    // (those come on macrotasks): onData() right after terminal() misses nothing.
    if (this.#unheard) {
      const early = this.#unheard;
      this.#unheard = null;
      queueMicrotask(() => {
        for (const c of early) fn(c);
      });
    }
    return () => {
      this.#listeners = this.#listeners.filter((f) => f !== fn);
    };
  }

  push(chunk) {
    if (this.#lines) {
      const whole = this.#lines.push(chunk);
      if (whole) this.#give(whole);
      return;
    }
    this.#give(chunk);
  }

  #give(chunk) {
    if (this.#unheard) this.#unheard.push(chunk);
    for (const fn of this.#listeners) fn(chunk);
    if (this.#waiting) {
      const w = this.#waiting;
      this.#waiting = null;
      w({ value: chunk, done: false });
    } else this.#queue.push(chunk);
  }

  end() {
    const rest = this.#lines && this.#lines.flush();
    if (rest) this.#give(rest);
    this.#ended = true;
    if (this.#waiting) {
      const w = this.#waiting;
      this.#waiting = null;
      w({ value: undefined, done: true });
    }
  }

  [Symbol.asyncIterator]() {
    return {
      next: () => {
        if (this.#queue.length > 0) return Promise.resolve({ value: this.#queue.shift(), done: false });
        if (this.#ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => {
          this.#waiting = resolve;
        });
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }
}


module.exports = { LineSplitter, byLines, Chunks, WorkspaceReadStream, WorkspaceWriteStream };
