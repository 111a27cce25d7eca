'use strict';
// rootless: no — reads index.d.ts, the JS lists, options/mod.rs and `kern run --help`; starts no box
// One source of truth at the JS boundary: the option names index.d.ts promises, the names the
// JS layer and the native side accept, and `kern run`'s flags agree. Each list is read from its
// own source (index.d.ts through the TypeScript compiler API, js/options.js as exported, KNOWN
// in src/session/options/mod.rs, `kern run --help`'s output), so an option added in one place only
// fails here. No box runs.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const ts = require('typescript');
const OPTIONS = require('../../js/options.js');
const platform = require('../../js/platform.js');

const repo = path.join(__dirname, '..', '..');

/** index.d.ts, parsed: the property names of an interface, a type literal, or an intersection. */
function declarations() {
  const file = path.join(repo, 'index.d.ts');
  const src = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const interfaces = new Map();
  const classes = new Map();
  const functions = new Map();
  src.forEachChild((n) => {
    if (ts.isInterfaceDeclaration(n)) interfaces.set(n.name.text, n);
    if (ts.isClassDeclaration(n) && n.name) classes.set(n.name.text, n);
    if (ts.isFunctionDeclaration(n) && n.name) functions.set(n.name.text, n);
  });
  const membersOf = (members) => members.filter((m) => m.name).map((m) => m.name.text);
  const namesOf = (type) => {
    if (ts.isTypeLiteralNode(type)) return membersOf(type.members);
    if (ts.isIntersectionTypeNode(type)) return type.types.flatMap(namesOf);
    if (ts.isTypeReferenceNode(type)) {
      const i = interfaces.get(type.typeName.getText(src));
      if (!i) throw new Error(`index.d.ts: no interface ${type.typeName.getText(src)}`);
      return membersOf(i.members);
    }
    throw new Error(`index.d.ts: an options type this test cannot read: ${type.getText(src)}`);
  };
  /** The names of the `opts` parameter of a class's method (or of a top-level function). */
  const optsOf = (fn) => {
    const p = fn.parameters.find((x) => x.name.getText(src) === 'opts');
    if (!p || !p.type) throw new Error(`index.d.ts: ${fn.name.getText(src)} has no typed opts`);
    return namesOf(p.type);
  };
  const method = (cls, name) => {
    const m = classes.get(cls).members.find((x) => ts.isMethodDeclaration(x) && x.name.getText(src) === name);
    if (!m) throw new Error(`index.d.ts: no ${cls}.${name}`);
    return optsOf(m);
  };
  return {
    sandbox: membersOf(interfaces.get('SandboxOptions').members),
    constructor: optsOf(classes.get('Sandbox').members.find(ts.isConstructorDeclaration)),
    run: method('Sandbox', 'run'),
    runCode: method('Sandbox', 'runCode'),
    readFile: method('Sandbox', 'readFile'),
    readStream: method('Sandbox', 'createReadStream'),
    kernel: method('Sandbox', 'kernel'),
    cell: method('Kernel', 'runCode'),
    spawn: method('Sandbox', 'spawn'),
    terminal: method('Sandbox', 'terminal'),
    watch: method('Sandbox', 'watch'),
    publish: method('Sandbox', 'publish'),
    oneShot: optsOf(functions.get('runCode')),
  };
}

/** The native side's list: KNOWN in src/session/options/mod.rs (`check_early` refuses anything else). */
function nativeKnown() {
  const text = fs.readFileSync(path.join(repo, 'src/session/options/mod.rs'), 'utf8');
  const m = /const KNOWN: &\[&str\] = &\[([^\]]*)\];/.exec(text);
  if (!m) throw new Error('src/session/options/mod.rs: no `const KNOWN: &[&str] = &[...]` list');
  return [...m[1].matchAll(/"([^"]+)"/g)].map((x) => x[1]);
}

/** `kern run`'s long flags, from its --help. */
function cliFlags() {
  const r = spawnSync(platform.kernPath(), ['run', '--help'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`kern run --help failed: ${r.stderr}`);
  const flags = [...r.stdout.matchAll(/^\s+(?:-\w, )?--([a-z][a-z-]*)/gm)].map((x) => x[1]);
  return flags.filter((f) => f !== 'help');
}

// SandboxOptions name -> `kern run` flag, where the names differ by design (camelCase in JS,
// --kebab-case on the CLI; units said in the JS name, and the CLI's shorter names).
const FLAG_OF = {
  image: 'image',
  workspace: 'workspace',
  workspaceMount: 'workspace-mount',
  memoryMb: 'memory',
  pids: 'pids-limit',
  cpus: 'cpus',
  timeoutS: 'timeout',
  tmpfs: 'tmpfs',
  volumes: 'volume', // repeatable: one --volume NAME:PATH each
  env: 'env',
  enforceLimits: 'no-enforce-limits', // a flag turns the default (true) off
  securityProfile: 'security-profile',
};

// SandboxOptions with no `kern run` flag, by design, and why. `kern run` is one fresh box from
// a terminal, for trying an image or a command: no session, no network, the caller's own tty.
const NO_FLAG = {
  setup: 'a session step before the calls; `kern run` has no session',
  workspaceMaxBytes: 'a quota the session checks between calls',
  name: 'names a resident box; resident boxes are the session\'s (persist)',
  persist: 'resident boxes are the session\'s',
  persistTtlS: 'resident boxes are the session\'s',
  network: 'the CLI box has no network; networking lives in the session (its proxy and relay)',
  egressAllow: 'the egress proxy runs in the session\'s process',
  secrets: 'the egress proxy writes them in, in the session\'s process',
  packageCache: 'the egress proxy keeps package files, in the session\'s process; the CLI box has no network',
  mounts: 'host mounts are checked by the session (MountRefused); the CLI binds only --workspace',
  profiles: 'profiles resolve to session options',
  maxOutputBytes: 'the CLI writes the box\'s output straight to the terminal: nothing is captured',
  spillOutput: 'the CLI writes the box\'s output straight to the terminal: nothing is capped, so nothing spills',
  requireLimits: 'the CLI says a best-effort cap on stderr; refusing is for unattended callers',
  apparmor: 'a session hardening option; the CLI box uses the default',
  capDrop: 'a session hardening option; the CLI box uses the default',
  user: 'the CLI box runs as the image\'s user',
  depsReadonly: 'concerns `setup`\'s .deps, which the CLI does not run',
  setupNetwork: 'concerns `setup`, which the CLI does not run',
  pycCache: 'the session\'s compiled-stdlib cache, shared across its calls',
  trackFiles: 'result.files is a session result; the CLI reports only an exit code',
  onStdout: 'a JS callback; the CLI streams to the terminal',
  onStderr: 'a JS callback; the CLI streams to the terminal',
  prewarm: 'a pool of boxes for a session\'s later calls',
  zygote: 'a zygote serves a session\'s later calls; a `kern run` is one call',
  spareMemoryMb: 'boxes kept ready for a session\'s later calls; a `kern run` is one call',
  requireIsolation: 'a session refusal at open(); the CLI box says what it could not enforce on stderr',
};

// `kern run` flags with no Sandbox option, by design, and why: they are about the terminal kern
// runs in, which a Sandbox (a library in another program) does not have.
const CLI_ONLY = {
  interactive: 'relays kern\'s own stdin to the box; a Sandbox call takes `stdin` per call, and sb.terminal() is written to',
  tty: 'relays the terminal kern runs in; the Sandbox\'s terminal is sb.terminal(), which its caller drives',
  publish: 'a Sandbox publishes a port with publish(), a method, for as long as it wants',
};

const sorted = (xs) => [...new Set(xs)].sort();

describe('option names agree across index.d.ts, the JS layer, the native side and kern run', () => {
  const d = declarations();

  test('SandboxOptions in index.d.ts is exactly what the native side accepts', () => {
    expect(sorted(d.sandbox)).toEqual(sorted(nativeKnown()));
    expect(d.sandbox.length).toBe(new Set(d.sandbox).size);
    expect(sorted(d.constructor)).toEqual(sorted(d.sandbox));
  });

  test('per-call, readFile, kernel, cell, spawn and terminal options in index.d.ts are the JS layer\'s lists', () => {
    expect(sorted(d.run)).toEqual(sorted(OPTIONS.run));
    expect(sorted(d.runCode)).toEqual(sorted(OPTIONS.runCode));
    expect(sorted(d.readFile)).toEqual(sorted(OPTIONS.readFile));
    expect(sorted(d.readStream)).toEqual(sorted(OPTIONS.readStream));
    expect(sorted(d.kernel)).toEqual(sorted(OPTIONS.kernel));
    expect(sorted(d.cell)).toEqual(sorted(OPTIONS.cell));
    expect(sorted(d.spawn)).toEqual(sorted(OPTIONS.spawn));
    expect(sorted(d.terminal)).toEqual(sorted(OPTIONS.terminal));
    expect(sorted(d.watch)).toEqual(sorted(OPTIONS.watch));
    expect(sorted(d.publish)).toEqual(sorted(OPTIONS.publish));
    // The one-shot runCode() takes a Sandbox's options and a call's language.
    expect(sorted(d.oneShot)).toEqual(sorted([...d.sandbox, 'language']));
  });

  test('every SandboxOptions name has a `kern run` flag or a reason it has none, and every flag an option or a reason it has none', () => {
    const flags = cliFlags();
    const mapped = Object.keys(FLAG_OF);
    // each option is accounted for exactly once
    expect(sorted([...mapped, ...Object.keys(NO_FLAG)])).toEqual(sorted(d.sandbox));
    expect(mapped.filter((k) => k in NO_FLAG)).toEqual([]);
    // the mapped flags and the CLI-only ones are kern run's flags, all of them
    expect(sorted([...Object.values(FLAG_OF), ...Object.keys(CLI_ONLY)])).toEqual(sorted(flags));
    expect(Object.keys(CLI_ONLY).filter((f) => Object.values(FLAG_OF).includes(f))).toEqual([]);
  });
});
