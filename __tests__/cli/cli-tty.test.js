'use strict';
// rootless: yes
// `kern run -it`, `kern exec -it` and `kern attach` from a terminal: the box's own terminal
// relayed to the host's, driven under script(1) (a pty of its own, with a host shell script on
// it) as a person would, plus -t and -i with pipes. Real boxes, real ptys, no mocks.

const fs = require('fs');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { requireRootfs, tempDirs, uniqueName, hostProcessesMatching, waitFor, sleep, isRoot } = require('../helpers');

const KERN = process.env.KERN_BIN || path.join(__dirname, '..', '..', 'kern');
// Generous: a hang fails the test instead of the suite, nothing is timed.
const DEADLINE_MS = 60000;
const PROMPT = 'KP> ';
// An interactive bash whose prompt is known (no rc file of the image or the host sets another).
const BASH = `-e "PS1=${PROMPT}" -- bash --norc --noprofile`;
// Output lines come as `\r...\r\n`: the terminal's ONLCR, and bash's bracketed-paste toggle ends
// with a carriage return before the command's output.

const temps = tempDirs();
const sessions = [];
let rootfs;

beforeAll(() => {
  rootfs = requireRootfs();
});

afterEach(() => {
  // A failed test's terminal: its hang-up ends kern, which ends its box.
  for (const s of sessions.splice(0)) if (s.child.exitCode === null) s.child.kill('SIGKILL');
});

afterAll(() => temps.removeAll());

function kern(args, input) {
  const r = spawnSync(KERN, args, { encoding: 'utf8', timeout: DEADLINE_MS, input });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A terminal: script(1) runs `drive` (host sh) on a pty of its own; `type` is the keyboard,
 * `until` waits for the screen to show something (after what was already matched). */
function terminal(drive) {
  const dir = temps.temp('kern-tty-');
  fs.writeFileSync(path.join(dir, 'drive.sh'), drive);
  const child = spawn('script', ['-qfec', 'sh ./drive.sh', '/dev/null'], {
    cwd: dir,
    env: { ...process.env, KERN, TERM: 'xterm' },
  });
  let out = '';
  let from = 0;
  child.stdout.on('data', (d) => (out += d.toString('latin1')));
  child.stderr.on('data', (d) => (out += d.toString('latin1')));
  const closed = new Promise((resolve) => child.on('close', (code) => resolve(code)));
  const s = {
    dir,
    child,
    file: (name) => path.join(dir, name),
    read: (name) => fs.readFileSync(path.join(dir, name), 'utf8'),
    screen: () => out,
    type: (text) => child.stdin.write(text),
    async until(re) {
      const end = Date.now() + DEADLINE_MS;
      for (;;) {
        const m = re.exec(out.slice(from));
        if (m) {
          from += m.index + m[0].length;
          return m;
        }
        if (Date.now() > end) throw new Error(`the terminal never showed ${re}; it showed:\n${JSON.stringify(out)}`);
        await sleep(50);
      }
    },
    async exited() {
      child.stdin.end();
      let timer;
      const late = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the terminal's session never ended; it showed:\n${JSON.stringify(out)}`)), DEADLINE_MS);
      });
      try {
        return await Promise.race([closed, late]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
  sessions.push(s);
  return s;
}

const tiocstiInjector = (target) => `
import fcntl, os, sys, termios
line = b"touch ${target}\\n"
def inject(fd):
    try:
        for ch in line:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
        return True
    except OSError:
        return False
hits = [fd for fd in range(64) if inject(fd)]
try:
    if inject(os.open("/dev/tty", os.O_RDWR)):
        hits.append("tty")
except OSError:
    pass
print("INJECTED", hits, flush=True)
if hits:
    print("GOT", repr(sys.stdin.readline()), flush=True)
`;

describe('kern run -it: an interactive shell on the box\'s own terminal', () => {
  test('types, answers, is sized like the host terminal, takes ^C, exits with the shell\'s code and restores the terminal', async () => {
    const t = terminal(`
stty rows 33 cols 101
stty -g > before
"$KERN" run -it --image host ${BASH}
echo "KERN-EXIT=$?"
stty -g > after
`);
    await t.until(new RegExp(PROMPT));
    t.type('echo $((6*7))\r');
    await t.until(/\r42\r\n/);
    // The host terminal's size, and the box's own devpts (its first terminal).
    t.type('stty size; tty\r');
    await t.until(/\r33 101\r\n\/dev\/pts\/0\r\n/);
    // ^C is a byte to the box's terminal (the host's is raw), whose line discipline makes it a
    // SIGINT for the foreground job there: the sleep ends, the shell lives on.
    const nap = `100.${process.pid}${Date.now() % 1000}`;
    t.type(`sleep ${nap}\r`);
    const sleeping = () => hostProcessesMatching(`sleep ${nap}`).length > 0;
    expect(await waitFor(sleeping, DEADLINE_MS)).toBe(true);
    t.type('\x03');
    await t.until(new RegExp(PROMPT));
    t.type('echo alive-$((1+1))\r');
    await t.until(/\ralive-2\r\n/);
    expect(sleeping()).toBe(false);
    t.type('exit 3\r');
    expect(await t.exited()).toBe(0);
    expect(t.screen()).toMatch(/KERN-EXIT=3/);
    expect(t.read('after')).toBe(t.read('before'));
  }, 240000);

  test('a resize of the host terminal (SIGWINCH) resizes the box\'s', async () => {
    // A host process on the same terminal resizes it once told to: kern, in the foreground, gets
    // the SIGWINCH.
    const t = terminal(`
stty rows 20 cols 70
( while [ ! -e go ]; do sleep 0.1; done; stty -F /dev/tty rows 31 cols 97; echo RESIZED ) &
"$KERN" run -it --image host ${BASH}
echo "KERN-EXIT=$?"
`);
    await t.until(new RegExp(PROMPT));
    t.type('stty size\r');
    await t.until(/\r20 70\r\n/);
    fs.writeFileSync(t.file('go'), '');
    await t.until(/RESIZED/);
    // The relay resizes the box's terminal as it reads the signal: asked until it says so.
    const end = Date.now() + DEADLINE_MS;
    let size;
    do {
      t.type('stty size\r');
      size = (await t.until(/\r(\d+ \d+)\r\n/))[1];
    } while (size !== '31 97' && Date.now() < end);
    expect(size).toBe('31 97');
    t.type('exit\r');
    await t.exited();
    expect(t.screen()).toMatch(/KERN-EXIT=0/);
  }, 240000);

  test('SIGTERM, SIGHUP or SIGINT to kern ends the box and restores the host terminal first', async () => {
    for (const [sig, code] of [['SIGTERM', 143], ['SIGHUP', 129], ['SIGINT', 130]]) {
      const marker = uniqueName('kerntty');
      const t = terminal(`
stty -g > before
sh -c 'echo KERNPID=$$; exec "$KERN" run -it --image host -e MARK=${marker} ${BASH}'
echo "KERN-EXIT=$?"
stty -g > after
`);
      const pid = Number((await t.until(/KERNPID=(\d+)/))[1]);
      await t.until(new RegExp(PROMPT));
      process.kill(pid, sig);
      expect(await t.exited()).toBe(0);
      expect(t.screen()).toMatch(new RegExp(`KERN-EXIT=${code}`));
      expect(t.screen()).toMatch(new RegExp(`kern got ${sig}: it ended the box`));
      expect(t.read('after')).toBe(t.read('before'));
      // The box's PID 1 is a fork of kern (the marker is in its command line): gone with it.
      expect(hostProcessesMatching(marker)).toEqual([]);
    }
  }, 240000);

  test('a box that ends from outside (its PID 1 killed) leaves the host terminal as it was', async () => {
    const marker = uniqueName('kerntty');
    const t = terminal(`
stty -g > before
"$KERN" run -it --image host -e MARK=${marker} ${BASH}
echo "KERN-EXIT=$?"
stty -g > after
`);
    await t.until(new RegExp(PROMPT));
    const inBox = (pid) => /^NSpid:\s+\d+\s+1$/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    const pid1 = hostProcessesMatching(marker).find((p) => {
      try {
        return inBox(p.pid);
      } catch {
        return false;
      }
    });
    expect(pid1).toBeDefined();
    process.kill(pid1.pid, 'SIGKILL');
    expect(await t.exited()).toBe(0);
    expect(t.screen()).toMatch(/KERN-EXIT=\d+/);
    expect(t.read('after')).toBe(t.read('before'));
    expect(hostProcessesMatching(marker)).toEqual([]);
  }, 240000);

  test('no process of the box holds the host terminal: it has only its own', async () => {
    const marker = uniqueName('kerntty');
    const t = terminal(`
tty > hosttty
"$KERN" run -it --image host -e MARK=${marker} -- sh -c 'echo READY; sleep 1000' ${marker}
echo "KERN-EXIT=$?"
`);
    await t.until(/READY/);
    const host = fs.statSync(t.read('hosttty').trim());
    // The box's processes (PID 1, a fork of kern, and the workload) are those of a PID
    // namespace below the host's: NSpid has more than one entry.
    const inBox = (pid) => {
      try {
        return /^NSpid:\s+\d+\s+\d+/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
      } catch {
        return false;
      }
    };
    const boxed = hostProcessesMatching(marker).filter((p) => inBox(p.pid));
    let scanned = 0;
    for (const { pid } of boxed) {
      let fds;
      try {
        fds = fs.readdirSync(`/proc/${pid}/fd`);
      } catch {
        continue; // PID 1 is non-dumpable: only root reads its fds
      }
      scanned += 1;
      for (const fd of fds) {
        let st;
        try {
          st = fs.statSync(`/proc/${pid}/fd/${fd}`);
        } catch {
          continue;
        }
        expect({ pid, fd, sameAsHostTerminal: st.dev === host.dev && st.ino === host.ino }).toEqual({
          pid,
          fd,
          sameAsHostTerminal: false,
        });
      }
    }
    expect(scanned).toBeGreaterThanOrEqual(isRoot ? 2 : 1);
    t.type('\x03');
    await t.exited();
    expect(t.screen()).toMatch(/KERN-EXIT=130/);
  }, 240000);

  test('-t alone leaves the host terminal as it is: its ^C ends the box', async () => {
    const marker = uniqueName('kerntty');
    // The trap keeps this host shell (it gets the SIGINT too) to say what kern did.
    const t = terminal(`
trap 'echo TRAPPED' INT
"$KERN" run -t --image host -e MARK=${marker} -- sh -c 'echo READY; sleep 1000'
echo "KERN-EXIT=$?"
`);
    await t.until(/READY/);
    t.type('\x03');
    await t.exited();
    // Which ends the box first is a race: kern's handler, or the box's PID 1 (a fork of kern,
    // so in the terminal's foreground group too) forwarding the SIGINT to the workload.
    expect(t.screen()).toMatch(/TRAPPED\r\nKERN-EXIT=130/);
    expect(hostProcessesMatching(marker)).toEqual([]);
  }, 240000);

  test('TIOCSTI from the box lands only in its own terminal, never the host\'s', async () => {
    // If an injection reached the host terminal, the host shell that reads it after kern
    // would run the command and create the file.
    const legacyTiocsti = (() => {
      try {
        return fs.readFileSync('/proc/sys/dev/tty/legacy_tiocsti', 'utf8').trim() !== '0';
      } catch {
        return true;
      }
    })();
    const run = async (how) => {
      const marker = path.join(temps.temp('kern-tiocsti-'), 'HOSTFILE');
      const t = terminal(`
cat > inject.py <<'EOF'
${tiocstiInjector(marker)}
EOF
${how}
echo "KERN-EXIT=$?"
exec sh
`);
      await t.until(/INJECTED/);
      // The host shell reads its terminal: anything injected there comes before this line.
      await t.until(/KERN-EXIT=/);
      t.type('echo HOST-$((3+4))\n');
      await t.until(/HOST-7/);
      t.type('exit\n');
      await t.exited();
      return { screen: t.screen(), reached: fs.existsSync(marker) };
    };

    const boxed = await run(`"$KERN" run -it --image host --workspace "$PWD" -- python3 inject.py`);
    expect(boxed.reached).toBe(false);
    const injected = /INJECTED \[(.*)\]/.exec(boxed.screen)[1];
    if (injected !== '') {
      // It went to the box's terminal: the box read it back as its own input.
      expect(boxed.screen).toMatch(/GOT 'touch .*HOSTFILE\\n'/);
    }

    // The check itself: the same injection from a host process on that terminal does reach
    // the host shell (where the kernel still allows TIOCSTI, or as root).
    const control = await run('python3 inject.py');
    if (legacyTiocsti || isRoot) expect(control.reached).toBe(true);
  }, 240000);
});

describe('kern run -t and -i with pipes', () => {
  test('-t without a terminal on stdin: the box still has its own, 80x24, no raw mode', () => {
    const r = kern(['run', '-t', '--image', 'host', '--', 'sh', '-c', 'tty; stty size; test -t 0 && echo stdin-tty; echo "$TERM"']);
    expect(r.code).toBe(0);
    // The box's terminal turns \n into \r\n on the way out, as any terminal does.
    expect(r.stdout).toMatch(/^\/dev\/pts\/0\r\n24 80\r\nstdin-tty\r\n\S+\r\n$/);
  });

  test('a workload that ends at once still has its output relayed', async () => {
    // It may end before kern has taken its terminal's master, or even before kern saw it start:
    // a race, so asked many times, four at a time (the contention makes the late cases come).
    const once = (i) =>
      new Promise((resolve) => {
        const c = spawn(KERN, ['run', '-t', '--image', 'host', '--', 'echo', `hi-${i}`], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        c.stdout.on('data', (d) => (out += d));
        c.on('close', (code) => resolve({ i, code, out }));
      });
    const lost = [];
    for (let round = 0; round < 15; round++) {
      const got = await Promise.all([0, 1, 2, 3].map((k) => once(round * 4 + k)));
      lost.push(...got.filter((r) => r.code !== 0 || r.out !== `hi-${r.i}\r\n`));
    }
    expect(lost).toEqual([]);
  }, 240000);

  test('-it with piped stdin is refused before any box, as docker does; -i and -t alone are not', () => {
    const ws = temps.temp('kern-tty-ws-');
    const r = kern(['run', '-it', '--image', 'host', '--workspace', ws, '--', 'touch', '/workspace/ran'], 'echo\n');
    expect(r.code).toBe(125);
    expect(r.stderr).toMatch(/-it needs a terminal on stdin.*-i alone.*-t alone/);
    expect(fs.existsSync(path.join(ws, 'ran'))).toBe(false);
    expect(kern(['run', '--tty', '--image', 'host', '--', 'true'], 'x\n').code).toBe(0);
    expect(kern(['run', '--interactive', '--image', 'host', '--', 'true'], 'x\n').code).toBe(0);
  });

  test('-i alone: the workload reads kern\'s stdin through a pipe, up to its EOF; without -i it reads nothing', () => {
    const big = 'x'.repeat(300 * 1024);
    const r = kern(['run', '-i', '--image', 'host', '--', 'sh', '-c', 'test -t 0 || echo piped; wc -c; echo done'], big);
    expect(r).toMatchObject({ code: 0, stdout: `piped\n${big.length}\ndone\n` });
    const without = kern(['run', '--image', 'host', '--', 'sh', '-c', 'wc -c; echo done'], big);
    expect(without).toMatchObject({ code: 0, stdout: '0\ndone\n' });
  });

  test('the command needs no --', () => {
    expect(kern(['run', '--image', 'host', 'sh', '-c', 'echo $0 $1', 'a', 'b'])).toMatchObject({ code: 0, stdout: 'a b\n' });
  });
});

describe('kern attach and kern exec -it: a resident box', () => {
  const { Sandbox } = require('../..');

  test('kern attach NAME: the image\'s shell in the live box; kern exec -t; an unknown name', async () => {
    const name = uniqueName('att');
    const ws = temps.temp('kern-attach-ws-');
    const sb = new Sandbox({ image: rootfs, persist: true, name, workspace: ws });
    try {
      await sb.open();
      await sb.run(['sh', '-c', 'echo from-api > /tmp/note']);
      const t = terminal(`
"$KERN" attach ${name}
echo "KERN-EXIT=$?"
`);
      // The image's bash (its prompt is the image's), in the same box as the API's calls.
      await t.until(/[#$] /);
      t.type('echo hi-$((2+3)) $0; cat /tmp/note; tty\r');
      await t.until(/\rhi-5 bash\r\nfrom-api\r\n\/dev\/pts\/\d+\r\n/);
      t.type('exit 4\r');
      await t.exited();
      expect(t.screen()).toMatch(/KERN-EXIT=4/);

      // A short call, many times: its output must not be lost to the race with its end.
      for (let i = 0; i < 15; i++) {
        const tty = kern(['exec', '-t', name, '--', 'sh', '-c', 'tty; cat /tmp/note']);
        expect(tty).toMatchObject({ code: 0 });
        expect(tty.stdout).toMatch(/^\/dev\/pts\/\d+\r\nfrom-api\r\n$/);
      }
      const piped = kern(['exec', '-i', name, '--', 'cat'], 'through\n');
      expect(piped).toMatchObject({ code: 0, stdout: 'through\n' });
    } finally {
      await sb.destroy().catch(() => {});
      kern(['stop', name]);
    }
    const unknown = kern(['attach', `${name}-none`]);
    expect(unknown.code).toBe(125);
    expect(unknown.stderr).toMatch(/no live resident box named .*-none \(`kern ps` lists them\)/);
  }, 240000);
});

// What a box without -t does to the terminal it was started from, through every descriptor
// it could have been given: its modes and size (the reviewer's box left echo and canonical mode
// off and a 3x9 size), and what the operator types (read from fd 1, which was the operator's
// pty opened read-write). fd 7 is the host terminal too, opened by the host shell before kern.
const TAKE_TERMINAL = String.raw`
W=/workspace
for fd in 0 1 2 7; do if [ -t $fd ]; then r=tty; else r=notty; fi; echo "fd$fd=$r" >> $W/fds; done
for fd in 0 1 2 7; do { stty raw -echo -icanon rows 3 cols 9 <&$fd; } 2>/dev/null; done
pids=
for fd in 0 1 2 7; do
  { cat <&$fd >> $W/stolen-$fd; } 2>/dev/null &
  pids="$pids $!"
done
echo BOX-OUT-$((40+2)); echo BOX-ERR-$((40+3)) >&2
touch $W/ready
while [ ! -e $W/done ]; do sleep 0.05; done
kill $pids 2>/dev/null
echo BOX-END
`;

describe('without -t the box gets pipes, never the host\'s terminal', () => {
  const { Sandbox } = require('../..');

  // `how`: the kern command line, run by a host shell on a terminal, with W the workspace.
  async function expectTerminalKept(ws, how) {
    fs.writeFileSync(path.join(ws, 'box.sh'), TAKE_TERMINAL);
    fs.chmodSync(ws, 0o777);
    const secret = uniqueName('typedline');
    const t = terminal(`
W='${ws}'
exec 7<>/dev/tty
stty rows 33 cols 101
stty -g > before; stty size > before.size
( while [ ! -e "$W/ready" ]; do sleep 0.05; done; stty -g < /dev/tty > during; stty size < /dev/tty > during.size; echo HOST-READY ) &
${how}
echo "KERN-EXIT=$?"
stty -g > after; stty size > after.size
IFS= read -r line; echo "HOST-GOT:[$line]"
`);
    await t.until(/HOST-READY/);
    // The operator types a line while the box runs. A box that holds the terminal reads it
    // (its readers block on it); give them the time to, then let the box end.
    t.type(`${secret}\n`);
    const stolen = () => [0, 1, 2, 7].some((fd) => {
      const f = path.join(ws, `stolen-${fd}`);
      return fs.existsSync(f) && fs.readFileSync(f, 'utf8').includes(secret);
    });
    await waitFor(stolen, 2000);
    fs.writeFileSync(path.join(ws, 'done'), '');
    await t.until(/KERN-EXIT=0/);
    // Written whole, not only made: the redirect creates the file before stty writes to it.
    const written = () => fs.existsSync(t.file('after.size')) && fs.readFileSync(t.file('after.size'), 'utf8').endsWith('\n');
    expect(await waitFor(written, DEADLINE_MS)).toBe(true);
    const screen = t.screen();
    // Its output still came, through kern.
    expect(screen).toMatch(/BOX-OUT-42/);
    expect(screen).toMatch(/BOX-ERR-43/);
    expect(screen).toMatch(/BOX-END/);
    // No descriptor of the box was a terminal...
    expect(fs.readFileSync(path.join(ws, 'fds'), 'utf8')).toBe('fd0=notty\nfd1=notty\nfd2=notty\nfd7=notty\n');
    // ...the host's was the same while the box ran and after, at the size it was given...
    expect(t.read('during')).toBe(t.read('before'));
    expect(t.read('after')).toBe(t.read('before'));
    expect(t.read('before.size')).toBe('33 101\n');
    expect(t.read('during.size')).toBe('33 101\n');
    expect(t.read('after.size')).toBe('33 101\n');
    // ...and what the operator typed reached the host shell that read it, and nothing else.
    expect(stolen()).toBe(false);
    await t.until(new RegExp(`HOST-GOT:\\[${secret}\\]`));
    expect(await t.exited()).toBe(0);
  }

  test('kern run, kern run -i with a file on stdin, kern run --security-profile untrusted', async () => {
    for (const how of [
      `"$KERN" run --image host --workspace "$W" -- sh /workspace/box.sh`,
      `"$KERN" run -i --image host --workspace "$W" -- sh /workspace/box.sh < /dev/null`,
      `"$KERN" run --security-profile untrusted --image ${rootfs} --workspace "$W" -- sh /workspace/box.sh`,
    ]) {
      await expectTerminalKept(temps.temp('kern-notty-'), how);
    }
  }, 240000);

  test('kern exec NAME, with and without -i, in a resident box', async () => {
    const name = uniqueName('notty');
    const ws = temps.temp('kern-notty-res-');
    const sb = new Sandbox({ image: rootfs, persist: true, name, workspace: ws });
    try {
      await sb.open();
      for (const how of [`"$KERN" exec ${name} -- sh /workspace/box.sh`, `"$KERN" exec -i ${name} -- sh /workspace/box.sh < /dev/null`]) {
        for (const f of ['fds', 'ready', 'done', 'stolen-0', 'stolen-1', 'stolen-2', 'stolen-7']) fs.rmSync(path.join(ws, f), { force: true });
        await expectTerminalKept(ws, how);
      }
    } finally {
      await sb.destroy().catch(() => {});
      kern(['stop', name]);
    }
  }, 240000);
});

// Left running by an earlier call of a resident box: every way it has to a later call's
// terminal (`kern attach`): the box's /dev/pts by listing and by number, /dev/ptmx's peers, the
// terminals other processes hold (/proc/<pid>/fd), and their root's /dev/pts. Whatever it
// opens, it writes SPY-WROTE to and reads from, until told to stop; it logs every success.
const PTY_SPY = String.raw`
import os, sys, time
W = '/workspace'
log = open(W + '/spy.log', 'a', buffering=1)
log.write('alive\n')
held = {}
def grab(path):
    if path in held:
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return
    if not os.isatty(fd):
        os.close(fd)
        return
    held[path] = fd
    log.write('OPENED %s\n' % path)
    try:
        os.write(fd, b'SPY-WROTE\r\n')
        log.write('WROTE %s\n' % path)
    except OSError:
        pass
scans = 0
deadline = time.time() + 90
while time.time() < deadline and not os.path.exists(W + '/stop'):
    ways = ['/dev/pts/' + n for n in os.listdir('/dev/pts') if n != 'ptmx']
    ways += ['/dev/pts/%d' % n for n in range(64)]
    for p in os.listdir('/proc'):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            ways += ['/proc/%s/root/dev/pts/%s' % (p, n) for n in os.listdir('/proc/%s/root/dev/pts' % p) if n != 'ptmx']
        except OSError:
            pass
        try:
            for fd in os.listdir('/proc/%s/fd' % p):
                try:
                    if os.readlink('/proc/%s/fd/%s' % (p, fd)).startswith('/dev/pts'):
                        ways.append('/proc/%s/fd/%s' % (p, fd))
                except OSError:
                    pass
        except OSError:
            pass
    for w in ways:
        grab(w)
    for path, fd in held.items():
        try:
            data = os.read(fd, 4096)
            if data:
                log.write('READ %s %r\n' % (path, data))
        except OSError:
            pass
    # Counted from each session's start (the test removes 'attached' between them).
    scans = scans + 1 if os.path.exists(W + '/attached') else 0
    if scans:
        with open(W + '/spy.scans.tmp', 'w') as f:
            f.write(str(scans))
        os.rename(W + '/spy.scans.tmp', W + '/spy.scans')
    time.sleep(0.02)
log.write('stopped\n')
`;

describe('a resident box\'s later terminal is out of reach of what earlier calls left running', () => {
  const { Sandbox } = require('../..');

  test('kern attach: a leftover of an earlier call can neither open its terminal, nor read what is typed, nor write to the screen', async () => {
    const name = uniqueName('ptyspy');
    const ws = temps.temp('kern-ptyspy-');
    fs.chmodSync(ws, 0o777);
    fs.writeFileSync(path.join(ws, 'spy.py'), PTY_SPY);
    const sb = new Sandbox({ image: rootfs, persist: true, name, workspace: ws });
    const secret = uniqueName('operatorline');
    const scans = () => {
      try {
        return Number(fs.readFileSync(path.join(ws, 'spy.scans'), 'utf8')) || 0;
      } catch {
        return 0;
      }
    };
    const log = () => (fs.existsSync(path.join(ws, 'spy.log')) ? fs.readFileSync(path.join(ws, 'spy.log'), 'utf8') : '');
    try {
      await sb.open();
      // Call 1 leaves the spy behind, in a session of its own, as the box's same account.
      const r1 = await sb.run(['sh', '-c', 'setsid python3 /workspace/spy.py </dev/null >/dev/null 2>&1 & sleep 0.3; echo started']);
      expect(r1.stdout).toBe('started\n');
      expect(await waitFor(() => /alive/.test(log()), DEADLINE_MS)).toBe(true);
      for (const how of [`"$KERN" attach -e "PS1=${PROMPT}" ${name} -- bash --norc --noprofile`, `"$KERN" exec -it -e "PS1=${PROMPT}" ${name} -- bash --norc --noprofile`]) {
        for (const f of ['attached', 'spy.scans']) fs.rmSync(path.join(ws, f), { force: true });
        const t = terminal(`
${how}
echo "KERN-EXIT=$?"
`);
        await t.until(new RegExp(PROMPT));
        t.type('touch /workspace/attached; tty\r');
        await t.until(/\/dev\/pts\/\d+\r\n/);
        // The spy has looked everywhere, several times, with the terminal live...
        expect(await waitFor(() => scans() >= 5, DEADLINE_MS)).toBe(true);
        // ...then the operator types a line, and the spy looks on while it is read.
        t.type(`: ${secret}\r`);
        t.type('echo typed-$((2+2))\r');
        await t.until(/\rtyped-4\r\n/);
        const after = scans();
        expect(await waitFor(() => scans() >= after + 5, DEADLINE_MS)).toBe(true);
        t.type('exit 5\r');
        await t.exited();
        expect(t.screen()).toMatch(/KERN-EXIT=5/);
        expect(t.screen()).not.toMatch(/SPY-WROTE/);
      }
      fs.writeFileSync(path.join(ws, 'stop'), '');
      expect(await waitFor(() => /stopped/.test(log()), DEADLINE_MS)).toBe(true);
      const found = log();
      expect(found).not.toMatch(/OPENED|WROTE|READ/);
      expect(found).not.toContain(secret);
    } finally {
      fs.writeFileSync(path.join(ws, 'stop'), '');
      await sb.destroy().catch(() => {});
      kern(['stop', name]);
    }
  }, 240000);
});
