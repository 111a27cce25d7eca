'use strict';
// A call's result (ExecutionResult) and its rich results (Result), built from what the native
// side hands over.

class Result {
  // Additions: `isMainResult` (the value of the last expression, not a display() or a figure)
  // and `chart` (a matplotlib figure's data, as the driver read it; see index.d.ts).
  constructor(data, isMainResult = false, chart = null) {
    this.data = data;
    this.isMainResult = isMainResult;
    this.chart = chart;
  }
  get text() { return this.data['text/plain']; }
  get html() { return this.data['text/html']; }
  get markdown() { return this.data['text/markdown']; }
  get svg() { return this.data['image/svg+xml']; }
  get json() { return this.data['application/json']; }
  get png() { return decodeImage(this.data['image/png']); }
  get jpeg() { return decodeImage(this.data['image/jpeg']); }
  get latex() { return this.data['text/latex']; }
  get javascript() { return this.data['application/javascript']; }
  get pdf() { return decodeImage(this.data['application/pdf']); }
  formats() { return Object.keys(this.data); }
}

function decodeImage(b64) {
  return typeof b64 === 'string' ? Buffer.from(b64, 'base64') : null;
}

/** A native bundle as a public Result. */
function toResult(b) {
  return new Result(bundleData(b), b.isMain, b.chart ? JSON.parse(b.chart) : null);
}

/** `onResult` (guarded) as the native side calls it: with each native bundle as it is kept. */
function liveResults(onResult) {
  return onResult ? (b) => onResult(toResult(b)) : undefined;
}

/** A result's `data` from the native side's MIME types and payloads: a null-prototype object,
 * so no key the box picks (the native side admits only MIME type names anyway) can stand in for
 * an Object.prototype method. */
function bundleData(b) {
  const data = Object.create(null);
  b.mimes.forEach((mime, i) => {
    data[mime] = b.payloads[i];
  });
  return data;
}

/** Output Buffer -> string. The native side caps each stream at maxOutputBytes; a cap beyond what
 * one JS string can hold is cut here, with a note, rather than thrown. */
function outputText(buf, notes, name) {
  if (buf.length <= MAX_STRING_BYTES) return buf.toString('utf8');
  notes.push(`note: ${name} was cut to ${MAX_STRING_BYTES} bytes, the most a JS string can hold`);
  return buf.toString('utf8', 0, MAX_STRING_BYTES);
}
const MAX_STRING_BYTES = require('buffer').constants.MAX_STRING_LENGTH;

function spillOf(s) {
  return s ? { path: s.path, bytes: s.bytes, complete: s.complete } : null;
}

class ExecutionResult {
  // What kern knows it wrote, from the native result (never guessed from the text):
  // the workload's part of stderr, undecoded until asked for, and kern's own lines.
  #codeStderr;
  #runtimeNotes;

  /** `r`: the native result (stdout/stderr as Buffers, `runtimeNotes`, and `codeStart`..`codeEnd`,
   * the workload's bytes of stderr); `extraNotes`: notes the JS layer adds. */
  constructor(r, extraNotes = []) {
    const notes = [];
    this.stdout = outputText(r.stdout, notes, 'stdout');
    const stdoutCut = notes.length > 0;
    let stderr = outputText(r.stderr, notes, 'stderr');
    const stderrCut = notes.length > (stdoutCut ? 1 : 0);
    notes.push(...extraNotes);
    if (notes.length) stderr += (stderr && !stderr.endsWith('\n') ? '\n' : '') + notes.join('\n') + '\n';
    this.stderr = stderr;
    this.#codeStderr = r.stderr.subarray(r.codeStart, Math.min(r.codeEnd, MAX_STRING_BYTES));
    this.#runtimeNotes = [...r.runtimeNotes, ...notes];
    this.exitCode = r.exitCode;
    this.durationMs = r.durationMs;
    this.fault = r.fault ? { type: r.fault.type, message: r.fault.message } : null;
    this.files = r.files.map((f) => ({ path: f.path, size: f.size, change: f.change }));
    this.stdoutTruncated = r.stdoutTruncated || stdoutCut;
    this.stderrTruncated = r.stderrTruncated || stderrCut;
    this.truncated = r.truncated || stdoutCut || stderrCut;
    // Addition: where each stream went past maxOutputBytes, with `spillOutput`.
    this.stdoutSpill = spillOf(r.stdoutSpill);
    this.stderrSpill = spillOf(r.stderrSpill);
    this.signal = r.signal ?? null;
    this.results = r.results.map(toResult);
    // Addition: the exception a cell raised (see index.d.ts).
    this.error = r.error ? { name: r.error.name, value: r.error.value, traceback: r.error.traceback } : null;
    // An addition: a kernel cell's number, null for a one-shot call.
    this.executionCount = r.executionCount ?? null;
  }
  get success() { return this.exitCode === 0 && this.fault === null; }
  get codeStderr() { return this.#codeStderr.toString('utf8'); }
  get runtimeNotes() { return [...this.#runtimeNotes]; }
}


module.exports = { Result, ExecutionResult, toResult, liveResults };
