#!/usr/bin/env node
// Side-by-side start-up benchmarks: bare process vs bubblewrap vs kern (API and CLI) vs podman,
// measured in ONE run on the same machine and the same test rootfs, as medians over N iterations.
//
//   npm run bench                 # N = 50
//   BENCH_N=200 npm run bench     # more iterations, tighter numbers
//
// Needs: `npm run build` (./kern and the addon) and the test rootfs (scripts/build-test-rootfs.sh;
// KERN_TEST_ROOTFS overrides its location). Writes the table between the bench markers of
// BENCHMARKS.md (prose outside the markers is kept) and prints it. Measurements only: nothing here
// passes or fails on a number.
//
// Method: every case is timed the same way, from just before the call to its completion, with
// process.hrtime.bigint(). Spawned cases use child_process.spawn with piped stdout/stderr (drained)
// and resolve on 'close' (process exited and its output fully read) — what any caller that wants
// the output pays. kern API cases time the awaited sb.run()/sb.runCode(), which spawn `kern` the
// same way inside the addon. Cases run sequentially, interleaved round-robin (one iteration of every
// case, then the next), so slow drift on the machine affects all cases alike. A few warm-up
// iterations of every case run first and are not counted; each warm-up also checks that the case
// really succeeds (exit 0, no fault), and a case that does not is reported instead of timed.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, which, percentile, median, writeSection, requireBuilt, sh, bwrapArgs, timeSpawn } = require('./common');

const die = dieFor('bench');
const parsePositiveInt = (value, dflt, name) => positiveInt(value, dflt, name, die);

const N = parsePositiveInt(process.env.BENCH_N, 50, 'BENCH_N');
const WARMUP = parsePositiveInt(process.env.BENCH_WARMUP, 5, 'BENCH_WARMUP');
const START = '<!-- bench:start -->';
const END = '<!-- bench:end -->';

// ---- preconditions ----------------------------------------------------------------------------

function checkPrerequisites() {
  if (!fs.existsSync(path.join(ROOTFS, 'usr/bin/python3')) || !fs.existsSync(path.join(ROOTFS, 'bin/true'))) {
    die(`test rootfs not found at ${ROOTFS} (needs usr/bin/python3 and bin/true).\n` +
      '       Build it with: bash scripts/build-test-rootfs.sh   (or set KERN_TEST_ROOTFS)');
  }
  return requireBuilt(REPO, KERN, die);
}

// ---- timing primitives -----------------------------------------------------------------------

async function timeApi(fn) {
  const t0 = process.hrtime.bigint();
  const r = await fn();
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.fault || r.exitCode !== 0) {
    const why = r.fault ? `fault ${r.fault.type}: ${r.fault.message}` : `exit ${r.exitCode}`;
    throw new Error(`${why}${r.stderr ? ` | stderr: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`);
  }
  return ms;
}

// ---- cases ------------------------------------------------------------------------------------

async function main() {
  const api = checkPrerequisites();
  const { Sandbox } = api;
  const TRUE = ['/bin/true'];
  const PY = ['/usr/bin/python3', '-c', 'pass'];

  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-bench-'));
  const bwrapWs = fs.mkdtempSync(path.join(scratch, 'bwrap-ws-'));
  const notes = [];

  // bwrap must bind the workspace onto a directory that exists in the read-only rootfs (it cannot
  // create a mount point there). A plain debootstrap rootfs has no /workspace; /mnt is the same
  // kind of empty directory, so the cost is identical.
  const wsTarget = fs.existsSync(path.join(ROOTFS, 'workspace')) ? '/workspace' : '/mnt';
  if (wsTarget !== '/workspace') {
    notes.push(`bubblewrap binds its workspace at \`${wsTarget}\`: the read-only rootfs has no \`/workspace\` and bwrap cannot create a mount point in it.`);
  }

  const bwrap = which('bwrap');
  const podman = which('podman');

  const sandboxes = [];
  async function openSandbox(opts) {
    const sb = await new Sandbox({ image: ROOTFS, ...opts }).open();
    sandboxes.push(sb);
    return sb;
  }

  /** @type {{name: string, group: 'true'|'python', kind: string, fn?: () => Promise<number>, skip?: string, times: number[], error?: string}[]} */
  const cases = [];
  const add = (name, group, kind, fn, skip) => cases.push({ name, group, kind, fn, skip, times: [] });

  add('bare process: `/bin/true`', 'true', 'bare', () => timeSpawn(TRUE));
  add('bare process: `python3 -c pass`', 'python', 'bare', () => timeSpawn(PY));
  add('bubblewrap: `/bin/true`', 'true', 'bwrap', () => timeSpawn(bwrapArgs(ROOTFS, bwrapWs, wsTarget, TRUE)),
    bwrap ? undefined : 'bwrap not installed');
  add('bubblewrap: `python3 -c pass`', 'python', 'bwrap', () => timeSpawn(bwrapArgs(ROOTFS, bwrapWs, wsTarget, PY)),
    bwrap ? undefined : 'bwrap not installed');

  let sbLimits, sbNoLimits;
  const apiCase = (name, group, getSb, call) => {
    const c = { name, group, kind: 'kern', times: [] };
    c.fn = async () => {
      const sb = await getSb();
      return timeApi(() => call(sb));
    };
    cases.push(c);
  };
  const getLimits = async () => sbLimits || (sbLimits = await openSandbox({}));
  const getNoLimits = async () => sbNoLimits || (sbNoLimits = await openSandbox({ enforceLimits: false }));
  apiCase("kern API: `sb.run(['/bin/true'])`", 'true', getLimits, (sb) => sb.run(TRUE));
  apiCase("kern API: `sb.runCode('pass')` (python)", 'python', getLimits, (sb) => sb.runCode('pass', { language: 'python' }));
  let sbUntrusted;
  const getUntrusted = async () => sbUntrusted || (sbUntrusted = await openSandbox({ securityProfile: 'untrusted' }));
  apiCase("kern API, `securityProfile: 'untrusted'`: `sb.run(['/bin/true'])`", 'true', getUntrusted, (sb) => sb.run(TRUE));
  apiCase("kern API, `securityProfile: 'untrusted'`: `sb.runCode('pass')`", 'python', getUntrusted,
    (sb) => sb.runCode('pass', { language: 'python' }));
  apiCase("kern API, `enforceLimits: false`: `sb.run(['/bin/true'])`", 'true', getNoLimits, (sb) => sb.run(TRUE));
  apiCase("kern API, `enforceLimits: false`: `sb.runCode('pass')`", 'python', getNoLimits,
    (sb) => sb.runCode('pass', { language: 'python' }));

  // A fixed --workspace, as bwrap gets: without it `kern run` creates and deletes a temporary one.
  const kernWs = fs.mkdtempSync(path.join(scratch, 'kern-ws-'));
  const kernCli = (extra, cmd) => [KERN, 'run', '--image', ROOTFS, '--workspace', kernWs, ...extra, '--', ...cmd];
  add('kern CLI: `kern run -- /bin/true`', 'true', 'kern', () => timeSpawn(kernCli([], TRUE)));
  add('kern CLI: `kern run -- python3 -c pass`', 'python', 'kern', () => timeSpawn(kernCli([], PY)));
  add('kern CLI, `--no-enforce-limits`: `kern run -- /bin/true`', 'true', 'kern',
    () => timeSpawn(kernCli(['--no-enforce-limits'], TRUE)));

  add('podman: `podman run --rootfs` `/bin/true`', 'true', 'podman',
    () => timeSpawn([podman, 'run', '--rm', '--network=none', '--rootfs', ROOTFS, ...TRUE]),
    podman ? undefined : 'not installed');

  // Warm-up doubles as a correctness check: a case that fails is reported, not timed.
  for (let w = 0; w < WARMUP; w++) {
    for (const c of cases) {
      if (c.skip || c.error) continue;
      try {
        await c.fn();
      } catch (e) {
        c.error = String(e.message || e).replace(/\s+/g, ' ').slice(0, 300);
      }
    }
  }
  process.stderr.write(`bench: ${WARMUP} warm-up + ${N} timed iterations of ${cases.filter((c) => !c.skip && !c.error).length} cases\n`);
  for (let i = 0; i < N; i++) {
    for (const c of cases) {
      if (c.skip || c.error) continue;
      try {
        c.times.push(await c.fn());
      } catch (e) {
        c.error = `failed on iteration ${i + 1}: ${String(e.message || e).replace(/\s+/g, ' ').slice(0, 300)}`;
      }
    }
    if ((i + 1) % 10 === 0 || i + 1 === N) process.stderr.write(`bench: ${i + 1}/${N}\n`);
  }

  for (const sb of sandboxes) {
    try {
      await sb.close();
    } catch {}
  }
  fs.rmSync(scratch, { recursive: true, force: true });

  // ---- report ----
  for (const c of cases) {
    const s = [...c.times].sort((a, b) => a - b);
    c.median = median(s);
    c.p90 = percentile(s, 0.9);
  }
  const ref = (kind, group) => cases.find((c) => c.kind === kind && c.group === group && !c.skip && !c.error && c.times.length);
  const fmt = (x) => (Number.isFinite(x) ? x.toFixed(2) : '—');
  const ratio = (c, r) => (r && r !== c && Number.isFinite(c.median) && c.times.length ? `${(c.median / r.median).toFixed(2)}×` : '—');

  const rows = cases.map((c) => {
    if (c.skip) return `| ${c.name} | ${c.skip} | — | — | — |`;
    if (c.error && !c.times.length) return `| ${c.name} | failed: ${c.error.replace(/\|/g, '\\|')} | — | — | — |`;
    const flag = c.error ? ` (stopped: ${c.error.replace(/\|/g, '\\|')})` : '';
    return `| ${c.name}${flag} | ${fmt(c.median)} | ${fmt(c.p90)} | ${ratio(c, ref('bwrap', c.group))} | ${ratio(c, ref('bare', c.group))} |`;
  });

  const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) || [])[1] || os.cpus()[0]?.model || 'unknown';
  const cgroup = fs.existsSync('/sys/fs/cgroup/cgroup.controllers') ? 'v2' :
    fs.existsSync('/sys/fs/cgroup/unified') ? 'v1 (hybrid)' : 'v1';
  const user = os.userInfo();
  let pkgVersion = '?';
  try {
    pkgVersion = require(path.join(REPO, 'package.json')).version;
  } catch {}

  const lines = [
    START,
    '<!-- Generated by bench/run.js (`npm run bench`); everything between these markers is overwritten. -->',
    '',
    `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`,
    `- Kernel: ${sh('uname', ['-r']) || os.release()}; cgroup ${cgroup}; ${os.cpus().length} CPU(s): ${cpu.trim()}`,
    `- Node ${process.version}; kern-sandbox ${pkgVersion}; ${sh('bwrap', ['--version']) || 'bubblewrap not installed'}; running as ${user.uid === 0 ? 'root' : `uid ${user.uid} (rootless)`}`,
    `- Rootfs: \`${ROOTFS}\` (Debian bookworm, python ${sh(path.join(ROOTFS, 'usr/bin/python3'), ['-c', 'import platform;print(platform.python_version())']) || '3.11'}); bare cases use the host's \`/usr/bin/python3\``,
    `- N = ${N} timed iterations per case after ${WARMUP} warm-ups, cases interleaved round-robin; times in ms, spawn-to-exit as seen from Node`,
    '- kern CLI rows: `kern run --image ROOTFS --workspace WS [--no-enforce-limits] -- CMD` (default limits: memory 512 MiB, pids 256, timeout 30 s, 64 MiB `/tmp` tmpfs)',
    '- Reproduce: `npm run build && npm run bench` (or `BENCH_N=200 npm run bench` for tighter numbers)',
    '- Isolation in the bubblewrap rows: `bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup-try --die-with-parent --new-session --ro-bind ROOTFS / --proc /proc --dev /dev --tmpfs /tmp --bind WS ' + wsTarget + ' --chdir ' + wsTarget + ' --cap-drop ALL -- CMD`',
    ...notes.map((n) => `- Note: ${n}`),
    '',
    '| case | median ms | p90 ms | vs bwrap (same command) | vs bare (same command) |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    END,
  ];
  const block = lines.join('\n');

  writeSection(
    OUT,
    START,
    END,
    block,
    '# Benchmarks\n\nStart-up cost of one fresh box, side by side with a bare process and bubblewrap.\n\n'
  );
  console.log(block);
  console.log(`\nbench: wrote ${path.relative(process.cwd(), OUT) || OUT}`);

  if (cases.some((c) => c.error)) {
    console.error('bench: some cases failed (see the table); the other numbers are still valid');
  }
}

main().catch((e) => {
  console.error('bench: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
