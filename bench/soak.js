#!/usr/bin/env node
// Soak: many Sandboxes at once doing mixed work for minutes, then a count of what could leak.
// Not part of CI (it runs for minutes on purpose). Writes its section between the bench-soak
// markers of BENCHMARKS.md and prints it; exits non-zero when something leaked or a call failed.
//
//   npm run bench:soak                          # 100 workers for 600 s
//   SOAK_WORKERS=20 SOAK_SECONDS=60 npm run bench:soak
//
// Needs: `npm run build` and the test rootfs.
//
// Each worker loops until the time is up: open a Sandbox on the test rootfs (every third with
// `egressAllow` naming a loopback server of this process, every other of those with `secrets` for
// it too, every fifth with `prewarm: 1`, every fourth with `zygote: true`, every seventh with
// `securityProfile: 'untrusted'`, every other eleventh with `capDrop: []`, whose boxes lock their
// mounts in a nested user namespace; every sixth from the fifth is a `persist` Sandbox instead),
// then run a python `runCode`, a `run(['sh', ...])` that writes a file, a `writeFile`/`readFile`
// round trip, `listFiles`, a kernel with two cells (not persist), every fourth session a Jupyter
// kernel cell, a `spawn()`ed server reached through `connect()`, a `terminal()`, a `snapshot`,
// through the proxy when it has one (with the secret's value checked at the server, never in the
// box), and `close()` (a persist worker's box is destroyed at the end). Every result is checked
// (exit code, output); a wrong one counts as a failure.
//
// Leaks are counted on the host before the first and after the last Sandbox: processes whose
// parent chain reaches this process, this process's open descriptors, mounts in this process's
// mount namespace, cgroup directories named `box-*` under /sys/fs/cgroup whose kern is gone (other
// runs on the host make live ones meanwhile), `kern-ws-*` temp directories and their owner files,
// and this process's RSS (after a GC when node runs with --expose-gc; more than
// SOAK_RSS_MB, default 256, of growth counts as a leak). Processes and descriptors are sampled after a short settle (a `kern` exits just
// after it has reported).
'use strict';

const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { REPO, KERN, OUT, ROOTFS, dieFor, parsePositiveInt: positiveInt, percentile, median, writeSection, requireBuilt, readProcs, isOurs } = require('./common');

const die = dieFor('bench-soak');
const WORKERS = positiveInt(process.env.SOAK_WORKERS, 100, 'SOAK_WORKERS', die);
const SECONDS = positiveInt(process.env.SOAK_SECONDS, 600, 'SOAK_SECONDS', die);
const RSS_MB = positiveInt(process.env.SOAK_RSS_MB, 256, 'SOAK_RSS_MB', die);
const SECRET = `soak-secret-${process.pid}-${Date.now()}`;
/** The image with Debian's ipykernel, for the Jupyter cells (skipped without it). */
const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
const HAS_SCI = fs.existsSync(path.join(SCI, '.kern-test-rootfs'));
// A private temp dir for this run: what is left in it at the end is ours (temporary workspaces,
// their owner files), whatever else runs on the host.
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-soak-tmp-'));
process.env.TMPDIR = TMP;
const START = '<!-- bench-soak:start -->';
const END = '<!-- bench-soak:end -->';

if (!fs.existsSync(path.join(ROOTFS, '.kern-test-rootfs'))) die(`no test rootfs at ${ROOTFS}: run scripts/build-test-rootfs.sh`);
const { Sandbox } = requireBuilt(REPO, KERN, die);

/** Processes below this one (kern monitors, boxes, drivers), not counting itself. */
function descendants() {
  const procs = readProcs();
  return [...procs.keys()].filter((pid) => pid !== process.pid && isOurs(procs, pid)).length;
}

function boxCgroups() {
  let n = 0;
  const walk = (dir, depth) => {
    let entries;
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      // kern names its leaves box-<kern pid>-…: one whose kern is gone is left behind.
      const m = /^box-(\d+)-/.exec(e.name);
      if (m && !fs.existsSync(`/proc/${m[1]}`)) n++;
      else if (e.name.startsWith('box-')) continue;
      else if (depth < 4) walk(path.join(dir, e.name), depth + 1);
    }
  };
  walk('/sys/fs/cgroup', 0);
  return n;
}

function snapshotHost() {
  // Collected first: what only a JS object's finaliser would close is not counted as held.
  if (global.gc) global.gc();
  return {
    processes: descendants(),
    fds: fdLinks().length,
    mounts: fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean).length,
    cgroups: boxCgroups(),
    tmpEntries: fs.readdirSync(TMP).filter((n) => !n.startsWith('kern-soak-')).length,
    rssMb: Math.round(rss() / 2 ** 20),
  };
}

function fdLinks() {
  const out = [];
  for (const f of fs.readdirSync('/proc/self/fd')) {
    try {
      out.push(fs.readlinkSync(`/proc/self/fd/${f}`).replace(/\[\d+\]$/, ''));
    } catch {
      // the listing's own descriptor, closed by now
    }
  }
  return out.sort();
}

function rss() {
  if (global.gc) global.gc();
  return process.memoryUsage().rss;
}

async function main() {
  const authorizations = [];
  const server = http.createServer((req, res) => {
    if (req.headers.authorization) authorizations.push(req.headers.authorization);
    res.end('soak');
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-soak-'));
  await new Promise((r) => setTimeout(r, 500));
  const before = snapshotHost();
  const fdsAtStart = fdLinks();
  const t0 = Date.now();
  const deadline = t0 + SECONDS * 1000;
  const times = { open: [], runCode: [], run: [], files: [], kernel: [], jupyter: [], spawn: [], terminal: [], snapshot: [], egress: [], close: [] };
  const failures = [];
  let sessions = 0;
  const timed = async (kind, fn) => {
    const s = process.hrtime.bigint();
    const v = await fn();
    times[kind].push(Number(process.hrtime.bigint() - s) / 1e6);
    return v;
  };
  const check = (what, cond, detail) => {
    if (!cond) failures.push(`${what}: ${JSON.stringify(detail).slice(0, 300)}`);
  };
  const worker = async (w) => {
    for (let i = 0; Date.now() < deadline; i++) {
      const persist = w % 6 === 5;
      const egress = !persist && w % 3 === 0;
      const secrets = egress && w % 6 === 0;
      const hardened = w % 7 === 0 ? { securityProfile: 'untrusted' } : w % 11 === 0 ? { capDrop: [] } : {};
      const o = persist
        ? { image: ROOTFS, persist: true, name: `soak-${process.pid}-${w}`, workspace: fs.mkdtempSync(path.join(scratch, `p${w}-`)) }
        : { image: ROOTFS, ...(egress ? { egressAllow: [`127.0.0.1:${port}`] } : {}), ...(w % 5 === 0 ? { prewarm: 1 } : {}), ...hardened,
          ...(secrets ? { secrets: { SOAK_KEY: { value: SECRET, hosts: [`127.0.0.1:${port}`] } } } : {}),
          ...(w % 4 === 1 && !hardened.securityProfile ? { zygote: true } : {}) };
      let sb;
      try {
        sb = await timed('open', () => new Sandbox(o).open());
        sessions++;
        const a = await timed('runCode', () => sb.runCode(`print(${w} * ${i})`));
        check('runCode', a.exitCode === 0 && a.stdout === `${w * i}\n`, a);
        const b = await timed('run', () => sb.run(['sh', '-c', `echo ${i} > out.txt && cat out.txt`]));
        check('run', b.exitCode === 0 && b.stdout === `${i}\n` && b.files.length === 1, b);
        await timed('files', async () => {
          await sb.writeFile(`d/${i}.txt`, `soak ${w} ${i}`);
          const back = (await sb.readFile(`d/${i}.txt`)).toString();
          check('readFile', back === `soak ${w} ${i}`, back);
          const list = await sb.listFiles();
          check('listFiles', list.length === 2, list);
        });
        if (!persist) await timed('kernel', async () => {
          const k = await sb.kernel();
          try {
            await k.runCode('x = 41');
            const c = await k.runCode('x + 1');
            check('kernel', c.results.length === 1 && c.results[0].text === '42', c);
          } finally {
            await k.close();
          }
        });
        if (HAS_SCI && !persist && i % 4 === 0) await timed('jupyter', async () => {
          const js = await new Sandbox({ image: SCI }).open();
          try {
            const k = await js.kernel({ jupyter: 'python3' });
            try {
              const c = await k.runCode('6 * 7');
              check('jupyter', c.results.length === 1 && c.results[0].text === '42', c);
            } finally {
              await k.close();
            }
          } finally {
            await js.close();
          }
        });
        await timed('spawn', async () => {
          let said = '';
          const p = await sb.spawn(['python3', '-c', 'import socket\ns = socket.socket(); s.bind(("127.0.0.1", 47123)); s.listen(1); print("ready", flush=True)\nc, _ = s.accept(); c.sendall(c.recv(100).upper()); c.close()'], {
            onStdout: (d) => (said += d),
          });
          for (let t = 0; t < 200 && !said.includes('ready') && p.running; t++) await new Promise((r) => setTimeout(r, 25));
          const sock = await p.connect(47123);
          const got = await new Promise((resolve, reject) => {
            let buf = '';
            sock.on('data', (d) => (buf += d));
            sock.on('end', () => resolve(buf));
            sock.on('error', reject);
            sock.write(`soak ${w} ${i}`);
          });
          sock.destroy();
          check('connect', got === `SOAK ${w} ${i}`, got);
          const r = await p.wait();
          check('spawn', r.exitCode === 0, r);
        });
        await timed('terminal', async () => {
          const t = await sb.terminal();
          await t.write('echo soak-$((6 * 7)); exit\n');
          const r = await t.wait();
          check('terminal', r.exitCode === 0 && r.stdout.includes('soak-42'), r);
        });
        await timed('snapshot', async () => sb.snapshot(path.join(scratch, `w${w}.tgz`)));
        if (egress) {
          const e = await timed('egress', () =>
            sb.runCode(`import os, urllib.request\nos.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")\nprint(urllib.request.urlopen("http://127.0.0.1:${port}/").read().decode())`)
          );
          check('egress', e.exitCode === 0 && e.stdout === 'soak\n', e);
        }
        if (secrets) {
          const before = authorizations.length;
          const e = await timed('egress', () =>
            sb.runCode(`import os, urllib.request\nos.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")\nk = os.environ["SOAK_KEY"]\nprint(k == ${JSON.stringify(SECRET)})\nr = urllib.request.Request("http://127.0.0.1:${port}/s", headers={"Authorization": "Bearer " + k})\nprint(urllib.request.urlopen(r).read().decode())`)
          );
          check('secrets', e.exitCode === 0 && e.stdout === 'False\nsoak\n' && authorizations.slice(before).includes(`Bearer ${SECRET}`), e);
        }
      } catch (err) {
        failures.push(`worker ${w}: ${err && err.message}`);
      } finally {
        if (sb) await timed('close', () => sb.close());
        if (sb && persist) {
          await sb.destroy().catch((e) => failures.push(`destroy ${w}: ${e.message}`));
          fs.rmSync(o.workspace, { recursive: true, force: true });
        }
      }
    }
  };
  await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
  const wall = (Date.now() - t0) / 1000;
  server.close();
  fs.rmSync(scratch, { recursive: true, force: true });
  await new Promise((r) => setTimeout(r, 2000));
  const after = snapshotHost();
  const fdsBefore = [...fdsAtStart];
  const fdsLeft = fdLinks().filter((l) => {
    const i = fdsBefore.indexOf(l);
    if (i < 0) return true;
    fdsBefore.splice(i, 1);
    return false;
  });
  const tmpLeft = fs.readdirSync(TMP).filter((n) => !n.startsWith('kern-soak-'));
  fs.rmSync(TMP, { recursive: true, force: true });
  const leaks = Object.keys(before).filter((k) => (k === 'rssMb' ? after[k] - before[k] > RSS_MB : after[k] > before[k]));
  const row = (k) => {
    const t = times[k].sort((a, b) => a - b);
    return t.length ? `| ${k} | ${t.length} | ${median(t).toFixed(1)} | ${percentile(t, 0.99).toFixed(1)} | ${t[t.length - 1].toFixed(1)} |` : `| ${k} | 0 | — | — | — |`;
  };
  const lines = [
    START,
    '<!-- Generated by bench/soak.js (`npm run bench:soak`); everything between these markers is overwritten. -->',
    '',
    '## Soak: concurrent Sandboxes, then a leak count',
    '',
    `- Date: ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}`,
    `- Machine: ${os.cpus().length} CPU(s), ${Math.round(os.totalmem() / 2 ** 30)} GiB; running as ${process.getuid() === 0 ? 'root' : 'uid ' + process.getuid()}; Node ${process.version}`,
    `- Reproduce: \`npm run build && npm run bench:soak\` (SOAK_WORKERS, default 100; SOAK_SECONDS, default 600; SOAK_RSS_MB, default 256)`,
    `- ${WORKERS} workers for ${SECONDS} s (${wall.toFixed(0)} s with the last sessions finishing): ${sessions} Sandboxes opened, each running python (fresh, prewarmed or zygote), sh, the file API, a two-cell kernel, a Jupyter cell (every fourth), a spawned server reached through connect(), a terminal, a snapshot, (every third) a fetch through the egress proxy, with a secret every sixth, and (every sixth) all of it in a persist box; ${failures.length} failed check(s).`,
    '',
    '| step | count | median ms | p99 ms | max ms |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...Object.keys(times).map(row),
    '',
    '| on the host | before | after |',
    '| --- | ---: | ---: |',
    ...Object.keys(before).map((k) => `| ${k} | ${before[k]} | ${after[k]} |`),
    '',
    leaks.length ? `Leaked: ${leaks.join(', ')}.` : 'Nothing leaked: every count is back where it started.',
    ...(fdsLeft.length ? ['', `Descriptors left: ${fdsLeft.join(', ')}`] : []),
    ...(tmpLeft.length ? ['', `Left in the temp dir: ${tmpLeft.slice(0, 10).join(', ')}`] : []),
    ...(failures.length ? ['', 'First failures:', '', ...failures.slice(0, 5).map((f) => `- ${f}`)] : []),
    '',
    END,
  ];
  const block = lines.join('\n');
  writeSection(OUT, START, END, block);
  console.log(block);
  if (leaks.length || failures.length) process.exit(1);
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
