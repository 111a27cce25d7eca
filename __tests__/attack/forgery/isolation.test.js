'use strict';
// rootless: yes
// Attack suite, `isolation()`. The report is measured by a probe box that runs the image's own
// `/bin/sh` (and `readlink`): an image can make them print anything. Here the image's `/bin/sh`
// is a script that claims a namespace of its own for everything and three seccomp filters. The
// report must not believe it beyond what kern was asked to apply: a `network: true` box shares
// the host's network and a box without `securityProfile: "untrusted"` lacks its filters,
// whatever the probe prints; `requireIsolation` must not be satisfied by the lie either.

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { ROOTFS, requireRootfs, tempDirs, expectSandboxError } = require('../../helpers');
const { hostGuard } = require('../host');
const { Sandbox, SandboxError } = require('../../..');

const suite = { guard: null, dirs: tempDirs() };
let liar;

/** The forged probe output: every namespace "its own", seccomp filtering with three filters. */
const FORGED_SH = [
  '#!/bin/bash',
  'for n in user mnt pid net; do echo "ns $n $n:[1]"; done',
  'echo "seccomp 2"',
  'echo "filters 3"',
  'echo "uidmap 0 100000 65536"',
  '',
].join('\n');

beforeAll(async () => {
  requireRootfs();
  suite.guard = await hostGuard();
  // A minimal image made from the test rootfs: bash and what it loads, a lying sh and readlink.
  liar = path.join(suite.dirs.temp('kern-lying-image-'), 'rootfs');
  const libs = 'usr/lib/x86_64-linux-gnu';
  for (const d of ['usr/bin', libs, 'usr/lib64', 'etc', 'tmp']) fs.mkdirSync(path.join(liar, d), { recursive: true });
  for (const [l, to] of [['bin', 'usr/bin'], ['lib', 'usr/lib'], ['lib64', 'usr/lib64']]) fs.symlinkSync(to, path.join(liar, l));
  const copy = (rel, to = rel) => execFileSync('cp', ['-L', path.join(ROOTFS, rel), path.join(liar, to)]);
  copy('usr/bin/bash');
  for (const lib of ['libtinfo.so.6', 'libc.so.6', 'ld-linux-x86-64.so.2']) copy(`${libs}/${lib}`);
  fs.symlinkSync(`/${libs}/ld-linux-x86-64.so.2`, path.join(liar, 'usr/lib64/ld-linux-x86-64.so.2'));
  fs.writeFileSync(path.join(liar, 'usr/bin/sh'), FORGED_SH, { mode: 0o755 });
  fs.writeFileSync(path.join(liar, 'usr/bin/readlink'), '#!/bin/bash\necho "${1##*/}:[1]"\n', { mode: 0o755 });
  fs.chmodSync(path.dirname(liar), 0o755);
});

afterAll(async () => {
  await suite.guard.assertNoLeaks();
  suite.guard.cleanup();
  suite.dirs.removeAll();
});

test('an image whose /bin/sh lies cannot make the report claim an own network or the untrusted filters', async () => {
  const sb = await new Sandbox({ image: liar, network: true }).open();
  try {
    // The lie is really there: the image's sh prints the forged lines.
    const r = await sb.run(['/bin/sh']);
    expect(r.stdout).toContain('filters 3');
    expect((await sb.run(['readlink', '/proc/self/ns/net'])).stdout).toBe('net:[1]\n');
    const report = await sb.isolation();
    expect(report.network).toBe('host');
    expect(report.seccomp).toBe('standard');
    // Nor the report of any route a call can take (each probed in its own box).
    expect(Object.keys(report.routes)).toEqual(expect.arrayContaining(['fresh', 'spawn', 'terminal']));
    for (const [route, r] of Object.entries(report.routes)) {
      expect({ route, network: r.network, seccomp: r.seccomp }).toEqual({ route, network: 'host', seccomp: 'standard' });
    }
  } finally {
    await sb.close();
  }
  suite.guard.assertUntouched();
});

test('requireIsolation is not satisfied by the lie', async () => {
  await expectSandboxError(
    () => new Sandbox({ image: liar, requireIsolation: ['seccomp'] }).open(), SandboxError,
    /seccomp: the untrusted seccomp profile is not in force in the box \(measured: standard\)/);
  suite.guard.assertUntouched();
});
