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
// `egressAllow` naming a loopback server of this process, every fifth with `prewarm: 1`, every
// seventh with `securityProfile: 'untrusted'`, every other eleventh with `capDrop: []`, whose boxes
// lock their mounts in a nested user namespace), then
// run a python `runCode`, a `run(['sh', ...])` that writes a file, a `writeFile`/`readFile` round
// trip, `listFiles`, a kernel with two cells, a `snapshot`, through the proxy when it has one,
// and `close()`. Every result is checked (exit code, output); a wrong one counts as a failure.
//
// Leaks are counted on the host before the first and after the last Sandbox: processes whose
// parent chain reaches this process, this process's open descriptors, mounts in this process's
// mount namespace, cgroup directories named `box-*` under /sys/fs/cgroup, and `kern-ws-*` temp
// directories. Processes and descriptors are sampled after a short settle (a `kern` exits just
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
      if (e.name.startsWith('box-')) n++;
      else if (depth < 4) walk(path.join(dir, e.name), depth + 1);
    }
  };
  walk('/sys/fs/cgroup', 0);
  return n;
}

function snapshotHost() {
  return {
    processes: descendants(),
    fds: fs.readdirSync('/proc/self/fd').length,
    mounts: fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean).length,
    cgroups: boxCgroups(),
    tempDirs: fs.readdirSync(os.tmpdir()).filter((n) => n.startsWith('kern-ws-')).length,
  };
}

async function main() {
  const server = http.createServer((req, res) => res.end('soak'));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-soak-'));
  await new Promise((r) => setTimeout(r, 500));
  const before = snapshotHost();
  const t0 = Date.now();
  const deadline = t0 + SECONDS * 1000;
  const times = { open: [], runCode: [], run: [], files: [], kernel: [], snapshot: [], egress: [], close: [] };
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
      const egress = w % 3 === 0;
      const o = { image: ROOTFS, ...(egress ? { egressAllow: [`127.0.0.1:${port}`] } : {}), ...(w % 5 === 0 ? { prewarm: 1 } : {}),
        ...(w % 7 === 0 ? { securityProfile: 'untrusted' } : w % 11 === 0 ? { capDrop: [] } : {}) };
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
        await timed('kernel', async () => {
          const k = await sb.kernel();
          try {
            await k.runCode('x = 41');
            const c = await k.runCode('x + 1');
            check('kernel', c.results.length === 1 && c.results[0].text === '42', c);
          } finally {
            await k.close();
          }
        });
        await timed('snapshot', async () => sb.snapshot(path.join(scratch, `w${w}.tgz`)));
        if (egress) {
          const e = await timed('egress', () =>
            sb.runCode(`import os, urllib.request\nos.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")\nprint(urllib.request.urlopen("http://127.0.0.1:${port}/").read().decode())`)
          );
          check('egress', e.exitCode === 0 && e.stdout === 'soak\n', e);
        }
      } catch (err) {
        failures.push(`worker ${w}: ${err && err.message}`);
      } finally {
        if (sb) await timed('close', () => sb.close());
      }
    }
  };
  await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
  const wall = (Date.now() - t0) / 1000;
  server.close();
  fs.rmSync(scratch, { recursive: true, force: true });
  await new Promise((r) => setTimeout(r, 2000));
  const after = snapshotHost();
  const leaks = Object.keys(before).filter((k) => after[k] > before[k]);
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
    `- Reproduce: \`npm run build && npm run bench:soak\` (SOAK_WORKERS, default 100; SOAK_SECONDS, default 600)`,
    `- ${WORKERS} workers for ${SECONDS} s (${wall.toFixed(0)} s with the last sessions finishing): ${sessions} Sandboxes opened, each running python, sh, the file API, a two-cell kernel, a snapshot${' '}and (every third) a fetch through the egress proxy; ${failures.length} failed check(s).`,
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
