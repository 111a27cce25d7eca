'use strict';
// rootless: yes
// What a box may learn of the host is nothing it did not need. The box's PID 1 is kern's own
// process: its command line must not name where kern lives on the host. (A bind mount's source
// path does show in /proc/self/mountinfo: the kernel prints it, see README "Known gaps".)

const path = require('path');
const { Sandbox } = require('../../..');
const { requireRootfs, opts } = require('../../helpers');

const KERN_BIN = process.env.KERN_BIN || path.resolve(__dirname, '..', '..', '..', 'kern');

beforeAll(() => requireRootfs());

test("/proc/1/cmdline in a box names no host path of kern's", async () => {
  const sb = await new Sandbox(opts()).open();
  try {
    const r = await sb.run(['sh', '-c', 'tr "\\0" " " < /proc/1/cmdline']);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^kern box\s*$/);
    expect(r.stdout).not.toContain(path.dirname(KERN_BIN));
  } finally {
    await sb.close();
  }
});
