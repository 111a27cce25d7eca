#!/usr/bin/env node
// Where the milliseconds of one fresh box go (issue 21, "measure first"): a per-stage timeline of
// `sb.run(['/bin/true'])`, `sb.run(['python3', '-c', 'pass'])` and a python `sb.runCode('pass')`,
// from the call to the resolved promise, read out of band with strace: no product change, no
// debug build. Medians over N calls of each kind.
//
//   npm run bench:timeline                 # N = 15 calls of each kind
//   BENCH_N=40 npm run bench:timeline
//
// Needs: strace (Debian: apt-get install strace), root (strace follows kern into its user
// namespaces), `npm run build` and the test rootfs (KERN_TEST_ROOTFS overrides its location).
// Writes its section between the bench-timeline markers of BENCHMARKS.md and prints it.
// Measurements only: nothing passes or fails on a number.
//
// Method:
// - A child node process (this script with --child) opens one Sandbox with default limits, makes
//   3 warm-up calls of each kind, then N rounds of one call of each kind, each after a 250 ms pause
//   (the Sandbox's spare kern is back in place, nothing else of ours runs). Around each call it
//   makes a marker syscall, `access("/kern-timeline-mark/<kind>-<i>-start")` and `-end`, which
//   fails harmlessly and shows in the trace with its timestamp: the call starts just after the
//   start marker and the promise has resolved just before the end marker.
// - Traced: `strace -f -ttt --seccomp-bpf -e trace=<the stage markers below>`. --seccomp-bpf
//   stops only on the listed syscalls (a full trace stops on every syscall and made a `true`
//   box ~7x slower here); the list holds no read/open/mmap, so a python start costs few stops.
// - Untraced: the same child again without strace; its own hrtime totals are printed beside.
// - Stages, from the syscalls that mark them (tid = thread; K = the kern that got the spec, I = the
//   box's PID 1, W = the workload):
//     call → spec sent          the addon's first sendto/sendmsg of the BoxSpec (JS, napi, session:
//                               workspace snapshot, sockets, the spare kern taken)
//     spec sent → box clone     K receives the spec, reads it, and clone()s with new namespaces
//     clone → "go"              K writes I's uid/gid maps, clones the image/workspace trees
//                               (open_tree) and sends them to I (sendmsg "g")
//     "go" → pivot_root         I: mount namespace, tmpfs, binds, /dev, /proc (the mount calls)
//     pivot_root → fork         I: hostname, loopback up, keyring, signals, forks the workload
//     fork → workload runs      until W's first step (setsid)
//     workload runs → Landlock  W: keyring, rlimits, caps dropped, no_new_privs, the Landlock ruleset
//     Landlock → execve         W: Landlock and seccomp applied
//     execve → cell done        (runCode) python starts, imports the driver, reads the cell, runs
//                               it, writes the result frame ("done")
//     execve → workload exit    (run) the workload itself
//     cell done → exit          (runCode) the driver tears down and python exits
//     exit → report             I reports the exit (write "X"), K reaps I, reads the cgroup's OOM
//                               count, writes the report
//     report → resolved         the addon reads the report and output, builds the result, the
//                               promise resolves
//   Counts of traced syscalls per stage are given too (each is a ptrace stop).
'use strict';

const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, median, percentile, writeSection, requireBuilt, sh, which, otherWork } = require('./common');

const die = dieFor('bench-timeline');
const N = positiveInt(process.env.BENCH_N, 15, 'BENCH_N', die);
const START = '<!-- bench-timeline:start -->';
const END = '<!-- bench-timeline:end -->';
const MARK = '/kern-timeline-mark/';
const PAUSE_MS = 250;
const WARMUP = 3;

// The syscalls that mark the stages; nothing per-file (read, openat, mmap) so a python start
// costs few ptrace stops.
const TRACE = ['access', 'sendto', 'sendmsg', 'recvmsg', 'clone', 'clone3', 'execve', 'exit_group', 'write',
  'mount', 'move_mount', 'open_tree', 'pivot_root', 'umount2', 'seccomp', 'landlock_restrict_self', 'wait4', 'sethostname', 'setsid'];

// Calls that block until something happens elsewhere.
const WAITS = new Set(['recvmsg', 'wait4']);

const KINDS = {
  true: { label: "`sb.run(['/bin/true'])`", call: (sb) => sb.run(['/bin/true']) },
  python: { label: "`sb.run(['python3', '-c', 'pass'])`", call: (sb) => sb.run(['/usr/bin/python3', '-c', 'pass']) },
  cell: { label: "`sb.runCode('pass')` (python)", call: (sb) => sb.runCode('pass', { language: 'python' }) },
};

// ---- the child: the calls, with markers ---------------------------------------------------------

async function child() {
  const { Sandbox } = require(REPO);
  const mark = (label) => {
    try {
      fs.accessSync(MARK + label);
    } catch {}
  };
  const sb = await new Sandbox({ image: ROOTFS }).open();
  const totals = Object.fromEntries(Object.keys(KINDS).map((k) => [k, []]));
  try {
    for (let w = 0; w < WARMUP; w++) {
      for (const k of Object.values(KINDS)) await check(await k.call(sb));
    }
    for (let i = 0; i < N; i++) {
      for (const [key, k] of Object.entries(KINDS)) {
        await new Promise((r) => setTimeout(r, PAUSE_MS));
        mark(`${key}-${i}-start`);
        const t0 = process.hrtime.bigint();
        const r = await k.call(sb);
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        mark(`${key}-${i}-end`);
        check(r);
        totals[key].push(ms);
      }
    }
  } finally {
    await sb.close();
  }
  process.stdout.write(JSON.stringify(totals) + '\n');
}

function check(r) {
  if (r.fault || r.exitCode !== 0) {
    throw new Error(`a call failed: ${r.fault ? r.fault.type + ': ' + r.fault.message : 'exit ' + r.exitCode} ${String(r.stderr || '').slice(-300)}`);
  }
}

// ---- the parent: trace, parse, report ------------------------------------------------------------

function runChild(traceFile) {
  const self = [process.execPath, __filename, '--child'];
  const argv = traceFile ?
    ['strace', '-f', '-ttt', '-qq', '--seccomp-bpf', '-s', '64', '-o', traceFile, '-e', `trace=${TRACE.join(',')}`, ...self] :
    self;
  return new Promise((resolve, reject) => {
    const p = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('error', reject);
    p.on('close', (code) => {
      if (code !== 0) return reject(new Error(`${traceFile ? 'traced' : 'untraced'} child exited ${code}`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop()));
      } catch (e) {
        reject(new Error(`cannot read the child's totals: ${e.message}`));
      }
    });
  });
}

/** strace -f lines, with `<unfinished ...>` / `<... resumed>` pairs joined, as {tid, t, call, text, ret}. */
function parseTrace(file) {
  const pending = new Map();
  const events = [];
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = line.match(/^(\d+)\s+(\d+\.\d+)\s+(.*)$/);
    if (!m) continue;
    const tid = Number(m[1]);
    const t = Number(m[2]) * 1000;
    let rest = m[3];
    if (rest.startsWith('<... ')) {
      const p = pending.get(tid);
      if (!p) continue;
      pending.delete(tid);
      rest = p.text + rest.replace(/^<\.\.\. \w+ resumed>/, '');
      // A call that waits marks its stage when it returns; any other, when it starts.
      events.push(finish({ tid, t: WAITS.has(p.call) ? t : p.t, tEnd: t, call: p.call, text: rest }));
      continue;
    }
    const call = (rest.match(/^(\w+)\(/) || [])[1];
    if (!call) continue;
    if (rest.endsWith('<unfinished ...>')) {
      pending.set(tid, { t, call, text: rest.replace(/\s*<unfinished \.\.\.>$/, '') });
      continue;
    }
    events.push(finish({ tid, t, tEnd: t, call, text: rest }));
  }
  return events.sort((a, b) => a.t - b.t);
}

function finish(e) {
  const r = e.text.match(/\)\s+=\s+(-?\d+)/);
  e.ret = r ? Number(r[1]) : NaN;
  return e;
}

/** The stage stamps (ms) of one call between its markers, or an Error saying what was missing. */
function stagesOf(events, kind, i) {
  const startAt = events.findIndex((e) => e.call === 'access' && e.text.includes(`${MARK}${kind}-${i}-start"`));
  const endAt = events.findIndex((e) => e.call === 'access' && e.text.includes(`${MARK}${kind}-${i}-end"`));
  if (startAt < 0 || endAt < startAt) return new Error('markers not found');
  const w = events.slice(startAt, endAt + 1);
  const t = { start: w[0].t, end: w[w.length - 1].t };
  const count = (from, to) => w.filter((e) => e.t > from && e.t <= to).length;
  const first = (pred, after = t.start) => w.find((e) => e.t >= after && pred(e));
  const spec = first((e) => (e.call === 'sendto' || e.call === 'sendmsg') && /"\\?"?root|iov_base="\{"/.test(e.text));
  if (!spec) return new Error('spec not seen');
  t.spec = spec.t;
  const recv = first((e) => e.call === 'recvmsg' && e.tid !== spec.tid && /root|iov_base="\{"/.test(e.text), 0);
  if (!recv) return new Error('kern receiving the spec not seen');
  const K = recv.tid;
  const clone = first((e) => e.tid === K && e.call === 'clone' && e.text.includes('CLONE_NEWUSER'));
  if (!clone) return new Error('box clone not seen');
  t.clone = clone.t;
  const I = clone.ret;
  const go = first((e) => e.tid === K && e.call === 'sendmsg' && e.text.includes('iov_base="g'), t.clone);
  const pivot = first((e) => e.tid === I && e.call === 'pivot_root');
  const fork = first((e) => e.tid === I && (e.call === 'clone' || e.call === 'clone3') && e.ret > 0, pivot ? pivot.t : t.clone);
  if (!go || !pivot || !fork) return new Error('box setup not seen');
  t.go = go.t;
  t.pivot = pivot.t;
  t.fork = fork.t;
  // fork() returned W's pid in the box; W says it is set up with a "W <pid>" line before its execve.
  const wline = first((e) => e.tid !== I && e.tid !== K && e.call === 'write' && /"W \d/.test(e.text), t.fork);
  if (!wline) return new Error('workload not seen');
  const W = wline.tid;
  const exec = first((e) => e.tid === W && e.call === 'execve');
  const wexit = first((e) => e.tid === W && e.call === 'exit_group');
  const x = first((e) => e.tid === I && e.call === 'write' && /"X /.test(e.text));
  const report = first((e) => e.tid === K && e.call === 'write' && e.text.includes('exit_code'));
  if (!exec || !wexit || !x || !report) return new Error('workload or report not seen');
  const landlock = first((e) => e.tid === W && (e.call === 'landlock_restrict_self' || e.call === 'seccomp'), t.fork);
  const setsid = first((e) => e.tid === W && e.call === 'setsid', t.fork);
  t.exec = exec.t;
  t.setsid = setsid ? setsid.t : t.fork;
  t.landlock = landlock ? landlock.t : t.exec;
  t.wexit = wexit.t;
  t.x = x.t;
  t.report = report.t;
  if (kind === 'cell') {
    const done = first((e) => e.tid === W && e.call === 'write' && e.text.includes('\\"done\\"'));
    if (!done) return new Error('result frame not seen');
    t.done = done.t;
  }
  // Spare kerns the addon started during the call (vfork + exec of `kern box`, the caller waits
  // for the exec), and how much of the call each spent moving itself into its cgroup (a write of
  // its pid to cgroup.procs).
  const spawns = w.filter((e) => e.call === 'clone3' && e.text.includes('CLONE_VFORK') && e.ret > 0);
  // Only the part before the spec went counts: the top-up runs on a thread beside the call.
  t.spareSpawnBeforeSpec = spawns.filter((e) => e.t < t.spec).reduce((a, e) => a + (Math.min(e.tEnd, t.spec) - e.t), 0);
  t.spareSpawns = spawns.length;
  t.spareMove = 0;
  for (const sp of spawns) {
    for (const e of events) {
      if (e.tid === sp.ret && e.call === 'write' && e.text.includes(`"${sp.ret}"`)) t.spareMove += Math.max(0, Math.min(e.tEnd, t.end) - Math.max(e.t, t.start));
    }
  }
  t.stops = w.length;
  t.counts = { mounts: count(t.go, t.pivot) };
  return t;
}

const STAGES = [
  ['call → spec sent to kern', 'start', 'spec', 'JS, napi, session: options, workspace snapshot, sockets, the spare kern taken'],
  ['spec → box clone', 'spec', 'clone', 'kern reads the spec, clone() with new user/pid/net/mount/ipc/uts namespaces'],
  ['clone → "go" to PID 1', 'clone', 'go', 'kern: uid/gid maps, the image and workspace trees cloned (open_tree, idmapped)'],
  ['"go" → pivot_root', 'go', 'pivot', "PID 1: the box's mount tree (tmpfs, binds, /dev, /proc)"],
  ['pivot_root → workload fork', 'pivot', 'fork', 'PID 1: hostname, loopback up, keyring, signal handlers, fork'],
  ['fork → workload runs', 'fork', 'setsid', "from PID 1's fork() returning to the workload's first step (setsid)"],
  ['workload runs → Landlock', 'setsid', 'landlock', 'workload: session, keyring, rlimits, capabilities dropped, no_new_privs, the Landlock ruleset built'],
  ['Landlock → execve', 'landlock', 'exec', 'workload: Landlock and seccomp applied, execve'],
  ['execve → workload exit', 'exec', 'wexit', 'the workload itself', (k) => k !== 'cell'],
  ['execve → result frame', 'exec', 'done', 'python start, driver import, the cell run, its result frame', (k) => k === 'cell'],
  ['result frame → exit', 'done', 'wexit', 'the driver ends, python exits', (k) => k === 'cell'],
  ['exit → report', 'wexit', 'report', 'PID 1 reports, kern reaps it, reads the OOM count, writes the report'],
  ['report → promise resolved', 'report', 'end', 'the addon reads the report, builds the result'],
];

/** On cgroup v1: ms per write of a pid to a cgroup.procs (each box's kern does one per hierarchy
 * it joins, memory and pids, and again to leave), moving an idle `sleep` between a probe cgroup
 * under kern's and kern's own: `rounds` writes back to back, and `rounds` each after a 50 ms pause
 * (as a call after a pause does). Null where there is no cgroup v1 hierarchy of kern's. */
async function cgroupMoveProbe(rounds = 20) {
  if (fs.existsSync('/sys/fs/cgroup/cgroup.controllers')) return null;
  const mem = (fs.readFileSync('/proc/self/cgroup', 'utf8').match(/^\d+:memory:(.*)$/m) || [])[1];
  const parents = [['pids', '/sys/fs/cgroup/pids/kern-sandbox']];
  if (mem !== undefined) parents.unshift(['memory', path.join('/sys/fs/cgroup/memory', mem, 'kern-sandbox')]);
  const out = [];
  for (const [hier, parent] of parents) {
    if (!fs.existsSync(parent)) continue;
    const probe = path.join(parent, `timeline-probe-${process.pid}`);
    const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
    const series = { hier, burst: [], paused: [] };
    try {
      fs.mkdirSync(probe);
      for (const pause of [0, 50]) {
        for (let i = 0; i < rounds; i++) {
          const dir = i % 2 ? parent : probe;
          if (pause) await new Promise((r) => setTimeout(r, pause));
          const t0 = process.hrtime.bigint();
          fs.writeFileSync(path.join(dir, 'cgroup.procs'), String(sleeper.pid));
          (pause ? series.paused : series.burst).push(Number(process.hrtime.bigint() - t0) / 1e6);
        }
      }
    } finally {
      sleeper.kill('SIGKILL');
      await new Promise((r) => sleeper.once('exit', r));
      try {
        fs.rmdirSync(probe);
      } catch {}
    }
    series.burst.sort((a, b) => a - b);
    series.paused.sort((a, b) => a - b);
    out.push(series);
  }
  return out.length ? out : null;
}

async function main() {
  if (process.argv[2] === '--child') return child();
  if (!which('strace')) die('strace not found (Debian: apt-get install strace)');
  if (process.getuid() !== 0) die('run as root: strace must follow kern into the user namespaces it creates');
  if (!fs.existsSync(path.join(ROOTFS, 'usr/bin/python3'))) die(`test rootfs not found at ${ROOTFS}`);
  requireBuilt(REPO, KERN, die);

  const loadBefore = os.loadavg();
  const others = otherWork();
  others.sample();
  const moves = await cgroupMoveProbe();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-timeline-'));
  const traceFile = path.join(scratch, 'trace.txt');
  process.stderr.write(`bench-timeline: untraced, ${N} calls of each kind\n`);
  const plain = await runChild(null);
  others.sample();
  process.stderr.write(`bench-timeline: traced, ${N} calls of each kind\n`);
  const traced = await runChild(traceFile);
  others.sample();
  const events = parseTrace(traceFile);
  if (process.env.BENCH_KEEP_TRACE) {
    fs.copyFileSync(traceFile, process.env.BENCH_KEEP_TRACE);
    process.stderr.write(`bench-timeline: trace kept at ${process.env.BENCH_KEEP_TRACE}\n`);
  }
  fs.rmSync(scratch, { recursive: true, force: true });

  const fmt = (x) => (Number.isFinite(x) ? x.toFixed(2) : '—');
  const sections = [];
  const summary = {};
  for (const [kind, k] of Object.entries(KINDS)) {
    const calls = [];
    const errors = [];
    for (let i = 0; i < N; i++) {
      const s = stagesOf(events, kind, i);
      if (s instanceof Error) errors.push(`${i}: ${s.message}`);
      else calls.push(s);
    }
    const sorted = (xs) => [...xs].sort((a, b) => a - b);
    const plainMed = median(sorted(plain[kind]));
    const tracedMed = median(sorted(calls.map((c) => c.end - c.start)));
    const rows = [];
    let sumMed = 0;
    const stageMed = {};
    for (const [name, from, to, what, when] of STAGES) {
      if (when && !when(kind)) continue;
      const d = sorted(calls.map((c) => c[to] - c[from]));
      const med = median(d);
      stageMed[name] = med;
      sumMed += med;
      rows.push({ name, what, med, p90: percentile(d, 0.9) });
    }
    const stopMed = median(sorted(calls.map((c) => c.stops)));
    const spawnMed = median(sorted(calls.map((c) => c.spareSpawnBeforeSpec)));
    const moveMed = median(sorted(calls.map((c) => c.spareMove)));
    const spawnsMed = median(sorted(calls.map((c) => c.spareSpawns)));
    const rowSpare = rows.find((r) => r.name.startsWith('call → spec'));
    if (rowSpare) rowSpare.what += `; of it, median ${fmt(spawnMed)} ms while the next spare kern was being started (vfork until its exec, on a thread beside the call)`;
    const mountStops = median(sorted(calls.map((c) => c.counts.mounts)));
    summary[kind] = { plainMed, tracedMed, stageMed, spawnMed, moveMed };
    sections.push(
      `### ${k.label}`,
      '',
      `Untraced: median **${fmt(plainMed)} ms** (p90 ${fmt(percentile(sorted(plain[kind]), 0.9))}) over ${plain[kind].length} calls. ` +
        `Traced: median ${fmt(tracedMed)} ms over ${calls.length} calls, ${stopMed} traced syscalls per call (${mountStops} of them mount calls in PID 1)` +
        (errors.length ? `; ${errors.length} calls not parsed (${errors.slice(0, 3).join('; ')})` : '') + '. ' +
        `Per call the addon started ${spawnsMed} spare kern(s), which then spent a median ${fmt(moveMed)} ms (traced) moving into their cgroups (writes to cgroup.procs, the part before the promise resolved). ` +
        `The share is of the sum of the stage medians (${fmt(sumMed)} ms); the last column scales it to the untraced median.`,
      '',
      '| stage | what happens | traced median ms | p90 | share | ≈ untraced ms |',
      '| --- | --- | ---: | ---: | ---: | ---: |',
      ...rows.map((r) => `| ${r.name} | ${r.what} | ${fmt(r.med)} | ${fmt(r.p90)} | ${((100 * r.med) / sumMed).toFixed(0)}% | ${fmt((r.med / sumMed) * plainMed)} |`),
      ''
    );
  }

  const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) || [])[1] || 'unknown';
  const block = [
    START,
    '<!-- Generated by bench/timeline.js (`npm run bench:timeline`); everything between these markers is overwritten. -->',
    '',
    `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}; kernel ${sh('uname', ['-r'])}; ${os.cpus().length} CPU(s): ${cpu.trim()}; load average before the run ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`,
    `- ${sh('strace', ['-V']).split('\n')[0]}; Node ${process.version}; one Sandbox with default limits (memory 512 MiB, pids 256), ${N} calls of each kind after ${WARMUP} warm-ups, each after a ${PAUSE_MS} ms pause`,
    `- Traced: \`strace -f -ttt --seccomp-bpf -e trace=${TRACE.join(',')}\` on the node process; a stage is the time between the syscalls that mark it (see bench/timeline.js)`,
    `- Note: ${others.note()}`,
    '- Reproduce: `npm run build && npm run bench:timeline` (as root; `BENCH_N=40` for more calls, `BENCH_KEEP_TRACE=FILE` keeps the trace)',
    moves ? `- One write of a pid to a cgroup v1 \`cgroup.procs\` on this host, untraced (an idle process moved between a probe cgroup and kern's; what each box's kern does to join each hierarchy and to leave it): ` +
      moves.map((m) => `${m.hier}: median ${fmt(median(m.paused))} ms (p90 ${fmt(percentile(m.paused, 0.9))}) after a 50 ms pause, ${fmt(median(m.burst))} ms back to back`).join('; ') :
      '- No cgroup v1 hierarchy of kern: the cgroup move probe was skipped.',
    '',
    ...sections,
    END,
  ].join('\n');
  writeSection(OUT, START, END, block);
  console.log(block);
  console.log(`\nbench-timeline: wrote ${path.relative(process.cwd(), OUT) || OUT}`);
  if (process.env.BENCH_TIMELINE_JSON) fs.writeFileSync(process.env.BENCH_TIMELINE_JSON, JSON.stringify({ summary, traced }, null, 1));
}

main().catch((e) => {
  console.error('bench-timeline: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
