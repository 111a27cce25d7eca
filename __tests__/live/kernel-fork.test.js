'use strict';
// rootless: yes
// kernel.fork({ count }) (issue 33, an ADDITION in index.d.ts): each fork is a new kernel in a
// fresh box of a new Sandbox (the parent's options, a copy of its workspace) holding the
// parent's interpreter state, carried as data (driver_state.py), never as memory: the fork is a
// fresh process, as isolated from its parent and siblings as two fresh boxes are.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { Sandbox, SandboxError } = require('../..');
const { opts, uniqueName, expectSandboxError, capsEnforced, hostProcessesMatching, waitFor, cellStdout: py } = require('../helpers');

async function withParent(sbOpts, kOpts, fn) {
  const sb = await new Sandbox(opts(sbOpts)).open();
  const k = await sb.kernel(kOpts);
  const forks = [];
  try {
    await fn(k, sb, forks);
  } finally {
    await Promise.all(forks.map((f) => f.close().catch(() => {})));
    await k.close().catch(() => {});
    await sb.close();
  }
}

const SETUP = `
import os, sys, json, collections
from functools import reduce as fold
class Point:
    scale = 10
    def __init__(self, x, y): self.x, self.y = x, y
    def norm(self): return (self.x ** 2 + self.y ** 2) ** 0.5
    @staticmethod
    def unit(): return Point(1, 0)
    @property
    def scaled(self): return self.x * Point.scale
class Point3(Point):
    def __init__(self, x, y, z):
        super().__init__(x, y)
        self.z = z
def sq(v, k=2): return v ** k
def counter():
    n = 0
    def step():
        nonlocal n
        n += 1
        return n
    return step
tick = counter(); tick(); tick()
data = {'list': [1, 2, 3], 'p': Point(3, 4), 'bytes': b'\\x00\\xff' * 1000, 'od': collections.OrderedDict(a=1)}
alias = data
f = lambda z: sq(z) + 1
p3 = Point3(1, 2, 2)
os.makedirs('sub', exist_ok=True)
os.chdir('sub')
sys.path.append('/workspace/sub')
open('mod_here.py', 'w').write('VALUE = 7\\n')
import mod_here
big = bytearray(8 << 20)
big[12345] = 7
`;

const CHECK = `
print(data['p'].norm(), data['p'].scaled, Point.unit().x, p3.norm(), sq(3), f(2), tick(), alias is data,
      data['bytes'] == b'\\x00\\xff' * 1000, list(data['od']), fold(lambda a, b: a + b, data['list']),
      os.getcwd(), mod_here.VALUE, big[12345], len(big), isinstance(p3, Point), json.dumps([1]))
`;
const CHECKED = '5.0 30 1 2.23606797749979 9 5 3 True True [\'a\'] 6 /workspace/sub 7 7 8388608 True [1]\n';

describe('kernel.fork', () => {
  test('each fork holds the parent\'s variables, objects, cell functions and classes, modules and directory; the parent goes on', async () => {
    await withParent({}, {}, async (k, sb, forks) => {
      await py(k, SETUP);
      expect(await py(k, CHECK)).toBe(CHECKED);
      // The parent's counter moved to 3 above: forks start from there.
      forks.push(...await k.fork({ count: 2 }));
      expect(forks).toHaveLength(2);
      for (const f of forks) {
        expect(f.notCarried).toEqual([]);
        expect(f.sandbox).toBeInstanceOf(Sandbox);
        expect(f.sandbox).not.toBe(sb);
        expect(await py(f, CHECK)).toBe(CHECKED.replace(' 3 True', ' 4 True'));
        // Tracebacks of cell functions still show their lines.
        const r = await f.runCode('sq(None)');
        expect(r.error.traceback).toMatch(/def sq\(v, k=2\): return v \*\* k/);
      }
      expect(await py(k, 'print(tick())')).toBe('4\n');
    });
  });

  test('a fork\'s cells count on from its parent\'s, so tracebacks through carried functions show their own lines', async () => {
    await withParent({}, {}, async (k, _sb, forks) => {
      await py(k, 'def boom():\n    raise ValueError("from the first cell")');
      const second = await k.runCode('x = 2');
      expect(second.executionCount).toBe(2);
      forks.push(...await k.fork());
      const r = await forks[0].runCode('y = 3\nboom()');
      expect(r.executionCount).toBe(3);
      expect(r.error.traceback).toMatch(/<cell-1>.*\n.*raise ValueError\("from the first cell"\)/);
      expect(r.error.traceback).toMatch(/<cell-3>.*\n.*boom\(\)/);
      // The parent's count is its own.
      expect((await k.runCode('z = 4')).executionCount).toBe(3);
    });
  });

  test('values that cannot be pickled are named with why, warned about, and the rest is carried', async () => {
    await withParent({}, {}, async (k, _sb, forks) => {
      await py(k, 'import threading, socket\nlock = threading.Lock()\ns = socket.socket()\nkept = 5');
      // Under Jest, `process` in a test is a copy whose 'warning' event never fires: the call is
      // watched instead.
      const spy = jest.spyOn(process, 'emitWarning').mockImplementation(() => {});
      try {
        forks.push(...await k.fork());
        expect(spy.mock.calls.map((c) => c[1] && c[1].code)).toEqual(['KERN_STATE_LEFT_OUT']);
        expect(spy.mock.calls[0][0]).toMatch(/fork\(\) left out 2 names .*could not be carried: .*lock.* \(see notCarried\)/);
      } finally {
        spy.mockRestore();
      }
      expect(forks[0].notCarried.map((n) => n.name).sort()).toEqual(['lock', 's']);
      expect(forks[0].notCarried[0].reason).toMatch(/pickle/);
      expect(await py(forks[0], 'print(kept, "lock" in globals(), "s" in globals())')).toBe('5 False False\n');
    });
  });

  test('forks are independent of each other and of the parent: memory, files, /tmp, /dev/shm', async () => {
    await withParent({}, {}, async (k, sb, forks) => {
      await py(k, 'x = [0]\nopen("shared.txt", "w").write("parent")');
      forks.push(...await k.fork({ count: 2 }));
      const [a, b] = forks;
      await py(a, 'x.append("a")\nopen("shared.txt", "w").write("a")\nopen("/tmp/t-a", "w").write("a")\nopen("/dev/shm/s-a", "w").write("a")');
      expect(await py(b, 'import os\nprint(x, open("shared.txt").read(), os.path.exists("/tmp/t-a"), os.path.exists("/dev/shm/s-a"))'))
        .toBe('[0] parent False False\n');
      expect(await py(k, 'import os\nprint(x, open("shared.txt").read(), os.path.exists("/tmp/t-a"), os.path.exists("/dev/shm/s-a"))'))
        .toBe('[0] parent False False\n');
      // On the host: three workspaces, each with its own file.
      expect((await sb.readFile('shared.txt')).toString()).toBe('parent');
      expect((await a.sandbox.readFile('shared.txt')).toString()).toBe('a');
      expect((await b.sandbox.readFile('shared.txt')).toString()).toBe('parent');
    });
  });

  test('randomness differs across forks: random, uuid4, os.urandom, str hashes', async () => {
    await withParent({}, {}, async (k, _sb, forks) => {
      await py(k, 'import random, uuid, os\nrandom.random()');
      forks.push(...await k.fork({ count: 3 }));
      const draw = 'print(random.random(), uuid.uuid4(), os.urandom(8).hex(), hash("kern"))';
      const seen = await Promise.all([k, ...forks].map((x) => py(x, draw)));
      for (const col of [0, 1, 2, 3]) {
        expect(new Set(seen.map((s) => s.split(' ')[col])).size).toBe(4);
      }
    });
  });

  test('a fork has its own limits and timeouts: one that runs past its timeout goes alone', async () => {
    const memoryMb = 200;
    await withParent({ memoryMb }, { timeoutS: 3 }, async (k, _sb, forks) => {
      await py(k, 'state = "kept"');
      forks.push(...await k.fork({ count: 2 }));
      const [a, b] = forks;
      const spun = await a.runCode('while True: pass');
      expect(spun.fault && spun.fault.type).toBe('timeout');
      await expectSandboxError(() => a.runCode('1'), SandboxError, /torn down/);
      expect(await py(b, 'print(state)')).toBe('kept\n');
      if (capsEnforced) {
        // Its own deadline: reclaim before the OOM can take seconds in a slow guest.
        const r = await b.runCode('hog = bytearray(400 << 20)\nfor i in range(0, len(hog), 4096): hog[i] = 1', { timeoutS: 120 });
        expect(r.fault && r.fault.type).toBe('oom');
      }
      expect(await py(k, 'print(state)')).toBe('kept\n');
    });
  });

  test('a fork of a fork carries what the first fork changed', async () => {
    await withParent({}, {}, async (k, _sb, forks) => {
      await py(k, 'gen = 0\nhistory = []');
      forks.push(...await k.fork());
      await py(forks[0], 'gen = 1\nhistory.append("one")');
      forks.push(...await forks[0].fork());
      await py(forks[1], 'gen += 1\nhistory.append("two")');
      expect(await py(forks[1], 'print(gen, history)')).toBe('2 [\'one\', \'two\']\n');
      expect(await py(forks[0], 'print(gen, history)')).toBe('1 [\'one\']\n');
      expect(await py(k, 'print(gen, history)')).toBe('0 []\n');
    });
  });

  test('closing a fork closes its Sandbox; the parent\'s cells queued around a fork run in call order', async () => {
    await withParent({}, {}, async (k) => {
      await py(k, 'n = 0');
      const one = k.runCode('import time; time.sleep(0.3); n = 1');
      const forked = k.fork();
      const two = k.runCode('n = 2');
      await one;
      const [f] = await forked;
      await two;
      expect(await py(f, 'print(n)')).toBe('1\n');
      expect(await py(k, 'print(n)')).toBe('2\n');
      await f.close();
      await expectSandboxError(() => f.sandbox.run(['true']), SandboxError, /closed/);
    });
  });

  test('bad counts and options are refused before anything runs, and the kernel runs on', async () => {
    await withParent({}, {}, async (k) => {
      for (const bad of [0, 65, 1.5, '2']) {
        await expectSandboxError(() => k.fork({ count: bad }), SandboxError, /whole number from 1 to 64/);
      }
      await expectSandboxError(() => k.fork({ cnt: 2 }), SandboxError, /unknown fork\(\) option `cnt`/);
      expect(await py(k, 'print("still here")')).toBe('still here\n');
    });
  });
});

describe('kernel.fork attacks: a fork reaches neither its parent nor its siblings', () => {
  test('signals, /proc, sockets and the workspace of the parent are out of a fork\'s reach', async () => {
    const marker = uniqueName('forkparent');
    await withParent({}, {}, async (k, sb, forks) => {
      // The parent leaves a process running, listens on a TCP port and an abstract socket.
      await py(k, [
        'import subprocess, socket',
        `child = subprocess.Popen(["sh", "-c", "sleep 600; : ${marker}"])`,
        'tcp = socket.socket(); tcp.bind(("127.0.0.1", 0)); tcp.listen(); port = tcp.getsockname()[1]',
        `uds = socket.socket(socket.AF_UNIX); uds.bind("\\0${marker}"); uds.listen()`,
        'open("parent-only", "w").write("p")',
      ].join('\n'));
      expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10_000)).toBeTruthy();
      forks.push(...await k.fork({ count: 2 }));
      const [a, b] = forks;
      expect(a.notCarried.map((n) => n.name).sort()).toEqual(['child', 'tcp', 'uds']);
      const tried = await a.runCode([
        'import os, socket, signal',
        `mine = [p for p in os.listdir("/proc") if p.isdigit() and "${marker}" in open(f"/proc/{p}/cmdline").read()]`,
        'def refused(addr, family=socket.AF_INET):',
        '    s = socket.socket(family)',
        '    try:',
        '        s.connect(addr)',
        '        return False',
        '    except OSError:',
        '        return True',
        `print(mine, refused(("127.0.0.1", port)), refused("\\0${marker}", socket.AF_UNIX), os.path.exists("parent-only"), flush=True)`,
        'os.kill(-1, signal.SIGKILL)',
      ].join('\n'));
      // The fork killed everything it could see: itself.
      expect(tried.stdout).toBe('[] True True True\n');
      // The workspace copy holds the parent's file, but writing it changes only the copy: the
      // parent's process, sockets and state are untouched, and so is the sibling.
      expect(hostProcessesMatching(marker).length).toBeGreaterThan(0);
      expect(await py(k, 'print(child.poll(), port > 0)')).toBe('None True\n');
      expect(await py(b, 'import os\nprint(os.path.exists("parent-only"))')).toBe('True\n');
      await py(k, 'child.kill(); child.wait()');
    });
  });

  test('a fork and a restored kernel run under the posture of a fresh box, in namespaces of their own', async () => {
    const probe = [
      'import os, re',
      'st = open("/proc/self/status").read()',
      'keep = {k: re.search(k + r":\\s*(.*)", st).group(1) for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")}',
      'keep["uid_map"] = " ".join(open("/proc/self/uid_map").read().split())',
      'keep["ns"] = {n: os.readlink("/proc/self/ns/" + n) for n in ("pid", "mnt", "net", "ipc", "uts", "user")}',
      'import json; print(json.dumps(keep))',
    ].join('\n');
    const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kern-ckpt-posture-')), 'ck');
    await withParent({}, {}, async (k, sb, forks) => {
      const parent = JSON.parse(await py(k, probe));
      expect(parent.NoNewPrivs).toBe('1');
      expect(parent.Seccomp).toBe('2');
      forks.push(...await k.fork());
      await k.checkpoint(dir, { keepRunning: true });
      const other = await Sandbox.fromCheckpoint(dir);
      try {
        const restored = await other.restoreKernel(dir);
        for (const kid of [forks[0], restored]) {
          const seen = JSON.parse(await py(kid, probe));
          const { ns, ...posture } = seen;
          const { ns: parentNs, ...parentPosture } = parent;
          expect(posture).toEqual(parentPosture);
          for (const n of Object.keys(parentNs)) expect(ns[n]).not.toBe(parentNs[n]);
        }
      } finally {
        await other.close();
      }
    });
    fs.rmSync(path.dirname(dir), { recursive: true, force: true });
  });

  test('code a pickled value runs as it loads runs in the fork\'s box alone, never on the host', async () => {
    const canary = path.join(os.tmpdir(), uniqueName('forkreduce'));
    await withParent({}, {}, async (k, _sb, forks) => {
      await py(k, [
        'import os',
        'class Planted:',
        '    def __reduce__(self):',
        `        return (os.system, ("echo planted > ${canary}; echo planted > /workspace/planted",))`,
        'value = Planted()',
      ].join('\n'));
      forks.push(...await k.fork());
      expect(fs.existsSync(canary)).toBe(false);
      expect(await py(forks[0], `print(open("${canary}").read().strip(), value)`)).toBe('planted 0\n');
      expect((await forks[0].sandbox.readFile('planted')).toString()).toBe('planted\n');
      expect(await py(k, 'import os\nprint(os.path.exists("/workspace/planted"))')).toBe('False\n');
    });
    expect(fs.existsSync(canary)).toBe(false);
  });
});
