'use strict';
// rootless: yes
// Attack suite, terminal injection (TIOCSTI / TIOCLINUX, CVE-2017-5226 class). The caller here
// really has a terminal: a host python harness opens a fresh pty, makes it the controlling
// terminal of a new session, injects a control string into it itself (proof the ioctl works on
// this host), then execs node, which opens a Sandbox and runs the attacks in a runCode, a run and a
// kernel cell. Afterwards the harness reads the pty's input queue: it must hold the control string
// and nothing the box pushed.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { ROOTFS, requireRootfs, tempDirs } = require('../../helpers');
const { hostGuard, REPO } = require('../host');

const { temp, removeAll } = tempDirs();

const PY_ATTACK = [
  'import fcntl, termios, os, json, re',
  'def try_(f):',
  '    try:',
  '        v = f(); return "ok"',
  '    except OSError as e: return __import__("errno").errorcode.get(e.errno, str(e.errno))',
  'out = {}',
  'out["devtty"] = try_(lambda: os.open("/dev/tty", os.O_RDWR))',
  'for fd in (0, 1, 2):',
  '    out[f"sti{fd}"] = try_(lambda: [fcntl.ioctl(fd, termios.TIOCSTI, bytes([c])) for c in b"BOXINJECT\\n"])',
  '    out[f"sti_hibits{fd}"] = try_(lambda: fcntl.ioctl(fd, (0x123 << 32) | termios.TIOCSTI, b"H"))',
  '    out[f"tioclinux{fd}"] = try_(lambda: fcntl.ioctl(fd, 0x541C, b"\\x03"))',
  '    out[f"tiocsctty{fd}"] = try_(lambda: fcntl.ioctl(fd, termios.TIOCSCTTY, 0))',
  'out["setsid_again"] = try_(os.setsid)',
  'out["devtty_after_setsid"] = try_(lambda: os.open("/dev/tty", os.O_RDWR))',
  'out["tty_nr"] = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[4])',
  'out["session_leader"] = os.getsid(0) == os.getpid()',
  'out["vt"] = sorted(n for n in os.listdir("/dev") if re.match(r"^(tty\\d+|console|vcsa?\\d*|ttyS\\d+|kmsg)$", n))',
  'm, s = os.openpty()',
  'pid = os.fork()',
  'if pid == 0:',
  '    try:',
  '        os.setsid(); fcntl.ioctl(s, termios.TIOCSCTTY, 0); fcntl.ioctl(s, termios.TIOCSTI, b"Y"); os._exit(0)',
  '    except OSError as e: os._exit(100 + e.errno)',
  'st = os.waitpid(pid, 0)[1]',
  'out["ownpty_sti"] = "ok" if os.WEXITSTATUS(st) == 0 else "errno" + str(os.WEXITSTATUS(st) - 100)',
  'out["ownpty_dev"] = os.fstat(s).st_dev',
  'out["ownpty_name"] = os.ttyname(s)',
  'print(json.dumps(out))',
].join('\n');

// Node, run by the harness with the pty as its stdin and controlling terminal.
const NODE_DRIVER = `
const fs = require('fs');
const { Sandbox } = require(process.argv[2]);
(async () => {
  const out = {};
  const sb = await new Sandbox({ image: process.argv[3] }).open();
  try {
    const py = fs.readFileSync(process.argv[5], 'utf8');
    const r = await sb.runCode(py);
    out.runCode = { stdout: r.stdout, fault: r.fault, exitCode: r.exitCode };
    const b = await sb.run(['bash', '-c', 'exec 3<>/dev/tty && echo OPENED; printf "%s" "$(ps -o tty= -p $$)"; echo; echo end']);
    out.run = { stdout: b.stdout, stderr: b.stderr, fault: b.fault };
    const k = await sb.kernel();
    const kr = await k.runCode(py);
    out.kernel = { stdout: kr.stdout, fault: kr.fault };
    await k.close();
  } finally {
    await sb.close();
  }
  fs.writeFileSync(process.argv[4], JSON.stringify(out));
})().catch((e) => { fs.writeFileSync(process.argv[4], JSON.stringify({ error: String(e && e.stack || e) })); process.exit(1); });
`;

// The host harness: pty, new session, controlling terminal, control injection, exec node; then
// drain the pty's input queue.
const HARNESS = `
import fcntl, json, os, sys, termios, tty
node, driver, repo, image, out, pyfile = sys.argv[1:7]
master, slave = os.openpty()
tty.setraw(slave)
pid = os.fork()
if pid == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    os.dup2(slave, 0)
    err = None
    try:
        for c in b"HOSTCTRL":
            fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
    except OSError as e:
        err = e.errno
    with open(out + ".ctrl", "w") as f: f.write(json.dumps({"ctrl_errno": err}))
    os.execv(node, [node, driver, repo, image, out, pyfile])
_, status = os.waitpid(pid, 0)
fl = fcntl.fcntl(slave, fcntl.F_GETFL)
fcntl.fcntl(slave, fcntl.F_SETFL, fl | os.O_NONBLOCK)
queued = b""
try:
    while True:
        b = os.read(slave, 4096)
        if not b: break
        queued += b
except OSError:
    pass
print(json.dumps({"status": status, "queued": queued.decode(errors="replace"), "host_pts_dev": os.fstat(slave).st_dev}))
`;

let guard;
let res; // { harness, box }

beforeAll(async () => {
  requireRootfs();
  guard = await hostGuard();
  const dir = temp('kern-atk-tty-');
  const driver = path.join(dir, 'driver.js');
  const pyfile = path.join(dir, 'attack.py');
  const out = path.join(dir, 'out.json');
  fs.writeFileSync(driver, NODE_DRIVER);
  fs.writeFileSync(pyfile, PY_ATTACK);
  let py = 'python3';
  if (spawnSync(py, ['-c', '1']).status !== 0) py = '/usr/bin/python3';
  const h = spawnSync(py, ['-c', HARNESS, process.execPath, driver, REPO, ROOTFS, out, pyfile], { encoding: 'utf8', timeout: 120000 });
  if (h.status !== 0) throw new Error(`tty harness failed: ${h.stderr}`);
  const harness = JSON.parse(h.stdout.trim().split('\n').pop());
  const box = JSON.parse(fs.readFileSync(out, 'utf8'));
  if (box.error) throw new Error(`node driver failed: ${box.error}`);
  const ctrl = JSON.parse(fs.readFileSync(`${out}.ctrl`, 'utf8'));
  const parse = (r) => JSON.parse(r.stdout.trim().split('\n').pop());
  res = { harness, ctrl, box, runCode: parse(box.runCode), kernel: parse(box.kernel) };
}, 150000);

afterAll(() => {
  if (guard) guard.cleanup();
  removeAll();
});

test('control: on this host, TIOCSTI into the caller\'s own terminal works (the attack path is live)', () => {
  expect(res.ctrl.ctrl_errno).toBeNull();
  expect(res.harness.queued.startsWith('HOSTCTRL')).toBe(true);
});

test('nothing the box pushed (runCode, run, kernel) reached the caller\'s terminal input queue', () => {
  expect(res.harness.queued).toBe('HOSTCTRL');
  expect(res.harness.status).toBe(0);
  guard.assertUntouched();
});

test.each(['runCode', 'kernel'])('%s: /dev/tty cannot be opened (no controlling terminal), even after another setsid', (k) => {
  expect(res[k].devtty).toBe('ENXIO');
  expect(res[k].devtty_after_setsid).toBe('ENXIO');
  expect(res[k].tty_nr).toBe(0);
  expect(res[k].session_leader).toBe(true);
});

test.each(['runCode', 'kernel'])('%s: TIOCSTI (plain and with high cmd bits), TIOCLINUX and TIOCSCTTY on fds 0-2 all fail', (k) => {
  for (const fd of [0, 1, 2]) {
    for (const op of ['sti', 'sti_hibits', 'tioclinux', 'tiocsctty']) {
      expect({ [`${op}${fd}`]: res[k][`${op}${fd}`] }).toEqual({ [`${op}${fd}`]: 'ENOTTY' });
    }
  }
});

test('no virtual console, serial line, console or kmsg device is in the box /dev', () => {
  expect(res.runCode.vt).toEqual([]);
  expect(res.kernel.vt).toEqual([]);
});

test('a pty the box opens is its own (a private devpts instance): TIOCSTI works there and stays there', () => {
  expect(res.runCode.ownpty_sti).toBe('ok'); // the ioctl exists in the box: the refusals above are the terminal's absence
  expect(res.runCode.ownpty_name).toMatch(/^\/dev\/pts\/\d+$/);
  expect(res.runCode.ownpty_dev).not.toBe(res.harness.host_pts_dev);
  expect(res.harness.queued).not.toMatch(/Y/);
});

test('a shell (run) cannot open /dev/tty either and has no tty', () => {
  expect(res.box.run.fault).toBeNull();
  expect(res.box.run.stdout).not.toMatch(/OPENED/);
  expect(res.box.run.stdout).toMatch(/^\?\nend\n$/);
  expect(res.box.run.stderr).toMatch(/No such device or address/);
});
