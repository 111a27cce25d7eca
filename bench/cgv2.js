#!/usr/bin/env node
// cgroup v2: a box born in its cgroup (clone3 CLONE_INTO_CGROUP) against the same box whose kern
// moves itself into the cgroup first (KERN_NO_CLONE_INTO_CGROUP=1), and both against bubblewrap,
// side by side in one run. Runs inside the cgroup-v2 guest; bench/cgv2.sh boots it, as root and as
// an unprivileged user, and writes the section of BENCHMARKS.md. Measurements only.
//
//   node bench/cgv2.js measure > out.json     # in the guest (needs bwrap and the test rootfs)
//   node bench/cgv2.js report root.json user.json   # on the host: writes BENCHMARKS.md
//
// Method (as bench/run.js): every case is timed from just before the call to its completion with
// process.hrtime.bigint(); cases run interleaved round-robin, after untimed warm-ups that also
// check each case succeeds. The API cases of each mode run in a worker process of their own (the
// variable must be in kern's environment when the session starts its spare kerns); the worker
// times the awaited call and the driver waits for its answer before the next case.
'use strict';

const { spawn, fork } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt, which, median, writeSection, requireBuilt, sh, bwrapArgs, timeSpawn } = require('./common');

const die = dieFor('bench-cgv2');
const START = '<!-- bench-cgv2:start -->';
const END = '<!-- bench-cgv2:end -->';
const TRUE = ['/bin/true'];
const PY = ['/usr/bin/python3', '-c', 'pass'];
const MODES = { clone3: {}, move: { KERN_NO_CLONE_INTO_CGROUP: '1' } };

// ---- worker: one mode's sandboxes, timed calls on request ------------------------------------

async function worker() {
  const { Sandbox } = requireBuilt(REPO, KERN, die);
  const sb = await new Sandbox({ image: ROOTFS }).open();
  const calls = {
    true: () => sb.run(TRUE),
    pass: () => sb.runCode('pass', { language: 'python' }),
  };
  process.on('message', async (m) => {
    if (m === 'placement') return process.send(await placement(sb).catch((e) => ({ error: String(e.message || e) })));
    if (m === 'close') {
      await sb.close();
      return process.send('closed');
    }
    try {
      const t0 = process.hrtime.bigint();
      const r = await calls[m]();
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (r.fault || r.exitCode !== 0) throw new Error(r.fault ? `${r.fault.type}: ${r.fault.message}` : `exit ${r.exitCode}: ${r.stderr}`);
      process.send({ ms, notes: r.runtimeNotes });
    } catch (e) {
      process.send({ error: String(e.message || e) });
    }
  });
  process.send('ready');
}

/** Where the box's first process and its kern are, read from this side while the box runs. */
async function placement(sb) {
  const marker = `cgv2-${process.pid}-${Date.now()}`;
  let seen = null;
  const read = (f) => {
    try {
      return fs.readFileSync(f, 'utf8').trim();
    } catch {
      return null;
    }
  };
  const cg = (pid) => (read(`/proc/${pid}/cgroup`) || '').replace(/^0::/, '');
  const ppid = (pid) => Number((read(`/proc/${pid}/stat`) || '').replace(/^.*\) /, '').split(' ')[1]);
  const look = () => {
    const pid = fs.readdirSync('/proc').find((p) => /^\d+$/.test(p) && (read(`/proc/${p}/cmdline`) || '').includes(marker));
    if (!pid) return false;
    const init = ppid(Number(pid));
    const leaf = cg(init);
    seen = { workload: cg(pid), init: leaf, monitor: cg(ppid(init)), pidsMax: read(`/sys/fs/cgroup${leaf}/pids.max`) };
    return true;
  };
  let polling = null;
  const r = await sb.run(['sh', '-c', `echo ready; sleep 3; : ${marker}`], {
    // The workload's exec may come a moment after its output: look until it is there.
    onStdout: () => {
      polling = polling || setInterval(() => (seen || look()) && clearInterval(polling), 20);
    },
  });
  clearInterval(polling);
  if (!seen) throw new Error(`the box's workload was not found in /proc (exit ${r.exitCode}, ${JSON.stringify(r.fault)})`);
  return seen;
}

// ---- driver ----------------------------------------------------------------------------------

/** What one move of a process between two cgroups costs here (the wait clone3 saves), timed on
 * a `sleep` moved to and fro 30 times, 50 ms apart, so no move finds a grace period under way. */
async function moveCost() {
  const base = fs.mkdtempSync('/sys/fs/cgroup/kern-bench-move-');
  const dirs = ['a', 'b'].map((d) => path.join(base, d));
  dirs.forEach((d) => fs.mkdirSync(d));
  const child = spawn('sleep', ['60']);
  const times = [];
  try {
    for (let i = 0; i < 30; i++) {
      await new Promise((r) => setTimeout(r, 50));
      const t0 = process.hrtime.bigint();
      fs.writeFileSync(path.join(dirs[i % 2], 'cgroup.procs'), String(child.pid));
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  } finally {
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    dirs.forEach((d) => fs.rmdirSync(d));
    fs.rmdirSync(base);
  }
  times.sort((a, b) => a - b);
  return { median: median(times), min: times[0], max: times[times.length - 1] };
}

function startWorker(env) {
  const w = fork(__filename, ['worker'], { env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ask = (m) =>
    new Promise((resolve, reject) => {
      const died = (code) => reject(new Error(`worker exited (${code})`));
      w.once('exit', died);
      w.once('message', (reply) => {
        w.off('exit', died);
        resolve(reply);
      });
      w.send(m);
    });
  const ready = new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('exit', (code) => reject(new Error(`worker exited before it was ready (${code})`)));
  });
  return { ask, ready, proc: w };
}

async function measure() {
  const N = parsePositiveInt(process.env.BENCH_N, 50, 'BENCH_N', die);
  const WARMUP = parsePositiveInt(process.env.BENCH_WARMUP, 5, 'BENCH_WARMUP', die);
  requireBuilt(REPO, KERN, die);
  if (!which('bwrap')) die('bwrap not found on PATH');
  if (!fs.existsSync('/sys/fs/cgroup/cgroup.controllers')) die('this host is not on cgroup v2');
  const root = process.getuid() === 0;
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-cgv2-'));
  const ws = fs.mkdtempSync(path.join(scratch, 'ws-'));
  const wsTarget = fs.existsSync(path.join(ROOTFS, 'workspace')) ? '/workspace' : '/mnt';

  const workers = {};
  for (const [mode, env] of Object.entries(MODES)) {
    workers[mode] = startWorker(env);
    await workers[mode].ready;
  }
  const cases = [];
  const add = (name, group, mode, fn) => cases.push({ name, group, mode, fn, times: [], notes: new Set() });
  add('bubblewrap: `/bin/true`', 'true', null, () => timeSpawn(bwrapArgs(ROOTFS, ws, wsTarget, TRUE)));
  add('bubblewrap: `python3 -c pass`', 'python', null, () => timeSpawn(bwrapArgs(ROOTFS, ws, wsTarget, PY)));
  for (const mode of Object.keys(MODES)) {
    const api = (call) => async (c) => {
      const r = await workers[mode].ask(call);
      if (r.error) throw new Error(r.error);
      r.notes.forEach((n) => c.notes.add(n));
      return r.ms;
    };
    add("kern API: `sb.run(['/bin/true'])`", 'true', mode, api('true'));
    add("kern API: `sb.runCode('pass')`", 'python', mode, api('pass'));
    if (root) {
      // No spare kern: the CLI pays the cgroup set-up (and, in `move` mode, the move) on the call.
      const env = { ...process.env, ...MODES[mode] };
      const argv = [KERN, 'run', '--image', ROOTFS, '--workspace', ws, '--', ...TRUE];
      add('kern CLI: `kern run -- /bin/true` (no spare)', 'true', mode, () => timeSpawn(argv, { env }));
    }
  }
  const placements = {};
  for (const mode of Object.keys(MODES)) {
    placements[mode] = await workers[mode].ask('placement');
    if (placements[mode].error) die(`${mode}: ${placements[mode].error}`);
  }
  for (let i = 0; i < WARMUP + N; i++) {
    for (const c of cases) {
      if (c.error) continue;
      try {
        const ms = await c.fn(c);
        if (i >= WARMUP) c.times.push(ms);
      } catch (e) {
        c.error = String(e.message || e).slice(0, 300);
      }
    }
  }
  for (const w of Object.values(workers)) {
    await w.ask('close');
    w.proc.kill();
  }
  fs.rmSync(scratch, { recursive: true, force: true });
  const facts = {
    user: root ? 'root' : `${os.userInfo().username} (uid ${process.getuid()}, rootless: kern starts in a systemd user scope with Delegate=yes)`,
    kernel: sh('uname', ['-r']),
    systemd: sh('systemctl', ['--version']).split('\n')[0],
    node: process.version,
    bwrap: sh('bwrap', ['--version']),
    cpus: os.cpus().length,
    n: N,
    warmup: WARMUP,
    move: root ? await moveCost() : null,
  };
  const out = cases.map((c) => ({ name: c.name, group: c.group, mode: c.mode, times: c.times, error: c.error, notes: [...c.notes] }));
  process.stdout.write(JSON.stringify({ facts, placements, cases: out }) + '\n');
}

// ---- report (host) ---------------------------------------------------------------------------

function report(files) {
  if (!files.length) die('usage: node bench/cgv2.js report RESULT.json...');
  const f2 = (x) => (Number.isFinite(x) ? x.toFixed(1) : '—');
  const label = { clone3: 'born in its cgroup (clone3)', move: 'kern moves in first (`KERN_NO_CLONE_INTO_CGROUP=1`)' };
  const lines = [START, '<!-- Generated by bench/cgv2.sh (`bash bench/cgv2.sh`); everything between these markers is overwritten. -->', '',
    '## cgroup v2: born in the cgroup (clone3) vs moved in, and bubblewrap (guest)', ''];
  const first = JSON.parse(fs.readFileSync(files[0], 'utf8'));
  lines.push(`- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}; host ${sh('uname', ['-r'])}, ${os.cpus().length} CPU(s): ${os.cpus()[0]?.model || '?'}`,
    `- Guest: the cgroup-v2 rig (\`scripts/cgv2-vm.sh\`: user-mode Linux ${first.facts.kernel}, ${first.facts.systemd} as PID 1, pure cgroup2, ${first.facts.cpus} vCPU; 2-4x slower than the host), Node ${first.facts.node}, ${first.facts.bwrap} (the host's binary), kern built by \`npm run build:debug\` (dev profile: kern's own code unoptimised, dependencies optimised)`,
    '- Reproduce: `npm run build:debug && bash bench/cgv2.sh` (as root on the host; `BENCH_N` timed rounds, default 50, `BENCH_WARMUP` untimed, default 5)',
    `- Method: N = ${first.facts.n} timed rounds after ${first.facts.warmup} warm-ups, every case once per round, interleaved; medians in ms, from just before the call to its end as Node sees it. bubblewrap runs as in bench/run.js (user, pid, net, ipc, uts, cgroup namespaces; the test rootfs read-only; /proc, /dev, a /tmp tmpfs, the workspace bound) and caps nothing; kern runs with its default caps (memory 512 MiB, pids 256) enforced by the box's cgroup. One sandbox per mode, opened untimed; the API rows keep the session's two spare kerns.`,
    `- Host load average when the runs ended (1, 5, 15 min): ${os.loadavg().map((l) => l.toFixed(1)).join(', ')} on ${os.cpus().length} CPUs (other work on the shared host; the guest's vCPU competes with it, hence the wide min–max)`,
    '');
  for (const file of files) {
    const r = JSON.parse(fs.readFileSync(file, 'utf8'));
    lines.push(`### As ${r.facts.user}`, '');
    if (r.facts.move) {
      const m = r.facts.move;
      lines.push(`One move of a process between two cgroups in this guest (what a box born in its cgroup skips): median ${m.median.toFixed(2)} ms (${m.min.toFixed(2)}–${m.max.toFixed(2)}), 30 moves 50 ms apart.`, '');
    }
    lines.push('Where the box is, read from outside while it runs (`/proc/PID/cgroup`):', '');
    lines.push('| mode | box init and workload | its kern (monitor) | leaf `pids.max` |', '| --- | --- | --- | ---: |');
    for (const [mode, p] of Object.entries(r.placements)) {
      lines.push(`| ${label[mode]} | \`${p.init}\`${p.workload === p.init ? '' : ` / \`${p.workload}\``} | \`${p.monitor}\` | ${p.pidsMax} |`);
    }
    if (Object.values(r.placements).every((p) => p.monitor === p.init)) {
      lines.push('', 'Both modes take the same path here: kern starts in its own delegated scope and must leave it for the box\'s leaf anyway (cgroup v2 lets a cgroup with processes of its own hand no controllers to its children), so the box inherits the leaf. The two modes are an A/A pair: their difference is this run\'s noise.');
    }
    lines.push('');
    const bw = {};
    for (const c of r.cases) if (!c.mode) bw[c.group] = median([...c.times].sort((a, b) => a - b));
    lines.push('| case | mode | median ms | min–max ms | vs bubblewrap |', '| --- | --- | ---: | ---: | ---: |');
    for (const c of r.cases) {
      const t = [...c.times].sort((a, b) => a - b);
      const m = median(t);
      const mode = c.mode ? label[c.mode] : '—';
      if (c.error) {
        lines.push(`| ${c.name} | ${mode} | failed: ${c.error.replace(/\|/g, '/').replace(/\s+/g, ' ')} | | |`);
        continue;
      }
      lines.push(`| ${c.name} | ${mode} | ${f2(m)} | ${f2(t[0])}–${f2(t[t.length - 1])} | ${(m / bw[c.group]).toFixed(2)}× |`);
    }
    const notes = [...new Set(r.cases.flatMap((c) => c.notes))];
    if (notes.length) lines.push('', `Runtime notes seen: ${notes.map((n) => `\`${n}\``).join('; ')}`);
    lines.push('');
  }
  lines.push(END);
  writeSection(OUT, START, END, lines.join('\n'));
  console.log(lines.join('\n'));
}

const cmd = process.argv[2];
if (cmd === 'worker') worker().catch((e) => {
  console.error(`bench-cgv2 worker: ${e.stack || e}`);
  process.exit(1);
});
else if (cmd === 'measure') measure().catch((e) => die(e.stack || String(e)));
else if (cmd === 'report') report(process.argv.slice(3));
else die('usage: node bench/cgv2.js measure | report RESULT.json...');
