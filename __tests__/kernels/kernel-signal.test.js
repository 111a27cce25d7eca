'use strict';
// rootless: yes
// A kernel cell's `signal` (issue 19, an ADDITION in index.d.ts): an abort stops the cell the
// way its timeout would (the driver kernel's box is ended; a Jupyter kernel is interrupted and
// keeps its state, or is torn down if it does not stop), and only then does the call reject with
// signal.reason. Each abort here is of a cell that, left alone, would go on to write a workspace
// file (and change a variable) well within its own timeout: the file's absence, not the
// rejection, shows the abort stopped it.

const fs = require('fs');
const { SandboxError } = require('../..');
const { uniqueName, hostProcessesMatching, expectSandboxError, waitFor, withKernel } = require('../helpers');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

/** A cell that starts a child sleeping 60 s whose cmdline holds `marker` (so the host sees the
 * cell run), then `before` (python lines), sleeps `sleepS`, then sets x = 2 and writes
 * `done-<marker>`: what it does only if nothing stopped it. The child is a python, which a
 * SIGINT ends at any moment after its exec (the default action until its handler is in, then
 * KeyboardInterrupt); not `sh -c "sleep 60"`: dash catches SIGINT under -c and waits for its
 * foreground job, so a SIGINT between its fork of `sleep` and that exec is lost to the sleep and
 * the shell outlives the interrupt by a minute. */
const stoppableCell = (marker, sleepS, before = []) => [
  'import subprocess, sys, time',
  ...before,
  `subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "${marker}"])`,
  `time.sleep(${sleepS})`,
  'x = 2',
  `open("done-${marker}", "w").close()`,
].join('\n');

/** Runs `cell` on `k` under a fresh AbortController, aborts it (with `reason`, if given) once the
 * host sees a process with `marker` in its cmdline, and returns how the call settled and those
 * processes right before the abort and right after the call settled. */
async function abortOnceUp(k, cell, cellOpts, marker, reason) {
  const ac = new AbortController();
  let settledYet = false;
  const settled = k.runCode(cell, { ...cellOpts, signal: ac.signal }).then(
    (r) => ({ resolved: r }),
    (e) => ({ rejected: e }),
  ).finally(() => (settledYet = true));
  // Generous, only so a cell that never starts its process fails instead of hanging.
  const before = await waitFor(() => settledYet || hostProcessesMatching(marker).length > 0, 60000, 20);
  expect({ settledYet, before: !!before }).toEqual({ settledYet: false, before: true });
  if (reason === undefined) ac.abort();
  else ac.abort(reason);
  const outcome = await settled;
  return { outcome, after: hostProcessesMatching(marker) };
}

const files = async (sb) => (await sb.listFiles()).map((f) => f.path);

describe('the driver kernel', () => {
  test('an abort mid-cell ends the kernel\'s box and every process in it, then rejects with an AbortError; later calls say why', async () => {
    await withKernel({}, {}, async (k, sb) => {
      await k.runCode('x = 1');
      const marker = uniqueName('kcellabort');
      // The sleep is well within the cell's timeout: only the abort can stop the cell.
      const { outcome, after } = await abortOnceUp(k, stoppableCell(marker, 20), { timeoutS: 100 }, marker);
      expect(outcome.rejected).toBeInstanceOf(DOMException);
      expect(outcome.rejected.name).toBe('AbortError');
      expect(after).toEqual([]);
      // As after a timeout, the driver kernel is gone, and says the cell was aborted.
      await expectSandboxError(() => k.runCode('print(x)'), SandboxError, /torn down \(the cell was aborted; kern killed the kernel's box/);
      expect(await files(sb)).not.toContain(`done-${marker}`);
    });
  });

  test('with onTimeout: "interrupt", an abort interrupts the cell and the kernel keeps its state', async () => {
    await withKernel({}, { onTimeout: 'interrupt' }, async (k, sb) => {
      await k.runCode('x = 1');
      const marker = uniqueName('kcellintr');
      const { outcome, after } = await abortOnceUp(k, stoppableCell(marker, 20), { timeoutS: 100 }, marker);
      expect(outcome.rejected).toMatchObject({ name: 'AbortError' });
      // The cell's child got the interrupt too (it ends as the signal reaches it, which may be
      // just after the call settled: bounded, so a child the interrupt missed fails this).
      expect(after.length === 0 || (await waitFor(() => hostProcessesMatching(marker).length === 0, 10000, 20))).toBe(true);
      expect((await k.runCode('print(x)')).stdout).toBe('1\n');
      expect(await files(sb)).not.toContain(`done-${marker}`);
    });
  });

  test('onAbort: "resolve": the aborted cell resolves with its output so far; the kernel is torn down as before', async () => {
    await withKernel({}, {}, async (k) => {
      const marker = uniqueName('kcellkeep');
      const { outcome, after } = await abortOnceUp(k, `print("so far", flush=True)\n${stoppableCell(marker, 20)}`, { timeoutS: 100, onAbort: 'resolve' }, marker);
      expect(outcome.resolved.stdout).toBe('so far\n');
      expect(outcome.resolved.fault).toMatchObject({ type: 'killed', message: expect.stringMatching(/^the cell was aborted; kern killed the kernel's box/) });
      expect(after).toEqual([]);
      await expectSandboxError(() => k.runCode('1'), SandboxError, /torn down \(the cell was aborted/);
    });
  });

  test('aborted with a reason of its own, it rejects with that very object', async () => {
    await withKernel({}, {}, async (k, sb) => {
      const marker = uniqueName('kcellreason');
      const reason = new Error('x');
      const { outcome, after } = await abortOnceUp(k, stoppableCell(marker, 20), { timeoutS: 100 }, marker, reason);
      expect(outcome.rejected).toBe(reason);
      expect(after).toEqual([]);
      expect(await files(sb)).not.toContain(`done-${marker}`);
    });
  });

  test('an already-aborted signal rejects with its reason and runs nothing; the kernel carries on, state and all', async () => {
    await withKernel({}, {}, async (k, sb) => {
      await k.runCode('x = 1');
      const name = uniqueName('kcellnever');
      const write = `x = 2\nopen("${name}", "w").close()`;
      const e = await k.runCode(write, { signal: AbortSignal.abort() }).catch((err) => err);
      expect(e).toBeInstanceOf(DOMException);
      expect(e.name).toBe('AbortError');
      const reason = new Error('never started');
      await expect(k.runCode(write, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
      const after = await k.runCode('print(x)');
      expect(after.stdout).toBe('1\n');
      expect(await files(sb)).not.toContain(name);
    });
  });

  test('a cell aborted while it waits for an earlier one rejects at once and never runs; the cells around it run in order', async () => {
    await withKernel({}, {}, async (k, sb) => {
      const name = uniqueName('kcellqueued');
      // The first cell holds the kernel until the test writes `release` (no clock involved).
      const first = k.runCode('import os, time\nlog = ["first"]\nwhile not os.path.exists("release"): time.sleep(0.02)', { timeoutS: 100 });
      const ac = new AbortController();
      const queued = k.runCode(`log.append("queued")\nopen("${name}", "w").close()`, { signal: ac.signal });
      const last = k.runCode('log.append("last")\nprint(log)');
      ac.abort();
      // Rejected while the first cell still holds the kernel: it did not wait for it.
      await expect(queued).rejects.toMatchObject({ name: 'AbortError' });
      await sb.writeFile('release', '');
      expect((await first).success).toBe(true);
      expect((await last).stdout).toBe("['first', 'last']\n");
      expect(await files(sb)).not.toContain(name);
    });
  });

  test('a signal that is never aborted changes nothing; one aborted after the cell is ignored', async () => {
    await withKernel({}, {}, async (k) => {
      const ac = new AbortController();
      const r = await k.runCode('x = 5\nprint(x)', { signal: ac.signal });
      expect(r.stdout).toBe('5\n');
      ac.abort();
      expect((await k.runCode('print(x + 1)', { signal: new AbortController().signal })).stdout).toBe('6\n');
    });
  });

  test('a signal that is not an AbortSignal is a SandboxError, and the cell does not run', async () => {
    await withKernel({}, {}, async (k) => {
      await k.runCode('x = 1');
      await expectSandboxError(() => k.runCode('x = 2', { signal: { aborted: true } }), SandboxError, /option `signal` must be an AbortSignal/);
      await expect(k.runCode('x = 2', { signal: 'abort' })).rejects.toThrow(/option `signal` must be an AbortSignal/);
      expect((await k.runCode('print(x)')).stdout).toBe('1\n');
    });
  });
});

describe('a Jupyter kernel (ipykernel)', () => {
  beforeAll(() => {
    if (!fs.existsSync(`${SCI}/.kern-test-rootfs`)) {
      throw new Error(`test rootfs (sci) missing at ${SCI}: build it with scripts/build-test-rootfs-sci.sh`);
    }
  });

  test('an abort mid-cell interrupts the kernel, which keeps its state; the call rejects with the abort\'s reason', async () => {
    await withKernel({ image: SCI }, { jupyter: 'python3' }, async (k, sb) => {
      await k.runCode('x = 1');
      const marker = uniqueName('jcellabort');
      const reason = new Error('x');
      const { outcome } = await abortOnceUp(k, stoppableCell(marker, 60), { timeoutS: 100 }, marker, reason);
      expect(outcome.rejected).toBe(reason);
      // Interrupted, not torn down: the state from before the cell, and nothing after its sleep.
      const after = await k.runCode('print(x)');
      expect(after.stdout).toBe('1\n');
      expect(await files(sb)).not.toContain(`done-${marker}`);
    });
  });

  test('a cell that ignores the interrupt is torn down once the grace is over, then the call rejects; later calls say why', async () => {
    await withKernel({ image: SCI }, { jupyter: 'python3' }, async (k, sb) => {
      const marker = uniqueName('jcellstubborn');
      const cell = stoppableCell(marker, 30, ['import signal', 'signal.signal(signal.SIGINT, signal.SIG_IGN)']);
      const { outcome, after } = await abortOnceUp(k, cell, { timeoutS: 100 }, marker);
      expect(outcome.rejected).toMatchObject({ name: 'AbortError' });
      expect(after).toEqual([]);
      await expectSandboxError(() => k.runCode('1'), SandboxError, /torn down \(the cell was aborted and did not stop within \d+s of an interrupt/);
      expect(await files(sb)).not.toContain(`done-${marker}`);
    });
  });

  test('an already-aborted signal runs nothing, and a bad one is a SandboxError; the kernel carries on', async () => {
    await withKernel({ image: SCI }, { jupyter: 'python3' }, async (k, sb) => {
      await k.runCode('x = 1');
      const name = uniqueName('jcellnever');
      const reason = new Error('never started');
      await expect(k.runCode(`x = 2\nopen("${name}", "w").close()`, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
      await expect(k.runCode('x = 3', { signal: {} })).rejects.toThrow(/option `signal` must be an AbortSignal/);
      expect((await k.runCode('print(x)')).stdout).toBe('1\n');
      expect(await files(sb)).not.toContain(name);
    });
  });
});
