'use strict';
// rootless: yes
// `workspaceMaxBytes` can't be walked around: a box that makes more entries than kern tracks,
// entries that hold no data, or a directory kern can't read, still has its workspace measured
// whole (or the check fails closed), and the next call is refused with `workspace_full`. The
// host checks the refused call never ran: its marker file never appears.

const fs = require('fs');
const path = require('path');
const { Sandbox } = require('../../..');
const { opts } = require('../../helpers');
const { guardedSuite } = require('../host');

const suite = guardedSuite();
const { dirs } = suite;

const CAP = 64 << 20;

async function expectRefused(sb, ws) {
  const r = await sb.run(['sh', '-c', 'touch /workspace/ran-anyway']);
  expect(r.fault && r.fault.type).toBe('workspace_full');
  expect(fs.existsSync(path.join(ws, 'ran-anyway'))).toBe(false);
  return r.fault.message;
}

test('110,000 empty files (past the 100,000 entries result.files tracks) still count: the next call is refused', async () => {
  const ws = dirs.temp('kern-quota-many-');
  const sb = await new Sandbox(opts({ workspace: ws, workspaceMaxBytes: CAP, timeoutS: 300 })).open();
  try {
    const r = await sb.runCode(
      "import os\nos.mkdir('m')\nfor i in range(110000):\n    open(f'm/{i}', 'w').close()\nopen('z-after', 'wb').write(b'x' * (8 << 20))\nprint('made')"
    );
    expect(r.stdout).toBe('made\n');
    const why = await expectRefused(sb, ws);
    expect(why).toMatch(/at least 4 KiB an entry/);
    // The driver kernel checks before every cell too.
    const k = await sb.kernel();
    try {
      const c = await k.runCode("open('/workspace/ran-anyway', 'w')");
      expect(c.fault && c.fault.type).toBe('workspace_full');
      expect(fs.existsSync(path.join(ws, 'ran-anyway'))).toBe(false);
    } finally {
      await k.close();
    }
  } finally {
    await sb.close();
  }
  suite.guard.assertUntouched();
}, 300_000);

test('bytes in a directory the box closed (chmod 000) count, or the check fails closed', async () => {
  const ws = dirs.temp('kern-quota-closed-');
  const sb = await new Sandbox(opts({ workspace: ws, workspaceMaxBytes: CAP })).open();
  try {
    const r = await sb.run(['sh', '-c', 'mkdir hide && head -c 100000000 /dev/zero > hide/big && chmod 000 hide && echo made']);
    expect(r.stdout).toBe('made\n');
    const why = await expectRefused(sb, ws);
    // As root kern reads it and counts it; unprivileged it can't, and says so.
    expect(why).toMatch(/over workspaceMaxBytes|could not measure the whole workspace/);
  } finally {
    await sb.close();
    // The box's closed directory, opened again so the temp dir can be removed.
    fs.chmodSync(path.join(ws, 'hide'), 0o700);
  }
  suite.guard.assertUntouched();
}, 120_000);
