'use strict';
// rootless: yes
// (Rootless: the spill is a file the host writes into the workspace as the caller's user.)
// `spillOutput` (issue 35): output past `maxOutputBytes` is kept whole in a workspace file that
// the result names, on every route a call's output takes; bounded by `workspaceMaxBytes`; a box
// can't turn the host's write elsewhere; a 1 GiB stream spills with the host's memory flat.

const fs = require('fs');
const path = require('path');
const helpers = require('../helpers');

const { opts, expectOk, makeTempDir, summary, expectRefusedBeforeAnyBox, uniqueName } = helpers;
const { Sandbox, SandboxError } = require('../..');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

const CAP = 1000;
const N = 100000;
/** What `seq 1 N` (and the python loop below) prints. */
const SEQ = Array.from({ length: N }, (_, i) => `${i + 1}\n`).join('');
const PY_SEQ = `for i in range(1, ${N + 1}): print(i)\n`;
const SPILL_PATH = /^\.kern-output\/[0-9]+-[0-9]+-[0-9]+\.stdout$/;

beforeAll(() => helpers.requireRootfs());

/** A Sandbox spilling past CAP on a workspace of its own, and that workspace on the host. */
async function spilling(extra = {}) {
  const ws = makeTempDir('kern-spill-ws-');
  const sb = await new Sandbox(opts({ maxOutputBytes: CAP, spillOutput: true, workspace: ws, ...extra })).open();
  return { sb, ws };
}

/** The result kept the cap, and the file it names holds the whole stream (on stderr, after
 * the lines kern wrote itself, as `stderr` shows them), on the host and through readFile's
 * ranges. */
async function expectSpilled(sb, ws, r, whole, stream = 'stdout') {
  const spill = r[`${stream}Spill`];
  expect(spill).toEqual({ path: expect.stringMatching(SPILL_PATH.source.replace('stdout', stream)), bytes: expect.any(Number), complete: true });
  const file = fs.readFileSync(path.join(ws, spill.path), 'utf8');
  expect({ bytes: Buffer.byteLength(file), cut: r[`${stream}Truncated`] }).toEqual({ bytes: spill.bytes, cut: true });
  // The result's text is the file's first CAP bytes.
  expect({ kept: r[stream].slice(0, CAP) }).toEqual({ kept: file.slice(0, CAP) });
  if (stream === 'stdout') expect(r.stdout.length).toBe(CAP);
  expect(file.endsWith(whole)).toBe(true);
  const lead = file.slice(0, file.length - whole.length).split('\n').filter(Boolean);
  expect(lead.filter((l) => stream === 'stdout' || !/^(note|warning): /.test(l))).toEqual([]);
  const mid = Math.floor(spill.bytes / 2);
  const page = await sb.readFile(spill.path, { offset: mid, length: 100 });
  expect(page.toString()).toBe(Buffer.from(file).subarray(mid, mid + 100).toString());
  return spill;
}

describe('spillOutput', () => {
  test('off by default: the excess is dropped and nothing is written', async () => {
    const ws = makeTempDir('kern-spill-ws-');
    const sb = await new Sandbox(opts({ maxOutputBytes: CAP, workspace: ws })).open();
    try {
      const r = await sb.run(['seq', '1', String(N)]);
      expectOk(r);
      expect({ len: r.stdout.length, cut: r.stdoutTruncated, spill: r.stdoutSpill }).toEqual({ len: CAP, cut: true, spill: null });
      expect(fs.existsSync(path.join(ws, '.kern-output'))).toBe(false);
    } finally {
      await sb.close();
    }
  });

  test('a bad value is refused before any box', async () => {
    const err = await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ spillOutput: 'yes' }), /spillOutput/);
    expect(err.code).toBe('ERR_INVALID_OPTION');
  });

  test('a fresh box: both streams spill whole, stdout beside its stderr, and the result lists the files', async () => {
    const { sb, ws } = await spilling();
    try {
      const r = await sb.run(['sh', '-c', `seq 1 ${N}; seq 1 ${N} >&2`]);
      expectOk(r);
      const out = await expectSpilled(sb, ws, r, SEQ);
      const err = await expectSpilled(sb, ws, r, SEQ, 'stderr');
      expect(err.path).toBe(out.path.replace(/stdout$/, 'stderr'));
      expect(r.files.map((f) => f.path).sort()).toEqual([out.path, err.path].sort());
      // A stream under the cap has no file.
      const small = await sb.run(['echo', 'hi']);
      expect({ out: small.stdoutSpill, err: small.stderrSpill, cut: small.truncated }).toEqual({ out: null, err: null, cut: false });
      // Each call has its own file; the earlier one stays.
      const again = await sb.run(['seq', '1', String(N)]);
      expect(again.stdoutSpill.path).not.toBe(out.path);
      expect(fs.readFileSync(path.join(ws, out.path), 'utf8')).toBe(SEQ);
    } finally {
      await sb.close();
    }
  });

  for (const [route, extra] of [
    ['a fresh python box', {}],
    ['a prewarmed box', { prewarm: 1 }],
    ['a zygote fork', { zygote: true }],
  ]) {
    test(`runCode in ${route} spills whole`, async () => {
      const { sb, ws } = await spilling(extra);
      try {
        for (let i = 0; i < 2; i++) {
          const r = await sb.runCode(PY_SEQ);
          expectOk(r);
          await expectSpilled(sb, ws, r, SEQ);
        }
      } finally {
        await sb.close();
      }
    });
  }

  test('a call into a resident box (persist) spills whole', async () => {
    const { sb, ws } = await spilling({ persist: true, name: uniqueName('spill') });
    try {
      const r = await sb.runCode(PY_SEQ);
      expectOk(r);
      await expectSpilled(sb, ws, r, SEQ);
    } finally {
      await sb.destroy();
      await sb.close();
    }
  });

  test('kernel cells spill whole, each cell its own file', async () => {
    const { sb, ws } = await spilling();
    try {
      const k = await sb.kernel();
      try {
        const first = await k.runCode(PY_SEQ);
        expectOk(first);
        const a = await expectSpilled(sb, ws, first, SEQ);
        const second = await k.runCode(`import sys\nfor i in range(1, ${N + 1}): print(i, file=sys.stderr)\n`);
        expectOk(second);
        const b = await expectSpilled(sb, ws, second, SEQ, 'stderr');
        expect(second.stdoutSpill).toBeNull();
        expect(b.path.replace(/stderr$/, '')).not.toBe(a.path.replace(/stdout$/, ''));
      } finally {
        await k.close();
      }
    } finally {
      await sb.close();
    }
  });

  test('a Jupyter kernel cell spills whole', async () => {
    if (!fs.existsSync(SCI)) throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
    const { sb, ws } = await spilling({ image: SCI });
    try {
      const k = await sb.kernel({ jupyter: 'python3' });
      try {
        const r = await k.runCode(PY_SEQ);
        expectOk(r);
        await expectSpilled(sb, ws, r, SEQ);
      } finally {
        await k.close();
      }
    } finally {
      await sb.close();
    }
  });

  test('a process and a terminal spill whole', async () => {
    const { sb, ws } = await spilling();
    try {
      const p = await sb.spawn(['seq', '1', String(N)]);
      const r = await p.wait();
      expectOk(r);
      await expectSpilled(sb, ws, r, SEQ);
      // A terminal's output is the pty's: each newline comes out as CR LF.
      const t = await sb.terminal({ argv: ['seq', '1', String(N)] });
      const tr = await t.wait();
      expectOk(tr);
      await expectSpilled(sb, ws, tr, SEQ.replace(/\n/g, '\r\n'));
    } finally {
      await sb.close();
    }
  });

  test('workspaceMaxBytes bounds the file, and the result says where it stopped', async () => {
    const { sb, ws } = await spilling({ workspaceMaxBytes: 100000 });
    try {
      const r = await sb.run(['seq', '1', String(N)]);
      expect(r.exitCode).toBe(0);
      expect(r.stdoutSpill).toEqual({ path: expect.stringMatching(SPILL_PATH), bytes: 100000, complete: false });
      expect(fs.readFileSync(path.join(ws, r.stdoutSpill.path), 'utf8')).toBe(SEQ.slice(0, 100000));
      expect(r.runtimeNotes).toEqual(expect.arrayContaining([expect.stringMatching(/first 100000 bytes \(workspaceMaxBytes\)/)]));
    } finally {
      await sb.close();
    }
  });
});

describe('spillOutput under attack', () => {
  /** A host directory an escaped write would land in, listed at every poll while `fn` runs. */
  async function watchingHostDir(fn) {
    const target = makeTempDir('kern-spill-target-');
    const seen = new Set();
    const poll = () => fs.readdirSync(target).forEach((n) => seen.add(n));
    const timer = setInterval(poll, 10);
    try {
      await fn(target);
    } finally {
      clearInterval(timer);
    }
    poll();
    return [...seen];
  }

  test('a box that made .kern-output a symlink to a host directory gets no spill, and the host directory stays empty', async () => {
    const { sb, ws } = await spilling();
    try {
      let r;
      const seen = await watchingHostDir(async (target) => {
        expectOk(await sb.run(['ln', '-s', target, '.kern-output']));
        r = await sb.run(['seq', '1', String(N)]);
      });
      expect(seen).toEqual([]);
      expect(r.exitCode).toBe(0);
      expect({ spill: r.stdoutSpill, len: r.stdout.length }).toEqual({ spill: null, len: CAP });
      expect(r.runtimeNotes).toEqual(expect.arrayContaining([expect.stringMatching(/^warning: stdout past maxOutputBytes could not be kept in the workspace .*symlink/)]));
      expect(fs.lstatSync(path.join(ws, '.kern-output')).isSymbolicLink()).toBe(true);
    } finally {
      await sb.close();
    }
  });

  test('a box that swaps .kern-output for a symlink while its output spills does not move the write out', async () => {
    const { sb, ws } = await spilling();
    try {
      let r;
      const seen = await watchingHostDir(async (target) => {
        // Past the cap, waits for the spill's directory, swaps it for a symlink to the host
        // directory, then writes more.
        const script = [
          `seq 1 ${N}`,
          'i=0; while [ ! -d .kern-output ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done',
          `mv .kern-output moved && ln -s ${target} .kern-output && echo swapped >&2`,
          `seq 1 ${N}`,
        ].join('\n');
        r = await sb.run(['sh', '-c', script]);
      });
      expect(summary(r)).toMatchObject({ exitCode: 0, fault: null });
      expect(r.stderr).toContain('swapped');
      expect(seen).toEqual([]);
      // The file went where the directory went: the whole stream, in the box's own directory.
      const name = path.basename(r.stdoutSpill.path);
      expect(fs.readFileSync(path.join(ws, 'moved', name), 'utf8')).toBe(SEQ + SEQ);
    } finally {
      await sb.close();
    }
  });

  test('1 GiB of stdout spills whole while the host process memory stays flat', async () => {
    const { sb, ws } = await spilling({ maxOutputBytes: 1 << 20, timeoutS: 600 });
    try {
      const before = process.memoryUsage().rss;
      let peak = before;
      const timer = setInterval(() => {
        peak = Math.max(peak, process.memoryUsage().rss);
      }, 20);
      let r;
      try {
        r = await sb.run(['head', '-c', String(1 << 30), '/dev/zero']);
      } finally {
        clearInterval(timer);
      }
      expectOk(r);
      expect(r.stdoutSpill).toEqual({ path: expect.stringMatching(SPILL_PATH), bytes: 1 << 30, complete: true });
      expect(fs.statSync(path.join(ws, r.stdoutSpill.path)).size).toBe(1 << 30);
      // The kept MiB, its copy for the file and the queued chunks: well under 256 MiB.
      const growthMiB = Math.round((peak - before) / (1 << 20));
      expect({ growthMiB, under256: growthMiB < 256 }).toEqual({ growthMiB, under256: true });
      fs.rmSync(path.join(ws, r.stdoutSpill.path));
    } finally {
      await sb.close();
    }
  });
});
