'use strict';
// rootless: no — the flags map onto the same boxes core.test.js runs rootless
// The `kern` runtime from a terminal: the same box as the API, with flags named like the options.

const path = require('path');
const { spawnSync } = require('child_process');
const { requireRootfs, makeTempDir } = require('../helpers');
const fs = require('fs');

const KERN = process.env.KERN_BIN || path.join(__dirname, '..', '..', 'kern');

function kern(args) {
  const r = spawnSync(KERN, args, { encoding: 'utf8', timeout: 60000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

let rootfs;
beforeAll(() => {
  rootfs = requireRootfs();
});

test('kern run executes an argv in a box and exits with its code', () => {
  const ok = kern(['run', '--image', rootfs, '--', 'python3', '-c', 'import os; print(6 * 7, os.getcwd())']);
  expect(ok).toMatchObject({ code: 0, stdout: '42 /workspace\n' });
  expect(kern(['run', '--image', rootfs, '--', 'sh', '-c', 'exit 3']).code).toBe(3);
});

test('kern run honours --timeout with a timeout fault on stderr', () => {
  const r = kern(['run', '--image', rootfs, '--timeout', '1', '--', 'sleep', '30']);
  expect(r.code).toBe(137);
  expect(r.stderr).toMatch(/^warning: fault timeout: /m);
});

test('kern run sizes scratch with --tmpfs and passes --env, with the workspace it is given', () => {
  const ws = makeTempDir('kern-cli-ws-');
  try {
    const r = kern([
      'run', '--image', rootfs, '--workspace', ws, '--tmpfs', '/tmp:8m', '--env', 'GREETING=hi', '--',
      'python3', '-c',
      'import os; s = os.statvfs("/tmp"); print(s.f_blocks * s.f_frsize >> 20, os.environ["GREETING"]); open("out.txt", "w").write("x")',
    ]);
    expect(r).toMatchObject({ code: 0, stdout: '8 hi\n' });
    expect(fs.readFileSync(path.join(ws, 'out.txt'), 'utf8')).toBe('x');
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test('kern run --workspace-mount puts the workspace, and the cwd, where it says', () => {
  const ws = makeTempDir('kern-cli-ws-');
  try {
    const r = kern(['run', '--image', rootfs, '--workspace', ws, '--workspace-mount', '/home/user', '--', 'sh', '-c', 'pwd; echo hi > /home/user/f']);
    expect(r).toMatchObject({ code: 0, stdout: '/home/user\n' });
    expect(fs.readFileSync(path.join(ws, 'f'), 'utf8')).toBe('hi\n');
    const bad = kern(['run', '--image', rootfs, '--workspace-mount', '/proc/x', '--', 'true']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/--workspace-mount.*\/proc/);
    const scratch = kern(['run', '--image', rootfs, '--workspace-mount', '/tmp/w', '--', 'true']);
    expect(scratch.stderr).toMatch(/--workspace-mount \/tmp\/w: it is inside the scratch tmpfs at \/tmp/);
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test('kern run names a missing program and a registry it cannot reach', () => {
  const missing = kern(['run', '--image', rootfs, '--', 'no-such-program']);
  expect(missing.code).toBe(127);
  expect(missing.stderr).toMatch(/fault exec_failed: cannot run "no-such-program"/);
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  const registry = kern(['run', '--image', '127.0.0.1:1/kern/none:latest', '--', 'true']);
  expect(registry.code).toBe(125);
  expect(registry.stderr).toMatch(/image 127\.0\.0\.1:1\/kern\/none:latest .*cannot reach .*refused/);
});
