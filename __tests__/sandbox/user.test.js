'use strict';
// rootless: yes
// `user`: the account every box runs as, resolved in the image's /etc/passwd. The workspace is
// idmapped to that account, so what it writes lands owned by the workspace's owner on the host,
// and files it closes to everyone else (0600/0700) stay readable through the host file API.

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, tempDirs, expectSandboxError, uniqueName } = require('../helpers');
const { Sandbox, SandboxError, withSandbox } = require('../..');

beforeAll(() => requireRootfs());
const temp = tempDirs();
afterAll(() => temp.removeAll());

const WHO = 'echo "$(id -u):$(id -g) $(whoami 2>/dev/null || echo -)"; stat -c "%u:%g" .';

test('a name from the image (nobody), a number and a uid:gid pair each become the account, which owns the workspace', async () => {
  for (const [user, want] of [
    ['nobody', /^65534:65534 nobody\n65534:65534\n$/],
    ['1000', /^1000:0 -\n1000:0\n$/],
    ['1000:1000', /^1000:1000 -\n1000:1000\n$/],
    ['nobody:nogroup', /^65534:65534 nobody\n65534:65534\n$/],
    ['root', /^0:0 root\n0:0\n$/],
  ]) {
    const r = await withSandbox(opts({ user }), (sb) => sb.run(['sh', '-c', WHO]));
    expect([user, r.stdout]).toEqual([user, expect.stringMatching(want)]);
  }
});

test('what the account writes lands owned by the workspace owner, and closed files stay readable from the host', async () => {
  const ws = temp.temp('kern-user-');
  await withSandbox(opts({ user: 'nobody', workspace: ws }), async (sb) => {
    const r = await sb.runCode(
      'import os\nos.makedirs("private", mode=0o700)\nwith open("private/key", "w") as f: f.write("s3cret")\nos.chmod("private/key", 0o600)\nprint(os.getuid())'
    );
    expect(r.stdout).toBe('65534\n');
    expect(r.files.map((f) => f.path)).toContain('private/key');
    // The host file API works as the workspace owner: no ACL, no helper box needed.
    expect((await sb.readFile('private/key')).toString()).toBe('s3cret');
    const listed = await sb.listFiles('private');
    expect(listed.map((f) => f.path)).toEqual(['private/key']);
  });
  const st = fs.statSync(path.join(ws, 'private', 'key'));
  const owner = fs.statSync(ws);
  expect([st.uid, st.gid]).toEqual([owner.uid, owner.gid]);
  expect(st.mode & 0o777).toBe(0o600);
});

test('the account applies to kernels and to the setup box too', async () => {
  await withSandbox(opts({ user: 'nobody', setup: 'id -u > /workspace/setup-uid' }), async (sb) => {
    expect((await sb.readFile('setup-uid')).toString()).toBe('65534\n');
    const k = await sb.kernel();
    try {
      const cell = await k.runCode('import os\nos.getuid()');
      expect(cell.results.map((x) => x.text)).toContain('65534');
    } finally {
      await k.close();
    }
  });
});

test('an account other than root has no capability and cannot take root back', async () => {
  const r = await withSandbox(opts({ user: 'nobody' }), (sb) =>
    sb.run(['sh', '-c', 'grep ^CapEff /proc/self/status; su -c true root </dev/null 2>&1 >/dev/null && echo became-root; touch /etc/x 2>/dev/null && echo wrote-etc; echo done'])
  );
  expect(r.stdout).toMatch(/^CapEff:\s+0+\n/);
  expect(r.stdout).not.toMatch(/became-root|wrote-etc/);
  expect(r.stdout).toMatch(/done\n$/);
});

test('an unknown account or a malformed value is a SandboxError that says what to give', async () => {
  for (const [user, re] of [
    ['ghost', /no user "ghost" in the image's \/etc\/passwd/],
    ['nobody:ghosts', /ghosts/],
    ['a:b:c', /<user>\[:<group>\]/],
    ['--privileged', /<user>\[:<group>\]/],
    [1000, /user/],
  ]) {
    const sb = new Sandbox(opts({ user }));
    await expectSandboxError(() => sb.open(), SandboxError, re);
    await sb.close();
  }
});

// Rootless too: the one id a rootless box maps could be any, but a value that works in one
// posture only is a mistake found late.
test('an account beyond the box\'s 65,536 ids is refused, root or not', async () => {
  const sb = new Sandbox(opts({ user: '70000' }));
  await expectSandboxError(() => sb.open(), SandboxError, /65536 ids/);
  await sb.close();
});

describe('a call\'s own `user` (an addition)', () => {
  test('run, runCode, spawn and terminal each run as the account they name; the workspace is theirs in that box; the next call is the Sandbox\'s again', async () => {
    const ws = temp.temp('kern-calluser-');
    await withSandbox(opts({ user: 'nobody', workspace: ws }), async (sb) => {
      const asRoot = await sb.run(['sh', '-c', `${WHO}; touch by-root`], { user: 'root' });
      expect(asRoot.stdout).toMatch(/^0:0 root\n0:0\n$/);
      expect((await sb.runCode('import os\nprint(os.getuid(), os.getgid())', { user: '1000:1000' })).stdout).toBe('1000 1000\n');
      const p = await sb.spawn(['sh', '-c', WHO], { user: 'daemon' });
      expect((await p.wait()).stdout).toMatch(/^1:1 daemon\n1:1\n$/);
      const t = await sb.terminal({ argv: ['sh', '-c', 'id -u; read x'], user: 'root' });
      let out = '';
      t.onData((d) => (out += d));
      await t.write('\n');
      const tr = await t.wait();
      // (The typed newline's echo may come first.)
      expect(tr.stdout.split(/\r?\n/)).toContain('0');
      expect(out.split(/\r?\n/)).toContain('0');
      // The Sandbox's account again, without `user`.
      expect((await sb.run(['sh', '-c', WHO])).stdout).toMatch(/^65534:65534 nobody\n65534:65534\n$/);
      // On the host the file is the workspace owner's, whoever wrote it in the box.
      expect(fs.statSync(path.join(ws, 'by-root')).uid).toBe(fs.statSync(ws).uid);
    });
  });

  test('root in a call\'s box is still unprivileged: no capability, nothing of the image written', async () => {
    await withSandbox(opts({ user: 'nobody' }), async (sb) => {
      const r = await sb.run(['sh', '-c', 'grep ^CapEff /proc/self/status; touch /etc/x 2>/dev/null && echo wrote-etc; echo done'], { user: 'root' });
      expect(r.stdout).toMatch(/^CapEff:\s+0+\n/);
      expect(r.stdout).not.toMatch(/wrote-etc/);
    });
  });

  test('a bad or unknown account is a SandboxError before any box; a persist Sandbox refuses it', async () => {
    await withSandbox(opts(), async (sb) => {
      await expectSandboxError(() => sb.run(['true'], { user: 'ghost' }), SandboxError, /no user "ghost" in the image's \/etc\/passwd/);
      await expectSandboxError(() => sb.run(['true'], { user: 7 }), SandboxError, /option `user` must be "<user>\[:<group>\]" or null, got/);
      await expectSandboxError(() => sb.run(['true'], { user: '--privileged' }), SandboxError, /<user>\[:<group>\]/);
      await expectSandboxError(() => sb.spawn(['true'], { user: '70000' }), SandboxError, /65536 ids/);
    });
    const res = new Sandbox(opts({ persist: true, name: uniqueName('calluser'), workspace: temp.temp('kern-calluser-res-') }));
    await res.open();
    try {
      await expectSandboxError(() => res.run(['true'], { user: 'root' }), SandboxError, /can't be given to a call of a `persist` Sandbox/);
    } finally {
      await res.close();
      await res.destroy();
    }
  });
});
