'use strict';
// rootless: yes
// Attack suite, host secrets: the host process's environment (secret canaries set in the REAL
// environment of this Jest process, which the addon and kern inherit), /proc/*/environ and
// cmdline of every box process (kern's PID 1 carries the host environment: it must stay
// unreadable), host credential files, and the host's unix sockets. Every posture a box can have is
// probed: python runCode, a shell run, a kernel, a prewarmed box, the setup box, egressAllow,
// network: true and image "host".

const fs = require('fs');
const os = require('os');
const net = require('net');
const path = require('path');
const { spawnSync } = require('child_process');
const { requireRootfs, opts, tempDirs, isRoot, uniqueName } = require('../../helpers');
const { hostGuard, runJson, PY_PRELUDE, realEnv } = require('../host');
const { Sandbox } = require('../../..');

const { temp, removeAll } = tempDirs();

const SECRET = uniqueName('sekret');
const SECRETS = {
  KERN_ATK_SECRET: SECRET,
  AWS_SECRET_ACCESS_KEY: `${SECRET}aws`,
  GITHUB_TOKEN: `${SECRET}gh`,
  NPM_TOKEN: `${SECRET}npm`,
  SSH_AUTH_SOCK: `/tmp/${SECRET}/agent.sock`,
};

// Everything the workload can read about its environment, as one string, plus PID 1's environ errno.
const ENV_PROBE =
  PY_PRELUDE +
  [
    'blob = [json.dumps(dict(os.environ))]',
    'readable = []',
    'for p in [d for d in os.listdir("/proc") if d.isdigit()] + ["self", "thread-self"]:',
    '    for f in ["environ", "cmdline"]:',
    '        try:',
    '            blob.append(open(f"/proc/{p}/{f}", "rb").read().decode(errors="replace")); readable.append(f"{p}/{f}")',
    '        except OSError: pass',
    'print(json.dumps({"blob": "\\n".join(blob), "pid1_environ": try_(lambda: open("/proc/1/environ", "rb").read()), "readable": readable}))',
  ].join('\n');

const leaked = (blob) => Object.entries(SECRETS).filter(([k, v]) => blob.includes(v) || blob.includes(`${k}=`)).map(([k]) => k);

let guard;
const saved = {};

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  for (const [k, v] of Object.entries(SECRETS)) {
    saved[k] = realEnv[k];
    realEnv[k] = v;
  }
});

afterAll(() => {
  for (const [k, v] of Object.entries(saved)) {
    if (v === undefined) delete realEnv[k];
    else realEnv[k] = v;
  }
  if (guard) guard.cleanup();
  removeAll();
});

test('control: the secrets are in the real environment a host child process inherits', () => {
  const r = spawnSync('sh', ['-c', 'env'], { encoding: 'utf8' });
  expect(leaked(r.stdout).sort()).toEqual(Object.keys(SECRETS).sort());
});

describe('the host environment reaches no box, in any posture', () => {
  const modes = [
    ['python runCode', {}, 'runCode'],
    ['a shell run()', {}, 'run'],
    ['a kernel cell', {}, 'kernel'],
    ['a prewarmed box', { prewarm: 1 }, 'runCode'],
    ['egressAllow (with the relay process)', { egressAllow: ['example.invalid'] }, 'runCode'],
    ['network: true', { network: true }, 'runCode'],
    ['image "host"', { image: 'host' }, 'runCode'],
  ];
  test.each(modes)('%s: env, /proc/*/environ, /proc/*/cmdline hold no secret; PID 1 environ is refused', async (_l, o, mode) => {
    const s = await new Sandbox(o.image ? o : opts(o)).open();
    try {
      let j;
      if (mode === 'run') {
        const r = await s.run(['python3', '-c', ENV_PROBE]);
        j = JSON.parse(r.stdout.trim().split('\n').pop());
      } else if (mode === 'kernel') {
        const k = await s.kernel();
        try {
          ({ j } = await runJson(k, ENV_PROBE));
        } finally {
          await k.close();
        }
      } else {
        if (o.prewarm) await runJson(s, 'import json; print(json.dumps(0))'); // the next call takes a warm box
        ({ j } = await runJson(s, ENV_PROBE));
      }
      expect(j.readable.length).toBeGreaterThan(0); // the probe did read something
      expect(leaked(j.blob)).toEqual([]);
      expect(j.pid1_environ).toBe('EACCES');
    } finally {
      await s.close();
    }
    guard.assertUntouched();
  });

  test('the setup box (host network, installs deps) starts from a clean environment too', async () => {
    const ws = temp('kern-atk-env-setup-');
    const s = await new Sandbox(
      opts({ workspace: ws, setup: '(env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f"; echo; done) > /workspace/setup-env.txt 2>/dev/null; cat /proc/1/environ >> /workspace/setup-env.txt 2>/dev/null; true' })
    ).open();
    await s.close();
    const blob = fs.readFileSync(path.join(ws, 'setup-env.txt'), 'utf8');
    expect(blob).toMatch(/PATH=/); // the probe ran
    expect(leaked(blob)).toEqual([]);
    guard.assertUntouched();
  });
});

describe('host secrets on disk and host sockets', () => {
  let sb;
  beforeAll(async () => {
    sb = await new Sandbox(opts()).open();
  });
  afterAll(async () => {
    if (sb) await sb.close();
  });

  test('the host\'s /etc/shadow is not the one the box reads (the box sees the image\'s)', async () => {
    const { j } = await runJson(sb, PY_PRELUDE + 'print(json.dumps({"shadow": try_(lambda: open("/etc/shadow").read()), "root": try_(lambda: os.listdir("/root"))}))');
    const boxShadow = j.shadow.startsWith('ok:') ? j.shadow.slice(3) : '';
    if (isRoot) {
      const host = fs.readFileSync('/etc/shadow', 'utf8');
      const hostRootHash = host.split('\n').find((l) => l.startsWith('root:')).split(':')[1];
      if (hostRootHash.length > 2) expect(boxShadow.includes(hostRootHash)).toBe(false);
      expect(boxShadow).not.toBe(host.slice(0, 200));
    }
    // /root in the box is the image's: none of the host's /root entries that the image lacks.
    if (isRoot && j.root.startsWith('ok:')) {
      const hostOnly = fs.readdirSync('/root').filter((n) => n.length > 3 && n !== '.bashrc' && n !== '.profile');
      for (const n of hostOnly) expect(j.root.includes(`'${n}'`)).toBe(false);
    }
    guard.assertUntouched();
  });

  test('a credential file planted in the host home directory is found nowhere in the box', async () => {
    const dir = path.join(os.homedir(), `.kern-atk-${guard.token}`);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'id_rsa'), `-----BEGIN ${SECRET}-----\n`);
    try {
      const r = await sb.run(['sh', '-c', `find / \\( -path /proc -o -path /sys \\) -prune -o -name '*${guard.token}*' -print 2>/dev/null; for h in /root /home/* "$HOME"; do ls -a "$h" 2>/dev/null; done; echo end`], { timeoutS: 60 });
      expect(r.stdout).not.toContain(guard.token);
      expect(r.stdout).toMatch(/end\n$/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    guard.assertUntouched();
  });

  test('the host\'s unix sockets (a path socket and an abstract one) do not show in the box\'s /proc/net/unix', async () => {
    const sockPath = path.join(guard.dir, `${guard.token}.sock`);
    const a = net.createServer().listen(sockPath);
    const b = net.createServer().listen(`\0${guard.token}-abstract`);
    await Promise.all([a, b].map((s) => new Promise((res) => (s.listening ? res() : s.once('listening', res)))));
    try {
      expect(fs.readFileSync('/proc/net/unix', 'utf8')).toContain(guard.token); // the host sees them
      const r = await sb.run(['cat', '/proc/net/unix']);
      expect(r.exitCode).toBe(0);
      expect(r.stdout).not.toContain(guard.token);
    } finally {
      a.close();
      b.close();
    }
  });
});

test('after every attack: no process, cgroup or mount left behind on the host', async () => {
  await guard.assertNoLeaks();
  fs.rmSync(path.join(guard.dir, `${guard.token}.sock`), { force: true });
  guard.assertUntouched();
});
