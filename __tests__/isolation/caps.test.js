'use strict';
// rootless: yes
// `capDrop`: which capabilities the workload loses. Default ["ALL"]; [] keeps them all; names
// drop just those. Whatever is kept counts only inside the box's own user namespace: box root
// is never host root, and nested user namespaces stay refused.

const fs = require('fs');
const { KEEP_ALL_CAPS, isRoot, requireRootfs, opts, makeCanaryFile, expectSandboxError, uniqueName, hostProcessesMatching } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

beforeAll(() => requireRootfs());

const PROBE = [
  'import socket',
  'eff = int([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1], 16)',
  'print("eff", hex(eff), "netbind", bool(eff >> 10 & 1), "sysadmin", bool(eff >> 21 & 1))',
  's = socket.socket()',
  'try:',
  '    s.bind(("127.0.0.1", 80)); print("bind80 ok")',
  'except PermissionError:',
  '    print("bind80 refused")',
].join('\n');

async function probe(capDrop) {
  const sb = await new Sandbox(opts(capDrop === undefined ? {} : { capDrop })).open();
  try {
    const r = await sb.runCode(PROBE);
    expect(r.exitCode).toBe(0);
    return r.stdout;
  } finally {
    await sb.close();
  }
}

test('default (["ALL"]): no capability, so no port below 1024', async () => {
  const out = await probe(undefined);
  expect(out).toMatch(/^eff 0x0 netbind False sysadmin False\nbind80 refused\n$/);
  expect(await probe(['ALL'])).toBe(out);
});

test('[] keeps every capability (in the box; as root all but SETFCAP): a port below 1024 can be bound', async () => {
  const out = await probe(KEEP_ALL_CAPS);
  expect(out).toMatch(/netbind True sysadmin True\nbind80 ok\n$/);
});

test('naming capabilities drops just those', async () => {
  const out = await probe(['NET_BIND_SERVICE', 'cap_sys_admin', ...KEEP_ALL_CAPS]);
  expect(out).toMatch(/netbind False sysadmin False\nbind80 refused\n$/);
  expect(out).not.toMatch(/^eff 0x0 /);
  const other = await probe(['NET_RAW', ...KEEP_ALL_CAPS]);
  expect(other).toMatch(/netbind True .*\nbind80 ok\n$/);
});

test('kept capabilities stay inside the box: no nested user namespace, no host file touched', async () => {
  const canary = makeCanaryFile();
  const sb = await new Sandbox(opts({ capDrop: KEEP_ALL_CAPS })).open();
  try {
    const marker = uniqueName('capsroot');
    let hostUid = null;
    const r = await sb.run(['sh', '-c', `unshare -U true && echo nested; mount -t tmpfs none /mnt && echo mounted; echo x >> /tmp/${canary.name}; echo ready; sleep 2; : ${marker}`], {
      onStdout: (c) => {
        if (hostUid !== null || !c.toString().includes('ready')) return;
        const [p] = hostProcessesMatching(marker);
        if (p) hostUid = fs.statSync(`/proc/${p.pid}`).uid;
      },
    });
    expect(r.stdout).not.toMatch(/nested/);
    // A mount in the box's own namespace is the box's business; the host never sees it.
    expect(canary.intact()).toBe(true);
    // Box root is never host root: on the host the process is an unprivileged id (or the caller).
    if (process.getuid() === 0) expect(hostUid).toBeGreaterThanOrEqual(65536);
    else expect(hostUid).toBe(process.getuid());
  } finally {
    await sb.close();
    canary.remove();
  }
});

test('an unknown capability is a SandboxError naming it', async () => {
  for (const capDrop of [['NET_RAWR'], ['ALL', 42], 'ALL']) {
    const sb = new Sandbox(opts({ capDrop }));
    await expectSandboxError(() => sb.open(), SandboxError, /capDrop/);
    await sb.close();
  }
});

(isRoot ? test : test.skip)('as root, keeping SETFCAP is refused before any box starts: box root could give a workspace file capabilities the host honours', async () => {
  for (const capDrop of [[], ['NET_RAW'], ['cap_sys_admin']]) {
    const sb = new Sandbox(opts({ capDrop }));
    await expectSandboxError(() => sb.open(), SandboxError, /capDrop.*SETFCAP/);
  }
  // Dropping SETFCAP keeps every other capability, and setxattr of security.capability fails.
  const ws = require('../helpers').makeTempDir('kern-fcaps-');
  const sb = await new Sandbox(opts({ capDrop: ['SETFCAP'], workspace: ws })).open();
  try {
    const r = await sb.runCode([
      'import os, struct',
      "open('capf', 'w').write('x')",
      "v = struct.pack('<IIIII', 0x02000001, 1 << 7, 0, 0, 0)  # cap_setuid+ep",
      'try:',
      "    os.setxattr('capf', 'security.capability', v); print('set')",
      'except OSError as e:',
      "    print('refused', e.errno)",
    ].join('\n'));
    expect(r.stdout).toMatch(/^refused/);
    let xattr = null;
    try {
      xattr = require('child_process').execFileSync('python3', ['-c', 'import os, sys; os.getxattr(sys.argv[1], "security.capability")', `${ws}/capf`], { stdio: ['ignore', 'pipe', 'ignore'] });
    } catch {
      xattr = null;
    }
    expect(xattr).toBeNull();
  } finally {
    await sb.close();
  }
});
