'use strict';
// rootless: no — no box: type-checks the integrations' hand-written .d.ts files
// consumer.ts uses each integration as a user would, assigning its values to the framework's own
// types (Experimental_SandboxSession, SandboxBackendProtocolV2, SandboxClient/SandboxSession),
// under --strict, in a project whose node_modules/kern-sandbox is this checkout, with the
// resolutions a user's project may have: package "exports" (node16) and the older "node"
// resolution (through typesVersions). The frameworks' own .d.ts files do not all check under
// every setting, so only errors in this package's files count.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const ROOT = path.resolve(__dirname, '..', '..');
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
let project;

beforeAll(() => {
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-int-types-'));
  const nm = path.join(project, 'node_modules');
  fs.mkdirSync(nm);
  fs.symlinkSync(ROOT, path.join(nm, 'kern-sandbox'));
  for (const dep of ['@types', '@ai-sdk', 'ai', 'deepagents', '@langchain', 'langchain', '@openai', 'zod']) {
    fs.symlinkSync(path.join(ROOT, 'node_modules', dep), path.join(nm, dep));
  }
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  fs.copyFileSync(path.join(__dirname, 'consumer.ts'), path.join(project, 'consumer.ts'));
});
afterAll(() => fs.rmSync(project, { recursive: true, force: true }));

/** Error lines of tsc's output in this package's files (consumer.ts, index.d.ts, js/integrations/). */
function oursOf(output) {
  return output.split('\n').filter((line) => {
    const m = /^(.+?)\(\d+,\d+\): error TS/.exec(line);
    if (!m) return false;
    let file;
    try {
      file = fs.realpathSync(path.resolve(project, m[1]));
    } catch {
      return true;
    }
    return file === path.join(project, 'consumer.ts') || file === path.join(ROOT, 'index.d.ts') || file.startsWith(path.join(ROOT, 'js', 'integrations') + path.sep);
  });
}

test.each([
  // The full check: the .d.ts files themselves too (the frameworks' own files may have errors of
  // their own under a setting; they are not ours to count).
  ['node16', ['--module', 'node16', '--moduleResolution', 'node16']],
  // How the older resolution finds the subpaths (typesVersions); the files are checked above.
  ['node (typesVersions)', ['--module', 'commonjs', '--moduleResolution', 'node', '--skipLibCheck']],
])('consumer.ts type-checks under --strict, resolution %s', (_name, resolution) => {
  const args = [TSC, '--noEmit', '--strict', '--types', 'node', '--target', 'es2022', '--lib', 'es2022,dom', ...resolution, 'consumer.ts'];
  let output = '';
  try {
    execFileSync(process.execPath, args, { cwd: project, encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    output = `${e.stdout || ''}${e.stderr || ''}` || String(e);
  }
  expect(oursOf(output)).toEqual([]);
  // Whatever else it said was about other packages' files, never a crash of tsc itself.
  expect(output.split('\n').filter((l) => l && !/^(.+?)\(\d+,\d+\): error TS/.test(l) && !/^\s/.test(l))).toEqual([]);
}, 240000);
