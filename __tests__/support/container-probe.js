'use strict';
// Runs INSIDE a Podman container (__tests__/packaging/container.test.js), with kern-sandbox installed from
// the packed npm package in /app/node_modules. One scenario per run (argv[2]); prints one JSON
// line, prefixed `PROBE `, with what the box did and what the container saw — checked on the
// container's side, outside the box.
//
//   node probe.js run        a python runCode, the box's network and isolation(), a kernel, a
//                            persist box, and the workspaces left after close()
//   node probe.js attack     the box against the container's processes and files
//   node probe.js open       open() only: the error, when the container refuses boxes
const fs = require('fs');
const net = require('net');
const { spawn } = require('child_process');
const { Sandbox } = require('kern-sandbox');

const IMAGE = '/rootfs'; // the test rootfs, bound read-only: not the container's own filesystem

function errorOf(e) {
  return { name: e.name, code: e.code, message: e.message };
}

/** The temporary workspaces (kern-ws-*) in the container's temp directory. */
function workspaces() {
  return fs.readdirSync(require('os').tmpdir()).filter((n) => n.startsWith('kern-ws-'));
}

/** The boxes of `runBoxes`, and the temporary workspaces their Sandboxes left after close(). */
async function run() {
  const before = workspaces();
  const out = await runBoxes();
  out.leftWorkspaces = workspaces().filter((n) => !before.includes(n));
  return out;
}

async function runBoxes() {
  // A server in the container, on its loopback: the box's own network namespace must not reach it.
  const server = net.createServer((s) => s.end('container-server\n'));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = server.address().port;
  const sb = await new Sandbox({ image: IMAGE }).open();
  try {
    const r = await sb.runCode(
      [
        'import os, socket',
        'print("uid", os.getuid(), "answer", 6 * 7)',
        'print("ifaces", sorted(n for _, n in socket.if_nameindex()))',
        's = socket.socket()',
        's.settimeout(3)',
        'try:',
        `    s.connect(("127.0.0.1", ${port}))`,
        '    print("connect", "reached", s.recv(64))',
        'except OSError as e:',
        '    print("connect", type(e).__name__)',
      ].join('\n'),
      { language: 'python' }
    );
    const isolation = await sb.isolation();
    // What a box may leave: a directory it closed to everyone (close() must still delete it).
    const closed = await sb.runCode('mkdir -p closed/inner && echo x > closed/inner/f && chmod 000 closed/inner closed', { language: 'bash' });
    // The long-lived boxes: a kernel's state across cells, and a resident (persist) box's call.
    const k = await sb.kernel();
    await k.runCode('x = 41');
    const kernel = (await k.runCode('print(x + 1)')).stdout;
    await k.close();
    const name = `ctr${process.pid}`;
    const resident = await new Sandbox({ image: IMAGE, persist: true, name, workspace: fs.mkdtempSync('/tmp/ws-') }).open();
    const persisted = await resident.runCode('echo resident $$', { language: 'bash' });
    await resident.destroy();
    await resident.close();
    return {
      kernel,
      closedExit: closed.exitCode,
      persisted: { stdout: persisted.stdout, fault: persisted.fault },
      stdout: r.stdout,
      exitCode: r.exitCode,
      fault: r.fault,
      notes: r.runtimeNotes,
      isolation,
      // The control: the container itself reaches its server.
      containerReaches: await new Promise((resolve) => {
        const c = net.connect(port, '127.0.0.1', () => c.end());
        c.on('data', () => resolve(true));
        c.on('error', () => resolve(false));
      }),
    };
  } finally {
    server.close();
    await sb.close();
  }
}

function cmdlineOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

async function attack() {
  // The container's own process and files, made before the box.
  const marker = `kerncanary${process.pid}`;
  const canary = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 300000)', marker], { stdio: 'ignore' });
  // Started (its cmdline is the marker's) before the box looks.
  for (let i = 0; i < 500 && !cmdlineOf(canary.pid).includes(marker); i++) await new Promise((r) => setTimeout(r, 20));
  const canaryReady = cmdlineOf(canary.pid).includes(marker);
  const secretPath = '/home/canary-secret.txt';
  let secretDir = '/home';
  try {
    fs.writeFileSync(secretPath, marker);
  } catch {
    secretDir = fs.mkdtempSync('/tmp/secret-');
  }
  const secret = `${secretDir}/canary-secret.txt`;
  fs.writeFileSync(secret, marker);
  const sb = await new Sandbox({ image: IMAGE }).open();
  try {
    const r = await sb.runCode(
      [
        'import os, signal',
        `pid, marker, secret = ${canary.pid}, ${JSON.stringify(marker)}, ${JSON.stringify(secret)}`,
        'seen = []',
        'for p in os.listdir("/proc"):',
        '    if p.isdigit():',
        '        try:',
        '            cmd = open(f"/proc/{p}/cmdline", "rb").read()',
        '        except OSError:',
        '            continue',
        '        if marker.encode() in cmd:',
        '            seen.append(p)',
        'print("seen", seen)',
        'try:',
        '    os.kill(pid, signal.SIGKILL)',
        '    print("kill", "sent")',
        'except OSError as e:',
        '    print("kill", type(e).__name__)',
        'for path in (secret, "/app/package.json", "/proc/1/root/etc/hostname"):',
        '    try:',
        '        print("read", path, open(path).read()[:40].strip())',
        '    except OSError as e:',
        '        print("read", path, type(e).__name__)',
        'for path in ("/app/planted", "/home/planted", "/planted", "/etc/planted"):',
        '    try:',
        '        open(path, "w").write("x")',
        '        print("write", path, "written")',
        '    except OSError as e:',
        '        print("write", path, type(e).__name__)',
      ].join('\n'),
      { language: 'python' }
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    const alive = cmdlineOf(canary.pid).includes(marker);
    return {
      stdout: r.stdout,
      stderr: r.stderr,
      exitCode: r.exitCode,
      fault: r.fault,
      canaryReady,
      canaryAlive: alive,
      secretIntact: fs.readFileSync(secret, 'utf8') === marker,
      planted: ['/home/planted', '/planted', '/etc/planted', `${secretDir}/planted`].filter((p) => fs.existsSync(p)),
    };
  } finally {
    canary.kill('SIGKILL');
    await sb.close();
  }
}

async function open() {
  try {
    const sb = await new Sandbox({ image: IMAGE }).open();
    // Past open(): a call says what it got.
    const r = await sb.runCode('print("ran")', { language: 'python' });
    await sb.close();
    return { opened: true, stdout: r.stdout, fault: r.fault };
  } catch (e) {
    return { opened: false, error: errorOf(e) };
  }
}

// One line, then out: a scenario that threw may leave a server or a canary behind, which must not
// keep the container (and the test waiting on it) alive.
const scenarios = { run, attack, open };
scenarios[process.argv[2]]()
  .then((out) => console.log(`PROBE ${JSON.stringify(out)}`))
  .catch((e) => console.log(`PROBE ${JSON.stringify({ thrown: errorOf(e) })}`))
  .finally(() => process.exit(0));
