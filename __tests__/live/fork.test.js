'use strict';
// rootless: yes
// sb.fork({ count }) (issue 33, an ADDITION in index.d.ts): new open Sandboxes with the
// parent's options, each with a copy of the parent's workspace as it was at the fork: files,
// directories and symlinks (as links, never followed), modes without set-id bits; independent of
// the parent and of each other from then on.

const fs = require('fs');
const path = require('path');
const { Sandbox, SandboxError } = require('../..');
const { opts, makeTempDir, makeCanaryFile, uniqueName, expectSandboxError, isRoot, unseal, stderrLinesOf } = require('../helpers');

const sh = async (sb, script) => {
  const r = await sb.run(['sh', '-c', script]);
  const err = stderrLinesOf(r);
  expect({ code: r.exitCode, err }).toEqual({ code: 0, err: [] });
  return r.stdout;
};

describe('Sandbox.fork', () => {
  test('each fork is a new open Sandbox with a copy of the workspace at the fork, independent from then on', async () => {
    const ws = makeTempDir('kern-fork-ws-');
    const parent = await new Sandbox(opts({ workspace: ws, env: { FORK_VAR: 'inherited' } })).open();
    let kids = [];
    try {
      await sh(parent, 'mkdir -p d/e && echo hi > d/e/f && ln -s d/e/f link && chmod 0555 d && head -c 300000 /dev/urandom > big && chmod 0640 big');
      const before = await sh(parent, 'md5sum big d/e/f; stat -c "%n %a %F" big d d/e/f link');
      kids = await parent.fork({ count: 3 });
      expect(kids).toHaveLength(3);
      for (const kid of kids) {
        expect(kid).toBeInstanceOf(Sandbox);
        expect(await sh(kid, 'md5sum big d/e/f; stat -c "%n %a %F" big d d/e/f link')).toBe(before);
        expect(await sh(kid, 'readlink link; cat link; echo "$FORK_VAR"')).toBe('d/e/f\nhi\ninherited\n');
      }
      // Writes after the fork stay where they were made.
      await sh(kids[0], 'echo zero > d/e/f 2>/dev/null || { chmod u+w d && echo zero > d/e/f; }; echo mine > only-0');
      await sh(parent, 'echo parent > only-parent');
      expect(await sh(kids[1], 'cat d/e/f; ls')).toBe('hi\nbig\nd\nlink\n');
      expect(await sh(parent, 'cat d/e/f; ls only-0 2>&1 || true')).toMatch(/^hi\n.*No such file/);
      expect((await kids[0].readFile('d/e/f')).toString()).toBe('zero\n');
      // The parent's kept workspace is its own: a fork's is temporary.
      expect(fs.existsSync(path.join(ws, 'only-parent'))).toBe(true);
      expect(fs.existsSync(path.join(ws, 'only-0'))).toBe(false);
    } finally {
      for (const k of kids) await k.close();
      await parent.close();
    }
    expect(fs.readFileSync(path.join(ws, 'd/e/f'), 'utf8')).toBe('hi\n');
    unseal(ws);
    fs.rmSync(ws, { recursive: true, force: true });
  });

  test('a symlink to a host file is copied as a link, never as the file; set-id bits are not copied', async () => {
    const canary = makeCanaryFile();
    const secret = canary.body;
    const ws = makeTempDir('kern-fork-ws-');
    // Planted from the host side: what a box could leave in a workspace, and more.
    fs.symlinkSync(canary.file, path.join(ws, 'to-host'));
    fs.writeFileSync(path.join(ws, 'tool'), '#!/bin/sh\necho tool\n');
    fs.chmodSync(path.join(ws, 'tool'), isRoot ? 0o4755 : 0o755);
    const parent = await new Sandbox(opts({ workspace: ws })).open();
    let kids = [];
    try {
      kids = await parent.fork();
      expect(kids).toHaveLength(1);
      const [kid] = kids;
      const out = await kid.run(['sh', '-c', 'readlink to-host; cat to-host; stat -c "%a" tool; ./tool']);
      expect(out.stdout).toBe(`${canary.file}\n755\ntool\n`);
      expect(`${out.stdout}${out.stderr}`).not.toContain(secret.trim());
      await expectSandboxError(() => kid.readFile('to-host'), SandboxError, /symlink/);
      expect((await kid.listFiles()).map((f) => f.path)).toEqual(['tool']);
    } finally {
      for (const k of kids) await k.close();
      await parent.close();
      fs.rmSync(ws, { recursive: true, force: true });
    }
    expect(canary.intact()).toBe(true);
    canary.remove();
  });

  test('refusals: bad counts and persist before any box starts; a fork while a kernel may write the workspace is refused', async () => {
    const parent = await new Sandbox(opts()).open();
    try {
      for (const count of [0, -1, 1.5, 65, '2']) {
        await expectSandboxError(() => parent.fork({ count }), SandboxError, /fork\(\{ count \}\) takes a whole number from 1 to 64/);
      }
      await expectSandboxError(() => parent.fork({ cnt: 2 }), SandboxError, /unknown fork\(\) option `cnt`/);
      const k = await parent.kernel();
      await expectSandboxError(() => parent.fork({ count: 2 }), SandboxError, /fork\(\)/);
      await k.close();
      const [kid] = await parent.fork();
      await kid.close();
    } finally {
      await parent.close();
    }
    const persisted = new Sandbox(opts({ persist: true, name: uniqueName('forkres'), workspace: makeTempDir('kern-fork-ws-') }));
    await expectSandboxError(() => persisted.fork(), SandboxError, /fork\(\) of a `persist` Sandbox is not available/);
  });
});
