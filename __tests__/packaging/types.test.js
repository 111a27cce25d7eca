'use strict';
// rootless: no — no box: type-checks index.d.ts
// Checks the hand-kept TypeScript surface (index.d.ts):
//  1. __tests__/types/consumer.ts, which uses every export/option/overload (and asserts a few misuses
//     with @ts-expect-error), type-checks under --strict against the package root.
//  2. The runtime module exports exactly the value names index.d.ts declares.
const path = require('path');
const fs = require('fs');
const { execFileSync } = require('child_process');
const ts = require('typescript');

const ROOT = path.resolve(__dirname, '..', '..');
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const DTS = path.join(ROOT, 'index.d.ts');

test.each([
  ['--strict', []],
  // `tsc --init`'s defaults: an optional member passed as `undefined` must still type-check.
  ['--strict --exactOptionalPropertyTypes', ['--exactOptionalPropertyTypes']],
])('consumer.ts type-checks against index.d.ts under %s', (_name, extra) => {
  const args = [
    TSC,
    '--noEmit', '--strict', ...extra,
    '--types', 'node',
    '--moduleResolution', 'node',
    '--module', 'commonjs',
    '--target', 'es2020',
    path.join('__tests__', 'types', 'consumer.ts'),
  ];
  let status = 0;
  let output = '';
  try {
    output = execFileSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8', stdio: 'pipe' });
  } catch (err) {
    status = typeof err.status === 'number' ? err.status : 1;
    output = `${err.stdout || ''}${err.stderr || ''}${err.status == null ? String(err) : ''}`;
  }
  if (status !== 0) {
    // eslint-disable-next-line no-console
    console.error(`tsc exited ${status}:\n${output}`);
  }
  expect({ status, output }).toEqual({ status: 0, output: '' });
});

/** Names of exported runtime values (classes, functions, consts/lets/vars) declared in a .d.ts. */
function declaredValueExports(file) {
  const src = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.ES2020, true);
  const names = new Set();
  const isExported = (node) =>
    (ts.getModifiers(node) || []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
  for (const stmt of src.statements) {
    if (!isExported(stmt)) continue;
    if ((ts.isClassDeclaration(stmt) || ts.isFunctionDeclaration(stmt)) && stmt.name) {
      names.add(stmt.name.text);
    } else if (ts.isVariableStatement(stmt)) {
      for (const decl of stmt.declarationList.declarations) {
        if (ts.isIdentifier(decl.name)) names.add(decl.name.text);
      }
    }
  }
  return [...names].sort();
}

test('require("..") exports exactly the runtime values declared in index.d.ts', () => {
  const declared = declaredValueExports(DTS);
  // Sanity: the parse found the surface at all.
  expect(declared.length).toBeGreaterThan(0);
  const actual = Object.keys(require('../..')).sort();
  expect(actual).toEqual(declared);
});
