'use strict';
// rootless: yes
// What a box's root shows of its image: the host image exposes only what programs need (issue 16,
// item 14), and an image without /etc/hosts or /etc/hostname gets them, so `localhost` resolves
// (item 16).

const fs = require('fs');
const path = require('path');
const { ROOTFS, isRoot, requireRootfs, opts, uniqueName, expectOk, summary } = require('../helpers');
const { withSandbox } = require('../..');

beforeAll(() => requireRootfs());

describe('image "host" shows programs, not the host\'s local configuration', () => {
  /** What `ls` and `cat` of `paths` print in a host-image box, and whether python3 and bash run. */
  async function look(paths) {
    const script = [
      // Headers by number: the paths hold the name the output must not.
      ...paths.map((p, i) => `echo "== ${i}"; cat '${p}' 2>/dev/null; ls '${p}' 2>/dev/null`),
      'echo "== python"; python3 -c "print(6 * 7)"',
      'echo "== bash"; bash -c "echo bash-runs"',
    ].join('; ');
    const r = await withSandbox({ image: 'host' }, (sb) => sb.run(['sh', '-c', script]));
    expectOk(r);
    expect(r.stdout).toMatch(/== python\n42\n== bash\nbash-runs\n$/);
    return r.stdout;
  }

  (isRoot ? test : test.skip)('a world-readable file in /usr/local/etc or /opt is not visible; /usr/local/bin is', async () => {
    const name = uniqueName();
    const secret = `token-${name}`;
    const made = [];
    const write = (dir, mode = 0o644) => {
      if (!fs.existsSync(dir)) {
        fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
        made.push(dir);
      }
      const f = path.join(dir, `${name}.npmrc`);
      fs.writeFileSync(f, `//registry.npmjs.org/:_authToken=${secret}\n`, { mode });
      made.push(f);
      return f;
    };
    const files = [write('/usr/local/etc'), write('/opt'), write(`/opt/${name}-vendor`)];
    const tool = path.join('/usr/local/bin', `${name}-tool`);
    fs.writeFileSync(tool, '#!/bin/sh\necho local-tool-runs\n', { mode: 0o755 });
    made.push(tool);
    try {
      const out = await look(files);
      expect(out).not.toContain(secret);
      expect(out).not.toContain(name);
      // Program directories of /usr/local stay: a tool installed there still runs.
      const r = await withSandbox({ image: 'host' }, (sb) => sb.run([`${name}-tool`]));
      expect(summary(r)).toMatchObject({ exitCode: 0, stdout: 'local-tool-runs\n' });
    } finally {
      for (const f of made.reverse()) fs.rmSync(f, { recursive: true, force: true });
    }
  });

  test('/opt and /usr/local/etc are absent in the box, whatever the host has there', async () => {
    const r = await withSandbox({ image: 'host' }, (sb) =>
      sb.run(['sh', '-c', 'test -e /opt && echo opt-shown; test -e /usr/local/etc && echo local-etc-shown; ls /usr/local; echo done'])
    );
    expectOk(r);
    expect(r.stdout).not.toMatch(/opt-shown|local-etc-shown/);
    const shown = r.stdout.trim().split('\n').slice(0, -1);
    const allowed = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32', 'libexec', 'include', 'share'];
    for (const entry of shown) expect(allowed).toContain(entry);
  });
});

describe('/etc/hosts and /etc/hostname where the image has none', () => {
  let image;

  beforeAll(() => {
    // The test rootfs has an /etc/hosts (scripts/build-test-rootfs.sh writes one, as most images
    // have); beside it, the same tree without (hard-linked, made by that script as root).
    image = fs.existsSync(path.join(ROOTFS, 'etc/hosts')) ? `${ROOTFS}-nohosts` : ROOTFS;
    if (fs.existsSync(path.join(image, 'etc/hosts')) || !fs.existsSync(path.join(image, 'usr/bin/python3'))) {
      throw new Error(`${image}: no rootfs without /etc/hosts; rebuild with scripts/build-test-rootfs.sh`);
    }
  });

  test('localhost resolves and python binds and connects to it', async () => {
    const code = [
      'import socket',
      "addrs = sorted({a[4][0] for a in socket.getaddrinfo('localhost', 80)})",
      'print(addrs)',
      's = socket.socket()',
      "s.bind(('localhost', 0))",
      's.listen(1)',
      "c = socket.create_connection(('localhost', s.getsockname()[1]))",
      'print("connected", s.accept()[1][0])',
      'print("hostname", socket.gethostname(), socket.gethostbyname(socket.gethostname()))',
    ].join('\n');
    const r = await withSandbox(opts({ image }), (sb) => sb.runCode(code));
    expectOk(r);
    expect(r.stdout).toMatch(/'127\.0\.0\.1'/);
    expect(r.stdout).toMatch(/^connected 127\.0\.0\.1$/m);
    expect(r.stdout).toMatch(/^hostname kern 127\.0\.0\.1$/m);
  });

  test('the files are what container runtimes write; an image\'s own /etc stays as it is', async () => {
    const r = await withSandbox(opts({ image }), (sb) =>
      sb.run(['sh', '-c', 'cat /etc/hosts; echo ==; cat /etc/hostname; echo ==; cat /etc/os-release | head -1'])
    );
    expectOk(r);
    const [hosts, hostname, osRelease] = r.stdout.split('==\n');
    expect(hosts).toMatch(/^127\.0\.0\.1\tlocalhost kern$/m);
    expect(hosts).toMatch(/^::1\tlocalhost ip6-localhost ip6-loopback$/m);
    const own = path.join(image, 'etc/hostname');
    expect(hostname).toBe(fs.existsSync(own) ? fs.readFileSync(own, 'utf8') : 'kern\n');
    expect(osRelease).toBe(fs.readFileSync(path.join(image, 'etc/os-release'), 'utf8').split('\n')[0] + '\n');
  });

  test('with the host network too', async () => {
    const r = await withSandbox(opts({ image, network: true }), (sb) =>
      sb.runCode("import socket; print(socket.getaddrinfo('localhost', 80)[0][4][0] in ('127.0.0.1', '::1'))")
    );
    expect(summary(r)).toMatchObject({ exitCode: 0, stdout: 'True\n' });
  });
});
