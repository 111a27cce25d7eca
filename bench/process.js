#!/usr/bin/env node
// Steered processes (issue 19): how long an abort takes to leave nothing of a box on the host,
// `spawn()` to its first byte, a `connect()` round trip to a server in a box, and a keystroke's
// echo on `terminal()`, each side by side with the same thing done on the host, in ONE run on one
// machine: medians over N iterations.
//
//   npm run bench:process                  # N = 30
//   BENCH_N=100 npm run bench:process      # tighter numbers
//
// Needs `npm run build` and the test rootfs (scripts/build-test-rootfs.sh; KERN_TEST_ROOTFS). Writes
// its section between the bench-process markers of BENCHMARKS.md and prints it. Measurements only:
// nothing passes or fails on a number.
//
// Method: every time is process.hrtime.bigint() in this process, and every case checks what it
// got (the output, the response, the echo), so a broken case stops the run instead of looking
// fast. Cases run interleaved round-robin (one iteration of each, then the next) with a 100 ms
// pause outside the timing before each, after BENCH_WARMUP untimed iterations.
// - abort: `sb.run(['sh', '-c', 'echo up; exec sleep 30.<unique>'], { signal })`; once `up` has
//   come and the sleep is found on the host, the box's processes are noted (the sleep, its
//   ancestors up to this process, and every descendant of the kern monitor among them), then
//   `abort()`. Two times from the abort: the promise rejected, and "gone": rejected AND none of
//   those pids is left in /proc (a zombie counts as left), polled every millisecond.
//   Host: the same command by child_process.spawn with the same `signal`; rejected is its 'error'
//   event, gone as above.
// - spawn to first byte: from the call to the first stdout chunk of `sb.spawn(['echo', 'hi'])`
//   and of `sb.spawn(['python3', '-c', 'print(1)'])` (onStdout); also when `spawn()` resolved.
//   Host: child_process.spawn of the same argv, to its first 'data' (python: /usr/bin/python3,
//   which is the image's Debian python 3.11 on a Debian host).
// - connect() round trip: `python3 -m http.server` spawned in a box once (untimed); each iteration
//   `await p.connect(port)`, `GET / HTTP/1.0`, the whole response (HTTP/1.0: the server closes).
//   Published: the same GET through `p.publish(port)`'s host port (`net.connect`, the token in the
//   URL): the proxy checks and strips it, and dials the box by its connector per connection.
//   Host: the same server started on the host on a free 127.0.0.1 port, `net.connect` and the
//   same GET. Both serve an empty directory. Also the connection alone (connect() resolved /
//   'connect' event).
// - keystroke echo: `sb.terminal({ argv: ['bash', '--norc', '--noprofile'] })` at its prompt;
//   write one `x`, time until an output chunk holds it; then DEL and its `\b` (untimed). Host: bash
//   on a pty of the host, timed the same way by a python helper with the pty in its own hands (what
//   the pty and bash's readline cost without kern or Node in the path), and `cat` on pipes from
//   Node (a round trip through a child's pipes from this event loop).
'use strict';

const fs = require('fs');
const os = require('os');
const net = require('net');
const path = require('path');
const { spawn } = require('child_process');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, percentile, median, writeSection, requireBuilt, readText, readProcs, otherWork, closeOnExit } = require('./common');

const die = dieFor('bench-process');
const N = positiveInt(process.env.BENCH_N, 30, 'BENCH_N', die);
const WARMUP = positiveInt(process.env.BENCH_WARMUP, 3, 'BENCH_WARMUP', die);
const START = '<!-- bench-process:start -->';
const END = '<!-- bench-process:end -->';
// The host's python for the host cases: the system one (a `python3` on PATH may be a version
// manager's shim, a shell script that costs more than the interpreter).
const HOST_PY = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => process.hrtime.bigint();
const msSince = (t0, t1 = now()) => Number(t1 - t0) / 1e6;

/** Resolves once `pred()` holds, checked every millisecond (a poll that leaves the CPUs to the
 * work it waits for); rejects after `ms`. */
async function until(pred, what, ms = 30000) {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`waited ${ms} ms for ${what}`);
    await sleep(1);
  }
}

/** A stream's text as it comes; `wait(pred)` resolves with the time of the chunk that made
 * `pred(text)` true, taken as that chunk arrives. */
function collector() {
  let text = '';
  let waiter = null;
  return {
    push: (c) => {
      text += c.toString('latin1');
      if (waiter && waiter.pred(text)) {
        const w = waiter;
        waiter = null;
        clearTimeout(w.timer);
        w.resolve(now());
      }
    },
    text: () => text,
    reset: () => {
      text = '';
    },
    wait: (pred, what, ms = 10000) =>
      new Promise((resolve, reject) => {
        if (pred(text)) return resolve(now());
        const timer = setTimeout(() => reject(new Error(`waited ${ms} ms for ${what}: ${JSON.stringify(text.slice(-200))}`)), ms);
        waiter = { pred, resolve, timer };
      }),
  };
}

// ---- abort -------------------------------------------------------------------------------------

/** The pid whose cmdline holds `marker`, its ancestors below this process and the descendants of
 * the topmost of them: what `ps` shows of that command's box (or of a host child). */
function treeOf(marker) {
  const procs = readProcs();
  let leaf = null;
  for (const pid of procs.keys()) {
    const cmd = readText(`/proc/${pid}/cmdline`);
    if (cmd && cmd.includes(marker)) leaf = pid;
  }
  if (leaf === null) return null;
  const chain = [];
  for (let p = leaf, hops = 0; p && p !== process.pid && hops < 64; hops++) {
    chain.push(p);
    p = procs.get(p) ? procs.get(p).ppid : 0;
  }
  const top = chain[chain.length - 1];
  const under = (pid) => {
    for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
      if (p === top) return true;
      p = procs.get(p) ? procs.get(p).ppid : 0;
    }
    return false;
  };
  return [...new Set([...chain, ...[...procs.keys()].filter(under)])];
}

const alive = (pid) => {
  const st = readText(`/proc/${pid}/stat`);
  return st !== null && st.slice(st.lastIndexOf(')') + 2)[0] !== 'X';
};

/** Starts `start(signal, onUp)`, waits for `up` and the tree, aborts; the two times. */
async function abortCase(start) {
  const marker = `30.${String(process.hrtime.bigint() % 1000000000n).padStart(9, '0')}`;
  const ac = new AbortController();
  let up = false;
  let rejectedAt = null;
  const done = start(marker, ac.signal, () => {
    up = true;
  }).then(
    () => {
      throw new Error('the aborted command resolved');
    },
    (e) => {
      rejectedAt = now();
      if (e.name !== 'AbortError') throw e;
    }
  );
  await until(() => up, 'its `up`');
  let pids = null;
  await until(() => (pids = treeOf(marker)) !== null, 'the sleep on the host', 10000);
  const t0 = now();
  ac.abort();
  await until(() => rejectedAt !== null && !pids.some(alive), 'the tree to go', 30000);
  const goneAt = now();
  await done;
  return { rejected: msSince(t0, rejectedAt), gone: msSince(t0, goneAt), pids: pids.length };
}

// ---- first byte --------------------------------------------------------------------------------

async function firstByteKern(sb, argv, expect) {
  let first = null;
  const out = collector();
  const t0 = now();
  const p = await sb.spawn(argv, {
    onStdout: (c) => {
      if (first === null) first = now();
      out.push(c);
    },
  });
  const resolved = now();
  await until(() => first !== null, 'the first byte');
  const r = await p.wait();
  if (r.exitCode !== 0 || r.fault || out.text() !== expect) throw new Error(`spawn ${argv.join(' ')}: ${JSON.stringify({ exitCode: r.exitCode, fault: r.fault, stdout: out.text() })}`);
  return { first: msSince(t0, first), resolved: msSince(t0, resolved) };
}

function firstByteHost(argv, expect) {
  return new Promise((resolve, reject) => {
    let first = null;
    let text = '';
    const t0 = now();
    const c = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
    c.stdout.on('data', (d) => {
      if (first === null) first = now();
      text += d;
    });
    c.on('error', reject);
    c.on('close', (code) => {
      if (code !== 0 || text !== expect) reject(new Error(`${argv.join(' ')}: exit ${code}, ${JSON.stringify(text)}`));
      else resolve({ first: msSince(t0, first) });
    });
  });
}

// ---- connect -----------------------------------------------------------------------------------

/** `GET /` over `sock` (connected, or connecting); resolves with the response once it closes. */
function get(sock, target = '/') {
  return new Promise((resolve, reject) => {
    const chunks = [];
    sock.on('data', (d) => chunks.push(d));
    sock.on('end', () => resolve(Buffer.concat(chunks).toString('latin1')));
    sock.on('error', reject);
    sock.write(`GET ${target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n`);
  });
}

function checkResponse(res, where) {
  if (!res.startsWith('HTTP/1.0 200') || !res.includes('Directory listing')) throw new Error(`${where}: ${JSON.stringify(res.slice(0, 200))}`);
}

async function connectKern(p, port) {
  const t0 = now();
  const sock = await p.connect(port);
  const connected = now();
  const res = await get(sock);
  const t1 = now();
  sock.destroy();
  checkResponse(res, 'the box');
  return { connect: msSince(t0, connected), get: msSince(t0, t1) };
}

/** The same GET to a host port: the host's own server, or (`token`) a published box's. */
async function connectHost(port, token) {
  const t0 = now();
  const sock = net.connect(port, '127.0.0.1');
  let connected = null;
  sock.once('connect', () => {
    connected = now();
  });
  const res = await get(sock, token ? `/?kern_token=${token}` : '/');
  const t1 = now();
  sock.destroy();
  checkResponse(res, token ? 'the published port' : 'the host');
  return { connect: msSince(t0, connected), get: msSince(t0, t1) };
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// ---- keystroke echo ----------------------------------------------------------------------------

/** One keystroke written with `write`, its echo collected by `out`; on a terminal (`erase`), DEL
 * and its `\b` after it keep bash's line empty. */
async function keystroke(write, out, erase = true) {
  out.reset();
  const t0 = now();
  const echoed = out.wait((t) => t.includes('x'), 'the echo');
  await write('x');
  const ms = msSince(t0, await echoed);
  if (!erase) return { echo: ms };
  out.reset();
  const erased = out.wait((t) => t.includes('\b'), 'the erase');
  await write('\x7f');
  await erased;
  return { echo: ms };
}

// The host baseline: bash on a host pty, timed by python with the pty's master in its own hands.
const PTY_HELPER = String.raw`
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvpe("bash", ["bash", "--norc", "--noprofile"], dict(os.environ, PS1="$ ", TERM="xterm-256color"))
def read_until(token):
    buf = b""
    end = time.monotonic() + 10
    while token not in buf:
        r, _, _ = select.select([fd], [], [], max(0, end - time.monotonic()))
        if not r: sys.exit("timed out waiting for %r, got %r" % (token, buf))
        buf += os.read(fd, 4096)
read_until(b"$ ")
print("ready", flush=True)
for _ in sys.stdin:
    t0 = time.perf_counter()
    os.write(fd, b"x")
    read_until(b"x")
    ms = (time.perf_counter() - t0) * 1000
    os.write(fd, b"\x7f")
    read_until(b"\x08")
    print(ms, flush=True)
`;

/** A child driven one line at a time: `ask()` writes a line and resolves with the next line out. */
function lineChild(argv) {
  const c = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
  let buf = '';
  const waiting = [];
  c.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiting.shift();
      if (w) w(line);
    }
  });
  const next = () => new Promise((r) => waiting.push(r));
  return {
    child: c,
    next,
    ask: (line) => {
      const p = next();
      c.stdin.write(`${line}\n`);
      return p;
    },
  };
}

// ---- the run -----------------------------------------------------------------------------------

async function main() {
  if (!fs.existsSync(path.join(ROOTFS, 'usr/bin/python3'))) die(`test rootfs not found at ${ROOTFS}; build it with scripts/build-test-rootfs.sh`);
  const { Sandbox } = requireBuilt(REPO, KERN, die);
  const { opened, closeAll } = closeOnExit((m) => console.error(`bench-process: ${m}`));
  const { sample: sampleOthers, note: othersNote } = otherWork();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-process-'));
  const children = [];
  const sb = await new Sandbox({ image: ROOTFS }).open();
  opened.push(sb);

  // The servers and terminals the round-trip cases reuse (started untimed).
  const PORT = 8000;
  const server = await sb.spawn(['python3', '-m', 'http.server', String(PORT), '--bind', '127.0.0.1', '--directory', '/tmp']);
  for (let i = 0; ; i++) {
    try {
      (await server.connect(PORT)).destroy();
      break;
    } catch (e) {
      if (i > 200) throw e;
      await sleep(50);
    }
  }
  const published = await server.publish(PORT);
  const hostPort = await freePort();
  const hostDir = fs.mkdtempSync(path.join(scratch, 'www-'));
  const hostServer = spawn(HOST_PY, ['-m', 'http.server', String(hostPort), '--bind', '127.0.0.1', '--directory', hostDir], { stdio: 'ignore' });
  children.push(hostServer);
  for (let i = 0; ; i++) {
    const ok = await new Promise((r) => net.connect(hostPort, '127.0.0.1', () => r(true)).on('error', () => r(false)));
    if (ok) break;
    if (i > 200) die('the host http.server did not start');
    await sleep(50);
  }

  const term = await sb.terminal({ argv: ['bash', '--norc', '--noprofile'], env: { PS1: '$ ' } });
  const termOut = collector();
  term.onData(termOut.push);
  await termOut.wait((t) => t.includes('$ '), 'the terminal\'s prompt');
  const ptyHelper = lineChild([HOST_PY, '-c', PTY_HELPER]);
  children.push(ptyHelper.child);
  if ((await ptyHelper.next()) !== 'ready') die('the host pty helper did not start');
  const cat = spawn('cat', [], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(cat);
  const catOut = collector();
  cat.stdout.on('data', catOut.push);
  const catWrite = (s) => new Promise((r) => cat.stdin.write(s, r));

  const cases = [
    ['abort', 'kern', '`sb.run([...], { signal })`, `sleep` running', () =>
      abortCase((marker, signal, onUp) => sb.run(['sh', '-c', `echo up; exec sleep ${marker}`], { signal, onStdout: (c) => c.toString().includes('up') && onUp() }))],
    ['abort', 'host', '`child_process.spawn(..., { signal })`, same command', () =>
      abortCase((marker, signal, onUp) => new Promise((resolve, reject) => {
        const c = spawn('sh', ['-c', `echo up; exec sleep ${marker}`], { signal, stdio: ['ignore', 'pipe', 'ignore'] });
        c.stdout.on('data', (d) => d.toString().includes('up') && onUp());
        c.on('error', reject);
        c.on('close', resolve);
      }))],
    ['first byte, `echo hi`', 'kern', '`sb.spawn([\'echo\', \'hi\'])`', () => firstByteKern(sb, ['echo', 'hi'], 'hi\n')],
    ['first byte, `echo hi`', 'host', '`child_process.spawn(\'echo\', [\'hi\'])`', () => firstByteHost(['echo', 'hi'], 'hi\n')],
    ['first byte, `python3 -c \'print(1)\'`', 'kern', '`sb.spawn([\'python3\', ...])`', () => firstByteKern(sb, ['python3', '-c', 'print(1)'], '1\n')],
    ['first byte, `python3 -c \'print(1)\'`', 'host', `\`child_process.spawn('${HOST_PY}', ...)\``, () => firstByteHost([HOST_PY, '-c', 'print(1)'], '1\n')],
    ['HTTP GET to `python3 -m http.server`', 'kern', '`await p.connect(8000)` in its box', () => connectKern(server, PORT)],
    ['HTTP GET to `python3 -m http.server`', 'host', '`net.connect()` to it on a host port', () => connectHost(hostPort)],
    ['HTTP GET to `python3 -m http.server`', 'kern published', '`net.connect()` to `p.publish(8000)`\'s host port, the token in the URL', () => connectHost(published.port, published.token)],
    ['keystroke echo', 'kern', '`term.write(\'x\')` on bash in `sb.terminal()`', () => keystroke((s) => term.write(s), termOut)],
    ['keystroke echo', 'host pty', 'bash on a host pty, timed by python holding the master', async () => ({ echo: Number(await ptyHelper.ask('go')) })],
    ['keystroke echo', 'host pipes', '`cat` on pipes, from Node', () => keystroke(catWrite, catOut, false)],
  ].map(([group, side, what, fn]) => ({ group, side, what, fn, samples: [] }));

  try {
    for (let i = 0; i < WARMUP + N; i++) {
      for (const c of cases) {
        await sleep(100);
        const m = await c.fn();
        if (i >= WARMUP) c.samples.push(m);
      }
      sampleOthers();
      if ((i + 1) % 10 === 0) process.stderr.write(`bench-process: ${i + 1}/${WARMUP + N}\n`);
    }
  } finally {
    await term.kill('SIGKILL').catch(() => {});
    await server.kill('SIGKILL').catch(() => {});
    for (const c of children) c.kill('SIGKILL');
    await closeAll();
    fs.rmSync(scratch, { recursive: true, force: true });
  }

  // ---- report ----
  const fmt = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
  const stat = (c, k) => {
    const s = c.samples.map((m) => m[k]).sort((a, b) => a - b);
    return { med: median(s), p90: percentile(s, 0.9) };
  };
  const rows = [];
  // `base`: the host row this one compares with; none: a host row (the first of a group is 1.0×,
  // a second host baseline has no ratio).
  const row = (label, c, k, base, second = false) => {
    const s = stat(c, k);
    const ratio = base ? `${(s.med / stat(base, k).med).toFixed(1)}×` : second ? '' : '1.0×';
    rows.push(`| ${label} | ${c.side}: ${c.what} | ${fmt(s.med)} | ${fmt(s.p90)} | ${ratio} |`);
  };
  const by = (group, side) => cases.find((c) => c.group === group && c.side === side);
  const abortK = by('abort', 'kern');
  const abortH = by('abort', 'host');
  row('abort → promise rejected', abortH, 'rejected');
  row('abort → promise rejected', abortK, 'rejected', abortH);
  row('abort → rejected and nothing left in `ps`', abortH, 'gone');
  row('abort → rejected and nothing left in `ps`', abortK, 'gone', abortH);
  for (const g of ['first byte, `echo hi`', 'first byte, `python3 -c \'print(1)\'`']) {
    row(`spawn → ${g}`, by(g, 'host'), 'first');
    row(`spawn → ${g}`, by(g, 'kern'), 'first', by(g, 'host'));
    const s = stat(by(g, 'kern'), 'resolved');
    rows.push(`| … of which \`spawn()\` resolved | kern | ${fmt(s.med)} | ${fmt(s.p90)} | |`);
  }
  const http = 'HTTP GET to `python3 -m http.server`';
  row('connection made', by(http, 'host'), 'connect');
  row('connection made', by(http, 'kern'), 'connect', by(http, 'host'));
  row('connect + GET + whole response', by(http, 'host'), 'get');
  row('connect + GET + whole response', by(http, 'kern'), 'get', by(http, 'host'));
  row('connect + GET + whole response', by(http, 'kern published'), 'get', by(http, 'host'));
  row('keystroke → its echo', by('keystroke echo', 'host pty'), 'echo');
  row('keystroke → its echo', by('keystroke echo', 'host pipes'), 'echo', null, true);
  row('keystroke → its echo', by('keystroke echo', 'kern'), 'echo', by('keystroke echo', 'host pty'));
  const boxPids = abortK.samples.map((m) => m.pids).sort((a, b) => a - b);
  const pidCount = boxPids[0] === boxPids[boxPids.length - 1] ? `${boxPids[0]}` : `${boxPids[0]}–${boxPids[boxPids.length - 1]}`;

  const block = [
    START,
    '<!-- Generated by bench/process.js (`npm run bench:process`); everything between these markers is overwritten. -->',
    '',
    '## Steered processes: abort, spawn, connect, publish, terminal',
    '',
    `- Host: ${os.cpus().length} x ${os.cpus()[0] && os.cpus()[0].model}, Linux ${os.release()}, ${process.getuid() === 0 ? 'root' : 'unprivileged'}; Node ${process.version}; load average ${os.loadavg()[0].toFixed(1)} at the end; ${new Date().toISOString().slice(0, 10)}`,
    `- Note: ${othersNote()}`,
    `- N = ${N} per case after ${WARMUP} warm-up, interleaved round-robin, 100 ms pause before each; times in ms (median, p90); the ratio is to the host's row of its group (for the keystroke, the host pty)`,
    '- Reproduce: `npm run build && npm run bench:process` (or `BENCH_N=100 npm run bench:process`)',
    `- "Nothing left in \`ps\`": the sleep, its ancestors up to the benchmark and every descendant of the topmost: ${pidCount} pids for a box (the kern monitor, the box's PID 1, the sleep), 1 on the host; gone from /proc, zombies counted as left`,
    '',
    '| measurement | case | median | p90 | vs host |',
    '| --- | --- | ---: | ---: | ---: |',
    ...rows,
    '',
    END,
  ].join('\n');
  writeSection(OUT, START, END, block);
  console.log(block);
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
