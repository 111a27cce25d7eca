'use strict';
// rootless: yes
// `requireLimits`: a Sandbox refuses to open unless the memory and pids caps are read back from
// the box's cgroup as set. As root on this machine (cgroup v1, writable) they are, and the caps
// hold; as an unprivileged user on cgroup v1 nothing can be delegated, so open() refuses rather
// than fall back to rlimits.

const { isRoot, requireRootfs, opts, expectSandboxError, summary } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

beforeAll(() => requireRootfs());

const cgroupV1 = require('fs').existsSync('/sys/fs/cgroup/memory') && !require('fs').existsSync('/sys/fs/cgroup/cgroup.controllers');

test('where the caps can be verified, open() succeeds and the caps hold', async () => {
  if (!isRoot) return;
  const sb = await new Sandbox(opts({ requireLimits: true, memoryMb: 64, pids: 32 })).open();
  try {
    const ok = await sb.run(['true']);
    expect(summary(ok)).toMatchObject({ exitCode: 0, fault: null });
    // No fallback note: the caps are the cgroup's.
    expect(ok.runtimeNotes.join('\n')).not.toMatch(/best-effort/);
    const hog = await sb.runCode('b = bytearray(256 * 1024 * 1024)\nprint("allocated")');
    expect(hog.fault && hog.fault.type).toBe('oom');
    expect(hog.stdout).not.toMatch(/allocated/);
  } finally {
    await sb.close();
  }
});

test('where they cannot (unprivileged on cgroup v1), open() throws instead of falling back', async () => {
  if (isRoot || !cgroupV1) return;
  const sb = new Sandbox(opts({ requireLimits: true }));
  const err = await expectSandboxError(() => sb.open(), SandboxError, /requireLimits/, /not verifiably enforced/);
  expect(err.message).toMatch(/cgroup/);
  await expectSandboxError(() => sb.run(['true']), SandboxError, /not open|closed/);
  await sb.close();
  // Without it, the same session runs, with the fallback said out loud.
  const lax = await new Sandbox(opts()).open();
  try {
    const r = await lax.run(['true']);
    expect(r.exitCode).toBe(0);
    expect(r.runtimeNotes.join('\n')).toMatch(/best-effort/);
  } finally {
    await lax.close();
  }
});

test('requireLimits with enforceLimits: false is a contradiction', async () => {
  const sb = new Sandbox(opts({ requireLimits: true, enforceLimits: false }));
  await expectSandboxError(() => sb.open(), SandboxError, /requireLimits/, /enforceLimits/);
  await sb.close();
});
