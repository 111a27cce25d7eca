'use strict';
// rootless: yes
// `kern doctor`: one line per thing kern-sandbox needs from the host. Run as root and (through
// scripts/test.sh's rootless list) as an unprivileged user; its verdict on the caps is checked
// against what a real box with `requireLimits` gets on the same host and account.

const path = require('path');
const fs = require('fs');
const { spawnSync } = require('child_process');
const { isRoot, requireRootfs, opts, expectSandboxError } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const KERN = process.env.KERN_BIN || path.join(__dirname, '..', '..', 'kern');
const CHECKS = ['userns', 'idmap', 'cgroup', 'caps', 'seccomp', 'landlock', 'openat2', 'store', 'proxy', 'ca'];
const cgroupV1 = fs.existsSync('/sys/fs/cgroup/memory') && !fs.existsSync('/sys/fs/cgroup/cgroup.controllers');

function doctor(args = [], env = {}) {
  const r = spawnSync(KERN, ['doctor', ...args], { encoding: 'utf8', timeout: 60000, env: { ...process.env, ...env } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function doctorJson(env, args = []) {
  const r = doctor(['--json', ...args], env);
  const report = JSON.parse(r.stdout);
  const by = Object.fromEntries(report.checks.map((c) => [c.name, c]));
  return { code: r.code, report, by };
}

beforeAll(() => requireRootfs());

test('kern doctor prints one line per check and a verdict', () => {
  const r = doctor();
  for (const name of CHECKS) expect(r.stdout).toMatch(new RegExp(`^(ok|degraded|missing|info) +${name} `, 'm'));
  expect(r.stdout).toMatch(/^kern doctor: boxes can/m);
  const { report, code } = doctorJson();
  expect(report.checks.map((c) => c.name)).toEqual(expect.arrayContaining(CHECKS));
  expect(code).toBe(r.code);
  expect(code).toBe(report.ok ? 0 : 1);
  for (const c of report.checks) {
    expect(['ok', 'degraded', 'missing', 'info']).toContain(c.status);
    if (c.status === 'missing' || c.status === 'degraded') expect(typeof c.fix === 'string' || c.name === 'store').toBe(true);
  }
});

test('as root on this machine: caps are ok and the exit is 0, as a requireLimits box agrees', async () => {
  if (!isRoot) return;
  const { code, by } = doctorJson();
  expect(by.userns.status).toBe('ok');
  expect(by.userns.detail).toMatch(/with a mount namespace in it/);
  expect(by.caps).toMatchObject({ status: 'ok', blocking: true });
  expect(by.caps.detail).toMatch(/as root/);
  expect(by.idmap.status).toBe('ok');
  expect(code).toBe(0);
  // The test leaf is gone again (kern inherits this process's cgroup).
  const own = fs.readFileSync('/proc/self/cgroup', 'utf8').match(/^\d+:memory:(.*)$/m);
  if (own) {
    const parent = path.join('/sys/fs/cgroup/memory', own[1], 'kern-sandbox');
    const leftovers = fs.existsSync(parent) ? fs.readdirSync(parent).filter((n) => /doctor/.test(n)) : [];
    expect(leftovers).toEqual([]);
  }
  const sb = await new Sandbox(opts({ requireLimits: true })).open();
  try {
    expect((await sb.run(['true'])).exitCode).toBe(0);
  } finally {
    await sb.close();
  }
});

test('unprivileged on cgroup v1: caps are degraded to the rlimit fallback, exit 1, and a requireLimits box is refused', async () => {
  if (isRoot || !cgroupV1) return;
  const r = doctor();
  expect(r.code).toBe(1);
  expect(r.stdout).toMatch(/^degraded +caps +unprivileged on cgroup v1 .*rlimits: memory .* and pids .* are best-effort/m);
  expect(r.stdout).toMatch(/^kern doctor: boxes can't run here with enforced caps; see: caps$/m);
  const { code, by } = doctorJson();
  expect(code).toBe(1);
  expect(by.caps).toMatchObject({ status: 'degraded', blocking: true });
  expect(by.caps.fix).toMatch(/root|cgroup v2/);
  expect(by.userns.status).toBe('ok');
  await expectSandboxError(() => new Sandbox(opts({ requireLimits: true })).open(), SandboxError, /requireLimits/);
});

test('KERN_CGROUP_PARENT on a directory kern cannot write is reported as not writable', () => {
  // /sys refuses mkdir even to root.
  const { by } = doctorJson({ KERN_CGROUP_PARENT: '/sys' });
  expect(by.cgroup_parent).toMatchObject({ status: 'missing' });
  expect(by.cgroup_parent.detail).toMatch(/^KERN_CGROUP_PARENT=\/sys is not writable: /);
  expect(by.cgroup_parent.fix).toMatch(/delegated/);
  // Unset, there is no such line.
  const env = { ...process.env };
  delete env.KERN_CGROUP_PARENT;
  const r = spawnSync(KERN, ['doctor', '--json'], { encoding: 'utf8', env });
  expect(JSON.parse(r.stdout).checks.map((c) => c.name)).not.toContain('cgroup_parent');
});

test('kern doctor --workspace checks idmapped mounts where the workspace would be', () => {
  if (!isRoot) return;
  // ramfs has no idmapped mounts (tmpfs and the disk filesystems have).
  const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'kern-doctor-ramfs-'));
  expect(spawnSync('mount', ['-t', 'ramfs', 'none', dir]).status).toBe(0);
  try {
    const r = doctor(['--workspace', dir]);
    expect(r.stdout).toMatch(new RegExp(`^missing +idmap +${dir} \\(ramfs, kernel .*\\) can't be an idmapped mount`, 'm'));
    expect(r.stdout).toMatch(/see: idmap$/m);
    expect(r.code).toBe(1);
  } finally {
    spawnSync('umount', [dir]);
    fs.rmdirSync(dir);
  }
});

test('a workspace that is not a real directory is refused by doctor, by open() and by kern run, alike', async () => {
  const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'kern-doctor-ws-'));
  try {
    const real = path.join(dir, 'real');
    fs.mkdirSync(real);
    const fifo = path.join(dir, 'fifo');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const cases = {
      'a FIFO': fifo,
      'a symlink': path.join(dir, 'to-shadow'),
      'a symlink ': path.join(dir, 'to-dir'),
      'a file': path.join(dir, 'file'),
      'a character device': '/dev/null',
      'a socket': path.join(dir, 'sock'),
    };
    fs.symlinkSync('/etc/shadow', cases['a symlink']);
    fs.symlinkSync(real, cases['a symlink ']);
    fs.writeFileSync(cases['a file'], 'x');
    const server = require('net').createServer().listen(cases['a socket']);
    await new Promise((resolve) => server.on('listening', resolve));
    const shadowBefore = fs.statSync('/etc/shadow');
    try {
      for (const [kind, p] of Object.entries(cases)) {
        const what = new RegExp(`${p.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} is ${kind.trim()}`);
        const r = doctor(['--workspace', p, '--json']);
        const idmap = JSON.parse(r.stdout).checks.find((c) => c.name === 'idmap');
        expect({ kind, status: idmap.status, blocking: idmap.blocking }).toEqual({ kind, status: 'missing', blocking: true });
        expect(idmap.detail).toMatch(/can't be a workspace/);
        expect(idmap.detail).toMatch(what);
        expect(r.code).toBe(1);
        await expectSandboxError(() => new Sandbox(opts({ workspace: p })).open(), SandboxError, what);
        const run = spawnSync(KERN, ['run', '--image', 'host', '--workspace', p, '--', 'true'], { encoding: 'utf8', timeout: 60000 });
        expect({ kind, code: run.status }).toEqual({ kind, code: 125 });
        expect(run.stderr).toMatch(what);
      }
    } finally {
      server.close();
    }
    // Nothing was followed or touched.
    expect(fs.statSync('/etc/shadow').mtimeMs).toBe(shadowBefore.mtimeMs);
    expect(fs.readdirSync(real)).toEqual([]);
    // The directory itself is fine, everywhere.
    const ok = doctorJson({}, ['--workspace', real]);
    expect(ok.by.idmap.detail).not.toMatch(/can't be a workspace/);
    const sb = await new Sandbox(opts({ workspace: real })).open();
    await sb.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 120000);

test('proxy credentials are not printed', () => {
  const { by } = doctorJson({ HTTPS_PROXY: 'http://alice:s3cret@proxy.example:3128', NO_PROXY: 'localhost' });
  expect(by.proxy.detail).toContain('HTTPS_PROXY=http://***@proxy.example:3128');
  expect(by.proxy.detail).toContain('NO_PROXY=localhost');
  expect(by.proxy.detail).not.toMatch(/s3cret|alice/);
});
