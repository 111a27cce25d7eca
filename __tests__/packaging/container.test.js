'use strict';
// rootless: no — starts Podman containers as root; the container's non-root user is the unprivileged case
// kern-sandbox inside containers (issue 22): the PACKED npm package (dist/*.tgz, installed with
// npm as a user would) in a Podman container (runc runtime) of the test image
// (scripts/build-test-container.sh), as the container's non-root user and as the root of a
// container with its own user namespace, with the shipped seccomp.json and the flags the README
// lists; and without each, the SandboxError that names the refusal and its fix. Every check of
// what the box did is made on the container's side (__tests__/support/container-probe.js).
// The box runs on the test rootfs bound read-only at /rootfs, not on the container's own files.

const fs = require('fs');
const path = require('path');
const { spawnSync, execFileSync } = require('child_process');
const { requireRootfs, makeTempDir } = require('../helpers');

const repo = path.join(__dirname, '..', '..');
const pkg = require('../../package.json');
const { platformKey } = require('../../js/platform.js');

const IMAGE = process.env.KERN_TEST_CONTAINER_IMAGE || 'localhost/kern-sandbox-test:latest';
const key = platformKey();
const tarballs = [`${pkg.name}-${key}-${pkg.version}.tgz`, `${pkg.name}-${pkg.version}.tgz`].map((f) => path.join(repo, 'dist', f));

let tmp, app, rootfs, profile;

/** dist/ as `npm run pack:all -- --dev` left it, or packed now when missing or older than the build. */
function ensureDist() {
  const built = ['kern', `js/${pkg.napi.binaryName}.${key}.node`, 'package.json', ...pkg.files]
    .map((f) => path.join(repo, f))
    .filter((f) => fs.existsSync(f))
    .map((f) => fs.statSync(f).mtimeMs);
  const stale = tarballs.some((t) => !fs.existsSync(t) || fs.statSync(t).mtimeMs < Math.max(...built));
  if (stale) execFileSync(process.execPath, [path.join(repo, 'scripts', 'pack.js'), '--dev'], { cwd: repo, stdio: ['ignore', 'ignore', 'inherit'] });
}

/** The flags of each posture. */
const NON_ROOT = ['--user', 'app'];
// Root of a container with a user namespace of its own (podman --uidmap; Kubernetes hostUsers: false).
const USERNS = ['--uidmap', '0:200000:65536', '--gidmap', '0:200000:65536'];
const ROOT_USERNS = USERNS;
// What the README's run line and deploy/k8s/deployment.yaml add: no capability (root of a user
// namespace keeps CAP_SETFCAP, which mapping uid 0 needs), no privilege gain, a read-only root
// (Podman mounts a tmpfs at /tmp; kern's state and image store go there: KERN_HOME).
const READ_ONLY = ['--security-opt', 'no-new-privileges', '--read-only', '-e', 'KERN_HOME=/tmp/kern-sandbox'];
const HARDENED = ['--cap-drop', 'ALL', ...READ_ONLY];
const HARDENED_ROOT = ['--cap-drop', 'ALL', '--cap-add', 'SETFCAP', ...READ_ONLY];
const withProfile = () => ['--security-opt', `seccomp=${profile}`];
const UNMASKED = ['--security-opt', 'systempaths=unconfined'];
const UNMASKED_PROC = ['--security-opt', 'unmask=/proc/*'];

/** `podman run` of the probe (or another command) in the test image; the probe's JSON. */
function podman(flags, argv) {
  const r = spawnSync(
    'podman',
    ['run', '--rm', '--runtime', 'runc', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024',
      '-v', `${app}:/app:ro`, '-v', `${rootfs}:/rootfs:ro`, '-w', '/app', ...flags, IMAGE, ...argv],
    { encoding: 'utf8', timeout: 180000 }
  );
  if (r.error) throw r.error;
  return r;
}

function probe(flags, scenario) {
  const r = podman(flags, ['node', 'probe.js', scenario]);
  const line = r.stdout.split('\n').find((l) => l.startsWith('PROBE '));
  if (!line) throw new Error(`podman run ${flags.join(' ')} probe ${scenario}: no probe line (exit ${r.status})\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(line.slice(6));
}

beforeAll(() => {
  rootfs = requireRootfs();
  const have = spawnSync('podman', ['--version'], { encoding: 'utf8' });
  if (have.status !== 0) throw new Error('podman is missing: run scripts/setup-deps.sh (it installs podman and runc)');
  execFileSync('bash', [path.join(repo, 'scripts', 'build-test-container.sh')], { stdio: ['ignore', 'ignore', 'inherit'] });
  ensureDist();
  tmp = makeTempDir('kern-container-');
  app = path.join(tmp, 'app');
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true }));
  // As a user installs it: the packed tarballs, through npm. Their dependencies come from npm's
  // cache where it has them; a fresh machine's cache has their tarballs (npm ci) but not the
  // registry's listings a range needs, which npm then fetches.
  const npm = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', ...tarballs], { cwd: app, encoding: 'utf8', timeout: 300000 });
  if (npm.status !== 0) throw new Error(`npm install of the packed package failed:\n${npm.stdout}\n${npm.stderr}`);
  fs.copyFileSync(path.join(__dirname, '..', 'support', 'container-probe.js'), path.join(app, 'probe.js'));
  // The container's users (app = 1000, and root of the --uidmap container = host 200000) read it.
  execFileSync('chmod', ['-R', 'a+rX', tmp]);
  profile = path.join(app, 'node_modules', pkg.name, 'seccomp.json');
}, 600000);

afterAll(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the installed package carries the docs the README links to, the deploy files and the third-party notices, as in the repo', () => {
  const docs = fs.readdirSync(path.join(repo, 'docs')).map((f) => `docs/${f}`);
  expect(docs.length).toBeGreaterThan(0);
  for (const f of ['deploy/Dockerfile', 'deploy/k8s/deployment.yaml', 'deploy/serve.Dockerfile', 'deploy/k8s/serve.yaml', 'deploy/k8s/haproxy.cfg', 'THIRD_PARTY_NOTICES', ...docs]) {
    expect(fs.readFileSync(path.join(app, 'node_modules', pkg.name, f), 'utf8')).toBe(fs.readFileSync(path.join(repo, f), 'utf8'));
  }
  // The platform package ships compiled third-party code (the crates, acorn): its notices too.
  expect(fs.readFileSync(path.join(app, 'node_modules', `${pkg.name}-${key}`, 'THIRD_PARTY_NOTICES'), 'utf8'))
    .toBe(fs.readFileSync(path.join(repo, 'THIRD_PARTY_NOTICES'), 'utf8'));
});

describe('the shipped profile', () => {
  test("is Podman's default profile with sethostname taken out of the CAP_SYS_ADMIN rules, and nothing else", () => {
    const ours = JSON.parse(fs.readFileSync(profile, 'utf8'));
    const base = JSON.parse(fs.readFileSync('/usr/share/containers/seccomp.json', 'utf8'));
    const added = ours.syscalls.filter((r) => !base.syscalls.some((b) => JSON.stringify(b) === JSON.stringify(r)));
    expect(added.map((r) => [r.names, r.action, r.args, r.includes, r.excludes])).toEqual([
      [['sethostname'], 'SCMP_ACT_ALLOW', [], {}, {}],
      [base.syscalls.find((b) => b.includes.caps?.includes('CAP_SYS_ADMIN')).names.filter((n) => n !== 'sethostname'), 'SCMP_ACT_ALLOW', [], { caps: ['CAP_SYS_ADMIN'] }, {}],
      [base.syscalls.find((b) => b.excludes.caps?.includes('CAP_SYS_ADMIN')).names.filter((n) => n !== 'sethostname'), 'SCMP_ACT_ERRNO', [], {}, { caps: ['CAP_SYS_ADMIN'] }],
    ]);
    expect({ ...ours, syscalls: null }).toEqual({ ...base, syscalls: null });
    expect(ours.syscalls.length).toBe(base.syscalls.length + 1);
  });

  test('is what scripts/make-seccomp-profile.py makes from the installed default (regenerate it when containers-common changes)', () => {
    const made = spawnSync('python3', [path.join(repo, 'scripts', 'make-seccomp-profile.py')], { encoding: 'utf8' });
    expect(made.status).toBe(0);
    expect(made.stdout).toBe(fs.readFileSync(path.join(repo, 'seccomp.json'), 'utf8'));
  });

  test('the container itself still cannot set its hostname with it (the kernel wants CAP_SYS_ADMIN; only the filter is lifted)', () => {
    const r = podman([...NON_ROOT, ...withProfile(), ...UNMASKED], ['python3', '-c', 'import socket; socket.sethostname("x")']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/PermissionError/);
  });
});

describe.each([
  ['the non-root user (--user app), systempaths=unconfined', () => [...NON_ROOT, ...withProfile(), ...UNMASKED, ...HARDENED], 0],
  ['root in a user namespace of its own (--uidmap), unmask=/proc/*', () => [...ROOT_USERNS, ...withProfile(), ...UNMASKED_PROC, ...HARDENED_ROOT], 0],
  ['the non-root user in a user namespace (the Kubernetes manifest: hostUsers: false, runAsUser)', () => [...USERNS, ...NON_ROOT, ...withProfile(), ...UNMASKED_PROC, ...HARDENED], 0],
])('inside a container as %s, with the shipped profile', (_name, flags, boxUid) => {
  let out;
  beforeAll(() => {
    out = probe(flags(), 'run');
  }, 200000);

  test('a python runCode runs, as the box root', () => {
    expect(out.thrown).toBeUndefined();
    expect(out.fault).toBeNull();
    expect(out.exitCode).toBe(0);
    expect(out.stdout).toContain(`uid ${boxUid} answer 42`);
  });

  test('the long-lived boxes run too: a kernel keeps its state, a persist box answers a call', () => {
    expect(out.kernel).toBe('42\n');
    expect(out.persisted.fault).toBeNull();
    expect(out.persisted.stdout).toMatch(/^resident \d+\n$/);
  });

  test("close() deletes the workspace, even a directory the box closed to everyone (root without CAP_DAC_OVERRIDE too)", () => {
    expect(out.closedExit).toBe(0);
    expect(out.leftWorkspaces).toEqual([]);
  });

  test('the box is isolated: own mount, PID and user namespaces, network none', () => {
    expect(out.isolation).toMatchObject({ filesystem: true, process: true, userns: true, network: 'none' });
  });

  test('caps are enforced by a cgroup where the container lets kern write one, else the rlimit fallback says so', () => {
    const warned = out.notes.filter((n) => /^warning: (memory|pids) cap .* is best-effort/.test(n));
    if (out.isolation.limits.memory === 'cgroup') {
      expect(out.isolation.limits.pids).toBe('cgroup');
      expect(warned).toEqual([]);
    } else {
      // Here (cgroup v1) Podman mounts /sys/fs/cgroup read-only: both caps fall back, and say so.
      expect(out.isolation.limits).toMatchObject({ memory: 'rlimit', pids: 'rlimit' });
      expect(warned).toHaveLength(2);
      expect(warned[0]).toMatch(/no writable cgroup/);
    }
  });

  test("the network is off: only lo in the box, and the container's own loopback server is out of reach", () => {
    expect(out.stdout).toContain("ifaces ['lo']");
    expect(out.stdout).toMatch(/^connect (ConnectionRefusedError|TimeoutError|OSError)/m);
    expect(out.containerReaches).toBe(true);
  });
});

describe.each([
  ['the non-root user', () => [...NON_ROOT, ...withProfile(), ...UNMASKED, ...HARDENED]],
  ['root in a user namespace of its own', () => [...ROOT_USERNS, ...withProfile(), ...UNMASKED_PROC, ...HARDENED_ROOT]],
])("attack: the box against the container's processes and files, as %s", (_name, flags) => {
  let out;
  beforeAll(() => {
    out = probe(flags(), 'attack');
  }, 200000);

  test("the box sees none of the container's processes and cannot signal them: the canary lives", () => {
    expect(out.thrown).toBeUndefined();
    expect(out.exitCode).toBe(0);
    expect(out.canaryReady).toBe(true);
    expect(out.stdout).toContain('seen []');
    expect(out.stdout).toMatch(/^kill (ProcessLookupError|PermissionError)$/m);
    expect(out.canaryAlive).toBe(true);
  });

  test("the box cannot read the container's files outside the workspace, nor write anywhere the container sees", () => {
    const reads = out.stdout.split('\n').filter((l) => l.startsWith('read '));
    expect(reads).toHaveLength(3);
    for (const l of reads) expect(l).toMatch(/ (FileNotFoundError|PermissionError)$/);
    expect(out.stdout).not.toMatch(/kerncanary\d+/);
    const writes = out.stdout.split('\n').filter((l) => l.startsWith('write '));
    expect(writes).toHaveLength(4);
    for (const l of writes) expect(l).not.toMatch(/ written$/);
    expect(out.secretIntact).toBe(true);
    expect(out.planted).toEqual([]);
  });
});

describe('without the flags, open() throws a SandboxError that names the refusal and its fix', () => {
  test("the runtime's default seccomp profile: names seccomp and the shipped profile", () => {
    const out = probe([...NON_ROOT, ...UNMASKED], 'open');
    expect(out.opened).toBe(false);
    expect(out.error).toMatchObject({ name: 'SandboxError', code: 'ERR_HOST_UNSUPPORTED' });
    expect(out.error.message).toMatch(/sethostname: EPERM/);
    expect(out.error.message).toMatch(/seccomp profile refused sethostname/);
    expect(out.error.message).toContain('--security-opt seccomp=node_modules/kern-sandbox/seccomp.json');
    expect(out.error.message).toContain('seccompProfile: {type: Localhost');
  });

  test('the masked /proc paths: names them and systempaths=unconfined', () => {
    const out = probe([...NON_ROOT, ...withProfile()], 'open');
    expect(out.opened).toBe(false);
    expect(out.error).toMatchObject({ name: 'SandboxError', code: 'ERR_HOST_UNSUPPORTED' });
    expect(out.error.message).toMatch(/max_user_namespaces\): EROFS: Read-only file system/);
    expect(out.error.message).toMatch(/covers paths under \/proc \(\/proc\/acpi/);
    expect(out.error.message).toContain('--security-opt systempaths=unconfined');
    expect(out.error.message).toContain('procMount: Unmasked');
  });

  test('/proc/sys writable but files under /proc still covered: the proc mount refused, named the same', () => {
    const out = probe([...NON_ROOT, ...withProfile(), '--security-opt', 'unmask=/proc/sys'], 'open');
    expect(out.opened).toBe(false);
    expect(out.error.code).toBe('ERR_HOST_UNSUPPORTED');
    expect(out.error.message).toMatch(/mount \/proc .*EPERM/);
    expect(out.error.message).toContain('--security-opt systempaths=unconfined');
  });

  test("root of a user namespace without CAP_SETFCAP (--cap-drop ALL): names SETFCAP and --user", () => {
    const out = probe([...ROOT_USERNS, ...withProfile(), ...UNMASKED_PROC, ...HARDENED], 'open');
    expect(out.opened).toBe(false);
    expect(out.error.code).toBe('ERR_HOST_UNSUPPORTED');
    expect(out.error.message).toMatch(/cannot write the box's uid\/gid maps: Operation not permitted/);
    expect(out.error.message).toContain('--cap-add SETFCAP');
    expect(out.error.message).toContain('--user 1000');
  });

  test("the container's root that is the host's root (no user namespace): names --user and hostUsers: false", () => {
    const out = probe([...withProfile(), ...UNMASKED], 'open');
    expect(out.opened).toBe(false);
    expect(out.error.code).toBe('ERR_HOST_UNSUPPORTED');
    expect(out.error.message).toMatch(/idmapped mount, which failed \(Operation not permitted/);
    expect(out.error.message).toContain('run the container as a non-root user (--user 1000');
    expect(out.error.message).toContain('hostUsers: false');
  });
});

describe('kern doctor inside a container', () => {
  const doctor = (flags) => {
    const r = podman(flags, ['node_modules/.bin/kern', 'doctor', '--json']);
    return { code: r.status, report: JSON.parse(r.stdout), stderr: r.stderr };
  };
  const check = (report, name) => report.checks.find((c) => c.name === name);

  test("with the runtime's defaults: each restriction, with the flag that lifts it", () => {
    const { code, report } = doctor(NON_ROOT);
    expect(code).not.toBe(0);
    expect(check(report, 'container')).toMatchObject({ status: 'info', detail: expect.stringMatching(/^inside a container \(podman; this process's seccomp mode 2/) });
    expect(check(report, 'ctr-proc')).toMatchObject({ status: 'missing', fix: expect.stringContaining('--security-opt systempaths=unconfined') });
    expect(check(report, 'ctr-seccomp')).toMatchObject({ status: 'missing', detail: expect.stringContaining('sethostname in a new UTS namespace (EPERM'), fix: expect.stringContaining('--security-opt seccomp=node_modules/kern-sandbox/seccomp.json') });
    expect(check(report, 'ctr-root')).toBeUndefined();
    // Podman's /sys/fs/cgroup is read-only here: the caps line says so, and what caps boxes then.
    expect(check(report, 'caps')).toMatchObject({ status: 'degraded', detail: expect.stringMatching(/^the container's \/sys\/fs\/cgroup is read-only/), fix: expect.stringContaining('resources.limits') });
  });

  test('with the profile and the flags: those checks pass', () => {
    const { report } = doctor([...NON_ROOT, ...withProfile(), ...UNMASKED]);
    expect(check(report, 'ctr-proc').status).toBe('ok');
    expect(check(report, 'ctr-seccomp').status).toBe('ok');
    expect(check(report, 'userns').status).toBe('ok');
  });

  test('as root of a container with its own user namespace: no idmapped mount needed, nothing refused', () => {
    const { code, report } = doctor([...ROOT_USERNS, ...withProfile(), ...UNMASKED_PROC]);
    expect(check(report, 'idmap')).toMatchObject({ status: 'ok', detail: expect.stringMatching(/^root in a user namespace of its own/) });
    expect(check(report, 'ctr-root')).toBeUndefined();
    expect(report.checks.filter((c) => c.blocking && c.status !== 'ok' && c.name !== 'caps').map((c) => c.name)).toEqual([]);
    // Only the caps (cgroup v1 read-only here) keep it from "boxes run with enforced caps".
    expect(code === 0).toBe(check(report, 'caps').status === 'ok');
  });

  test("as the container's root without a user namespace: says to run as a non-root user", () => {
    const { report } = doctor([...withProfile(), ...UNMASKED]);
    expect(check(report, 'ctr-root')).toMatchObject({ status: 'missing', fix: expect.stringContaining('--user 1000') });
  });
});

describe('kern serve in the container (the shipped flags), the E2B SDK on the host', () => {
  const { sdk, KEY } = require('../serve/serve-helpers.js');
  let name;
  let url;
  beforeAll(async () => {
    name = `kern-serve-${process.pid}`;
    // The README's run flags, the port published on the host's loopback only, the packed
    // package's `kern serve` (as `npx kern-sandbox serve` runs it) listening on the container's
    // address, boxes on the read-only test rootfs.
    const r = spawnSync('podman', ['run', '-d', '--name', name, '--runtime', 'runc', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024',
      '-v', `${app}:/app:ro`, '-v', `${rootfs}:/rootfs:ro`, '-w', '/app', '-p', '127.0.0.1::49982', '-e', `KERN_API_KEYS=${KEY}`,
      ...NON_ROOT, ...withProfile(), ...UNMASKED, ...HARDENED, '--tmpfs', '/tmp',
      IMAGE, 'node', `node_modules/${pkg.name}/bin/kern.js`, 'serve', '--listen', '0.0.0.0:49982', '--image', '/rootfs'], { encoding: 'utf8', timeout: 60000 });
    if (r.status !== 0) throw new Error(`podman run kern serve failed: ${r.stdout}${r.stderr}`);
    const port = spawnSync('podman', ['port', name, '49982/tcp'], { encoding: 'utf8' }).stdout.trim().split(':').pop();
    url = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 100; i++) {
      if (await fetch(`${url}/health`).then((res) => res.ok, () => false)) return;
      await new Promise((res) => setTimeout(res, 200));
    }
    throw new Error(`kern serve in the container never answered: ${spawnSync('podman', ['logs', name], { encoding: 'utf8' }).stderr}`);
  }, 120000);
  afterAll(() => {
    if (name) spawnSync('podman', ['rm', '-f', '-t', '5', name], { stdio: 'ignore' });
  });

  test('sandboxes, commands, files and code run; a stop ends them all and the container exits 0', async () => {
    const env = { E2B_API_URL: url, E2B_SANDBOX_URL: url, E2B_API_KEY: KEY };
    const r = await sdk(`
      const sb = await Sandbox.create('base', { timeoutMs: 60000 });
      const out = {};
      out.run = (await sb.commands.run('echo "in $HOME"; cat /proc/1/cmdline | tr "\\\\0" " "')).stdout;
      await sb.files.write('c.txt', 'container');
      out.read = await sb.files.read('c.txt');
      const ci = await CISandbox.create({ timeoutMs: 60000 });
      out.cell = (await ci.runCode('6 * 7')).text;
      out.listed = (await Sandbox.list().nextItems()).length;
      return out;`, env);
    expect(r.run).toMatch(/^in \/home\/user\n/);
    // The box's PID 1 is kern's, not the container's node.
    expect(r.run).not.toMatch(/node/);
    expect(r.read).toBe('container');
    expect(r.cell).toBe('42');
    expect(r.listed).toBe(2);
    const stop = spawnSync('podman', ['stop', '-t', '20', name], { encoding: 'utf8', timeout: 60000 });
    expect(stop.status).toBe(0);
    const state = spawnSync('podman', ['inspect', '--format', '{{.State.ExitCode}}', name], { encoding: 'utf8' });
    expect(state.stdout.trim()).toBe('0');
    const logs = spawnSync('podman', ['logs', name], { encoding: 'utf8' }).stderr;
    expect(logs.split('\n').filter((l) => l.includes('"sandbox ended"')).length).toBe(2);
    expect(logs).toContain('"msg":"stopped"');
    expect(logs).not.toContain(KEY);
  }, 120000);
});
