'use strict';
// rootless: yes
// A resident box (`persist`) shares one PID namespace and one account between its calls. What
// one call leaves running must not read, trace or write a later call: its environment (another
// Sandbox of the same name passes its own `env`), its source (bash's `-c` argument), its memory,
// its output. The spy below is left by call 1 and watches through call 2; the host reads what it
// found, and call 2's own result.

const fs = require('fs');
const path = require('path');
const { Sandbox } = require('../..');
const { opts, uniqueName } = require('../helpers');
const { guardedSuite } = require('./host');

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
