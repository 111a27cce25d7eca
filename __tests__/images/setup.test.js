'use strict';
// rootless: yes
// `setup`: one networked box at open() that installs into /workspace/.deps, and what later boxes
// see of it. The install test reaches the real PyPI (reachable from this project's machines)
// through the setup box's egress proxy (setupNetwork "public") and the host's CA store.

const fs = require('fs');
const path = require('path');
const { requireRootfs, tempDirs, uniqueName, expectSandboxError, summary } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const realEnv = require('vm').runInThisContext('process').env;

const { temp, removeAll } = tempDirs();

beforeAll(() => {
  requireRootfs();
  if (!fs.existsSync(path.join(SCI, 'usr/lib/python3/dist-packages/pip'))) {
    throw new Error(`${SCI} has no pip: rebuild it with scripts/build-test-rootfs-sci.sh`);
  }
});

afterAll(() => {
  removeAll();
});

describe('a real install from PyPI', () => {
  let sb;
  let ws;
  const streamed = [];
  beforeAll(async () => {
    ws = temp('kern-setup-ws-');
    sb = await new Sandbox({
      image: SCI,
      workspace: ws,
      setup: 'pip install --no-deps six==1.16.0',
      onStdout: (c) => streamed.push(c.toString()),
      onStderr: (c) => streamed.push(c.toString()),
    }).open();
  }, 180_000);
  afterAll(async () => {
    if (sb) await sb.close();
  });

  test('the package lands in /workspace/.deps and runCode imports it', async () => {
    expect(fs.existsSync(path.join(ws, '.deps', 'python', 'six.py'))).toBe(true);
    const r = await sb.runCode('import six; print(six.__version__, six.__file__)');
    expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
    expect(r.stdout).toBe('1.16.0 /workspace/.deps/python/six.py\n');
  });

  test("setup's output went to the streaming callbacks", () => {
    expect(streamed.join('')).toMatch(/Successfully installed six/);
  });

  test('.deps is read-only in later boxes (depsReadonly defaults to true)', async () => {
    const r = await sb.run(['sh', '-c', 'echo evil > /workspace/.deps/python/six.py; touch /workspace/.deps/x; echo done']);
    expect(r.stderr).toMatch(/Read-only file system/);
    expect(fs.readFileSync(path.join(ws, '.deps', 'python', 'six.py'), 'utf8')).not.toContain('evil');
    expect(fs.existsSync(path.join(ws, '.deps', 'x'))).toBe(false);
    // The rest of the workspace stays writable.
    const w = await sb.run(['sh', '-c', 'echo ok > /workspace/mine.txt']);
    expect(w.exitCode).toBe(0);
  });

  test('runCode boxes still have no network, setup or not', async () => {
    const r = await sb.runCode(
      'import socket\ntry:\n    socket.create_connection(("pypi.org", 443), timeout=3)\n    print("connected")\nexcept OSError as e:\n    print("blocked", type(e).__name__)'
    );
    expect(r.stdout).toMatch(/^blocked/);
  });

  test('a later session on the same workspace finds the deps without running setup again', async () => {
    const again = await new Sandbox({ image: SCI, workspace: ws }).open();
    try {
      const r = await again.runCode('import six; print(six.__version__)');
      expect(r.stdout).toBe('1.16.0\n');
      const w = await again.run(['touch', '/workspace/.deps/y']);
      expect(w.exitCode).not.toBe(0);
    } finally {
      await again.close();
    }
  });
});

test('depsReadonly: false leaves .deps writable', async () => {
  const ws = temp('kern-setup-ws-');
  const sb = await new Sandbox({ image: SCI, workspace: ws, setup: 'mkdir -p /workspace/.deps/python', depsReadonly: false }).open();
  try {
    const r = await sb.run(['sh', '-c', 'echo x > /workspace/.deps/python/mod.py']);
    expect(r.exitCode).toBe(0);
    expect(fs.existsSync(path.join(ws, '.deps', 'python', 'mod.py'))).toBe(true);
  } finally {
    await sb.close();
  }
});

test('a failing setup makes open() throw with its exit code and last stderr lines', async () => {
  const sb = new Sandbox({ image: SCI, setup: 'echo first >&2; echo "the last words" >&2; exit 3' });
  const err = await expectSandboxError(() => sb.open(), SandboxError, /setup failed/, /exit(ed)? with code 3/, /the last words/);
  expect(err.exitCode).toBe(3);
  expect(err.stderrTail).toMatch(/first\nthe last words/);
  // The Sandbox did not open.
  await expectSandboxError(() => sb.run(['true']), SandboxError, /not open|closed/);
  await sb.close();
});

test('a failed setup removes the temporary workspace it made', async () => {
  const before = new Set(fs.readdirSync(require('os').tmpdir()).filter((n) => n.startsWith('kern-ws-')));
  const sb = new Sandbox({ image: SCI, setup: 'touch /workspace/.deps/marker; exit 1' });
  await expect(sb.open()).rejects.toThrow(/setup failed/);
  const after = fs.readdirSync(require('os').tmpdir()).filter((n) => n.startsWith('kern-ws-') && !before.has(n));
  const leftovers = after.filter((n) => fs.existsSync(path.join(require('os').tmpdir(), n, '.deps', 'marker')));
  expect(leftovers).toEqual([]);
});

test("the setup box has network but not the host's environment, and trusts the host CA bundle", async () => {
  const secret = uniqueName('kernsecret');
  realEnv.KERN_TEST_LEAK = secret;
  const ws = temp('kern-setup-ws-');
  try {
    const sb = await new Sandbox({
      image: SCI,
      workspace: ws,
      env: { MINE: 'yes' },
      setupNetwork: 'host',
      setup:
        'env > /workspace/env.txt; cmp -s "$SSL_CERT_FILE" /etc/kern-host-ca.crt && echo ca-ok > /workspace/ca.txt; ' +
        'python3 -c "import socket; print(len(socket.getaddrinfo(\'pypi.org\', 443)) > 0)" > /workspace/dns.txt',
    }).open();
    await sb.close();
  } finally {
    delete realEnv.KERN_TEST_LEAK;
  }
  const env = fs.readFileSync(path.join(ws, 'env.txt'), 'utf8');
  expect(env).not.toContain(secret);
  expect(env).toMatch(/^MINE=yes$/m);
  expect(env).toMatch(/^PIP_TARGET=\/workspace\/\.deps\/python$/m);
  expect(env).toMatch(/^SSL_CERT_FILE=\/etc\/kern-host-ca\.crt$/m);
  expect(env).toMatch(/^REQUESTS_CA_BUNDLE=\/etc\/kern-host-ca\.crt$/m);
  expect(env).toMatch(/^NODE_EXTRA_CA_CERTS=\/etc\/kern-host-ca\.crt$/m);
  expect(fs.readFileSync(path.join(ws, 'ca.txt'), 'utf8')).toBe('ca-ok\n');
  // Names resolve: the host's resolver configuration is in the box.
  expect(fs.readFileSync(path.join(ws, 'dns.txt'), 'utf8')).toBe('True\n');
  // The default, "public": the proxy's variables, no resolver (the proxy resolves), an empty cwd.
  const pub = await new Sandbox({ image: SCI, workspace: ws, setup: 'env > /workspace/env2.txt; pwd > /workspace/pwd.txt; ls -A > /workspace/ls.txt' }).open();
  await pub.close();
  const env2 = fs.readFileSync(path.join(ws, 'env2.txt'), 'utf8');
  expect(env2).toMatch(/^HTTPS_PROXY=http:\/\/127\.0\.0\.1:3128$/m);
  expect(env2).toMatch(/^PYTHONSAFEPATH=1$/m);
  expect(env2).not.toMatch(/^PYTHONPATH=/m);
  expect(env2).not.toMatch(/^PATH=.*\.deps/m);
  expect(fs.readFileSync(path.join(ws, 'pwd.txt'), 'utf8')).toBe('/.kern-setup\n');
  expect(fs.readFileSync(path.join(ws, 'ls.txt'), 'utf8')).toBe('');
  // The image's own /etc is still there around the overrides.
  const etc = await new Sandbox({ image: SCI, workspace: ws, setup: 'ls /etc > /workspace/etc.txt' }).open();
  await etc.close();
  expect(fs.readFileSync(path.join(ws, 'etc.txt'), 'utf8')).toMatch(/^passwd$/m);
});

test('KERN_HOST_CA=0 stops the setup box trusting the host CA bundle', async () => {
  const ws = temp('kern-setup-ws-');
  realEnv.KERN_HOST_CA = '0';
  try {
    const sb = await new Sandbox({ image: SCI, workspace: ws, setup: 'env > /workspace/env.txt; ls /etc > /workspace/etc.txt' }).open();
    await sb.close();
  } finally {
    delete realEnv.KERN_HOST_CA;
  }
  expect(fs.readFileSync(path.join(ws, 'env.txt'), 'utf8')).not.toMatch(/SSL_CERT_FILE|kern-host-ca/);
  expect(fs.readFileSync(path.join(ws, 'etc.txt'), 'utf8')).not.toMatch(/kern-host-ca/);
});

test('setup must be a non-empty command string', async () => {
  for (const bad of ['', '   ', 42]) {
    const sb = new Sandbox({ image: SCI, setup: bad });
    await expectSandboxError(() => sb.open(), SandboxError, /setup/);
    await sb.close();
  }
});
