'use strict';
// kern-sandbox/ai: an AI SDK 7 sandbox session (`Experimental_SandboxSession` of
// @ai-sdk/provider-utils) over one kern Sandbox, and a code interpreter tool.
//
//   const sandbox = createKernSandbox({ image: "python:3.12-slim" });
//   await generateText({ model, tools: { codeInterpreter }, experimental_sandbox: sandbox, ... });
//   await sandbox.close();
//
// Nothing of `ai` is loaded: a session is a plain object of the shape the SDK reads, and the tool
// is what the SDK's `tool()` returns (it returns its argument) with a Standard Schema input
// schema, which the SDK validates and turns into JSON Schema for the model. So this file works
// from CommonJS and ESM alike, while `ai` itself is ESM-only.

const { SandboxError } = require('../index.js');
const { Box, badInput, cut, stderrOf } = require('./box.js');

const KERN = Symbol('kern-sandbox.box');

function checkObject(what, o) {
  if (o === null || typeof o !== 'object' || Array.isArray(o)) throw badInput(`${what} takes an options object`);
  return o;
}

function checkCommand(o) {
  checkObject('run()/spawn()', o);
  if (typeof o.command !== 'string' || o.command === '') {
    throw badInput('run()/spawn() option `command` must be a non-empty shell command string');
  }
}

function checkMaxOutput(n) {
  if (n !== undefined && !(Number.isSafeInteger(n) && n > 0)) {
    throw badInput(`run() option \`maxOutputLength\` must be a positive safe integer, got ${JSON.stringify(n)}`);
  }
}

function checkEncoding(encoding) {
  if (encoding === undefined) return 'utf-8';
  let known;
  try {
    known = new TextDecoder(encoding);
  } catch {
    known = null;
  }
  if (!known) throw badInput(`unsupported text encoding ${JSON.stringify(encoding)}`);
  // The label as given: TextDecoder names latin1 windows-1252, which encode() would not take.
  return encoding;
}

function encode(text, encoding) {
  if (typeof text !== 'string') throw badInput('writeTextFile() option `content` must be a string');
  const e = encoding.toLowerCase().replace(/[^a-z0-9]/g, '');
  if (e === 'utf8') return Buffer.from(text, 'utf8');
  if (e === 'latin1' || e === 'iso88591') return Buffer.from(text, 'latin1');
  if (e === 'utf16le' || e === 'ucs2') return Buffer.from(text, 'utf16le');
  if (e === 'ascii' || e === 'usascii') return Buffer.from(text, 'ascii');
  throw badInput(`writeTextFile() cannot encode ${JSON.stringify(encoding)}; use utf-8, utf-16le, latin1 or ascii`);
}

function checkLine(name, n) {
  if (n !== undefined && !(Number.isSafeInteger(n) && n >= 1)) {
    throw badInput(`readTextFile() option \`${name}\` must be a 1-based line number, got ${JSON.stringify(n)}`);
  }
}

/** Lines `start` to `end` (1-based, inclusive) of `text`, each with its line ending. */
function lines(text, start = 1, end = Infinity) {
  if (start === 1 && end === Infinity) return text;
  const parts = text.match(/[^\n]*\n|[^\n]+$/g) || [];
  return parts.slice(start - 1, end).join('');
}

/** A web ReadableStream of a SandboxProcess stream (AsyncIterable<Buffer>). */
function webStream(iterable) {
  const it = iterable[Symbol.asyncIterator]();
  return new ReadableStream({
    async pull(controller) {
      const { value, done } = await it.next();
      if (done) controller.close();
      else controller.enqueue(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
    },
    async cancel() {
      if (it.return) await it.return();
    },
  });
}

async function streamToBuffer(stream) {
  if (!stream || typeof stream.getReader !== 'function') {
    throw badInput('writeFile() option `content` must be a ReadableStream<Uint8Array>');
  }
  const chunks = [];
  const reader = stream.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (!(value instanceof Uint8Array)) throw badInput('writeFile(): the stream must yield Uint8Array chunks');
    chunks.push(Buffer.from(value.buffer, value.byteOffset, value.byteLength));
  }
  return Buffer.concat(chunks);
}

function bytesOf(content) {
  if (!(content instanceof Uint8Array)) throw badInput('writeBinaryFile() option `content` must be a Uint8Array');
  return content;
}

/** The process handle `spawn` resolves with. */
function processHandle(sp, stdin) {
  const handle = {
    pid: sp.pid,
    stdout: webStream(sp.stdout),
    stderr: webStream(sp.stderr),
    async wait() {
      const r = await sp.wait();
      return { exitCode: r.exitCode };
    },
    async kill() {
      if (sp.running) await sp.kill();
    },
  };
  if (stdin) {
    handle.stdin = new WritableStream({
      write: (chunk) => sp.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)),
      close: () => sp.end(),
      abort: () => sp.end(),
    });
  }
  return handle;
}

/**
 * An AI SDK `Experimental_SandboxSession` on a kern Sandbox, opened at its first use (or by
 * `open()`), closed by `close()`.
 */
function createKernSandbox(options) {
  const box = new Box(options);
  const session = {
    get description() {
      return box.describe();
    },

    async run(o) {
      checkCommand(o);
      checkMaxOutput(o.maxOutputLength);
      const sb = await box.sandbox();
      const r = await sb.run(['sh', '-c', o.command], { cwd: o.workingDirectory, env: o.env, signal: o.abortSignal });
      const stdout = r.stdout;
      const stderr = stderrOf(r);
      const out = { exitCode: r.exitCode, stdout: cut(stdout, o.maxOutputLength), stderr: cut(stderr, o.maxOutputLength) };
      if (o.maxOutputLength !== undefined) {
        out.stdoutLength = stdout.length;
        out.stderrLength = stderr.length;
      }
      return out;
    },

    async spawn(o) {
      checkCommand(o);
      const sb = await box.sandbox();
      const sp = await sb.spawn(['sh', '-c', o.command], { cwd: o.workingDirectory, env: o.env, signal: o.abortSignal, onStdout: null, onStderr: null });
      // Without `stdin: true` the process reads end-of-file at once, as the SDK specifies.
      if (!o.stdin) await sp.end().catch(() => {});
      return processHandle(sp, !!o.stdin);
    },

    async readFile(o) {
      checkObject('readFile()', o);
      const buf = await box.read(o.path, o.abortSignal);
      if (buf === null) return null;
      return new ReadableStream({
        start(controller) {
          controller.enqueue(new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength));
          controller.close();
        },
      });
    },

    async readBinaryFile(o) {
      checkObject('readBinaryFile()', o);
      const buf = await box.read(o.path, o.abortSignal);
      return buf === null ? null : new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    },

    async readTextFile(o) {
      checkObject('readTextFile()', o);
      const encoding = checkEncoding(o.encoding);
      checkLine('startLine', o.startLine);
      checkLine('endLine', o.endLine);
      const buf = await box.read(o.path, o.abortSignal);
      if (buf === null) return null;
      return lines(new TextDecoder(encoding).decode(buf), o.startLine, o.endLine);
    },

    async writeFile(o) {
      checkObject('writeFile()', o);
      await box.write(o.path, await streamToBuffer(o.content), o.abortSignal);
    },

    async writeBinaryFile(o) {
      checkObject('writeBinaryFile()', o);
      await box.write(o.path, bytesOf(o.content), o.abortSignal);
    },

    async writeTextFile(o) {
      checkObject('writeTextFile()', o);
      await box.write(o.path, encode(o.content, checkEncoding(o.encoding)), o.abortSignal);
    },

    async stat(o) {
      checkObject('stat()', o);
      return box.stat(o.path, o.abortSignal);
    },

    async listDirectory(o) {
      checkObject('listDirectory()', o);
      return box.list(o.path, o.abortSignal);
    },

    async deleteFile(o) {
      checkObject('deleteFile()', o);
      return box.remove(o.path, { signal: o.abortSignal });
    },

    /** Opens the Sandbox now (else the first call does). */
    async open() {
      await box.open();
      return session;
    },

    /** Closes the Sandbox: its boxes and processes end, a temporary workspace is removed. */
    close: () => box.close(),

    /** The kern Sandbox, opened. */
    sandbox: () => box.sandbox(),

    [Symbol.asyncDispose]: () => box.close(),
  };
  Object.defineProperty(session, KERN, { value: box });
  return session;
}

// The code interpreter tool. Its input schema is a Standard Schema (standardschema.dev) with its
// JSON Schema, which the SDK accepts as any schema it takes.
const LANGUAGES = ['python', 'node', 'typescript', 'bash', 'sh'];
const INPUT_JSON_SCHEMA = {
  type: 'object',
  properties: {
    code: { type: 'string', description: 'The code to run.' },
    language: { type: 'string', enum: LANGUAGES, default: 'python', description: 'Its language (default python).' },
  },
  required: ['code'],
  additionalProperties: false,
};

function validateInput(value) {
  const issues = [];
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { issues: [{ message: 'the input must be an object { code, language? }' }] };
  }
  if (typeof value.code !== 'string') issues.push({ message: '`code` must be a string', path: ['code'] });
  if (value.language !== undefined && !LANGUAGES.includes(value.language)) {
    issues.push({ message: `\`language\` must be one of ${LANGUAGES.join(', ')}`, path: ['language'] });
  }
  for (const k of Object.keys(value)) {
    if (k !== 'code' && k !== 'language') issues.push({ message: `unknown key \`${k}\``, path: [k] });
  }
  return issues.length ? { issues } : { value: { code: value.code, language: value.language || 'python' } };
}

const inputSchema = {
  '~standard': {
    version: 1,
    vendor: 'kern-sandbox',
    validate: validateInput,
    jsonSchema: { input: () => INPUT_JSON_SCHEMA, output: () => INPUT_JSON_SCHEMA },
  },
};

/** A Result as plain JSON: its MIME bundle (images as base64), and its chart. */
function resultJson(x) {
  return { isMainResult: x.isMainResult, data: { ...x.data }, chart: x.chart };
}

const IMAGE_TYPES = ['image/png', 'image/jpeg'];

/** What the model sees of a run: the output as JSON text without image payloads, and each
 * image as a file part, so a vision model looks at a figure instead of reading base64. */
function toModelOutput({ output }) {
  const images = [];
  const results = output.results.map((r) => {
    const data = { ...r.data };
    for (const t of IMAGE_TYPES) {
      if (typeof data[t] !== 'string') continue;
      images.push({ type: 'file', mediaType: t, data: { type: 'data', data: data[t] } });
      data[t] = `(${t}, attached)`;
    }
    return { ...r, data };
  });
  if (images.length === 0) return { type: 'json', value: output };
  return { type: 'content', value: [{ type: 'text', text: JSON.stringify({ ...output, results }) }, ...images] };
}

function interpreter(pick) {
  return {
    description: 'Run Python, Node.js, TypeScript or shell code in an isolated sandbox and get back what it printed, '
      + 'its rich results (the last expression, figures as base64 PNG) and the error it raised. Each call starts '
      + 'fresh: only files in the working directory persist between calls, not variables.',
    inputSchema,
    toModelOutput,
    async execute({ code, language }, opts) {
      const box = pick(opts);
      const sb = await box.sandbox();
      const r = await sb.runCode(code, { language, signal: opts && opts.abortSignal });
      return {
        stdout: r.stdout,
        stderr: stderrOf(r),
        exitCode: r.exitCode,
        error: r.error && { name: r.error.name, value: r.error.value, traceback: r.error.traceback },
        results: r.results.map(resultJson),
      };
    },
  };
}

/** The tool on the session `generateText({ experimental_sandbox })` passes to tools. */
const codeInterpreter = interpreter((opts) => {
  const s = opts && opts.experimental_sandbox;
  if (!s || !s[KERN]) {
    throw new SandboxError('codeInterpreter runs in a kern sandbox: pass experimental_sandbox: createKernSandbox(...) to generateText/streamText, or use createCodeInterpreter(sandbox)');
  }
  return s[KERN];
});

/** A code interpreter tool bound to one session of createKernSandbox(). */
function createCodeInterpreter(session) {
  if (!session || !session[KERN]) throw badInput('createCodeInterpreter(sandbox) takes a session from createKernSandbox()');
  return interpreter(() => session[KERN]);
}

module.exports = { createKernSandbox, codeInterpreter, createCodeInterpreter };
