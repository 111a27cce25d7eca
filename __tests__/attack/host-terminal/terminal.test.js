'use strict';
// rootless: yes
// Attack suite, Sandbox.terminal(): a program on a terminal of the box pushes input (TIOCSTI) and
// writes terminal escape sequences, hoping a host terminal runs or answers them. The caller here
// really has a terminal, as in tty.test.js: a host python harness opens a pty (plus three more
// host ptys the box could aim at), makes it the controlling terminal and the stdin, stdout and
// stderr of a new session, injects a control string into it itself (the attack path is live on
// this host), then execs node, which opens terminals in boxes: bash on which python TIOCSTIs
// `touch /tmp/<token>-sti; echo INJECTED-$((6*7))` (default profile, then `untrusted`), and a
// python writing OSC 52, DSR, title set and report, ENQ and a 100 KB CSI. Meanwhile this Jest
// process watches the host paths those commands name, every few milliseconds. Afterwards the
// harness reads every host pty: what was typed into it and what was written to it.

const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const { ROOTFS } = require('../../helpers');
const { guardedSuite, REPO } = require('../host');

const suite = guardedSuite();

// In the box, on the terminal: what it sees of terminals, then TIOCSTI of $INJECT, one byte at a
// time, into its own terminal (bash reads it once python is gone).
const PY_STI = String.raw`
import errno, fcntl, json, os, struct, termios
def e(f):
    try: f(); return "ok"
    except OSError as x: return errno.errorcode.get(x.errno, str(x.errno))
info = {"fds": {}}
for n in os.listdir("/proc/self/fd"):
    try: info["fds"][n] = os.readlink(f"/proc/self/fd/{n}")
    except OSError: pass  # the listing's own descriptor
info["tty"] = os.ttyname(0)
info["pts"] = sorted(os.listdir("/dev/pts"))
info["ptsDev"] = os.stat("/dev/pts").st_dev
def devtty():
    # /dev/tty is whatever terminal controls this session: the same session as on fd 0, and what
    # is written to it comes out on the box's terminal.
    fd = os.open("/dev/tty", os.O_RDWR)
    try:
        os.write(fd, b"VIA-DEVTTY-" + str(6 * 7).encode() + b"\n")
        sid = lambda f: struct.unpack("i", fcntl.ioctl(f, 0x5429, bytes(4)))[0]  # TIOCGSID
        return {"sameSession": sid(fd) == sid(0) == os.getsid(0), "pgrp": os.tcgetpgrp(fd) == os.tcgetpgrp(0)}
    finally: os.close(fd)
try: info["devtty"] = devtty()
except OSError as x: info["devtty"] = errno.errorcode[x.errno]
info["console"] = e(lambda: os.close(os.open("/dev/console", os.O_RDWR | os.O_NOCTTY)))
info["hostPts"] = {}
for n in os.environ["HOSTPTS"].split():
    try:
        fd = os.open(f"/dev/pts/{n}", os.O_RDWR | os.O_NOCTTY)
        info["hostPts"][n] = "own" if os.fstat(fd).st_rdev == os.fstat(0).st_rdev else "other"
        os.close(fd)
    except OSError as x: info["hostPts"][n] = errno.errorcode[x.errno]
info["sti"] = sorted({e(lambda: fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))) for c in os.environ["INJECT"].encode()})
print("JSON:" + json.dumps(info))
`;

// In the box, spawned (pipes, no terminal): TIOCSTI on fds 0-2 and /dev/tty.
const PY_PIPES = String.raw`
import errno, fcntl, json, os, termios
def e(f):
    try: f(); return "ok"
    except OSError as x: return errno.errorcode.get(x.errno, str(x.errno))
print(json.dumps({"sti": [e(lambda: fcntl.ioctl(fd, termios.TIOCSTI, b"x")) for fd in (0, 1, 2)],
                  "devtty": e(lambda: os.open("/dev/tty", os.O_RDWR))}))
`;

// In the box, on a raw terminal: the escape sequences, then 2 s for any answer on its input.
const PY_ESC = String.raw`
import json, os, select, tty
tty.setraw(0)
for s in json.loads(os.environ["SEQS"]) + ["\x1b[" + "1;" * 50000 + "m"]:
    os.write(1, s.encode())
os.write(1, b"\r\nESC-WRITTEN\r\n")
r, _, _ = select.select([0], [], [], 2)
data = os.read(0, 4096) if r else b""
os.write(1, b"ANSWER:" + data.hex().encode() + b":END\r\n")
`;

// Node, run by the harness on its pty.
const NODE_DRIVER = String.raw`
const fs = require('fs');
const [repo, image, outFile, token, hostPts, stiPy, pipesPy, escPy, seqs] = process.argv.slice(2);
const { Sandbox } = require(repo);
const until = async (pred, what, ms = 60000) => {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error('waited for ' + what);
    await new Promise((r) => setTimeout(r, 20));
  }
};
const result = (r) => ({ exitCode: r.exitCode, fault: r.fault, notes: r.runtimeNotes });
async function sti(profile) {
  const sb = await new Sandbox({ image, ...(profile ? { securityProfile: profile } : {}) }).open();
  try {
    const env = { STI: fs.readFileSync(stiPy, 'utf8'), HOSTPTS: hostPts, PS1: '$ ',
      INJECT: 'touch /tmp/' + token + '-sti; echo INJECTED-$((6*7))\n' };
    const t = await sb.terminal({ argv: ['bash', '--norc', '--noprofile'], env });
    const chunks = [];
    t.onData((d) => chunks.push(d));
    const text = () => Buffer.concat(chunks).toString('latin1');
    await t.write('python3 -c "$STI"; echo PY-RC=$?\n');
    await until(() => /PY-RC=\d/.test(text()), 'python');
    await t.write('if test -e /tmp/' + token + '-sti; then echo FOUND-$((20+1)); else echo MISSING-$((20+1)); fi\n');
    await until(() => /(FOUND|MISSING)-21/.test(text()), 'the check');
    await t.write('exit\n');
    const r = await t.wait();
    let pipes = null;
    if (!profile) {
      const p = await sb.spawn(['python3', '-c', fs.readFileSync(pipesPy, 'utf8')]);
      const pr = await p.wait();
      pipes = { stdout: pr.stdout, ...result(pr) };
    }
    return { text: text(), result: result(r), pipes };
  } finally {
    await sb.close();
  }
}
(async () => {
  const out = { titleBefore: process.title };
  out.sti = await sti(null);
  out.stiUntrusted = await sti('untrusted');
  const sb = await new Sandbox({ image }).open();
  try {
    const t = await sb.terminal({ argv: ['python3', '-c', fs.readFileSync(escPy, 'utf8')], env: { SEQS: seqs } });
    const chunks = [];
    t.onData((d) => chunks.push(d));
    const r = await t.wait();
    out.esc = { hex: Buffer.concat(chunks).toString('hex'), result: result(r) };
  } finally {
    await sb.close();
  }
  out.titleAfter = process.title;
  // close() lets the Sandbox's spare kerns go without waiting for them, and this node is its
  // terminal's session leader: its exit hangs up its process group, spares included, which then
  // die before they remove their cgroup leaves (left for the next kern to sweep). Waiting for
  // them keeps the leak check about the attacks.
  const kernKids = () => fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      const st = fs.readFileSync('/proc/' + p + '/stat', 'utf8');
      return st.includes('(kern)') && Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]) === process.pid;
    } catch {
      return false;
    }
  });
  await until(() => kernKids().length === 0, 'the retired spares');
  fs.writeFileSync(outFile, JSON.stringify(out));
})().catch((e) => { fs.writeFileSync(outFile, JSON.stringify({ error: String((e && e.stack) || e) })); process.exit(1); });
`;

// The host harness: the caller's pty and three more, the control injection, exec node; then every
// host pty's input queue (what was typed) and output (what was written to it).
const HARNESS = String.raw`
import fcntl, json, os, select, sys, termios, tty
node, driver, out = sys.argv[1:4]
rest = sys.argv[4:]
master, slave = os.openpty()
tty.setraw(slave)
extra = [os.openpty() for _ in range(3)]
for m, s in extra: tty.setraw(s)
names = [os.ttyname(slave)] + [os.ttyname(s) for _, s in extra]
with open(out + ".hostpts", "w") as f: f.write(json.dumps({"names": names, "dev": os.stat("/dev/pts").st_dev}))
pid = os.fork()
if pid == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2): os.dup2(slave, fd)
    err = None
    try:
        for c in b"HOSTCTRL":
            fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
    except OSError as e:
        err = e.errno
    with open(out + ".ctrl", "w") as f: f.write(json.dumps({"ctrl_errno": err}))
    hostpts = " ".join(n.rsplit("/", 1)[1] for n in names)
    os.execv(node, [node, driver] + rest[:4] + [hostpts] + rest[4:])
# What node writes to its terminal is read as it comes (a full pty would block it).
written = b""
os.set_blocking(master, False)
while True:
    r, _, _ = select.select([master], [], [], 0.2)
    if r:
        try: written += os.read(master, 65536)
        except OSError: pass
    done, status = os.waitpid(pid, os.WNOHANG)
    if done: break
def drain(fd):
    os.set_blocking(fd, False)
    got = b""
    try:
        while True:
            b = os.read(fd, 4096)
            if not b: break
            got += b
    except OSError:
        pass
    return got.decode(errors="replace")
res = {"status": status, "caller": {"typed": drain(slave), "written": written.decode(errors="replace") + drain(master)}}
res["extra"] = [{"typed": drain(s), "written": drain(m)} for m, s in extra]
print(json.dumps(res))
`;

const SEQS = [
  '\x1b]52;c;cm0gLXJmIH4K\x07', // OSC 52: put "rm -rf ~" on the clipboard
  '\x1b]52;p;?\x07', // OSC 52: ask for the primary selection back
  '\x1b[6n', // DSR: report the cursor position (an answer is typed into input)
  '\x1b]0;kern-attack-title\x07', // icon name and window title
  '\x1b]2;kern-attack-title2\x1b\\', // window title, ST-terminated
  '\x1b[21t', // report the window title (the classic title-echo injection)
  '\x1b[>c', // secondary device attributes
  '\x05', // ENQ: the answerback string
  '\x1b[201~', // bracketed paste's end
  '\x1bP$q"p\x1b\\', // DECRQSS
];

const hostPath = (suffix) => `/tmp/${suite.guard.token}-${suffix}`;
let res;
let seqs; // SEQS and the title-report attack
const sightings = []; // host paths seen to exist while the harness ran

beforeAll(async () => {
  const dirs = suite.dirs.temp('kern-atk-terminal-');
  const file = (name, text) => {
    const p = path.join(dirs, name);
    fs.writeFileSync(p, text);
    return p;
  };
  const out = path.join(dirs, 'out.json');
  const driver = file('driver.js', NODE_DRIVER);
  // The title-report attack: a terminal that answered would type this command back.
  seqs = [...SEQS, `\x1b]2;;touch ${hostPath('title')}\n\x07\x1b[21t`];
  const args = [REPO, ROOTFS, out, suite.guard.token, file('sti.py', PY_STI), file('pipes.py', PY_PIPES), file('esc.py', PY_ESC), JSON.stringify(seqs)];
  const watch = setInterval(() => {
    for (const p of [hostPath('sti'), hostPath('title')]) if (fs.existsSync(p)) sightings.push(p);
  }, 5);
  let stdout = '';
  let stderr = '';
  const status = await new Promise((resolve) => {
    const h = spawn('python3', ['-c', HARNESS, process.execPath, driver, out, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    h.stdout.on('data', (d) => {
      stdout += d;
    });
    h.stderr.on('data', (d) => {
      stderr += d;
    });
    const timer = setTimeout(() => h.kill('SIGKILL'), 240000);
    h.on('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
  clearInterval(watch);
  if (status !== 0) throw new Error(`terminal harness failed (${status}): ${stderr}`);
  const box = JSON.parse(fs.readFileSync(out, 'utf8'));
  if (box.error) throw new Error(`node driver failed: ${box.error}`);
  res = {
    harness: JSON.parse(stdout.trim().split('\n').pop()),
    ctrl: JSON.parse(fs.readFileSync(`${out}.ctrl`, 'utf8')),
    hostPts: JSON.parse(fs.readFileSync(`${out}.hostpts`, 'utf8')),
    box,
  };
}, 300000);

/** The JSON line python printed on the terminal. */
const stiInfo = (k) => { const m = /JSON:(.*)\r\n/.exec(res.box[k].text); if (!m) throw new Error(res.box[k].text); return JSON.parse(m[1]); };

test('control: on this host, TIOCSTI into the caller\'s own terminal works (the attack path is live)', () => {
  expect(res.ctrl.ctrl_errno).toBeNull();
  expect(res.harness.caller.typed.startsWith('HOSTCTRL')).toBe(true);
});

test('TIOCSTI on the box\'s terminal types into that terminal only: bash in the box runs it, the host path never exists', () => {
  const info = stiInfo('sti');
  expect(info.sti).toEqual(['ok']); // the ioctl works: on the box's own terminal
  const { text, result } = res.box.sti;
  expect(text).toMatch(/INJECTED-42\r\n/); // run by the box's bash
  expect(text).toMatch(/FOUND-21\r\n/); // and its file is in the box's /tmp
  expect(result).toMatchObject({ exitCode: 0, fault: null });
  expect(sightings).toEqual([]);
  expect(fs.existsSync(hostPath('sti'))).toBe(false);
  suite.guard.assertUntouched();
});

test('nothing the boxes did was typed into, or written to, the caller\'s terminal or any other host pty', () => {
  expect(res.harness.status).toBe(0);
  // Lengths and heads: a failure shows what came, not 100 KB of it.
  const seen = ({ typed, written }) => ({ typed: typed.slice(0, 200), written: `${written.length} bytes: ${JSON.stringify(written.slice(0, 200))}` });
  expect(seen(res.harness.caller)).toEqual({ typed: 'HOSTCTRL', written: '0 bytes: ""' });
  expect(res.harness.extra.map(seen)).toEqual([0, 1, 2].map(() => ({ typed: '', written: '0 bytes: ""' })));
});

test('under securityProfile "untrusted" TIOCSTI is refused (EPERM, an escape_blocked fault naming it) and nothing runs, in the box or on the host', () => {
  const info = stiInfo('stiUntrusted');
  expect(info.sti).toEqual(['EPERM']);
  const { text, result } = res.box.stiUntrusted;
  expect(text).not.toMatch(/INJECTED-42/);
  expect(text).toMatch(/MISSING-21\r\n/);
  expect(result.fault).toMatchObject({ type: 'escape_blocked', message: expect.stringContaining('ioctl(TIOCSTI)') });
  expect(sightings).toEqual([]);
  expect(fs.existsSync(hostPath('sti'))).toBe(false);
});

test('the terminal is the box\'s own: its fds 0-2 are /dev/pts/0, /dev/pts holds only 0 and ptmx of another devpts, /dev/tty is that terminal, no /dev/console', () => {
  for (const k of ['sti', 'stiUntrusted']) {
    const info = stiInfo(k);
    expect(info.fds).toEqual({ 0: '/dev/pts/0', 1: '/dev/pts/0', 2: '/dev/pts/0' });
    expect(info.tty).toBe('/dev/pts/0');
    expect(info.pts).toEqual(['0', 'ptmx']);
    expect(info.ptsDev).not.toBe(res.hostPts.dev);
    expect(info.devtty).toEqual({ sameSession: true, pgrp: true });
    expect(res.box[k].text).toMatch(/VIA-DEVTTY-42\r\n/);
    expect(info.console).toBe('ENOENT');
    // The host's ptys by number: absent, or (pts/0) the box's own terminal.
    const want = Object.fromEntries(res.hostPts.names.map((n) => n.split('/').pop()).map((n) => [n, n === '0' ? 'own' : 'ENOENT']));
    expect(info.hostPts).toEqual(want);
  }
  expect(res.hostPts.names).toHaveLength(4);
});

test('a spawned process (pipes, no terminal) has no terminal to push into: TIOCSTI ENOTTY on fds 0-2, /dev/tty ENXIO', () => {
  const { stdout, exitCode, fault } = res.box.sti.pipes;
  expect({ exitCode, fault }).toEqual({ exitCode: 0, fault: null });
  expect(JSON.parse(stdout)).toEqual({ sti: ['ENOTTY', 'ENOTTY', 'ENOTTY'], devtty: 'ENXIO' });
});

test('escape sequences (OSC 52, DSR, titles and their report, ENQ, DECRQSS, a 100 KB CSI) reach the caller as the very bytes; nothing answers them, nothing else happens', () => {
  const bytes = Buffer.from(res.box.esc.hex, 'hex');
  for (const s of [...seqs, `\x1b[${'1;'.repeat(50000)}m`]) {
    expect({ seq: JSON.stringify(s.slice(0, 40)), found: bytes.includes(Buffer.from(s)) }).toEqual({ seq: JSON.stringify(s.slice(0, 40)), found: true });
  }
  // Nothing typed itself into the box's terminal in answer (no DSR, title, ENQ or DECRQSS reply).
  expect(bytes.toString('latin1')).toMatch(/ESC-WRITTEN\r\nANSWER::END\r\n$/);
  expect(res.box.esc.result).toMatchObject({ exitCode: 0, fault: null });
  // Node's own process: its title is its own, and it wrote nothing to its terminal (above).
  expect(res.box.titleAfter).toBe(res.box.titleBefore);
  expect(res.box.titleAfter).not.toMatch(/kern-attack/);
  expect(sightings).toEqual([]);
  expect(fs.existsSync(hostPath('title'))).toBe(false);
  suite.guard.assertUntouched();
});
