'use strict';
// rootless: yes
// (Rootless: the workload's Landlock domain is the same for every caller.)
// A box moves and links files between workspace directories as any program does: the workload's
// Landlock domain (which exists for resident boxes' cross-call isolation) grants Refer, without
// which every rename(2) or link(2) into another directory failed with EXDEV and tools that
// don't fall back to a copy (os.replace, git, pip's installs) broke. On every route a call's
// code takes, through the Rust plan runner and the zygote's Python one.

const fs = require('fs');
const path = require('path');
const { opts, expectOk, makeTempDir, uniqueName } = require('../helpers');
const { Sandbox } = require('../..');

const PY = [
  'import os, shutil',
  'os.makedirs("d/sub", exist_ok=True)',
  'open("d/sub/x", "w").write("moved")',
  'os.rename("d/sub/x", "d/y")',
  'os.link("d/y", "d/sub/z")',
  'os.replace("d/sub", "e")',
  'print(sorted(os.listdir("d")), sorted(os.listdir("e")), open("e/z").read())',
].join('\n');
const SH = 'mkdir -p s/t && echo hi > s/t/f && python3 -c \'import os; os.rename("s/t/f", "s/g"); os.rename("s/t", "u")\' && ls s u';

beforeAll(() => require('../helpers').requireRootfs());

/** Runs the rename scenario in `run`, then checks the workspace on the host. */
async function renames(ws, run) {
  const r = await run(PY);
  expectOk(r);
  expect(r.stdout).toBe("['y'] ['z'] moved\n");
  expect(fs.readFileSync(path.join(ws, 'd', 'y'), 'utf8')).toBe('moved');
  expect(fs.statSync(path.join(ws, 'e', 'z')).ino).toBe(fs.statSync(path.join(ws, 'd', 'y')).ino);
  fs.rmSync(path.join(ws, 'd'), { recursive: true });
  fs.rmSync(path.join(ws, 'e'), { recursive: true });
}

for (const [route, extra] of [
  ['a fresh box', {}],
  ['a prewarmed box', { prewarm: 1 }],
  ['a zygote fork', { zygote: true }],
  ['a resident box (persist)', { persist: true }],
]) {
  test(`rename and link across workspace directories work in ${route}`, async () => {
    const ws = makeTempDir('kern-rename-ws-');
    const persist = !!extra.persist;
    const sb = await new Sandbox(opts({ workspace: ws, ...extra, ...(persist ? { name: uniqueName('rename') } : {}) })).open();
    try {
      await renames(ws, (code) => sb.runCode(code));
      const r = await sb.run(['sh', '-c', SH]);
      expectOk(r);
      expect(r.stdout).toBe('s:\ng\n\nu:\n');
    } finally {
      if (persist) await sb.destroy();
      await sb.close();
    }
  });
}

test('rename and link across workspace directories work in a kernel and a process', async () => {
  const ws = makeTempDir('kern-rename-ws-');
  const sb = await new Sandbox(opts({ workspace: ws })).open();
  try {
    const k = await sb.kernel();
    try {
      await renames(ws, (code) => k.runCode(code));
    } finally {
      await k.close();
    }
    const p = await sb.spawn(['sh', '-c', SH]);
    const r = await p.wait();
    expectOk(r);
    expect(r.stdout).toBe('s:\ng\n\nu:\n');
  } finally {
    await sb.close();
  }
});
