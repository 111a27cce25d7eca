'use strict';
// rootless: yes
// Set-id bits from a box are never honoured on the host, not even while the call runs.
//
// A file a box writes in the workspace or a "rw" mount is a host file, owned on the host by the
// workspace's owner (root, when the tests run as root): one with its set-uid bit on would be a
// set-uid-root program for every local account. The box tries every way it has to set such a
// bit (chmod, fchmod, fchmodat, fchmodat2, open/creat/mknod/mkdir with the mode, openat2, and
// 32-bit `int 0x80` chmod) on 30,000 sibling directories' files, the shape that once exhausted
// the sweep after the call. The host looks for a set-id file all through the call, at the moment
// every attempt has been made (the box waits for the host's word), and after it.

const fs = require('fs');
const path = require('path');
const os = require('os');
const { execFile, execFileSync } = require('child_process');
const { Sandbox } = require('../../..');
const { opts, isRoot } = require('../../helpers');
const { guardedSuite } = require('../host');

const DIRS = 30000;

// As root, the 60,000 directories and files live on a tmpfs of this file's own: on this disk
// (ext4, discard) making and removing them took minutes while CI's other runs wrote, and the
// set-id rules are the kernel's, the same on tmpfs. Mounted here, before the guard's picture of
// the host's mounts; unprivileged, a plain directory (nobody may mount).
const MEM = isRoot ? fs.mkdtempSync(path.join(os.tmpdir(), 'kern-setid-mem-')) : null;
if (MEM) execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1g,mode=0755', 'kern-setid', MEM]);

const suite = guardedSuite();
const { dirs } = suite;
// After the guard's own afterAll (hooks run in the order declared), which compares the mounts.
afterAll(() => {
  if (!MEM) return;
  execFileSync('umount', [MEM]);
  fs.rmdirSync(MEM);
});
/** A directory of its own for one test, on the tmpfs as root. */
const scratch = (prefix) => (MEM ? fs.mkdtempSync(path.join(MEM, prefix)) : dirs.temp(prefix));

/** The box's attack on `top` (an in-box directory); prints ATTEMPTED, then waits for `ack`. */
function attack(top) {
  return String.raw`
import ctypes, mmap, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD = -100
top = ${JSON.stringify(top)}
os.makedirs(top + '/att', exist_ok=True)

# int 0x80 chmod (i386 number 15) from a 64-bit process: code and path in one page below 4 GiB.
page = libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)  # rwx, private|anonymous|MAP_32BIT
def chmod32(p):
    b = p.encode() + b'\0'
    addr = page + 64
    code = b'\x53\xb8\x0f\x00\x00\x00\xbb' + struct.pack('<I', addr) + b'\xb9\xed\x09\x00\x00\xcd\x80\x5b\xc3'
    ctypes.memmove(page, code, len(code))
    ctypes.memmove(addr, b, len(b))
    return ctypes.CFUNCTYPE(ctypes.c_int)(page)()

def openat2(p):
    how = struct.pack('<QQQ', os.O_CREAT | os.O_WRONLY, 0o4755, 0)
    buf = ctypes.create_string_buffer(how)
    return libc.syscall(437, AT_FDCWD, p.encode(), buf, len(how))

def route(i, f):
    k = i % 10
    if k == 0:
        os.chmod(f, 0o4755)
    elif k == 1:
        fd = os.open(f, os.O_RDONLY); os.fchmod(fd, 0o6755); os.close(fd)
    elif k == 2:
        if libc.fchmodat(AT_FDCWD, f.encode(), 0o2755, 0) != 0: raise OSError(ctypes.get_errno(), 'fchmodat')
    elif k == 3:
        if libc.syscall(452, AT_FDCWD, f.encode(), 0o4755, 0) != 0: raise OSError(ctypes.get_errno(), 'fchmodat2')
    elif k == 4:
        os.close(os.open(f + 'n', os.O_CREAT | os.O_WRONLY, 0o4755))
    elif k == 5:
        fd = libc.creat((f + 'c').encode(), 0o4755)
        if fd < 0: raise OSError(ctypes.get_errno(), 'creat')
    elif k == 6:
        if libc.mknod((f + 'm').encode(), 0o100000 | 0o4755, 0) != 0: raise OSError(ctypes.get_errno(), 'mknod')
    elif k == 7:
        os.mkdir(f + 'd', 0o2755)
        if os.stat(f + 'd').st_mode & 0o6000: raise RuntimeError('set-gid directory')
    elif k == 8:
        r = chmod32(f)
        if r != 0: raise OSError(-r, 'int 0x80 chmod')
    else:
        if openat2(f + 'o') < 0: raise OSError(ctypes.get_errno(), 'openat2')

done = refused = 0
for i in range(${DIRS}):
    d = f'{top}/att/d{i}'
    os.mkdir(d)
    f = d + '/f'
    with open(f, 'w') as h:
        h.write('#!/bin/sh\nid\n')
    try:
        route(i, f)
        done += 1
    except (OSError, RuntimeError):
        refused += 1
print('ATTEMPTED', done, refused, flush=True)
for _ in range(600):
    if os.path.exists(top + '/ack'):
        break
    time.sleep(0.1)
print('BYE', flush=True)
`;
}

/** Every file under `dir` with a set-id bit, as the host sees it (find's own walk). */
function setidOnHost(dir) {
  return new Promise((resolve, reject) => {
    execFile('find', [dir, '-perm', '/6000', '-print'], { maxBuffer: 64 << 20 }, (err, out) => {
      if (err && !out) reject(err);
      else resolve(out.split('\n').filter(Boolean));
    });
  });
}

/** Runs the attack in `target` (in-box path) whose host side is `hostDir`; returns what the host saw. */
async function run(sb, target, hostDir) {
  const seen = new Set();
  let calling = true;
  let polls = 0;
  const poller = (async () => {
    while (calling) {
      for (const p of await setidOnHost(hostDir)) seen.add(p);
      polls += 1;
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  let atCheckpoint = null;
  const r = await sb.runCode(attack(target), {
    timeoutS: 600,
    onStdout: (chunk) => {
      if (chunk.toString().includes('ATTEMPTED') && atCheckpoint === null) {
        atCheckpoint = 'pending';
        setidOnHost(hostDir).then((found) => {
          atCheckpoint = found;
          fs.writeFileSync(path.join(hostDir, 'ack'), 'go');
        });
      }
    },
  });
  calling = false;
  await poller;
  const after = await setidOnHost(hostDir);
  return { r, seen: [...seen], polls, atCheckpoint, after };
}

function expectNoSetid(out) {
  const { r, seen, polls, atCheckpoint, after } = out;
  expect(r.stderr).not.toMatch(/Traceback/);
  const m = /ATTEMPTED (\d+) (\d+)/.exec(r.stdout);
  expect(m).not.toBeNull();
  // Every one of the 30,000 attempts was refused in the box...
  expect(Number(m[1])).toBe(0);
  expect(Number(m[2])).toBe(DIRS);
  // ...and the host never saw a set-id file: while the call ran, at the moment every attempt was
  // made, and after it.
  expect(Array.isArray(atCheckpoint)).toBe(true);
  expect(atCheckpoint).toEqual([]);
  expect(polls).toBeGreaterThan(0);
  expect(seen).toEqual([]);
  expect(after).toEqual([]);
  expect(r.fault).toBeNull();
}

test(`30,000 directories of set-id attempts in the workspace: none is set-id on the host at any moment`, async () => {
  const ws = scratch('kern-setid-ws-');
  const sb = await new Sandbox(opts({ workspace: ws, memoryMb: 1024 })).open();
  try {
    expectNoSetid(await run(sb, '/workspace', ws));
  } finally {
    await sb.close();
  }
  suite.guard.assertUntouched();
}, 900_000);

test('the same in a "rw" mount', async () => {
  const data = scratch('kern-setid-rw-');
  fs.chmodSync(data, 0o777);
  const sb = await new Sandbox(opts({ mounts: { [data]: ['/data', 'rw'] }, memoryMb: 1024 })).open();
  try {
    expectNoSetid(await run(sb, '/data', data));
  } finally {
    await sb.close();
  }
  suite.guard.assertUntouched();
}, 900_000);

test('a set-id bit still reaches nothing through a resident box, a kernel or a prewarmed slot', async () => {
  const ws = dirs.temp('kern-setid-paths-');
  const probe = "import os\nopen('p','w').write('x')\ntry:\n    os.chmod('p', 0o4755); print('set')\nexcept OSError as e:\n    print('refused', e.errno)";
  const sb = await new Sandbox(opts({ workspace: ws, prewarm: 1 })).open();
  try {
    expect((await sb.runCode(probe)).stdout).toBe('refused 1\n');
    const k = await sb.kernel();
    try {
      expect((await k.runCode(probe)).stdout).toBe('refused 1\n');
    } finally {
      await k.close();
    }
  } finally {
    await sb.close();
  }
  const name = `setid${process.pid}`;
  const res = await new Sandbox(opts({ workspace: ws, persist: true, name })).open();
  try {
    expect((await res.runCode(probe)).stdout).toBe('refused 1\n');
  } finally {
    await res.destroy();
    await res.close();
  }
  expect(fs.statSync(path.join(ws, 'p')).mode & 0o6000).toBe(0);
});
