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
  const v8 = require('v8');
  const MAX_FRAME = 256 << 20;
  const RAW_PIECE = 64 << 20;
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
      const target = rel ? pathToFileURL(path.resolve(process.cwd(), s)).href : s;
      return import(target, opts).then((ns) => {
        imported.set(ns, target);
        return ns;
      });
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

  // ---- a kernel's state as data (kernel.fork(), checkpoints; the python side: driver_state.py)
  // Carried: the cells' let/const/class bindings (as let) and the globals they made; values by
  // structured clone (v8.serialize), functions and classes by their source, modules by name
  // (builtins, require()d files, import()ed specifiers); the current directory. Left out, by
  // name, with why: closures over local variables, native and bound functions, symbols, and
  // values holding instances of classes (a clone would make them plain objects).
  const GIVE = Symbol.for('kern.driver.give');
  const baseGlobals = new Set(Object.getOwnPropertyNames(globalThis));
  const imported = new Map();
  let cells = 0;
  const PLAIN = new Set([
    null, Object.prototype, Array.prototype, Map.prototype, Set.prototype, Date.prototype, RegExp.prototype,
    ArrayBuffer.prototype, DataView.prototype, Buffer.prototype, Boolean.prototype, Number.prototype,
    String.prototype, BigInt.prototype,
    ...[Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError].map((c) => c.prototype),
    ...[Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, Float32Array,
      Float64Array, BigInt64Array, BigUint64Array].map((c) => c.prototype),
  ]);
  // The first object in `v` a structured clone would change (one of a class), or null.
  const foreign = (v, seen) => {
    if (v === null || typeof v !== 'object' || seen.has(v)) return null;
    seen.add(v);
    if (!PLAIN.has(Object.getPrototypeOf(v))) return v;
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) return null;
    const items = v instanceof Map ? [...v.keys(), ...v.values()] : v instanceof Set ? [...v] : Object.values(v);
    for (const x of items) {
      const f = foreign(x, seen);
      if (f !== null) return f;
    }
    return null;
  };
  let builtins = null;
  const moduleOf = (v) => {
    if (v === null || (typeof v !== 'object' && typeof v !== 'function')) return null;
    if (imported.has(v)) return { kind: 'import', spec: imported.get(v) };
    if (builtins === null) {
      builtins = new Map();
      for (const b of nodeModule.builtinModules) {
        try {
          builtins.set(require(b), b);
        } catch {}
      }
    }
    if (builtins.has(v)) return { kind: 'require', spec: builtins.get(v) };
    for (const [id, m] of Object.entries(require.cache)) {
      if (m && m.exports === v) return { kind: 'require', spec: id };
    }
    return null;
  };
  // Whether function `fn` closes over anything but the kernel's globals (its [[Scopes]], as the
  // inspector shows them: Script and Global are the kernel's own).
  const closesOver = async (fn) => {
    globalThis[GIVE] = fn;
    const { result } = await post('Runtime.evaluate', { expression: 'globalThis[Symbol.for("kern.driver.give")]' });
    delete globalThis[GIVE];
    try {
      const own = await post('Runtime.getProperties', { objectId: result.objectId, ownProperties: true });
      const scopes = (own.internalProperties || []).find((p) => p.name === '[[Scopes]]');
      if (!scopes || !scopes.value || !scopes.value.objectId) return false;
      const list = await post('Runtime.getProperties', { objectId: scopes.value.objectId, ownProperties: true });
      return list.result.some((p) => p.value && !/^(Script|Global)$/.test(p.value.description || ''));
    } finally {
      post('Runtime.releaseObject', { objectId: result.objectId }).catch(() => {});
    }
  };
  const bind = async (e, value) => {
    if (e.scope === 'global') {
      globalThis[e.name] = value;
      return;
    }
    globalThis[GIVE] = value;
    try {
      const r = await post('Runtime.evaluate', {
        expression: `let ${e.name} = globalThis[Symbol.for("kern.driver.give")];`,
        replMode: true,
      });
      if (r.exceptionDetails) throw new Error(r.exceptionDetails.exception ? r.exceptionDetails.exception.description : r.exceptionDetails.text);
    } finally {
      delete globalThis[GIVE];
    }
  };
  const sendBlob = (parts) => {
    for (const p of parts) {
      for (let at = 0; at < p.length; at += RAW_PIECE) {
        const piece = p.subarray(at, at + RAW_PIECE);
        const head = Buffer.alloc(5);
        head.writeUInt32BE(piece.length + 1);
        sock.write(head);
        sock.write(piece);
      }
    }
  };
  const saveState = async () => {
    const { names } = await post('Runtime.globalLexicalScopeNames', {});
    const globals = Object.getOwnPropertyNames(globalThis).filter((n) => !baseGlobals.has(n));
    const entries = [];
    const parts = [];
    const left = [];
    for (const [scope, name] of [...names.map((n) => ['let', n]), ...globals.map((n) => ['global', n])]) {
      try {
        let value;
        if (scope === 'let') {
          const r = await post('Runtime.evaluate', { expression: name, replMode: true });
          if (r.exceptionDetails) throw new Error('it has no value yet');
          value = await valueOf(r.result);
        } else {
          value = globalThis[name];
        }
        const e = { name, scope };
        const mod = moduleOf(value);
        if (mod !== null) {
          Object.assign(e, mod);
        } else if (typeof value === 'function') {
          const src = Function.prototype.toString.call(value);
          if (/\{\s*\[native code\]\s*\}$/.test(src)) throw new Error('a native or bound function, not one a cell defined');
          if (await closesOver(value)) throw new Error("a function that closes over local variables: what it captured can't be carried");
          Object.assign(e, { kind: 'source', src });
        } else {
          const f = foreign(value, new Set());
          if (f !== null) {
            const c = Object.getPrototypeOf(f) && Object.getPrototypeOf(f).constructor;
            throw new Error(`it holds an instance of ${(c && c.name) || 'a class'}, which a structured clone would make a plain object`);
          }
          parts.push(v8.serialize(value));
          Object.assign(e, { kind: 'value', part: parts.length - 1 });
        }
        entries.push(e);
      } catch (err) {
        left.push([name, `${(err && err.name) || 'Error'}: ${(err && err.message) || String(err)}`.slice(0, 300)]);
      }
    }
    send({
      type: 'state', node: process.version, implementation: 'node', parts: parts.map((p) => p.length),
      left, cwd: process.cwd(), cells, entries,
    });
    sendBlob(parts);
  };
  const loadState = async (head, blob) => {
    if (head.implementation !== 'node' || head.node !== process.version) {
      throw new Error(`this state was saved by ${head.implementation} ${head.node || head.python}, and this kernel runs node ${process.version}: restore it into a box of the image it was taken in`);
    }
    try {
      process.chdir(head.cwd);
    } catch (e) {
      writeSync(2, `kern: the kernel's directory ${head.cwd} is not here (${e.code}); it stays in ${process.cwd()}\n`);
    }
    cells = Math.max(cells, head.cells || 0);
    const parts = [];
    let at = 0;
    for (const n of head.parts) {
      parts.push(blob.subarray(at, at + n));
      at += n;
    }
    // Classes and functions first: nothing else needs them to load, and a later cell may.
    const order = [...head.entries].sort((a, b) => (a.kind === 'source' ? 0 : 1) - (b.kind === 'source' ? 0 : 1));
    for (const e of order) {
      try {
        let value;
        if (e.kind === 'source') {
          const r = await post('Runtime.evaluate', { expression: `(${e.src}\n)`, replMode: true });
          if (r.exceptionDetails) throw new Error(r.exceptionDetails.exception ? r.exceptionDetails.exception.description : r.exceptionDetails.text);
          value = await valueOf(r.result);
        } else if (e.kind === 'require') {
          value = require(e.spec);
        } else if (e.kind === 'import') {
          value = await import(e.spec);
          imported.set(value, e.spec);
        } else {
          value = v8.deserialize(parts[e.part]);
        }
        await bind(e, value);
      } catch (err) {
        writeSync(2, `kern: ${e.name} could not be loaded: ${(err && err.message) || String(err)}\n`);
      }
    }
  };

  let kernel = false;
  const runCell = async (id, source, once) => {
    const name = once ? '[eval]' : `[cell-${id}]`;
    if (!once) cells = Math.max(cells, id);
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
    if (obj.type === 'save' || obj.type === 'load') {
      const load = obj.type === 'load';
      if (typeof obj.id !== 'number' || typeof obj.marker !== 'string' ||
          (load && !(Array.isArray(obj.parts) && obj.parts.every((n) => Number.isInteger(n) && n >= 0)))) {
        die(`a ${obj.type} frame needs an id, a marker (and a load, its parts' sizes): ${stringify(obj).slice(0, 200)}`);
      }
      if (!kernel) {
        kernel = true;
        kernelMode();
      }
      const total = load ? obj.parts.reduce((a, b) => a + b, 0) : 0;
      pending = { obj, blob: Buffer.allocUnsafe(total), got: 0 };
      if (!load || total === 0) stateOp();
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
  // A save or load, once its raw frames (a load's state) are in: run in turn with the cells.
  let pending = null;
  let rawLeft = 0;
  const stateOp = () => {
    const { obj, blob } = pending;
    pending = null;
    queue = queue.then(async () => {
      let ok = true;
      try {
        if (obj.type === 'save') await saveState();
        else await loadState(obj, blob);
      } catch (e) {
        ok = false;
        const text = inspect(e);
        writeSync(2, `${text}\n`);
        send(errorFrame(e, text));
      }
      writeSync(1, obj.marker);
      writeSync(2, obj.marker);
      send({ type: 'done', id: obj.id, status: ok ? 'ok' : 'error', exit: null });
    });
  };
  sock.on('data', (data) => {
    let chunk = data;
    while (chunk.length) {
      if (rawLeft > 0) {
        // A raw frame's data, straight into the load's buffer.
        const n = Math.min(rawLeft, chunk.length);
        chunk.copy(pending.blob, pending.got, 0, n);
        pending.got += n;
        rawLeft -= n;
        chunk = chunk.subarray(n);
        if (rawLeft === 0 && pending.got === pending.blob.length) stateOp();
        continue;
      }
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      chunk = Buffer.alloc(0);
      frames();
      if (rawLeft > 0) {
        chunk = buf;
        buf = Buffer.alloc(0);
      }
    }
  });
  const frames = () => {
    while (buf.length >= 4) {
      const len = buf.readUInt32BE(0);
      if (len > MAX_FRAME) die(`a frame of ${len} bytes is over the limit`);
      if (len > 1 && buf.length >= 5 && buf[4] === 0) {
        if (pending === null || pending.obj.type !== 'load' || pending.got + len - 1 > pending.blob.length) {
          die('a raw frame that no load asked for');
        }
        rawLeft = len - 1;
        buf = buf.subarray(5);
        return;
      }
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
  };
  sock.on('end', () => {
    if (kernel) queue.then(() => process.exit(0));
  });
})();
