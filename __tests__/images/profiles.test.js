'use strict';
// rootless: yes
// `profiles`: kern.toml resource profiles. Each test writes its own kern.toml and points
// KERN_CONFIG at it. vcpu caps are read back from the box's cgroup as root; rootless (cgroup v1,
// no cgroup of our own) from the rlimit and the runtime notes kern falls back on. Devices and
// scratch disks are looked at from inside real boxes.

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const {
  isRoot,
  requireRootfs,
  opts,
  tempDirs,
  uniqueName,
  hostProcessesMatching,
  hostCgroupCaps,
  expectSandboxError,
  openAndClose,
  expectRefusedBeforeAnyBox,
  summary,
  expectOk,
} = require('../helpers');
const { Sandbox, SandboxError, withSandbox } = require('../..');

// Jest gives each test file its own `process.env` copy: the addon reads the real one.
const realEnv = require('vm').runInThisContext('process').env;
const MiB = 1024 * 1024;
const rootTest = isRoot ? test : test.skip;

const { temp, removeAll } = tempDirs();
let savedConfig;

beforeAll(() => {
  requireRootfs();
  savedConfig = realEnv.KERN_CONFIG;
});

afterAll(() => {
  if (savedConfig === undefined) delete realEnv.KERN_CONFIG;
  else realEnv.KERN_CONFIG = savedConfig;
  removeAll();
});

/** Writes `text` as kern.toml in a fresh temp dir and points KERN_CONFIG at it. */
function kernToml(text) {
  const file = path.join(temp('kern-profiles-'), 'kern.toml');
  fs.writeFileSync(file, text);
  realEnv.KERN_CONFIG = file;
  return file;
}

const withOpen = (extra, fn) => withSandbox(opts(extra), fn);

async function refused(extra, ...patterns) {
  return expectSandboxError(() => openAndClose(Sandbox, opts(extra)), SandboxError, ...patterns);
}

/**
 * The memory (bytes, null = uncapped) and CPU (cores, null = uncapped) caps a box of these options
 * really got. As root: read back from the box's cgroup on the host while it runs. Rootless here
 * there is no cgroup: memory is the RLIMIT_DATA the box sees in /proc/self/limits, and the CPU cap
 * kern could not enforce is named in its runtime note.
 */
async function effectiveCaps(extra) {
  const ws = temp('kern-profiles-ws-');
  return withOpen({ workspace: ws, ...extra }, async (s) => {
    if (isRoot) {
      const whole = uniqueName('pcaps');
      const [a, b] = [whole.slice(0, 8), whole.slice(8)];
      let caps = null;
      let capsErr = null;
      const r = await s.run(
        ['sh', '-c', `a=${a}; b=${b}; sh -c "while [ ! -e go ]; do sleep 0.1; done; : $a$b" & until pgrep -f "$a$b" >/dev/null; do sleep 0.1; done; echo ready; wait`],
        {
          timeoutS: 60,
          onStdout: (c) => {
            if (!c.toString().includes('ready') || caps) return;
            try {
              caps = hostCgroupCaps(hostProcessesMatching(whole)[0].pid);
            } catch (e) {
              capsErr = e;
            }
            fs.writeFileSync(path.join(ws, 'go'), '');
          },
        }
      );
      expectOk(r);
      expect(capsErr).toBeNull();
      // cgroup v1 shows "no limit" as a page-rounded maximum; v2 as "max" (NaN here).
      const memory = Number.isFinite(caps.memory) && caps.memory < 2 ** 60 ? caps.memory : null;
      return { memory, cpus: caps.cpus };
    }
    const r = await s.run(['sh', '-c', 'grep "^Max data size" /proc/self/limits']);
    expectOk(r);
    const soft = r.stdout.trim().split(/\s+/)[3];
    const cpu = r.runtimeNotes.join('\n').match(/cpu cap of ([\d.]+) cores/);
    return { memory: soft === 'unlimited' ? null : Number(soft), cpus: cpu ? Number(cpu[1]) : null };
  });
}

describe('vcpu: caps from the profile, explicit options first', () => {
  const toml = '[[vcpu]]\nname = "heavy"\ncpus = 1.5\nmemory = "300M"\n\n[[vcpu]]\nname = "light"\ncpus = 0.25\n';
  beforeEach(() => kernToml(toml));

  test('memoryMb: null lets the profile set memory and cpus', async () => {
    expect(await effectiveCaps({ memoryMb: null, profiles: ['vcpu:heavy'] })).toEqual({ memory: 300 * MiB, cpus: 1.5 });
  });

  test('without the profile the same options leave both uncapped (the control)', async () => {
    expect(await effectiveCaps({ memoryMb: null })).toEqual({ memory: null, cpus: null });
  });

  test('memoryMb left out is the 512 default, which wins; cpus left out takes the profile', async () => {
    expect(await effectiveCaps({ profiles: ['vcpu:heavy'] })).toEqual({ memory: 512 * MiB, cpus: 1.5 });
  });

  test('the default overriding a profile\'s memory is said once, in the first call\'s runtimeNotes', async () => {
    const notes = await withOpen({ profiles: ['vcpu:heavy'] }, async (s) => {
      const first = await s.run(['true']);
      const second = await s.run(['true']);
      return [first.runtimeNotes.join('\n'), second.runtimeNotes.join('\n')];
    });
    expect(notes[0]).toMatch(/profile vcpu:heavy sets memory to 300 MiB, but memoryMb's default of 512 MiB applies.*memoryMb: null/);
    expect(notes[1]).not.toMatch(/vcpu:heavy/);
    const withNull = await withOpen({ memoryMb: null, profiles: ['vcpu:heavy'] }, (s) => s.run(['true']));
    expect(withNull.runtimeNotes.join('\n')).not.toMatch(/vcpu:heavy/);
  });

  test('explicit memoryMb and cpus win over the profile', async () => {
    expect(await effectiveCaps({ memoryMb: 200, cpus: 0.5, profiles: ['vcpu:heavy'] })).toEqual({
      memory: 200 * MiB,
      cpus: 0.5,
    });
  });

  test('a profile without memory, with memoryMb: null, leaves memory uncapped', async () => {
    expect(await effectiveCaps({ memoryMb: null, cpus: null, profiles: ['vcpu:light'] })).toEqual({ memory: null, cpus: 0.25 });
  });

  rootTest('the profile memory is enforced: 400 MB under a 64M profile is an oom fault', async () => {
    kernToml('[[vcpu]]\nname = "tiny"\nmemory = "64M"\n');
    await withOpen({ memoryMb: null, profiles: ['vcpu:tiny'] }, async (s) => {
      const r = await s.runCode('b = b"x" * (400 * 1024 * 1024)\nprint("ALLOCATED")\n', { timeoutS: 60 });
      expect(summary(r)).toMatchObject({ fault: { type: 'oom' } });
      expect(r.fault.message).toMatch(/64 MiB/);
      expect(r.stdout).not.toContain('ALLOCATED');
    });
  });
});

describe('vgpio: host character devices in the box', () => {
  const probe = 'stat -c "%F %t:%T" /dev/gpiochip8 && head -c 4 /dev/gpiochip8 | od -An -tx1 && echo x > /dev/gpiochip8 && echo wrote';

  test('a device reached through a symlink is bound at /dev/<name> as the real node, read-write', async () => {
    const dir = temp('kern-profiles-dev-');
    fs.symlinkSync('/dev/zero', path.join(dir, 'gpiochip8'));
    kernToml(`[[vgpio]]\nname = "leds"\ndevices = [${JSON.stringify(path.join(dir, 'gpiochip8'))}]\n`);
    await withOpen({ profiles: ['vgpio:leds'] }, async (s) => {
      const r = await s.run(['sh', '-c', probe]);
      expectOk(r);
      expect(r.stdout).toBe('character special file 1:5\n 00 00 00 00\nwrote\n');
    });
    // The control: without the profile there is no such node.
    await withOpen({}, async (s) => {
      const r = await s.run(['sh', '-c', 'test -e /dev/gpiochip8 && echo present || echo absent']);
      expect(r.stdout).toBe('absent\n');
    });
  });

  rootTest('a node made with mknod (1:3, like /dev/null) is bound and writable, nodev not applied', async () => {
    const dir = temp('kern-profiles-mknod-');
    fs.chmodSync(dir, 0o755); // box root is an unprivileged host id: it must reach the node
    const node = path.join(dir, 'gpiochip9');
    execFileSync('mknod', ['-m', '666', node, 'c', '1', '3']);
    kernToml(`[[vgpio]]\nname = "leds"\ndevices = [${JSON.stringify(node)}]\n`);
    await withOpen({ profiles: ['vgpio:leds'] }, async (s) => {
      const r = await s.run(['sh', '-c', 'echo on > /dev/gpiochip9 && stat -c "%F %t:%T" /dev/gpiochip9']);
      expectOk(r);
      expect(r.stdout).toBe('character special file 1:3\n');

      // A node replaced after open() (same device number, another inode) is refused at bind time.
      // Made beside it and renamed over it, so the new node cannot reuse the old inode number.
      execFileSync('mknod', ['-m', '666', `${node}.new`, 'c', '1', '3']);
      fs.renameSync(`${node}.new`, node);
      const again = await s.run(['sh', '-c', 'echo ran']);
      expect(summary(again)).toMatchObject({ fault: { type: 'startup_failed' } });
      expect(again.fault.message).toMatch(/gpiochip9 changed after it was checked/);
      expect(again.stdout).toBe('');
    });
  });

  test('a device in a /dev subdirectory keeps its path (bound, even where only stat is allowed)', async () => {
    if (!fs.existsSync('/dev/net/tun')) return; // no tun device on this host: nothing to bind
    const st = fs.statSync('/dev/net/tun');
    kernToml('[[vgpio]]\nname = "net"\ndevices = ["/dev/net/tun"]\n');
    await withOpen({ profiles: ['vgpio:net'] }, async (s) => {
      const r = await s.run(['stat', '-c', '%F %t:%T', '/dev/net/tun']);
      expectOk(r);
      const hex = (n) => n.toString(16);
      // rdev: major in bits 8-19, minor in the low 8 bits (and bits 20+), as glibc splits it.
      const major = (st.rdev >> 8) & 0xfff;
      const minor = (st.rdev & 0xff) | ((st.rdev >> 12) & 0xfff00);
      expect(r.stdout).toBe(`character special file ${hex(major)}:${hex(minor)}\n`);
    });
  });

  test('a device that does not exist is a SandboxError naming the line', async () => {
    kernToml('[[vgpio]]\nname = "leds"\ndevices = [\n  "/dev/nonexistent-gpiochip77",\n]\n');
    await refused({ profiles: ['vgpio:leds'] }, /kern\.toml:4: /, /nonexistent-gpiochip77" does not exist/);
  });

  test('a regular file is not a device', async () => {
    const file = path.join(temp('kern-profiles-file-'), 'gpiochip0');
    fs.writeFileSync(file, 'not a device');
    kernToml(`[[vgpio]]\nname = "leds"\ndevices = [${JSON.stringify(file)}]\n`);
    await refused({ profiles: ['vgpio:leds'] }, /kern\.toml:3: /, /not a character device/);
  });

  test("the box's own /dev nodes are not granted again", async () => {
    kernToml('[[vgpio]]\nname = "leds"\ndevices = ["/dev/null"]\n');
    await refused({ profiles: ['vgpio:leds'] }, /kern\.toml:3: /, /own \/dev\/null/);
  });
});

describe('vdisk: a size-capped scratch area', () => {
  beforeEach(() =>
    kernToml('[[vdisk]]\nname = "scratch"\nsize = "8M"\n\n[[vdisk]]\nname = "cache"\nsize = 4194304\npath = "/cache"\n')
  );

  test('writing past size is ENOSPC at the cap, and the default path is /scratch', async () => {
    await withOpen({ profiles: ['vdisk:scratch', 'vdisk:cache'] }, async (s) => {
      const r = await s.run([
        'sh',
        '-c',
        'dd if=/dev/zero of=/scratch/fill bs=1M count=16 2>&1; echo "rc=$?"; du -k /scratch/fill | cut -f1; ' +
          'df -k /scratch /cache | tail -n 2 | awk \'{print $2}\'',
      ]);
      expect(r.fault).toBeNull();
      expect(r.stdout).toMatch(/No space left on device/);
      const [, rc, used, scratchKb, cacheKb] = r.stdout.match(/rc=(\d+)\n(\d+)\n(\d+)\n(\d+)\n$/) || [];
      expect(rc).toBe('1');
      expect(Number(scratchKb)).toBe(8192);
      expect(Number(cacheKb)).toBe(4096);
      expect(Number(used)).toBeGreaterThan(7000);
      expect(Number(used)).toBeLessThanOrEqual(8192);
    });
  });

  test('it is fresh in every box', async () => {
    await withOpen({ profiles: ['vdisk:scratch'] }, async (s) => {
      expectOk(await s.run(['sh', '-c', 'echo hi > /scratch/f']));
      const r = await s.run(['ls', '-A', '/scratch']);
      expectOk(r);
      expect(r.stdout).toBe('');
    });
  });

  rootTest('its pages count toward memoryMb: past that it is an oom fault naming the vdisk', async () => {
    kernToml('[[vdisk]]\nname = "big"\nsize = "512M"\n');
    await withOpen({ memoryMb: 64, profiles: ['vdisk:big'] }, async (s) => {
      const r = await s.runCode(
        'chunk = b"x" * (1024 * 1024)\nwith open("/scratch/fill", "wb") as f:\n    for i in range(100):\n        f.write(chunk)\n        f.flush()\nprint("WROTE-ALL")\n',
        { timeoutS: 60 }
      );
      expect(summary(r)).toMatchObject({ fault: { type: 'oom' } });
      expect(r.fault.message).toMatch(/\/scratch/);
      expect(r.stdout).not.toContain('WROTE-ALL');
    });
  });
});

describe('mistakes are SandboxErrors that say where', () => {
  const good = '[[vcpu]]\nname = "heavy"\ncpus = 1\n\n[[vdisk]]\nname = "scratch"\nsize = "8M"\n';

  test.each([['vcpu:--privileged'], ['vcpu:heavy --privileged'], ['--privileged'], ['vcpu:a/b'], ['vcpu:'], ['vcpu:x\n']])(
    'the entry %j is refused by the constructor, before any file is read',
    (entry) => {
      realEnv.KERN_CONFIG = '/nonexistent/kern.toml';
      expect(() => new Sandbox(opts({ profiles: [entry] }))).toThrow(SandboxError);
      expect(() => new Sandbox(opts({ profiles: [entry] }))).toThrow(/option `profiles`/);
    }
  );

  test('an unknown kind is named', async () => {
    kernToml(good);
    await refused({ profiles: ['vnet:heavy'] }, /unknown kind "vnet"/);
  });

  test('a profile the file does not define names the file and what it has', async () => {
    const file = kernToml(good);
    const e = await refused({ profiles: ['vcpu:nope'] }, /vcpu:nope is not in/, /heavy/);
    expect(e.message).toContain(file);
  });

  test('a missing file says how to make one', async () => {
    const file = path.join(temp('kern-profiles-none-'), 'kern.toml');
    realEnv.KERN_CONFIG = file;
    const e = await refused({ profiles: ['vcpu:heavy'] }, /does not exist/, /KERN_CONFIG/, /\[\[vcpu\]\]/);
    expect(e.message).toContain(file);
  });

  test('a relative KERN_CONFIG is refused', async () => {
    realEnv.KERN_CONFIG = 'kern.toml';
    await refused({ profiles: ['vcpu:heavy'] }, /KERN_CONFIG=kern\.toml is a relative path/);
  });

  test.each([
    ['malformed TOML', '[[vcpu]]\nname = "heavy"\ncpus = = 2\n', ['vcpu:heavy'], [/kern\.toml:3: /]],
    ['an unknown key', '[[vcpu]]\nname = "heavy"\nthreads = 4\n', ['vcpu:heavy'], [/kern\.toml:3: /, /unknown field `threads`/]],
    ['an unknown section', '[[vnet]]\nname = "x"\n', ['vcpu:heavy'], [/kern\.toml:1: /, /unknown field `vnet`/]],
    ['memory_mb', '[[vcpu]]\nname = "heavy"\nmemory_mb = 2048\n', ['vcpu:heavy'], [/kern\.toml:3: /, /`memory_mb` is not a kern\.toml key.*`memory`/]],
    ['a duplicate name', '[[vcpu]]\nname = "heavy"\n\n[[vcpu]]\nname = "heavy"\n', ['vcpu:heavy'], [/kern\.toml:5: /, /second \[\[vcpu\]\] named "heavy" \(the first is on line 2\)/]],
    ['a bad name in the file', '[[vcpu]]\nname = "my-cpu"\n', ['vcpu:heavy'], [/kern\.toml:2: /, /letters or digits/]],
    ['a bad size', '[[vdisk]]\nname = "scratch"\nsize = "lots"\n', ['vdisk:scratch'], [/kern\.toml:3: /, /not a size/]],
    ['a relative vdisk path', '[[vdisk]]\nname = "scratch"\nsize = "1M"\npath = "scratch"\n', ['vdisk:scratch'], [/kern\.toml:4: /, /absolute/]],
    ['a vdisk under /proc', '[[vdisk]]\nname = "scratch"\nsize = "1M"\npath = "/proc/x"\n', ['vdisk:scratch'], [/kern\.toml:4: /, /under \/proc/]],
    ['a vdisk at /', '[[vdisk]]\nname = "scratch"\nsize = "1M"\npath = "/"\n', ['vdisk:scratch'], [/kern\.toml:4: /, /root/]],
    ['a vdisk at /etc', '[[vdisk]]\nname = "scratch"\nsize = "1M"\npath = "/etc"\n', ['vdisk:scratch'], [/kern\.toml:4: /, /under \/etc/]],
    ['a vdisk at /tmp', '[[vdisk]]\nname = "scratch"\nsize = "1M"\npath = "/tmp"\n', ['vdisk:scratch'], [/kern\.toml:4: /, /under \/tmp/]],
    ['a vdisk in the workspace', '[[vdisk]]\nname = "scratch"\nsize = "1M"\npath = "/workspace/s"\n', ['vdisk:scratch'], [/kern\.toml:4: /, /workspace/]],
  ])('%s', async (_label, text, profiles, patterns) => {
    kernToml(text);
    await refused({ profiles }, ...patterns);
  });

  // Issue 16: a size or core count out of bounds is refused like a bad option, before any box.
  test.each([
    ['memory = 96, which is bytes', '[[vcpu]]\nname = "heavy"\nmemory = 96\n', ['vcpu:heavy'], [/kern\.toml:3: /, /memory = 96 is 96 bytes, below the 32 MiB a box needs/, /write "32M" for MiB/]],
    ['memory = "1M"', '[[vcpu]]\nname = "heavy"\nmemory = "1M"\n', ['vcpu:heavy'], [/kern\.toml:3: /, /memory = "1M" is 1 MiB, below the 32 MiB/]],
    ['memory = "100T"', '[[vcpu]]\nname = "heavy"\nmemory = "100T"\n', ['vcpu:heavy'], [/kern\.toml:3: /, /memory = "100T" is 100 TiB, over the 16777216 MiB/]],
    ['cpus = 1e9', '[[vcpu]]\nname = "heavy"\ncpus = 1e9\n', ['vcpu:heavy'], [/kern\.toml:3: /, /cpus is 1000000000, over the 8192 cores/]],
    ['cpus = 0.001', '[[vcpu]]\nname = "heavy"\ncpus = 0.001\n', ['vcpu:heavy'], [/kern\.toml:3: /, /cpus is 0.001, below the 0.01 cores/]],
    ['a vdisk of 1e30g', '[[vdisk]]\nname = "scratch"\nsize = "1e30g"\n', ['vdisk:scratch'], [/kern\.toml:3: /, /size = "1e30g" is .* over the 16777216 MiB/]],
    ['a vdisk of 1 byte', '[[vdisk]]\nname = "scratch"\nsize = 1\n', ['vdisk:scratch'], [/kern\.toml:3: /, /size = 1 is 1 bytes, below the 4096 bytes/]],
  ])('out of bounds: %s', async (_label, text, profiles, patterns) => {
    kernToml(text);
    await expectRefusedBeforeAnyBox(Sandbox, SandboxError, opts({ profiles, memoryMb: null }), ...patterns);
  });

  test('two vcpu profiles at once', async () => {
    kernToml('[[vcpu]]\nname = "a"\n[[vcpu]]\nname = "b"\n');
    await refused({ profiles: ['vcpu:a', 'vcpu:b'] }, /two vcpu profiles, vcpu:a and vcpu:b/);
  });

  test('a vdisk on a `tmpfs` or `mounts` target clashes', async () => {
    kernToml(good);
    await refused({ tmpfs: { '/scratch': '1m' }, profiles: ['vdisk:scratch'] }, /kern\.toml:6: /, /overlaps the scratch tmpfs at \/scratch/);
    const src = temp('kern-profiles-src-');
    await refused({ mounts: { [src]: '/scratch' }, profiles: ['vdisk:scratch'] }, /kern\.toml:6: /, /overlaps the mount at \/scratch/);
  });

  test('an empty or absent list never reads the file', async () => {
    kernToml('this is [ not toml');
    for (const extra of [{ profiles: [] }, {}, { profiles: null }]) {
      await withOpen(extra, async (s) => expectOk(await s.run(['true'])));
    }
    await refused({ profiles: ['vcpu:heavy'] }, /kern\.toml:1: /);
  });
});
