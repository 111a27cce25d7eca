// rootless: yes
'use strict';
// `kern serve`'s envd process service through the real `e2b` SDK: commands in the foreground and
// the background, exit codes, stdin, env and cwd, connect, kill, timeouts and PTYs; each command
// a box of the sandbox's posture, seen from the host.

const { requireRootfs, hostProcessesMatching, uniqueName, waitFor } = require('../helpers.js');
const { startServe, sdk } = require('./serve-helpers.js');

let srv;
let id;
beforeAll(async () => {
  requireRootfs();
  srv = await startServe();
  id = await sdk(`return (await Sandbox.create('base', { envs: { FROM_CREATE: 'c1' }, timeoutMs: 600000 })).sandboxId;`);
});
afterAll(() => srv && srv.close());

/** Runs `body` with `sb` connected to the suite's sandbox. */
const inSandbox = (body, env) => sdk(`const sb = await Sandbox.connect('${id}');\n${body}`, env);

test('a command\'s stdout, stderr and exit code; a failure is CommandExitError with its output', async () => {
  const r = await inSandbox(`
    const ok = await sb.commands.run('echo out; echo err >&2');
    let failed;
    try { await sb.commands.run('echo partial; exit 7'); } catch (e) { failed = { name: e.constructor.name, exitCode: e.exitCode, stdout: e.stdout }; }
    return { ok: { stdout: ok.stdout, stderr: ok.stderr, exitCode: ok.exitCode }, failed };`);
  expect(r.ok).toEqual({ stdout: 'out\n', stderr: expect.stringContaining('err\n'), exitCode: 0 });
  expect(r.failed).toEqual({ name: 'CommandExitError', exitCode: 7, stdout: 'partial\n' });
});

test('env: the sandbox\'s envVars, a command\'s envs over them; cwd: home by default, any directory', async () => {
  const r = await inSandbox(`
    const a = await sb.commands.run('echo "$FROM_CREATE $ONE $E2B_SANDBOX"; pwd; echo "$HOME"', { envs: { ONE: 'o1' } });
    const b = await sb.commands.run('pwd', { cwd: '/tmp' });
    const c = await sb.commands.run('echo "$FROM_CREATE"', { envs: { FROM_CREATE: 'over' } });
    let bad;
    try { await sb.commands.run('pwd', { cwd: '/no/such/dir' }); } catch (e) { bad = e.constructor.name + ': ' + e.message; }
    return { a: a.stdout, b: b.stdout, c: c.stdout, bad };`);
  const lines = r.a.split('\n');
  expect(lines[0]).toBe('c1 o1 true');
  // E2B's home and default working directory, where the sandbox's workspace is mounted.
  expect(lines[1]).toBe('/home/user');
  expect(lines[2]).toBe('/home/user');
  expect(r.b).toBe('/tmp\n');
  expect(r.c).toBe('over\n');
  expect(r.bad).toMatch(/no\/such\/dir/);
});

test('stdin: send, close; a command without stdin reads end-of-file at once', async () => {
  const r = await inSandbox(`
    const cat = await sb.commands.run('cat; echo done', { background: true, stdin: true });
    await sb.commands.sendStdin(cat.pid, 'first\\n');
    await cat.sendStdin('second\\n');
    await sb.commands.closeStdin(cat.pid);
    const piped = await cat.wait();
    const none = await sb.commands.run('cat; echo eof');
    return { piped: piped.stdout, none: none.stdout };`);
  expect(r.piped).toBe('first\nsecond\ndone\n');
  expect(r.none).toBe('eof\n');
});

test('background: listed while it runs, reached again by connect from another program, killed by pid', async () => {
  const marker = uniqueName('bg');
  const started = await inSandbox(`
    const h = await sb.commands.run('while :; do echo tick; sleep 0.2; done; : ${marker}', { background: true, timeoutMs: 0 });
    const listed = (await sb.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args }));
    await h.disconnect();
    return { pid: h.pid, listed };`);
  expect(started.listed).toContainEqual({ pid: started.pid, cmd: '/bin/bash', args: ['-l', '-c', expect.stringContaining(marker)] });
  expect(hostProcessesMatching(marker).length).toBeGreaterThan(0);
  const reached = await inSandbox(`
    const h = await sb.commands.connect(${started.pid});
    let ticks = 0;
    await new Promise((resolve) => { h.onStdout = undefined; const t = setInterval(async () => { if (h.stdout.includes('tick')) { clearInterval(t); resolve(); } }, 50); });
    ticks = h.stdout.split('tick').length - 1;
    const killed = await sb.commands.kill(${started.pid});
    let end;
    try { await h.wait(); } catch (e) { end = e.constructor.name; }
    return { ticks, killed, end, after: (await sb.commands.list()).map((p) => p.pid) };`);
  expect(reached.ticks).toBeGreaterThan(0);
  expect(reached.killed).toBe(true);
  expect(reached.end).toBe('CommandExitError');
  expect(reached.after).not.toContain(started.pid);
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10_000)).toBeTruthy();
  const missing = await inSandbox(`return await sb.commands.kill(${started.pid + 100000});`);
  expect(missing).toBe(false);
});

test('a command past its timeoutMs is ended, its box with it', async () => {
  const marker = uniqueName('late');
  const r = await inSandbox(`
    const t0 = Date.now();
    try { await sb.commands.run('sleep 300; : ${marker}', { timeoutMs: 1500 }); return 'finished'; } catch (e) { return { name: e.constructor.name, waited: Date.now() - t0 }; }`);
  expect(r.name).toMatch(/TimeoutError|CommandExitError/);
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10_000)).toBeTruthy();
});

test('a PTY: output, typed input, resize, and its exit', async () => {
  const r = await inSandbox(`
    let out = '';
    const pty = await sb.pty.create({ cols: 100, rows: 30, onData: (d) => { out += new TextDecoder().decode(d); }, timeoutMs: 60000 });
    const enc = new TextEncoder();
    await sb.pty.sendInput(pty.pid, enc.encode('stty size; tty\\n'));
    for (let i = 0; i < 100 && !/30 100/.test(out); i++) await new Promise((r) => setTimeout(r, 50));
    await sb.pty.resize(pty.pid, { cols: 120, rows: 40 });
    await sb.pty.sendInput(pty.pid, enc.encode('stty size; exit 3\\n'));
    let end;
    try { end = await pty.wait(); } catch (e) { end = { name: e.constructor.name, exitCode: e.exitCode }; }
    return { out, end };`);
  expect(r.out).toMatch(/30 100/);
  expect(r.out).toMatch(/\/dev\/pts\/\d+/);
  expect(r.out).toMatch(/40 120/);
  expect(r.end).toEqual({ name: 'CommandExitError', exitCode: 3 });
});

test('each command is a box of its own: no host process, file or user is visible, the root is read-only', async () => {
  const canary = uniqueName('hostonly');
  const r = await inSandbox(`
    const a = await sb.commands.run('ps -e -o pid= | wc -l; cat /proc/1/cmdline | tr "\\\\0" " "; echo; touch /usr/x 2>&1; true');
    return a.stdout;`, { KERN_CANARY: canary });
  const [count, pid1, touch] = r.split('\n');
  expect(Number(count)).toBeLessThan(10);
  expect(pid1).not.toMatch(/node|jest/);
  expect(touch).toMatch(/Read-only file system/);
});

test('a command, a PTY and file operations run as the user they name; one the image lacks is refused with the reason', async () => {
  const r = await inSandbox(`
    const out = {};
    out.me = (await sb.commands.run('id -un')).stdout.trim();
    out.nobody = (await sb.commands.run('id -un; touch /tmp/by-nobody; stat -c %U /tmp/by-nobody', { user: 'nobody' })).stdout;
    out.root = (await sb.commands.run('id -u', { user: 'root' })).stdout;
    let pty = '';
    const t = await sb.pty.create({ cols: 80, rows: 24, user: 'daemon', onData: (d) => { pty += new TextDecoder().decode(d); } });
    await sb.pty.sendInput(t.pid, new TextEncoder().encode('id -un; exit\\n'));
    await t.wait();
    out.pty = pty;
    // In-box file operations run as the user too: /root (0700) is closed to nobody.
    const list = async (user) => { try { return (await sb.files.list('/root', { user })).length >= 0 ? 'listed' : ''; } catch (e) { return e.constructor.name + ': ' + e.message; } };
    out.rootList = await list(undefined);
    out.nobodyList = await list('nobody');
    try { await sb.commands.run('id', { user: 'ghost' }); } catch (e) { out.ghost = e.constructor.name + ': ' + e.message; }
    return out;`);
  expect(r.nobody).toBe('nobody\nnobody\n');
  expect(r.root).toBe('0\n');
  expect(r.pty).toMatch(/daemon/);
  expect(r.nobodyList).toMatch(/^SandboxError: .*Permission denied/);
  // As root, the image's root account owns /root; rootless, the image's files belong to ids
  // the box does not map, so /root is closed to every account.
  if (process.getuid() === 0) expect(r.rootList).toBe('listed');
  else expect(r.rootList).toMatch(/Permission denied/);
  expect(r.ghost).toMatch(/^InvalidArgumentError: .*no user "ghost" in the image's \/etc\/passwd/);
});
