'use strict';
// rootless: yes
// A resident box (`persist`) shares one PID namespace and one account between its calls. What
// one call leaves running must not read, trace or write a later call: its environment (another
// Sandbox of the same name passes its own `env`), its source (bash's `-c` argument), its memory,
// its output. The spy below is left by call 1 and watches through call 2; the host reads what it
// found, and call 2's own result.

const fs = require('fs');
const path = require('path');
const { Sandbox } = require('../../..');
const { opts, uniqueName } = require('../../helpers');
const { guardedSuite } = require('../host');

const suite = guardedSuite();
const { dirs } = suite;

const SPY = String.raw`
import os, sys, time
log = open('/workspace/spy.log', 'a', buffering=1)
token, mark = sys.argv[1], sys.argv[2]
me = os.getpid()
log.write('alive\n')
deadline = time.time() + 60
call2_seen_at = None
while time.time() < deadline:
    # Call 1's own processes (its shell) are the spy's kin: look only once call 2 has begun.
    if call2_seen_at is None and os.path.exists('/workspace/call2-started'):
        call2_seen_at = time.time()
        log.write('saw call 2\n')
    if call2_seen_at is None:
        time.sleep(0.02)
        continue
    for p in os.listdir('/proc'):
        if not p.isdigit() or int(p) in (me, 1):
            continue
        pid = int(p)
        for what in ('environ', 'cmdline'):
            try:
                data = open(f'/proc/{pid}/{what}', 'rb').read()
                if token.encode() in data or mark.encode() in data:
                    log.write(f'LEAK {what} {pid}\n')
            except OSError:
                pass
        try:
            with open(f'/proc/{pid}/mem', 'rb'):
                log.write(f'LEAK mem {pid}\n')
        except OSError:
            pass
        try:
            with open(f'/proc/{pid}/fd/1', 'w') as o:
                o.write('INJECTED\n')
                log.write(f'LEAK wrote {pid}\n')
        except OSError:
            pass
    if time.time() - call2_seen_at > 1.5:
        log.write('scan done\n')
        break
    time.sleep(0.02)
`;

test('what one call leaves running cannot read, trace or write a later call of the same resident box', async () => {
  const ws = dirs.temp('kern-resident-spy-');
  fs.chmodSync(ws, 0o777);
  const name = uniqueName('spybox').slice(0, 40);
  const token = uniqueName('SPYTOKEN');
  const mark = uniqueName('SECRETMARK');
  fs.writeFileSync(path.join(ws, 'spy.py'), SPY);
  const a = await new Sandbox(opts({ persist: true, name, workspace: ws })).open();
  const b = await new Sandbox(opts({ persist: true, name, workspace: ws, env: { SPY_SECRET: token } })).open();
  try {
    // Call 1 leaves the spy behind, in a session of its own.
    const r1 = await a.run(['sh', '-c', `setsid python3 /workspace/spy.py ${token} ${mark} </dev/null >/dev/null 2>&1 & sleep 0.3; echo started`]);
    expect(r1.stdout).toBe('started\n');
    const log = () => (fs.existsSync(path.join(ws, 'spy.log')) ? fs.readFileSync(path.join(ws, 'spy.log'), 'utf8') : '');
    // Call 2, from the other Sandbox with its secret env: its source carries the mark, and it
    // lives until the spy has scanned it for 1.5 s.
    const r2 = await b.runCode(
      `: ${mark}; touch /workspace/call2-started; for i in $(seq 200); do grep -q 'scan done' /workspace/spy.log && break; sleep 0.05; done; echo "call 2 done $SPY_SECRET" | tr -d '\\n' | wc -c`,
      { language: 'bash' }
    );
    expect(r2.fault).toBeNull();
    // The call ran with its secret (its length is what it printed), and nothing was written in.
    expect(r2.stdout).toBe(`${'call 2 done '.length + token.length}\n`);
    expect(r2.stderr).not.toMatch(/INJECTED/);
    const found = log();
    // The spy was alive and watched the whole of call 2...
    expect(found).toMatch(/alive\nsaw call 2\nscan done\n/);
    // ...and found nothing of it.
    expect(found).not.toMatch(/LEAK/);
  } finally {
    await b.destroy();
    await a.close();
    await b.close();
  }
  suite.guard.assertUntouched();
}, 120_000);

// Left by call 1: every way to a later call's terminal (the box's /dev/pts by listing and by
// number, the terminals other processes hold, their root's /dev/pts); it writes to and reads
// from whatever it opens, and logs it.
const PTY_SPY = String.raw`
import os, time
START = time.time()
W = '/workspace'
log = open(W + '/ptyspy.log', 'a', buffering=1)
log.write('alive\n')
held = {}
scans = 0
while time.time() < START + 90 and not os.path.exists(W + '/stop'):
    ways = ['/dev/pts/' + n for n in os.listdir('/dev/pts') if n != 'ptmx'] + ['/dev/pts/%d' % n for n in range(64)]
    for p in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:
        try:
            ways += ['/proc/%s/root/dev/pts/%s' % (p, n) for n in os.listdir('/proc/%s/root/dev/pts' % p) if n != 'ptmx']
        except OSError:
            pass
        try:
            ways += ['/proc/%s/fd/%s' % (p, f) for f in os.listdir('/proc/%s/fd' % p) if os.readlink('/proc/%s/fd/%s' % (p, f)).startswith('/dev/pts')]
        except OSError:
            pass
    for w in ways:
        if w in held:
            continue
        try:
            fd = os.open(w, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            continue
        held[w] = fd
        log.write('OPENED %s\n' % w)
        try:
            os.write(fd, b'SPY-WROTE\n')
        except OSError:
            pass
    for w, fd in held.items():
        try:
            log.write('READ %s %r\n' % (w, os.read(fd, 4096)))
        except OSError:
            pass
    if os.path.exists(W + '/pty-open'):
        scans += 1
        open(W + '/ptyspy.scans.tmp', 'w').write(str(scans))
        os.rename(W + '/ptyspy.scans.tmp', W + '/ptyspy.scans')
    time.sleep(0.02)
log.write('stopped\n')
`;

// Call 2: a pty of its own (as `script`, `expect` or IPython's `!cmd` open one), with a
// secret typed into it while the spy looks.
const PTY_CALL = String.raw`
import os, pty, select, time
W = '/workspace'
m, s = pty.openpty()
print(os.ttyname(s), flush=True)
open(W + '/pty-open', 'w').close()
def scans():
    try:
        return int(open(W + '/ptyspy.scans').read() or 0)
    except (OSError, ValueError):
        return 0
while scans() < 5:
    time.sleep(0.02)
os.write(m, SECRET.encode() + b'\n')
# Bounded: a spy that took the line would leave nothing to read.
got = os.read(s, 4096) if select.select([s], [], [], 10)[0] else b''
first = scans()
while scans() < first + 5:
    time.sleep(0.02)
os.set_blocking(m, False)
try:
    echoed = os.read(m, 65536)
except BlockingIOError:
    echoed = b''
print('GOT', got.decode().strip(), flush=True)
print('SPY' if b'SPY-WROTE' in echoed else 'CLEAN', flush=True)
`;

test('a pty a later call opens is out of reach of what an earlier call left running', async () => {
  const ws = dirs.temp('kern-resident-ptyspy-');
  fs.chmodSync(ws, 0o777);
  const name = uniqueName('ptyspybox').slice(0, 40);
  const secret = uniqueName('PTYSECRET');
  fs.writeFileSync(path.join(ws, 'spy.py'), PTY_SPY);
  fs.writeFileSync(path.join(ws, 'call.py'), `SECRET = ${JSON.stringify(secret)}\n${PTY_CALL}`);
  const sb = await new Sandbox(opts({ persist: true, name, workspace: ws })).open();
  const log = () => (fs.existsSync(path.join(ws, 'ptyspy.log')) ? fs.readFileSync(path.join(ws, 'ptyspy.log'), 'utf8') : '');
  try {
    const r1 = await sb.run(['sh', '-c', 'setsid python3 /workspace/spy.py </dev/null >/dev/null 2>&1 & sleep 0.3; echo started']);
    expect(r1.stdout).toBe('started\n');
    const r2 = await sb.run(['python3', '/workspace/call.py'], { timeoutS: 60 });
    expect(r2.fault).toBeNull();
    // The call had its terminal, and read back exactly what it typed; nothing else wrote to it.
    expect(r2.stdout).toMatch(new RegExp(`^/dev/pts/\\d+\nGOT ${secret}\nCLEAN\n$`));
    fs.writeFileSync(path.join(ws, 'stop'), '');
    // Generous: a hang fails below, nothing is timed.
    for (let i = 0; i < 1200 && !/stopped/.test(log()); i++) await new Promise((r) => setTimeout(r, 50));
    const found = log();
    // The spy was alive and looked the whole time...
    expect(found).toMatch(/^alive\n/);
    expect(found).toMatch(/stopped\n$/);
    // ...and got nowhere.
    expect(found).not.toMatch(/OPENED|READ/);
    expect(found).not.toContain(secret);
  } finally {
    fs.writeFileSync(path.join(ws, 'stop'), '');
    await sb.destroy();
    await sb.close();
  }
  suite.guard.assertUntouched();
}, 120_000);
