'use strict';
// rootless: no — the examples run as a user would run them on a host that passes `kern doctor`
// (`npx kern doctor && …` exits 1 where caps are only rlimits, as they are rootless on this
// cgroup-v1 machine); as root each runs once, against one image store.
//
// Every example of the documentation, run as written. The test reads README.md and docs/*.md now
// (no copies), takes each ```js, ```ts and ```bash block, and runs it: a JS/TS block as an ES
// module of its own (TypeScript's types stripped) in a temp project whose
// node_modules/kern-sandbox is this checkout, a bash block with `bash -e` there (`npx kern` is this
// checkout's kern). `python:3.12-slim` comes from a local registry standing in as a Docker Hub
// mirror (KERN_REGISTRY_MIRRORS), which holds the sci test rootfs (Debian's python3 with
// matplotlib, pandas and numpy; nodejs) under that name. A block claims its output with
// `// -> text` (`# -> text`) at a line's end; the claimed lines must appear in its stdout, in
// order. A block that is not to run carries `<!-- readme-test: norun=why -->` (or skip=why) on the
// line before it; they are counted and listed. The same test checks every relative link and
// anchor in those files and CONTRIBUTING.md.

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { spawn, execFileSync } = require('child_process');
const ts = require('typescript');
const reg = require('../support/registry');
const docs = require('../support/docs-examples');
const { uniqueName, hostProcessesMatching, waitFor } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const KERN = process.env.KERN_BIN || path.join(docs.REPO, 'kern');
const RUNNABLE = new Set(['js', 'ts', 'bash']);
const LAYOUT_VERSION = 'readme-oci-1';
const JEST = require.resolve('jest/bin/jest');

const all = docs.exampleFiles().flatMap((f) => docs.blocks(f));
const examples = all.filter((b) => RUNNABLE.has(b.lang));
const runs = (b) => !b.marker || b.marker.run === 'jest';
const toRun = examples.filter(runs);
const notRunnable = examples.filter((b) => b.marker && b.marker.norun);
const skipped = examples.filter((b) => b.marker && b.marker.skip);
const where = (b) => `${b.file}:${b.line} (${b.lang})`;

// --- the python:3.12-slim the examples pull --------------------------------------------------------

/** An OCI layout of the sci rootfs, one uncompressed layer, cached beside it (rebuilt when the
 * rootfs's stamp changes). */
function sciLayout() {
  const stamp = path.join(SCI, '.kern-test-rootfs');
  if (!fs.existsSync(stamp)) {
    throw new Error(`sci test rootfs missing: ${stamp} not found. Build it with scripts/build-test-rootfs.sh, then scripts/build-test-rootfs-sci.sh (or point KERN_TEST_ROOTFS_SCI at one).`);
  }
  // Bump LAYOUT_VERSION when the layout's making below changes.
  const want = crypto.createHash('sha256').update(fs.readFileSync(stamp)).update(LAYOUT_VERSION).digest('hex');
  const dir = `${SCI}-readme-oci`;
  if (fs.existsSync(path.join(dir, '.stamp')) && fs.readFileSync(path.join(dir, '.stamp'), 'utf8') === want) return dir;
  const tmp = `${dir}.tmp.${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  const blobs = path.join(tmp, 'blobs', 'sha256');
  fs.mkdirSync(blobs, { recursive: true });
  const layer = path.join(tmp, 'layer.tar');
  execFileSync('tar', ['-C', SCI, '--numeric-owner', '--sort=name', '--exclude=./.kern-test-rootfs', '--exclude=./dev/*', '-cf', layer, '.'], { stdio: 'pipe' });
  const layerDigest = execFileSync('sha256sum', [layer], { encoding: 'utf8' }).split(' ')[0];
  const layerSize = fs.statSync(layer).size;
  fs.renameSync(layer, path.join(blobs, layerDigest));
  const blob = (obj) => {
    const buf = Buffer.from(JSON.stringify(obj));
    const d = crypto.createHash('sha256').update(buf).digest('hex');
    fs.writeFileSync(path.join(blobs, d), buf);
    return { digest: `sha256:${d}`, size: buf.length };
  };
  const arch = { x64: 'amd64', arm64: 'arm64' }[process.arch];
  const config = blob({
    architecture: arch,
    os: 'linux',
    config: { Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8'], Cmd: ['python3'] },
    rootfs: { type: 'layers', diff_ids: [`sha256:${layerDigest}`] },
  });
  const manifest = blob({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
    layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: `sha256:${layerDigest}`, size: layerSize }],
  });
  fs.writeFileSync(path.join(tmp, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  fs.writeFileSync(
    path.join(tmp, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', ...manifest, annotations: { 'org.opencontainers.image.ref.name': 'latest' } }],
    })
  );
  fs.writeFileSync(path.join(tmp, '.stamp'), want);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.renameSync(tmp, dir);
  return dir;
}

// --- the project the examples run in -----------------------------------------------------------------

let registry;
let project;
let kernHome;
let env;

beforeAll(async () => {
  const layout = sciLayout();
  registry = await reg.startRegistry();
  await reg.push(registry, layout, 'library/python:3.12-slim');
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-readme-'));
  kernHome = path.join(project, '.kern-home');
  fs.mkdirSync(path.join(project, 'node_modules', '.bin'), { recursive: true });
  fs.symlinkSync(docs.REPO, path.join(project, 'node_modules', 'kern-sandbox'));
  fs.symlinkSync(path.join('..', 'kern-sandbox', 'bin', 'kern.js'), path.join(project, 'node_modules', '.bin', 'kern'));
  fs.symlinkSync(path.join(docs.REPO, 'node_modules', '@types'), path.join(project, 'node_modules', '@types'));
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'readme-examples', private: true }));
  // The real process's environment (Jest's `process.env` is a copy), less what would steer the
  // examples elsewhere, plus the mirror and a store of their own.
  const real = require('vm').runInThisContext('process').env;
  env = { ...real, KERN_HOME: kernHome, KERN_REGISTRY_MIRRORS: registry.url, npm_config_offline: 'true', npm_config_update_notifier: 'false' };
  for (const k of ['KERN_PULL', 'KERN_REGISTRY_AUTH', 'DOCKER_CONFIG', 'NODE_OPTIONS']) delete env[k];
  // Pulled once here, so no example pays the unpacking under its own timeout.
  execFileSync(KERN, ['pull', 'python:3.12-slim'], { env, stdio: 'pipe', timeout: 600000 });
}, 900000);

afterAll(async () => {
  if (registry) await registry.stop();
  if (project) {
    execFileSync('chmod', ['-R', 'u+rwX', project]);
    fs.rmSync(project, { recursive: true, force: true });
  }
});

/** Runs `argv` in `cwd` with the examples' environment: { code, signal, stdout, stderr }. */
function runIn(cwd, argv, timeoutMs) {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** The block as a file of its own, in a directory of its own in the project; its command. */
function materialise(block, n) {
  const dir = path.join(project, `example-${n}`);
  fs.mkdirSync(dir);
  if (block.marker && block.marker.run === 'jest') {
    fs.writeFileSync(path.join(dir, 'example.test.js'), block.code);
    return { dir, argv: [process.execPath, JEST, '--rootDir', dir, '--ci', '--colors=false'] };
  }
  if (block.lang === 'bash') {
    fs.writeFileSync(path.join(dir, 'example.sh'), block.code);
    return { dir, argv: ['bash', '-e', 'example.sh'] };
  }
  let code = block.code;
  if (block.lang === 'ts') {
    const out = ts.transpileModule(code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 }, reportDiagnostics: true });
    if (out.diagnostics && out.diagnostics.length) {
      throw new Error(`${where(block)} does not parse: ${out.diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('; ')}`);
    }
    code = out.outputText;
  }
  fs.writeFileSync(path.join(dir, 'example.mjs'), code);
  return { dir, argv: [process.execPath, 'example.mjs'] };
}

/** Runs one block as written; fails, showing its output, unless it exits 0 and prints every line
 * it claims. */
async function expectExampleRuns(block) {
  const { dir, argv } = materialise(block, examples.indexOf(block));
  const r = await runIn(dir, argv, 170000);
  const shown = `${where(block)}: exit ${r.code}${r.signal ? ` (${r.signal})` : ''}\n--- stdout\n${r.stdout.slice(-4000)}\n--- stderr\n${r.stderr.slice(-4000)}`;
  // On failure the received side carries the output (toEqual ignores an undefined field).
  expect({ exit: r.code, signal: r.signal, output: r.code === 0 ? undefined : shown }).toEqual({ exit: 0, signal: null });
  const missing = docs.missingClaim(docs.claims(block), r.stdout);
  expect(missing === null ? null : `it does not print the line it claims, ${JSON.stringify(missing)}: ${shown}`).toBeNull();
}

describe.each(docs.exampleFiles())('%s', (file) => {
  for (const b of examples.filter((x) => x.file === file && !(x.marker && x.marker.norun))) {
    if (b.marker && b.marker.skip) {
      test.skip(`the example at line ${b.line} (${b.lang}), skipped: ${b.marker.skip}`, () => expectExampleRuns(b));
    } else {
      test(`the example at line ${b.line} (${b.lang}) runs as written`, () => expectExampleRuns(b), 180000);
    }
  }
});

test('every JS and TS example type-checks against index.d.ts', () => {
  // The examples' names and shapes are the published ones (checkJs: a misspelt method or result
  // field fails here with the line it is on, not only as an odd run time error).
  const dir = path.join(project, 'typecheck');
  fs.mkdirSync(dir);
  const files = examples
    .filter((b) => b.lang !== 'bash' && !(b.marker && b.marker.run === 'jest'))
    .map((b) => {
      const name = `${b.file.replace(/\W/g, '_')}_${b.line}.${b.lang}`;
      fs.writeFileSync(path.join(dir, name), `${b.code}\nexport {};\n`);
      return name;
    });
  // skipLibCheck and esModuleInterop as `tsc --init` sets them: the integration examples pull in
  // the frameworks' own .d.ts files, which do not all check under other settings. index.d.ts and
  // js/integrations/*.d.ts are checked in full by packaging/types.test.js and integrations/types.test.js.
  const compilerOptions = { noEmit: true, allowJs: true, checkJs: true, module: 'esnext', target: 'es2022', moduleResolution: 'node', types: ['node'], skipLibCheck: true, esModuleInterop: true };
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files }));
  let output = '';
  try {
    execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: dir, encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    output = `${e.stdout || ''}${e.stderr || ''}` || String(e);
  }
  expect(output).toBe('');
  expect(files.length).toBeGreaterThan(10);
});

test('every example is run, or marked with the reason it is not', () => {
  // Markers only go on blocks the test would run; each says why.
  const strays = all.filter((b) => b.marker && !RUNNABLE.has(b.lang));
  expect(strays.map(where)).toEqual([]);
  const others = all.filter((b) => !RUNNABLE.has(b.lang));
  const langs = [...new Set(others.map((b) => b.lang || '(none)'))].sort();
  const lines = [
    `documentation examples: ${examples.length} js/ts/bash blocks in ${docs.exampleFiles().length} files: ${toRun.length} run (${toRun.length - toRun.filter((b) => !b.marker).length} of them under Jest), ${notRunnable.length} not runnable, ${skipped.length} skipped`,
    ...notRunnable.map((b) => `  not runnable: ${where(b)}: ${b.marker.norun}`),
    ...skipped.map((b) => `  skipped: ${where(b)}: ${b.marker.skip}`),
    `  not examples: ${others.length} blocks of other kinds (${langs.join(', ')})`,
  ];
  console.log(lines.join('\n'));
  // The README gets a user from install to a working tool by running code: most of it runs.
  expect(toRun.filter((b) => b.file === 'README.md').length).toBeGreaterThanOrEqual(5);
  expect(skipped.length).toBeLessThanOrEqual(2);
});

test('every example that claims output claims it on a line the test can find', () => {
  // A claim in a block that does not run would be an unchecked promise: only runnable blocks
  // may claim output.
  const unchecked = examples.filter((b) => !runs(b) && docs.claims(b).length > 0);
  expect(unchecked.map(where)).toEqual([]);
});

test("the README's warning holds: a spawn() left running keeps Jest from exiting; the box ends with Jest", async () => {
  const marker = uniqueName('kernreadmejest');
  const dir = path.join(project, 'jest-leak');
  fs.mkdirSync(dir);
  fs.writeFileSync(
    path.join(dir, 'leak.test.js'),
    `const { Sandbox } = require('kern-sandbox');\n` +
      `test('forgets to close', async () => {\n` +
      `  const sb = await new Sandbox({ image: 'host' }).open();\n` +
      `  await sb.spawn(['sh', '-c', 'sleep 600; echo ${marker}']);\n` +
      `});\n`
  );
  const jest = spawn(process.execPath, [JEST, '--rootDir', dir, '--ci', '--colors=false'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let said = '';
  jest.stdout.on('data', (d) => (said += d));
  jest.stderr.on('data', (d) => (said += d));
  let exited = null;
  jest.on('exit', (code, signal) => (exited = { code, signal }));
  try {
    // Jest's own words once its run is over and something still holds the process open.
    await waitFor(() => said.includes('Jest did not exit one second after the test run has completed') || exited, 120000);
    expect({ held: said.includes('did not exit one second'), exited, said: said.slice(-2000) }).toEqual(expect.objectContaining({ held: true, exited: null }));
    expect(said).toMatch(/1 passed/);
    expect(hostProcessesMatching(marker).length).toBeGreaterThan(0);
  } finally {
    if (!exited) jest.kill('SIGKILL');
  }
  // Killed, Jest's process takes the box with it (kern's lifeline).
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 20000)).toBe(true);
});

test('every relative link and anchor in the documentation resolves', () => {
  const broken = [];
  for (const f of docs.linkedFiles()) {
    for (const { line, target } of docs.links(f)) {
      const why = docs.brokenLink(f, target);
      if (why) broken.push(`${f}:${line}: ${why}`);
    }
  }
  expect(broken).toEqual([]);
  // The check itself sees links and anchors (it would pass vacuously otherwise).
  expect(docs.links('README.md').length).toBeGreaterThan(10);
  expect(docs.brokenLink('README.md', 'docs/guide.md#no-such-heading')).toMatch(/no heading/);
  expect(docs.brokenLink('README.md', 'docs/no-such-file.md')).toMatch(/no file/);
});

test('the README is a user\'s: short, install first, no "Addition" markers', () => {
  const readme = fs.readFileSync(path.join(docs.REPO, 'README.md'), 'utf8');
  expect(readme.split('\n').length).toBeLessThanOrEqual(300);
  expect(readme).not.toMatch(/\(Addition\.?\)|\(an addition\)|\(Added\.\)/i);
  const headings = readme.split('\n').filter((l) => l.startsWith('## '));
  expect(headings[0]).toBe('## Install');
});
