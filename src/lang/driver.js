// kern-sandbox Node driver: runs JavaScript (and TypeScript) cells the way a console does.
//
// Started in the box as `node -e <this file>` with a UNIX stream socket on fd 3, its only channel
// to the host (stdout and stderr belong to the user's code). It speaks the python driver's frames
// (see driver.py): a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
//   host -> driver  {"type": "setup", "acorn": "<acorn.js source>", "typescript": bool, "ack"?: true}   first
//   driver -> host  {"type": "ready", "node": "v24.1.0", "strips": bool}   only if the setup asked (ack)
//                   {"type": "cell", "id": N, "code": "...", "once": bool, "marker"?: "...", "env"?: {...}}
//   driver -> host  {"type": "display", "data": {mime: value}}     display(), while the cell runs
//                   {"type": "result", "data": {...}}              the last expression's value
//                   {"type": "error", "ename", "evalue", "traceback"}   the cell threw
//                   {"type": "done", "id": N, "status": "ok" | "error", "exit": null}   last
//
// A cell is evaluated by V8's REPL mode (`Runtime.evaluate` with `replMode`, through an in-process
// inspector session): what Chrome DevTools' console and Deno's Jupyter kernel use. It gives
// top-level `await`, `let`/`const`/`class` that a later cell may declare again, and the
// completion value, without rewriting the code. What REPL mode cannot take, `import`
// declarations, acorn (the parser Node vendors, sent by the host in the setup frame) finds, and
// they become `await import()` in place, on the same line, so stack traces keep the user's lines.
//
// Parsing happens here, in the box, not on the host: the code is untrusted, and a parser's
// worst case (deep nesting, a 16 MiB cell) then costs the box's CPU and memory, not the caller's
// event loop.
//
// A one-shot cell ("once") behaves as `node -e` does: an uncaught error prints its stack and
// exits 1; otherwise the process exits when its event loop is empty. A kernel's cells survive
// errors, including asynchronous ones after the cell, which are printed on stderr.
'use strict';
(() => {
  const fs = require('fs');
  const net = require('net');
  const path = require('path');
  const util = require('util');
  const inspector = require('inspector');
  const { pathToFileURL } = require('url');
  const nodeModule = require('module');
  const MAX_FRAME = 256 << 20;
  const TAKE = Symbol.for('kern.driver.take');
  const IMPORT = Symbol.for('kern.import');
  const DISPLAY_HOOK = Symbol.for('Jupyter.display');
  const { stringify } = JSON;
  const writeSync = fs.writeSync;

  // A kernel cell's own variables ("env") are set in process.env for the cell (and what it
  // starts), and restored once it has settled: a variable still as the cell's env set it gets
  // its old value back (or goes); one the cell changed or deleted itself keeps the change.
  const environ = process.env;
  const hasOwn = Function.prototype.call.bind(Object.prototype.hasOwnProperty);
  const cellEnv = (env) =>
    Object.keys(env).map((name) => {
      const old = hasOwn(environ, name) ? environ[name] : undefined;
      environ[name] = env[name];
      return [name, old, env[name]];
    });
  const restoreEnv = (saved) => {
    for (const [name, old, value] of saved) {
      if (!hasOwn(environ, name) || environ[name] !== value) continue;
      if (old === undefined) delete environ[name];
      else environ[name] = old;
    }
  };

  const die = (why) => {
    writeSync(2, `kern node driver: ${why}\n`);
    process.exit(70);
  };

  // ---- the channel
  const sock = new net.Socket({ fd: 3, readable: true, writable: true, allowHalfOpen: true });
  sock.on('error', () => process.exit(70));
  const send = (obj) => {
    const body = Buffer.from(stringify(obj), 'utf8');
    if (body.length > MAX_FRAME) {
      writeSync(2, `note: a result of ${body.length} bytes was dropped: a frame may be at most 256 MiB\n`);
      return;
    }
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length);
    sock.write(Buffer.concat([head, body]));
  };
  const flushed = () => new Promise((resolve) => sock.write('', resolve));

  // ---- values as MIME bundles
  const encode = (mime, v) => {
    if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
    if (mime === 'application/json' || (mime.endsWith('+json') && typeof v === 'object')) return v;
    return typeof v === 'string' ? v : String(v);
  };
  // An object offers MIME forms with a `[Symbol.for("Jupyter.display")]()` method returning a
  // bundle ({"text/html": ...}), as Deno's Jupyter kernel reads them; every value has text/plain.
  const bundleOf = (value) => {
    const data = { 'text/plain': util.inspect(value) };
    const hook =
      value !== null && (typeof value === 'object' || typeof value === 'function') ? value[DISPLAY_HOOK] : undefined;
    if (typeof hook === 'function') {
      const b = hook.call(value);
      if (b !== null && typeof b === 'object') {
        for (const [k, v] of Object.entries(b)) data[k] = encode(k, v);
      }
    }
    return data;
  };
  let inCell = false;
  // display(value): its bundle; display(data, mime): data as that MIME type (a Buffer or
  // Uint8Array is sent as base64, a string as it is, JSON types as they are).
  const display = (value, mime) => {
    if (!inCell) return;
    if (mime === undefined) return send({ type: 'display', data: bundleOf(value) });
    if (typeof mime !== 'string' || !mime.includes('/')) {
      throw new TypeError('display(value, mime): mime must be a MIME type such as "text/html"');
    }
    send({ type: 'display', data: { [mime]: encode(mime, value) } });
  };
  Object.defineProperty(globalThis, 'display', { value: display, writable: true, configurable: true });

  // ---- evaluation
  const session = new inspector.Session();
  session.connect();
  const post = (method, params) =>
    new Promise((resolve, reject) =>
      session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))),
    );
  let taken;
  Object.defineProperty(globalThis, TAKE, { value: (v) => { taken = v; }, configurable: true });
  // The value behind a remote object: primitives come by value, others through TAKE.
  const valueOf = async (remote) => {
    if (remote.type === 'undefined') return undefined;
    if (remote.objectId === undefined) {
      if ('unserializableValue' in remote) {
        const u = remote.unserializableValue;
        return u.endsWith('n') ? BigInt(u.slice(0, -1)) : Number(u);
      }
      return remote.value;
    }
    taken = undefined;
    await post('Runtime.callFunctionOn', {
      objectId: remote.objectId,
      functionDeclaration: 'function () { "use strict"; globalThis[Symbol.for("kern.driver.take")](this); }',
    });
    post('Runtime.releaseObject', { objectId: remote.objectId }).catch(() => {});
    return taken;
  };

  // import() of a cell: a relative specifier against the current directory, as a module of the
  // workspace would; a bare one as `node -e` resolves it.
  Object.defineProperty(globalThis, IMPORT, {
    value: (spec, opts) => {
      const s = String(spec);
      const rel = s.startsWith('./') || s.startsWith('../') || s.startsWith('/');
      return import(rel ? pathToFileURL(path.resolve(process.cwd(), s)).href : s, opts);
    },
    configurable: true,
  });

  let acorn = null;
  let typescript = false;
  const parse = (code, sourceType) =>
    acorn.parse(code, {
      ecmaVersion: 'latest',
      sourceType,
      allowAwaitOutsideFunction: true,
      allowHashBang: true,
      allowReturnOutsideFunction: false,
    });
  const lit = (node) => stringify(node.type === 'Literal' ? String(node.value) : node.name);
  const importOf = (code, node) => {
    const args = [stringify(String(node.source.value))];
    if (node.attributes && node.attributes.length) {
      const pairs = node.attributes.map((a) => `${lit(a.key)}: ${stringify(String(a.value.value))}`);
      args.push(`{ with: { ${pairs.join(', ')} } }`);
    }
    const call = `(await globalThis[Symbol.for("kern.import")](${args.join(', ')}))`;
    const named = [];
    let ns = null;
    for (const s of node.specifiers) {
      if (s.type === 'ImportNamespaceSpecifier') ns = s.local.name;
      else if (s.type === 'ImportDefaultSpecifier') named.push(`default: ${s.local.name}`);
      else named.push(`${lit(s.imported)}: ${s.local.name}`);
    }
    if (ns === null && named.length === 0) return `${call};`;
    if (ns === null) return `const { ${named.join(', ')} } = ${call};`;
    const rest = named.length ? `, { ${named.join(', ')} } = ${ns}` : '';
    return `const ${ns} = ${call}${rest};`;
  };
  // The code as REPL mode runs it, and whether its last statement is an expression (whose
  // value is the cell's result). Code that neither grammar accepts goes as it is: V8 says why.
  const prepare = (code) => {
    let program;
    try {
      program = parse(code, 'script');
    } catch {
      try {
        program = parse(code, 'module');
      } catch {
        return { code, show: false };
      }
    }
    const body = program.body;
    const show = body.length > 0 && body[body.length - 1].type === 'ExpressionStatement';
    let out = '';
    let at = 0;
    for (const node of body) {
      if (node.type !== 'ImportDeclaration') continue;
      const original = code.slice(node.start, node.end);
      const lines = original.split('\n').length - 1;
      out += code.slice(at, node.start) + importOf(code, node) + '\n'.repeat(lines);
      at = node.end;
    }
    return { code: out + code.slice(at), show };
  };

  // ---- errors
  const inspect = (e) => {
    if (e instanceof Refusal) return e.message;
    let text;
    try {
      text = util.inspect(e);
    } catch {
      text = String(e);
    }
    // The frames below the cell's are the driver's.
    const lines = text.split('\n');
    const cut = lines.findIndex((l) => /^\s+at .*(\(node:inspector|node:internal\/modules\/typescript)/.test(l));
    return cut === -1 ? text : lines.slice(0, cut).join('\n');
  };
  const errorFrame = (e, traceback) => {
    const isErr = e !== null && typeof e === 'object';
    let name = 'Error';
    let message = '';
    try {
      name = isErr && typeof e.name === 'string' ? e.name : typeof e;
      message = isErr && typeof e.message === 'string' ? e.message : String(e);
    } catch {}
    return { type: 'error', ename: name, evalue: message, traceback };
  };

  // A kernel survives what its cells leave running, as Node's REPL does.
  const kernelMode = () => {
    process.on('uncaughtException', (e) => writeSync(2, `Uncaught ${inspect(e)}\n`));
    process.on('unhandledRejection', (e) => writeSync(2, `Uncaught (in promise) ${inspect(e)}\n`));
  };

  // Said as it is, without a stack: nothing of the cell ran.
  class Refusal extends Error {}
  const refuseTypescript = () => {
    const strip = nodeModule.stripTypeScriptTypes;
    if (typeof strip === 'function') return null;
    return new Refusal(
      `TypeScript cells need Node.js >= 22.13 or >= 23.2 (module.stripTypeScriptTypes); this box's node is ${process.version}. ` +
        'Use language "node", or bring a newer Node.js into the box: an `image` with one, or a Node build bound in ' +
        "with `mounts` and put first on the box's PATH with `env`.",
    );
  };
  const stripTypes = (code) => {
    const strip = nodeModule.stripTypeScriptTypes;
    // Node warns, once, that stripTypeScriptTypes is experimental: the driver's business, not
    // the cell's stderr. The warning is emitted synchronously, so only this call is filtered.
    const emitWarning = process.emitWarning;
    process.emitWarning = function (w, ...rest) {
      if (String(w && w.message !== undefined ? w.message : w).includes('stripTypeScriptTypes')) return;
      return emitWarning.call(process, w, ...rest);
    };
    try {
      return strip(code, { mode: 'strip' });
    } catch (e) {
      // Enums and namespaces need code generated for them: 'transform' does it.
      if (e && e.code === 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX') return strip(code, { mode: 'transform' });
      throw e;
    } finally {
      process.emitWarning = emitWarning;
    }
  };

  let kernel = false;
  const runCell = async (id, source, once) => {
    const name = once ? '[eval]' : `[cell-${id}]`;
    // `throw null` is an error too: whether the cell threw is its own flag.
    let threw = false;
    let failed = null;
    let where = '';
    let result;
    inCell = true;
    try {
      let code = source;
      if (typescript) {
        const refused = refuseTypescript();
        if (refused) throw refused;
        code = stripTypes(code);
      }
      const prepared = prepare(code);
      const r = await post('Runtime.evaluate', {
        expression: `${prepared.code}\n//# sourceURL=${name}`,
        replMode: true,
        awaitPromise: true,
      });
      if (r.exceptionDetails) {
        const d = r.exceptionDetails;
        const ex = d.exception ? await valueOf(d.exception) : new Error(d.text);
        // A syntax error's stack has no line: say where, as `node -e` does (the rewritten
        // imports keep their lines).
        if (ex instanceof SyntaxError && typeof d.lineNumber === 'number') {
          const line = source.split('\n')[d.lineNumber];
          if (line !== undefined) {
            where = `${name}:${d.lineNumber + 1}\n${line}\n${' '.repeat(d.columnNumber || 0)}^\n\n`;
          }
        }
        throw ex;
      }
      if (prepared.show) {
        let value = await valueOf(r.result);
        // A promise as the last value is awaited, as a notebook cell's would be.
        if (value !== null && typeof value === 'object' && typeof value.then === 'function') value = await value;
        if (value !== undefined) result = value;
      }
      if (result !== undefined) send({ type: 'result', data: bundleOf(result) });
    } catch (e) {
      threw = true;
      failed = e;
    }
    inCell = false;
    if (threw) {
      const text = where + inspect(failed);
      writeSync(2, `${once ? '' : 'Uncaught '}${text}\n`);
      send(errorFrame(failed, text));
    }
    return !threw;
  };

  // ---- the loop
  let buf = Buffer.alloc(0);
  let queue = Promise.resolve();
  const frame = (obj) => {
    if (obj.type === 'setup') {
      const m = { exports: {} };
      const load = require('vm').runInThisContext(`(function (module, exports) {${obj.acorn}\n})`, {
        filename: 'acorn.js',
      });
      load(m, m.exports);
      acorn = m.exports;
      typescript = obj.typescript === true;
      // A kernel's host waits for this before kernel() resolves: it refuses there a Node that
      // cannot run the kernel's cells (typescript on a Node without stripTypeScriptTypes).
      if (obj.ack === true) {
        send({ type: 'ready', node: process.version, strips: typeof nodeModule.stripTypeScriptTypes === 'function' });
      }
      return;
    }
    if (obj.type !== 'cell' || typeof obj.id !== 'number' || typeof obj.code !== 'string') {
      die(`a frame must be a setup or a cell frame: ${stringify(obj).slice(0, 200)}`);
    }
    if (acorn === null) die('a cell came before the setup frame');
    const env = obj.env === undefined ? {} : obj.env;
    if (env === null || typeof env !== 'object' || Array.isArray(env) || Object.values(env).some((v) => typeof v !== 'string')) {
      die(`a cell frame's env must map names to strings: ${stringify(env).slice(0, 200)}`);
    }
    const once = obj.once === true;
    if (!once && !kernel) {
      kernel = true;
      kernelMode();
    }
    queue = queue.then(async () => {
      const saved = cellEnv(env);
      let ok;
      try {
        ok = await runCell(obj.id, obj.code, once);
      } finally {
        restoreEnv(saved);
      }
      if (typeof obj.marker === 'string') {
        writeSync(1, obj.marker);
        writeSync(2, obj.marker);
      }
      send({ type: 'done', id: obj.id, status: ok ? 'ok' : 'error', exit: null });
      if (once) {
        await flushed();
        sock.end();
        if (!ok) process.exit(1);
        // As `node -e`: the process ends when what the cell started is done.
        sock.unref();
      }
    });
  };
  sock.on('data', (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    while (buf.length >= 4) {
      const len = buf.readUInt32BE(0);
      if (len > MAX_FRAME) die(`a frame of ${len} bytes is over the limit`);
      if (buf.length < 4 + len) break;
      let obj;
      try {
        obj = JSON.parse(buf.subarray(4, 4 + len).toString('utf8'));
      } catch (e) {
        die(`a malformed frame: ${e.message}`);
      }
      buf = buf.subarray(4 + len);
      frame(obj);
    }
  });
  sock.on('end', () => {
    if (kernel) queue.then(() => process.exit(0));
  });
})();
