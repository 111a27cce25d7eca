'use strict';
// rootless: yes
// ADDITION (issue 20): `sb.isolation()`, the posture a box of this Sandbox really gets, measured
// (a probe box and kern's read-back of the cgroup), and `requireIsolation`, which refuses to open
// when a control it names is missing. Each report is checked against an independent look from the
// host and from inside an ordinary box of the same Sandbox: its namespaces against the host's, its
// seccomp filter count, the RLIMIT_DATA it got (the rlimit fallback) and the host's cgroup
// hierarchy. As root the caps are cgroup-held; as an unprivileged user on cgroup v1 (this
// machine) they fall back to rlimits, so `requireIsolation: ["limits"]` is refused there: a
// control really missing on this host. `enforceLimits: false` takes the cgroup away for root too.

const fs = require('fs');
const {
  ROOTFS,
  requireRootfs,
  opts,
  capsEnforced,
  isRoot,
  tempDirs,
  expectSandboxError,
  expectRefusedBeforeAnyBox,
  uniqueName,
} = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const { temp, removeAll } = tempDirs();
const HOST_CGROUP = fs.existsSync('/sys/fs/cgroup/cgroup.controllers') ? 'v2' : 'v1';
const MEMORY_MB = 256;

/** What an ordinary box of `sb` sees of itself, read by `run`, beside the host's own. */
async function lookInside(sb) {
  const r = await sb.run(['sh', '-c', [
    'for n in mnt pid net user; do echo "ns $n $(readlink /proc/self/ns/$n)"; done',
    'grep "^Seccomp_filters:" /proc/self/status',
    'grep "^Max data size" /proc/self/limits',
  ].join('; ')]);
  expect(r.exitCode).toBe(0);
  const ns = {};
  for (const [, n, link] of r.stdout.matchAll(/^ns (\w+) (\S+)$/gm)) ns[n] = link !== fs.readlinkSync(`/proc/self/ns/${n}`);
  const filters = Number(/^Seccomp_filters:\s+(\d+)/m.exec(r.stdout)[1]);
  const data = /^Max data size\s+(\S+)/m.exec(r.stdout)[1];
  return { ownNs: ns, filters, dataRlimit: data === 'unlimited' ? null : Number(data) };
}

/** The caps the default posture gets on this host, as the report should name them. */
function expectedCaps(inside) {
  if (capsEnforced) return { memory: 'cgroup', pids: 'cgroup', cgroup: HOST_CGROUP };
  if (!isRoot && HOST_CGROUP === 'v1') return { memory: 'rlimit', pids: 'rlimit', cgroup: null };
  // Elsewhere (an unprivileged run on v2 without the guest's delegation) whichever kern got:
  // the box's own RLIMIT_DATA says which.
  return inside.dataRlimit === null
    ? { memory: 'cgroup', pids: 'cgroup', cgroup: HOST_CGROUP }
    : { memory: 'rlimit', pids: 'rlimit', cgroup: null };
}

beforeAll(() => {
  requireRootfs();
});

afterAll(() => removeAll());

describe('isolation(): measured, and what an ordinary box of the Sandbox sees agrees', () => {
  test('the default posture: own namespaces, no host network, kern\'s standard filter, caps as this host allows', async () => {
    const sb = await new Sandbox(opts({ memoryMb: MEMORY_MB })).open();
    try {
      const { routes, ...report } = await sb.isolation();
      const inside = await lookInside(sb);
      const caps = expectedCaps(inside);
      expect(inside.ownNs).toEqual({ mnt: true, pid: true, net: true, user: true });
      expect(inside.filters).toBe(1);
      expect(report).toEqual({
        filesystem: true,
        network: 'none',
        process: true,
        limits: { memory: caps.memory, pids: caps.pids, cpu: 'none' },
        seccomp: 'standard',
        userns: true,
        cgroup: caps.cgroup,
      });
      // The rlimit fallback is the one the box runs under; a cgroup cap leaves RLIMIT_DATA alone.
      expect(inside.dataRlimit).toBe(caps.memory === 'rlimit' ? MEMORY_MB * 1024 * 1024 : null);
      // Measured once: the second call is the same answer.
      expect(await sb.isolation()).toEqual({ ...report, routes });
    } finally {
      await sb.close();
    }
  });

  test('securityProfile "untrusted", a CPU cap and network: true are what the box gets', async () => {
    const sb = await new Sandbox(opts({ securityProfile: 'untrusted', cpus: 0.5, network: true })).open();
    try {
      const report = await sb.isolation();
      const inside = await lookInside(sb);
      expect(inside.filters).toBe(3);
      expect(inside.ownNs.net).toBe(false);
      expect(report).toMatchObject({ seccomp: 'untrusted', network: 'host', filesystem: true, process: true });
      // A CPU rate has no rlimit: it is a cgroup's or nothing.
      expect(report.limits.cpu).toBe(report.cgroup === null ? 'none' : 'cgroup');
      if (capsEnforced) expect(report.limits.cpu).toBe('cgroup');
    } finally {
      await sb.close();
    }
  });

  test('egressAllow: the box\'s own network namespace, out only through the allowlist', async () => {
    const sb = await new Sandbox(opts({ egressAllow: ['example.com'] })).open();
    try {
      expect((await lookInside(sb)).ownNs.net).toBe(true);
      expect((await sb.isolation()).network).toBe('allowlist');
    } finally {
      await sb.close();
    }
  });

  test('enforceLimits: false: rlimits and no cgroup, root or not', async () => {
    const sb = await new Sandbox(opts({ enforceLimits: false, memoryMb: MEMORY_MB })).open();
    try {
      const report = await sb.isolation();
      expect({ limits: report.limits, cgroup: report.cgroup }).toEqual({
        limits: { memory: 'rlimit', pids: 'rlimit', cpu: 'none' },
        cgroup: null,
      });
      expect((await lookInside(sb)).dataRlimit).toBe(MEMORY_MB * 1024 * 1024);
    } finally {
      await sb.close();
    }
  });

  test('persist: measured on a fresh box of the resident box\'s posture, the same report as without persist', async () => {
    const plain = await new Sandbox(opts()).open();
    const ws = temp('kern-isolation-persist-');
    const resident = new Sandbox(opts({ persist: true, name: uniqueName('isoreport'), workspace: ws, requireIsolation: ['process'] }));
    try {
      await resident.open();
      const { routes: residentRoutes, ...top } = await resident.isolation();
      const { routes: plainRoutes, ...plainTop } = await plain.isolation();
      expect(top).toEqual(plainTop);
      // Its calls take the resident box; its processes fresh boxes: each measured there, and
      // under the same caps as a fresh box (the resident box's, read back from the host).
      expect(Object.keys(residentRoutes).sort()).toEqual(['resident', 'spawn', 'terminal']);
      for (const r of ['resident', 'spawn', 'terminal']) expect({ r, report: residentRoutes[r] }).toEqual({ r, report: plainRoutes.fresh });
      expect(plainRoutes.fresh).toEqual(plainTop);
    } finally {
      await resident.destroy();
      await resident.close();
      await plain.close();
    }
  });

  test('routes: each route a call can take is measured in its own box (zygote fork, prewarm slot, kernel, spawn, terminal)', async () => {
    const sb = await new Sandbox(opts({ memoryMb: MEMORY_MB, zygote: true, prewarm: 1 })).open();
    try {
      const { routes, ...top } = await sb.isolation();
      expect(Object.keys(routes).sort()).toEqual(['fresh', 'kernel', 'prewarm', 'spawn', 'terminal', 'zygote']);
      const inside = await lookInside(sb);
      const caps = expectedCaps(inside);
      const expected = {
        filesystem: true,
        network: 'none',
        process: true,
        limits: { memory: caps.memory, pids: caps.pids, cpu: 'none' },
        seccomp: 'standard',
        userns: true,
        cgroup: caps.cgroup,
      };
      for (const [route, report] of Object.entries(routes)) expect({ route, report }).toEqual({ route, report: expected });
      expect(top).toEqual(expected);
      // A python cell (a prewarmed slot or a zygote fork) sees the same of itself.
      const cell = await sb.runCode([
        'import os',
        'print(" ".join(str(os.readlink("/proc/self/ns/" + n) != h) for n, h in zip(("mnt", "pid", "net", "user"), HOST)))',
        'print([l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp_filters")][0])',
      ].join('\n').replace('HOST', JSON.stringify(['mnt', 'pid', 'net', 'user'].map((n) => fs.readlinkSync(`/proc/self/ns/${n}`)))));
      expect(cell.stdout).toBe('True True True True\n1\n');
      // The pool was topped up after the probe took a slot, and the zygote still serves.
      expect(cell.exitCode).toBe(0);
    } finally {
      await sb.close();
    }
  });

  test('before open(): ERR_NOT_OPEN', async () => {
    const err = await expectSandboxError(() => new Sandbox(opts()).isolation(), SandboxError, /not open/);
    expect(err.code).toBe('ERR_NOT_OPEN');
  });
});

describe('requireIsolation', () => {
  test('controls this host supplies: open() succeeds', async () => {
    const sb = await new Sandbox(opts({ requireIsolation: ['filesystem', 'process', 'network', 'seccomp'], securityProfile: 'untrusted' })).open();
    try {
      // The measurement open() made is the one isolation() returns.
      expect(await sb.isolation()).toMatchObject({ filesystem: true, process: true, network: 'none', seccomp: 'untrusted' });
    } finally {
      await sb.close();
    }
  });

  test('"limits": granted where a cgroup holds the caps, refused (ERR_ISOLATION_UNAVAILABLE) where they fall back', async () => {
    const ws = temp('kern-isolation-ws-');
    const sb = new Sandbox(opts({ workspace: ws, requireIsolation: ['limits'], setup: 'touch /workspace/setup-ran' }));
    if (capsEnforced) {
      await sb.open();
      expect((await sb.isolation()).limits).toMatchObject({ memory: 'cgroup', pids: 'cgroup' });
      await sb.close();
      return;
    }
    if (isRoot || HOST_CGROUP !== 'v1') return; // only where the fallback is certain
    const err = await expectSandboxError(() => sb.open(), SandboxError,
      /^requireIsolation: this host cannot supply 1 of the controls asked for: limits: memory is capped by rlimit, pids by rlimit/,
      /best-effort/, /KERN_CGROUP_PARENT/);
    expect(err.code).toBe('ERR_ISOLATION_UNAVAILABLE');
    // Refused before setup ran, and nothing of the session is left running.
    expect(fs.existsSync(`${ws}/setup-ran`)).toBe(false);
  });

  test('"limits" with enforceLimits: false: refused everywhere, before setup', async () => {
    const ws = temp('kern-isolation-ws-');
    const err = await expectSandboxError(
      () => new Sandbox(opts({ workspace: ws, enforceLimits: false, requireIsolation: ['limits', 'process'], setup: 'touch /workspace/setup-ran' })).open(),
      SandboxError, /cannot supply 1 of the controls/, /limits: memory is capped by rlimit, pids by rlimit/);
    expect(err.code).toBe('ERR_ISOLATION_UNAVAILABLE');
    expect(err.message).not.toMatch(/process:/);
    expect(fs.existsSync(`${ws}/setup-ran`)).toBe(false);
  });

  test('"seccomp" missing: named, with what to do; a control in force is not named', async () => {
    const err = await expectSandboxError(
      () => new Sandbox(opts({ requireIsolation: ['seccomp', 'filesystem'] })).open(), SandboxError,
      /seccomp: the untrusted seccomp profile is not in force in the box \(measured: standard\); set `securityProfile: "untrusted"`/);
    expect(err.code).toBe('ERR_ISOLATION_UNAVAILABLE');
    expect(err.message).not.toMatch(/filesystem:/);
  });

  test('bad values and network: true are refused by the constructor, before any kern starts', async () => {
    for (const [o, pattern] of [
      [{ requireIsolation: ['network'], network: true }, /contradict each other/],
      [{ requireIsolation: ['apparmor'] }, /"apparmor" is not a control; the controls are "filesystem", "network", "process", "limits", "seccomp"/],
      [{ requireIsolation: 'limits' }, /must be an array of control names/],
      [{ requireIsolation: [1] }, /must be an array of control names/],
    ]) {
      const err = await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts(o), pattern);
      expect(err.code).toBe('ERR_INVALID_OPTION');
    }
  });
});

test('the test image is the one the helpers use', () => {
  expect(fs.existsSync(ROOTFS)).toBe(true);
});
