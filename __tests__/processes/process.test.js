'use strict';
// rootless: yes
// Background processes and terminals beyond the spec (issue 19, ADDITIONS in index.d.ts):
// `sb.spawn()` and its SandboxProcess (pid, streams, write/end, kill, wait, connect), and
// `sb.processes()`; `sb.terminal()` and its Terminal (a pty of the box's own devpts: write,
// onData, iteration, resize, kill, wait). Everything through the public API, on real boxes;
// what must be gone is looked for in the host's /proc.

const http = require('http');
const { opts, sharedSandbox, uniqueName, hostProcessesMatching, waitFor, makeTempDir, startNodeUntilReady } = require('../helpers');
const { Sandbox, SandboxError, SandboxProcess, Terminal } = require('../..');

const sb = sharedSandbox({ env: { FROM_SANDBOX: 'sb' } });

/** Everything a stream yields, as one string. */
async function collect(stream) {
  let s = '';
  for await (const c of stream) s += c.toString('utf8');
  return s;
}

/** The lines a stream yields, one at a time (chunks may split or join them). */
function lines(stream) {
  const it = stream[Symbol.asyncIterator]();
  let buf = '';
  return async () => {
    for (;;) {
      const i = buf.indexOf('\n');
      if (i >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        return line;
      }
      const { value, done } = await it.next();
      if (done) return null;
      buf += value.toString('utf8');
    }
  };
}

/** Resolves once `text` (a string or RegExp) has appeared in a terminal's output so far. */
function expectOutput(term) {
  let seen = '';
  term.onData((d) => {
    seen += d.toString('utf8');
  });
  return {
    until: async (text, ms = 20000) => {
      const hit = () => (typeof text === 'string' ? seen.includes(text) : text.test(seen));
      await waitFor(hit, ms, 20);
      if (!hit()) throw new Error(`terminal never showed ${text}; it showed ${JSON.stringify(seen)}`);
      return seen;
    },
    get seen() {
      return seen;
    },
    reset() {
      seen = '';
    },
  };
}

/** Connects to `port` in `proc`'s box once something listens there. */
async function connectWhenUp(proc, port) {
  let last;
  for (let i = 0; i < 200; i++) {
    try {
      return await proc.connect(port);
    } catch (e) {
      last = e;
      expect(e).toBeInstanceOf(SandboxError);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw last;
}

/** One HTTP GET over an already connected socket; resolves with status and body. */
function getOver(socket, path = '/') {
  return new Promise((resolve, reject) => {
    const req = http.request({ createConnection: () => socket, path, headers: { Connection: 'close' } }, (res) => {
      let body = '';
      res.on('data', (c) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('spawn()', () => {
  test('stdin written as it goes and then ended; stdout streams in order; wait() gives the result', async () => {
    const chunks = [];
    const p = await sb.spawn(['python3', '-u', '-c', 'import sys\nprint("ready")\nfor line in sys.stdin: print("got", line.strip())\nprint("eof")'], {
      onStdout: (c) => chunks.push(c.toString()),
    });
    expect(p).toBeInstanceOf(SandboxProcess);
    expect(Number.isInteger(p.pid) && p.pid > 1).toBe(true);
    expect(p.running).toBe(true);
    const out = collect(p.stdout);
    await p.write('one\n');
    await p.write(Buffer.from('two\n'));
    await p.end();
    const r = await p.wait();
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('ready\ngot one\ngot two\neof\n');
    expect(await out).toBe(r.stdout);
    expect(chunks.join('')).toBe(r.stdout);
    expect(p.running).toBe(false);
    await expect(p.write('late\n')).rejects.toThrow(SandboxError);
  });

  test.each([
    ['python3', ['python3', '-c', 'import os; print(os.environ["ONLY"], os.environ["FROM_SANDBOX"], os.getcwd())']],
    ['bash', ['bash', '-c', 'echo "$ONLY $FROM_SANDBOX $(pwd)"']],
    ['node', ['node', '-e', 'console.log(process.env.ONLY, process.env.FROM_SANDBOX, process.cwd())']],
  ])('%s: env over the Sandbox\'s and a workspace-relative cwd', async (_name, argv) => {
    await sb.writeFile('spawned/here/.keep', '');
    const p = await sb.spawn(argv, { env: { ONLY: 'proc' }, cwd: 'spawned/here' });
    const r = await p.wait();
    expect(r.codeStderr).toBe('');
    expect(r.stdout).toBe('proc sb /workspace/spawned/here\n');
  });

  test('a background http.server, fetched through connect() while other calls run', async () => {
    const marker = uniqueName('httpsrv');
    await sb.writeFile(`${marker}.txt`, 'served from the box');
    const server = await sb.spawn(['python3', '-m', 'http.server', '8765', '--bind', '127.0.0.1']);
    try {
      const [first, other] = await Promise.all([
        connectWhenUp(server, 8765).then((s) => getOver(s, `/${marker}.txt`)),
        sb.run(['sh', '-c', 'echo meanwhile']),
      ]);
      expect(first).toEqual({ status: 200, body: 'served from the box' });
      expect(other.stdout).toBe('meanwhile\n');
      // Several connections, one after the other and at once.
      const many = await Promise.all([1, 2, 3].map(() => server.connect(8765).then((s) => getOver(s, `/${marker}.txt`))));
      expect(many.map((x) => x.status)).toEqual([200, 200, 200]);
      // The server is the box's: no call's box sees it, and nothing listens on the host.
      const probe = await sb.runCode('import socket\ntry:\n  socket.create_connection(("127.0.0.1", 8765), 2)\n  print("reached")\nexcept OSError as e:\n  print("refused")');
      expect(probe.stdout).toBe('refused\n');
      await expect(new Promise((resolve, reject) => {
        const s = require('net').connect(8765, '127.0.0.1', () => resolve('connected'));
        s.on('error', reject);
      })).rejects.toThrow(/ECONNREFUSED/);
    } finally {
      await server.kill();
    }
    const r = await server.wait();
    expect(r.signal).toBe('SIGTERM');
  });

  test('connect(): a bad port is a SandboxError; a port nobody listens on rejects naming it; so does an ended process', async () => {
    const p = await sb.spawn(['sleep', '30']);
    for (const bad of [0, 65536, -1, 1.5, '80', null, undefined]) {
      await expect(p.connect(bad)).rejects.toThrow(/the port must be a whole number from 1 to 65535/);
    }
    await expect(p.connect(9)).rejects.toThrow(/nothing in the box accepts connections on 127\.0\.0\.1:9/);
    await p.kill('SIGKILL');
    await expect(p.connect(9)).rejects.toThrow(/has ended/);
  });

  test('connect(port, { waitS }): waits for a server that listens late; ERR_CONNECTION_REFUSED when none does; the end stops the wait', async () => {
    const go = `go-${uniqueName('c')}`;
    const server = await sb.spawn(['python3', '-u', '-c', [
      'import os, socket, time',
      `while not os.path.exists(${JSON.stringify(go)}): time.sleep(0.02)`,
      's = socket.socket()',
      's.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)',
      "s.bind(('127.0.0.1', 8123)); s.listen()",
      'c, _ = s.accept(); c.sendall(b"late hello"); c.close()',
      'time.sleep(300)', // the box outlives the connector's answer, which it would race
    ].join('\n')]);
    try {
      // Nothing listens yet: refused at once without waitS, with its own code and a hint.
      const refused = await server.connect(8123).catch((e) => e);
      expect(refused).toBeInstanceOf(SandboxError);
      expect(refused.code).toBe('ERR_CONNECTION_REFUSED');
      expect(refused.message).toMatch(/nothing in the box accepts connections on 127\.0\.0\.1:8123.*waitS/);
      let settled = false;
      const waiting = server.connect(8123, { waitS: 120 }).finally(() => { settled = true; });
      await new Promise((r) => setTimeout(r, 300));
      expect(settled).toBe(false); // still trying: nothing listens until the go file
      await sb.writeFile(go, '');
      const socket = await waiting;
      let got = '';
      for await (const chunk of socket) got += chunk;
      expect(got).toBe('late hello');
    } finally {
      await server.kill('SIGKILL');
    }
    // A wait that nothing ends but the process's end.
    const p = await sb.spawn(['sleep', '60']);
    const waiting = p.connect(9, { waitS: 3600 }).catch((e) => e);
    await p.kill('SIGKILL');
    const err = await waiting;
    expect(err).toBeInstanceOf(SandboxError);
    expect(err.message).toMatch(/ended while connect\(\) waited for 127\.0\.0\.1:9|has ended|connector is gone/);
    // A bad waitS is refused before anything is asked of the box.
    const q = await sb.spawn(['sleep', '30']);
    try {
      for (const bad of [-1, 3601, NaN, Infinity, '5', {}]) {
        const e = await q.connect(80, { waitS: bad }).catch((x) => x);
        expect(e).toBeInstanceOf(SandboxError);
        expect(e.code).toBe('ERR_INVALID_OPTION');
        expect(e.message).toMatch(/waitS must be a number/);
      }
    } finally {
      await q.kill('SIGKILL');
    }
  });

  test('kill(): SIGTERM by default; a named signal reaches the process\'s handler; SIGKILL ends the box; unknown names are refused', async () => {
    const p = await sb.spawn(['python3', '-u', '-c', [
      'import signal, sys, time',
      'def on(sig, _): print("caught", signal.Signals(sig).name)',
      'signal.signal(signal.SIGUSR1, on)',
      'signal.signal(signal.SIGINT, on)',
      'print("up")',
      'while True: time.sleep(0.05)',
    ].join('\n')]);
    const next = lines(p.stdout);
    expect(await next()).toBe('up');
    await p.kill('SIGUSR1');
    expect(await next()).toBe('caught SIGUSR1');
    await p.kill('INT');
    expect(await next()).toBe('caught SIGINT');
    await expect(p.kill('SIGFOO')).rejects.toThrow(/unknown signal "SIGFOO"; use one of SIGHUP/);
    await expect(p.kill(9)).rejects.toThrow(SandboxError);
    expect(p.running).toBe(true);
    await p.kill();
    const r = await p.wait();
    expect(r.signal).toBe('SIGTERM');
    expect(r.exitCode).toBe(143);
    // Killing an ended process is a no-op.
    await p.kill();
  });

  test('kill() without a signal ends a process that ignores SIGTERM, with its box and every process in it', async () => {
    const marker = uniqueName('stubborn');
    const p = await sb.spawn(['sh', '-c', `trap "" TERM; (sleep 300) & echo ignoring; sleep 300; : ${marker}`, marker]);
    // Only once the shell ignores SIGTERM (a SIGTERM before the trap would simply end it).
    expect(await lines(p.stdout)()).toBe('ignoring');
    expect(hostProcessesMatching(marker).length).toBeGreaterThanOrEqual(1);
    await p.kill();
    expect(p.running).toBe(false);
    const r = await p.wait();
    expect(r.fault && r.fault.type).toBe('killed');
    expect(r.fault.message).toMatch(/^kill\(\) ended the process/);
    expect(hostProcessesMatching(marker)).toEqual([]);
  });

  test('timeoutS ends it with a timeout fault; without one it outlives a call\'s timeout', async () => {
    const short = await sb.spawn(['sleep', '60'], { timeoutS: 1 });
    const r = await short.wait();
    expect(r.fault && r.fault.type).toBe('timeout');
    const s = new Sandbox(opts({ timeoutS: 1 }));
    await s.open();
    try {
      const long = await s.spawn(['sh', '-c', 'sleep 2; echo lived']);
      expect((await long.wait()).stdout).toBe('lived\n');
    } finally {
      await s.close();
    }
  });

  test('processes() lists the live ones', async () => {
    const a = await sb.spawn(['sleep', '30']);
    const b = await sb.spawn(['true']);
    await b.wait();
    expect(sb.processes()).toContain(a);
    expect(sb.processes()).not.toContain(b);
    await a.kill('SIGKILL');
    await a.wait();
    expect(sb.processes()).not.toContain(a);
  });

  test('signal: already aborted starts nothing; aborted while running ends the box and wait() rejects with the reason', async () => {
    const name = uniqueName('spawnnever');
    await expect(sb.spawn(['touch', name], { signal: AbortSignal.abort() })).rejects.toHaveProperty('name', 'AbortError');
    await sb.run(['true']);
    expect((await sb.listFiles()).map((f) => f.path)).not.toContain(name);

    const marker = uniqueName('spawnabort');
    const ac = new AbortController();
    const reason = new Error('enough');
    const p = await sb.spawn(['sh', '-c', `sleep 300 & sleep 300; : ${marker}`, marker], { signal: ac.signal });
    expect(await waitFor(() => hostProcessesMatching(marker).length >= 1, 10000)).toBe(true);
    ac.abort(reason);
    await expect(p.wait()).rejects.toBe(reason);
    expect(hostProcessesMatching(marker)).toEqual([]);
  });

  test('output past maxOutputBytes is cut per stream: the streams deliver no more, the result says so, the process runs on', async () => {
    const s = new Sandbox(opts({ maxOutputBytes: 1000 }));
    await s.open();
    try {
      const p = await s.spawn(['python3', '-c', 'import sys\nsys.stdout.write("o" * 5000)\nsys.stdout.flush()\nsys.stderr.write("e" * 10)\nprint("\\nstill running", file=sys.stderr)']);
      const [out, err] = await Promise.all([collect(p.stdout), collect(p.stderr)]);
      const r = await p.wait();
      expect(out).toBe('o'.repeat(1000));
      expect(r.stdout).toBe(out);
      expect(r.stdoutTruncated).toBe(true);
      expect(r.stderrTruncated).toBe(false);
      // kern's own lines (a best-effort cap's warning, rootless on cgroup v1) come first.
      expect(err.endsWith('eeeeeeeeee\nstill running\n')).toBe(true);
      expect(r.codeStderr).toBe('eeeeeeeeee\nstill running\n');
    } finally {
      await s.close();
    }
  });

  test('bad input is a SandboxError before any box', async () => {
    await expect(sb.spawn('python3 -m http.server')).rejects.toThrow(/spawn\(\) takes an argv array/);
    await expect(sb.spawn([])).rejects.toThrow(/non-empty argv/);
    await expect(sb.spawn(['true'], { cols: 80 })).rejects.toThrow(/unknown per-call option `cols`/);
    await expect(sb.spawn(['true'], { env: { 'A=B': '1' } })).rejects.toThrow(/option `env`/);
    await expect(sb.spawn(['true'], { cwd: '../..' })).rejects.toThrow(/leads out of the workspace/);
    // A cwd the box can't enter is the caller's mistake, named as such (not a runtime error),
    // however soon the box ends.
    for (const cwd of ['no/such/dir', '/no/such/dir']) {
      for (const start of [() => sb.spawn(['true'], { cwd }), () => sb.terminal({ cwd })]) {
        const e = await start().then(() => null, (err) => err);
        expect(e).toBeInstanceOf(SandboxError);
        expect(e.code).toBe('ERR_INVALID_OPTION');
        expect(e.message).toMatch(/option `cwd`: .* does not exist in the/);
      }
    }
    await expect(sb.spawn(['true'], { timeoutS: -1 })).rejects.toThrow(/timeoutS/);
    const p = await sb.spawn(['cat']);
    await expect(p.write(42)).rejects.toThrow(/data must be a string or a Buffer/);
    await p.end();
    await expect(p.write('x')).rejects.toThrow(/write\(\) after end\(\)/);
    expect((await p.wait()).exitCode).toBe(0);
  });

  test('write() to a process that closed its stdin rejects at once, however much is written', async () => {
    const p = await sb.spawn(['sh', '-c', 'exec 0<&-; echo closed; sleep 30']);
    expect(await lines(p.stdout)()).toBe('closed');
    // More than a pipe holds: with a copy of the pipe's read end left outside the box, this
    // would fill the pipe and wait for the box's end.
    await expect(p.write(Buffer.alloc(4 << 20))).rejects.toThrow(/nothing reads the process's input any more/);
    expect(p.running).toBe(true);
    await p.kill('SIGKILL');
  });

  test('the Sandbox\'s callbacks get a process\'s output unless it names its own; a throwing callback becomes a note', async () => {
    const seen = [];
    const s = new Sandbox(opts({ onStdout: (c) => seen.push(`session:${c}`) }));
    await s.open();
    try {
      await (await s.spawn(['echo', 'one'])).wait();
      await (await s.spawn(['echo', 'two'], { onStdout: (c) => seen.push(`own:${c}`) })).wait();
      await (await s.spawn(['echo', 'three'], { onStdout: null })).wait();
      expect(seen).toEqual(['session:one\n', 'own:two\n']);
      const t = await s.terminal({ argv: ['sh', '-c', 'read x; echo "got $x"'] });
      let after = '';
      t.onData(() => {
        throw new Error('listener broke');
      });
      t.onData((d) => (after += d));
      await t.write('y\n');
      const r = await t.wait();
      expect(after).toContain('got y');
      expect(r.runtimeNotes.join('\n')).toMatch(/onData threw listener broke/);
    } finally {
      await s.close();
    }
  });

  test('a program that is not there ends with 127, as run() does', async () => {
    const p = await sb.spawn(['no-such-program-here']);
    const r = await p.wait();
    expect(r.exitCode).toBe(127);
  });

  test('close() ends every process and terminal of the Sandbox, with their boxes', async () => {
    const marker = uniqueName('closeproc');
    const s = new Sandbox(opts());
    await s.open();
    const p = await s.spawn(['sh', '-c', `sleep 300; : ${marker}`, marker]);
    const t = await s.terminal({ argv: ['sh', '-c', `sleep 300; : ${marker}`, marker] });
    await waitFor(() => hostProcessesMatching(marker).length >= 2, 10000);
    expect(hostProcessesMatching(marker).length).toBeGreaterThanOrEqual(2);
    await s.close();
    expect(hostProcessesMatching(marker)).toEqual([]);
    expect((await p.wait()).fault.type).toBe('killed');
    expect((await t.wait()).fault.type).toBe('killed');
  });
});

describe('an ended process lets go of what it held', () => {
  /** This process's open descriptors, as what they are (`pipe:`, `socket:`, `/dev/ptmx`...). */
  const fdLinks = () => require('fs').readdirSync('/proc/self/fd').map((f) => {
    try {
      return require('fs').readlinkSync(`/proc/self/fd/${f}`).replace(/\[\d+\]$/, '');
    } catch {
      return 'gone';
    }
  }).filter((l) => l !== 'gone').sort();

  test('its stdin pipe, connector line and terminal master are closed once wait() has its result, while the objects are still held', async () => {
    const own = await new Sandbox(opts()).open();
    try {
      await own.run(['true']); // the session's own descriptors (spares, runtime) made first
      const before = fdLinks();
      const held = [];
      for (let i = 0; i < 3; i += 1) {
        const p = await own.spawn(['true']);
        const t = await own.terminal({ argv: ['true'] });
        expect((await p.wait()).exitCode).toBe(0);
        expect((await t.wait()).exitCode).toBe(0);
        held.push(p, t); // not collected: only their end may close what they held
      }
      const ptmx = (l) => l.filter((x) => x.endsWith('ptmx')).length;
      await waitFor(() => fdLinks().length <= before.length && ptmx(fdLinks()) <= ptmx(before), 5000);
      expect({ ptmx: ptmx(fdLinks()), n: fdLinks().length <= before.length }).toEqual({ ptmx: ptmx(before), n: true });
      // What it still answers after its end.
      const [p, t] = held;
      await expect(p.connect(80)).rejects.toThrow(/connector is gone/);
      await expect(p.write('x')).rejects.toThrow(SandboxError);
      await expect(t.write('x')).rejects.toThrow(/the terminal has ended/);
      await t.resize(100, 30);
    } finally {
      await own.close();
    }
  });

  test('snapshot() right after wait() finds no process still writing', async () => {
    const own = await new Sandbox(opts()).open();
    const dir = makeTempDir('kern-snap-');
    try {
      for (let i = 0; i < 20; i += 1) {
        const p = await own.spawn(['sh', '-c', `echo ${i} > f${i}`]);
        expect((await p.wait()).exitCode).toBe(0);
        own.snapshot(`${dir}/s.tgz`);
      }
    } finally {
      await own.close();
      require('fs').rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the owner goes, the boxes go', () => {
  test('a host process killed with its background process and terminal running takes their boxes with it', async () => {
    const marker = uniqueName('ownerdies');
    const script = `
      const { Sandbox } = require(${JSON.stringify(require.resolve('../..'))});
      (async () => {
        const sb = await new Sandbox(${JSON.stringify(opts())}).open();
        await sb.spawn(['sh', '-c', 'sleep 300; : ${marker}', '${marker}']);
        await sb.terminal({ argv: ['sh', '-c', 'sleep 300; : ${marker}', '${marker}'] });
        console.log('ready');
        await new Promise(() => {});
      })();`;
    const { child, ready, err } = await startNodeUntilReady(script);
    expect({ ready, err }).toEqual({ ready: true, err: '' });
    // spawn() and terminal() resolve when the box is about to exec its program: its argv (and
    // the marker) may come a moment after.
    expect(await waitFor(() => hostProcessesMatching(marker).length >= 2, 10000)).toBe(true);
    child.kill('SIGKILL');
    await new Promise((r) => child.on('exit', r));
    // Polled with a generous bound, not timed: kern sees its lifeline close and ends the box.
    await waitFor(() => hostProcessesMatching(marker).length === 0, 30000, 100);
    expect(hostProcessesMatching(marker)).toEqual([]);
  });
});

describe('in a persist Sandbox', () => {
  test('spawn() and terminal() start fresh boxes of its posture on its workspace, not in the resident box', async () => {
    const s = new Sandbox(opts({ persist: true, name: uniqueName('procpersist'), persistTtlS: 60, workspace: makeTempDir() }));
    await s.open();
    try {
      await s.writeFile('shared.txt', 'same workspace');
      const resident = await s.run(['sh', '-c', 'readlink /proc/1/ns/pid']);
      const p = await s.spawn(['sh', '-c', 'cat shared.txt; echo; readlink /proc/1/ns/pid']);
      const r = await p.wait();
      const [text, ns] = r.stdout.trim().split('\n');
      expect(text).toBe('same workspace');
      expect(ns).not.toBe(resident.stdout.trim());
      const t = await s.terminal({ argv: ['cat', 'shared.txt'] });
      expect((await t.wait()).stdout).toBe('same workspace');
    } finally {
      await s.destroy();
      await s.close();
    }
  });
});

describe('terminal()', () => {
  test('a bash on a terminal of the box\'s own: a command typed, isatty, the size, resize and SIGWINCH, Ctrl-C, exit code', async () => {
    const t = await sb.terminal({ cols: 100, rows: 30 });
    expect(t).toBeInstanceOf(Terminal);
    const out = expectOutput(t);
    await t.write('echo $((6*7))-marker\n');
    await out.until('42-marker');
    await t.write('tty; stty size; python3 -c "import os; print(\'isatty\', os.isatty(0), os.isatty(1))"\n');
    await out.until('isatty True True');
    expect(out.seen).toMatch(/\/dev\/pts\/0\r\n30 100\r\n/);
    // The foreground program gets SIGWINCH and the new size.
    // The handler writes with os.write: a print() in it can land while the main thread's own
    // print still holds stdout's buffer, and raise "reentrant call" instead of printing.
    await t.write('python3 -c "import os, signal, time; signal.signal(signal.SIGWINCH, lambda *a: os.write(1, (\'winched %d %d\\\\n\' % tuple(os.get_terminal_size())).encode())); print(\'waiting\', flush=True); time.sleep(100)"\n');
    await out.until('waiting\r\n');
    t.resize(120, 40);
    await out.until('winched 120 40');
    // Ctrl-C reaches the foreground program; the shell lives on, at the new size.
    await t.write('\x03');
    await out.until('KeyboardInterrupt');
    await t.write('stty size; echo after-$((1+1))\n');
    await out.until(/[\r\n]40 120\r\nafter-2/);
    // And a `sleep` (once it is the foreground job: sh execs it right after saying so).
    await t.write('sh -c "echo sleeping; exec sleep 100"\n');
    await out.until('sleeping\r\n');
    await t.write('\x03');
    await t.write('echo status-$?\n');
    await out.until('status-130');
    await t.write('exit 3\n');
    const r = await t.wait();
    expect(r.exitCode).toBe(3);
    expect(r.stdout).toContain('42-marker');
  });

  test('argv, env, cwd; the iterator yields the output and ends with the program; TERM is set', async () => {
    await sb.writeFile('termdir/.keep', '');
    const t = await sb.terminal({ argv: ['sh', '-c', 'echo "$TERM $ONLY $(pwd)"'], env: { ONLY: 'term' }, cwd: 'termdir' });
    let s = '';
    for await (const c of t) s += c;
    expect(s).toBe('xterm-256color term /workspace/termdir\r\n');
    expect((await t.wait()).exitCode).toBe(0);
  });

  test('a TERM in the Sandbox\'s env is kept', async () => {
    const s = new Sandbox(opts({ env: { TERM: 'dumb' } }));
    await s.open();
    try {
      const t = await s.terminal({ argv: ['sh', '-c', 'echo "term=$TERM"'] });
      expect((await t.wait()).stdout).toBe('term=dumb\r\n');
    } finally {
      await s.close();
    }
  });

  test('^D typed: cat sees end of input', async () => {
    const t = await sb.terminal({ argv: ['cat'] });
    const out = expectOutput(t);
    await t.write('typed\n');
    await out.until('typed\r\ntyped\r\n');
    await t.write('\x04');
    expect((await t.wait()).exitCode).toBe(0);
  });

  test('kill(): SIGTERM to a sleeping program; a default kill ends it', async () => {
    const t = await sb.terminal({ argv: ['sleep', '300'] });
    await t.kill();
    const r = await t.wait();
    expect(r.signal).toBe('SIGTERM');
  });

  test('bad sizes and options are SandboxErrors before any box; resize() checks too', async () => {
    await expect(sb.terminal({ cols: 0 })).rejects.toThrow(/option `cols` must be a whole number of character cells from 1 to 1000, got 0/);
    await expect(sb.terminal({ rows: 1001 })).rejects.toThrow(/option `rows`/);
    await expect(sb.terminal({ cols: 'wide' })).rejects.toThrow(/option `cols`/);
    await expect(sb.terminal({ shell: 'bash' })).rejects.toThrow(/unknown terminal\(\) option `shell`/);
    await expect(sb.terminal({ argv: 'bash' })).rejects.toThrow(/option `argv` must be an array/);
    const t = await sb.terminal({ argv: ['sleep', '30'] });
    expect(() => t.resize(0, 10)).toThrow(/option `cols`/);
    expect(() => t.resize(80)).toThrow(/needs both/);
    expect(() => t.onData('x')).toThrow(/onData\(cb\) takes a function/);
    await t.kill('SIGKILL');
    await t.wait();
  });
});
