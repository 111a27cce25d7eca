'use strict';
// rootless: yes
// Attack suite, SandboxProcess.connect(): the host dials into a box through the box's connector
// (a process PID 1 forks, holding the one end of a socket pair whose other end only the caller
// has). The spawned process tries to turn that channel, or its own network, into a way to the
// host: host TCP listeners on 127.0.0.1 count every connection they get, one on the very port
// number the box listens on. The box dials that number before and after it listens (its own
// loopback either way), the host connects and talks to the box's server, the host asks for a
// port only the host listens on; meanwhile the process hunts the connector (its /proc files,
// ptrace, pidfd_getfd, process_vm_readv, its socket) and finally kills it. Every host listener
// must have seen nothing at every step, and the host's own socket must not be one of the host's
// network namespace.

const fs = require('fs');
const os = require('os');
const net = require('net');
const { Sandbox, SandboxError } = require('../../..');
const { opts, waitFor } = require('../../helpers');
const { guardedSuite, PY_PRELUDE } = require('../host');

const suite = guardedSuite();

const EXT_IP = (() => {
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs || []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '';
})();

// The box's process: dials, listens on the host's port number, hunts the connector, then serves
// one JSON line per connection (with a token only it knows) until the host writes `quit`.
const BOX = PY_PRELUDE + String.raw`
import select, signal, uuid
port, other, ext = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
token = uuid.uuid4().hex
me = os.getpid()
def fds():
    out = {}
    for n in os.listdir("/proc/self/fd"):
        try: out[n] = os.readlink(f"/proc/self/fd/{n}")
        except OSError: pass  # the listing's own descriptor, closed by now
    return out
inherited = fds()  # before the process opens anything itself
def say(**kw): print(json.dumps(kw), flush=True)
def dial(host, p, fam=socket.AF_INET):
    def go():
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3); s.connect((host, p)); s.close()
    return try_(go)

say(step="pre", v4=dial("127.0.0.1", port), other=dial("127.0.0.1", other),
    v6=dial("::1", port, socket.AF_INET6), ext=dial(ext, port) if ext else "none")

srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(16)
c = socket.create_connection(("127.0.0.1", port), 3); a, _ = srv.accept(); a.close(); c.close()
say(step="listening", token=token, selfDial="accepted by the box's own listener", ext=dial(ext, port) if ext else "none")

def status(p):
    keep = ("Name", "PPid", "Uid", "CapEff", "NoNewPrivs")
    try: return {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open(f"/proc/{p}/status") if l.split(":")[0] in keep}
    except OSError as e: return ename(e.errno)

def distinct(results): return sorted(set(results))

def hunt(p):
    d = {"status": status(p), "cmdline": try_(lambda: open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode())}
    d["fdList"] = try_(lambda: os.listdir(f"/proc/{p}/fd"))
    d["fdOpen"] = distinct(try_(lambda: os.close(os.open(f"/proc/{p}/fd/{n}", os.O_RDWR))) for n in range(32))
    d["fdOpenRead"] = distinct(try_(lambda: os.close(os.open(f"/proc/{p}/fd/{n}", os.O_RDONLY))) for n in range(32))
    d["fdinfo"] = try_(lambda: os.listdir(f"/proc/{p}/fdinfo"))
    d["mem"] = try_(lambda: os.close(os.open(f"/proc/{p}/mem", os.O_RDONLY)))
    d["environ"] = try_(lambda: open(f"/proc/{p}/environ", "rb").read())
    d["attach"] = sc(101, 16, p, 0, 0)        # ptrace(PTRACE_ATTACH)
    d["seize"] = sc(101, 0x4206, p, 0, 0)     # ptrace(PTRACE_SEIZE)
    if "ok" in (d["attach"], d["seize"]): sc(101, 17, p, 0, 0)  # PTRACE_DETACH
    pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(p), ctypes.c_long(0))  # pidfd_open
    d["pidfdOpen"] = "ok" if pidfd >= 0 else ename(ctypes.get_errno())
    d["pidfdGetfd"] = distinct(sc(438, pidfd, n, 0) for n in range(32)) if pidfd >= 0 else []
    buf = ctypes.create_string_buffer(64)
    iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 64)
    d["vmRead"] = sc(310, p, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0)  # process_vm_readv
    return d

procs = {p: hunt(p) for p in sorted(int(x) for x in os.listdir("/proc") if x.isdigit()) if p != me}
unix = open("/proc/net/unix").read().strip().split("\n")[1:]
def unix_dial(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.settimeout(2)
    s.connect(path if not path.startswith("@") else "\0" + path[1:]); s.close()
unixDial = {l.split()[-1]: try_(lambda: unix_dial(l.split()[-1])) for l in unix if len(l.split()) > 7}
say(step="probe", fds=inherited, procs={str(p): d for p, d in procs.items()}, unix=unix, unixDial=unixDial)

served = 0
while True:
    r, _, _ = select.select([srv, 0], [], [])
    if 0 in r:
        cmd = os.read(0, 100).decode().strip()
        if cmd in ("", "quit"): break
        if cmd == "kill-connector":
            hit = []
            for p, d in procs.items():
                if p != 1 and isinstance(d["status"], dict) and d["status"].get("Name") == "kern":
                    hit.append([p, try_(lambda: os.kill(p, signal.SIGKILL))])
            say(step="killed", hit=hit)
        continue
    a, peer = srv.accept(); served += 1
    got = a.makefile("rb").readline().decode().strip()
    a.sendall((json.dumps({"token": token, "peer": list(peer), "n": served, "got": got}) + "\n").encode())
    a.close()
say(step="done", served=served)
`;

const listen = (srv) => new Promise((res) => srv.listen(0, '127.0.0.1', res));
let hostSrv; // on the port number the box listens on
let otherSrv; // on a port only the host listens on
const seen = { port: 0, other: 0 };
let port;
let other;
let sb;
let proc;
const msgs = [];
let stdoutText = '';

/** The host listeners saw nothing, and the host is as it was: checked at every step. */
function assertHostUntouched(step) {
  expect({ step, seen }).toEqual({ step, seen: { port: 0, other: 0 } });
  suite.guard.assertUntouched();
}

async function step(name) {
  const m = await waitFor(() => msgs.find((x) => x.step === name), 60000);
  if (!m) throw new Error(`the box's process never said ${name}: ${stdoutText.slice(-2000)}`);
  return m;
}

/** Whether this (the host's) network namespace has a TCP connection from 127.0.0.1:`local` to
 * 127.0.0.1:`remote` (/proc/net/tcp: addresses and ports in hex). */
function hostTcpHas(local, remote) {
  const hex = (p) => `0100007F:${p.toString(16).toUpperCase().padStart(4, '0')}`;
  return fs
    .readFileSync('/proc/net/tcp', 'utf8')
    .trim()
    .split('\n')
    .slice(1)
    .some((l) => {
      const f = l.trim().split(/\s+/);
      return f[1] === hex(local) && f[2] === hex(remote);
    });
}

/** One exchange over connect(): where its socket is, and what the box answered. */
async function exchange(payload) {
  const s = await proc.connect(port);
  const remote = `${s.remoteAddress}:${s.remotePort}`;
  const inHostNetns = hostTcpHas(s.localPort, port);
  const reply = await new Promise((resolve, reject) => {
    let buf = '';
    s.on('data', (d) => {
      buf += d;
    });
    s.on('end', () => resolve(buf));
    s.on('error', reject);
    s.write(`${payload}\n`);
  });
  s.destroy();
  return { inHostNetns, remote, reply };
}

// The Sandbox lives in this block: its afterAll (close) runs before the guard's leak check.
describe('a spawned server and connect()', () => {
  beforeAll(async () => {
    hostSrv = net.createServer((c) => {
      seen.port += 1;
      c.destroy();
    });
    otherSrv = net.createServer((c) => {
      seen.other += 1;
      c.destroy();
    });
    await listen(hostSrv);
    await listen(otherSrv);
    port = hostSrv.address().port;
    other = otherSrv.address().port;
    sb = await new Sandbox(opts()).open();
    proc = await sb.spawn(['python3', '-c', BOX, String(port), String(other), EXT_IP], {
      onStdout: (c) => {
        stdoutText += c.toString();
        const lines = stdoutText.split('\n');
        msgs.length = 0;
        for (const l of lines.slice(0, -1)) msgs.push(JSON.parse(l));
      },
    });
  }, 60000);

  afterAll(async () => {
    if (sb) await sb.close();
    if (hostSrv) hostSrv.close();
    if (otherSrv) otherSrv.close();
  });

  test('control: the host listeners count connections made on the host, which the host\'s TCP table shows', async () => {
    const socks = [];
    for (const p of [port, other]) {
      await new Promise((res, rej) => {
        socks.push(net.connect(p, '127.0.0.1', res).on('error', rej));
      });
    }
    await waitFor(() => seen.port === 1 && seen.other === 1, 5000);
    expect(seen).toEqual({ port: 1, other: 1 });
    // A connection of the host's network namespace is in its TCP table (the lookup works).
    expect(hostTcpHas(socks[0].localPort, port)).toBe(true);
    for (const c of socks) c.destroy();
    Object.assign(seen, { port: 0, other: 0 });
  });

  test('the process dials the host\'s port number before it listens: refused on its own loopback; the host\'s address is unreachable', async () => {
    const pre = await step('pre');
    expect(pre.v4).toBe('ECONNREFUSED');
    expect(pre.other).toBe('ECONNREFUSED');
    expect(pre.v6).toMatch(/^(ECONNREFUSED|EADDRNOTAVAIL|ENETUNREACH)$/);
    if (EXT_IP) expect(pre.ext).toBe('ENETUNREACH');
    assertHostUntouched('pre');
  });

  test('it listens on the same port number: its own dial reaches its own listener, not the host\'s', async () => {
    const l = await step('listening');
    expect(l.selfDial).toBe('accepted by the box\'s own listener');
    if (EXT_IP) expect(l.ext).toBe('ENETUNREACH');
    assertHostUntouched('listening');
  });

  test('the process holds nothing but its stdin, stdout and stderr (pipes); nothing of the connector\'s line', async () => {
    const { fds } = await step('probe');
    expect(Object.keys(fds).sort()).toEqual(['0', '1', '2']);
    for (const n of ['0', '1', '2']) expect(fds[n]).toMatch(/^pipe:\[\d+\]$/);
  });

  test('the connector is in sight but out of reach: no /proc fd, fdinfo, mem or environ, no ptrace, pidfd_getfd or process_vm_readv; PID 1 too', async () => {
    const { procs, unix, unixDial } = await step('probe');
    // What the box holds besides the process: its PID 1 and the connector (kern, no capabilities).
    const others = Object.entries(procs);
    const connectors = others.filter(([p, d]) => p !== '1' && d.status.Name === 'kern');
    expect(connectors).toHaveLength(1);
    expect(connectors[0][1].status).toMatchObject({ PPid: '1', CapEff: '0000000000000000', NoNewPrivs: '1' });
    expect(procs['1'].status.Name).toBe('kern');
    for (const [p, d] of others) {
      expect({ pid: p, name: d.status.Name, fdList: d.fdList, fdOpen: d.fdOpen, fdOpenRead: d.fdOpenRead, fdinfo: d.fdinfo, mem: d.mem, environ: d.environ })
        .toEqual({ pid: p, name: 'kern', fdList: 'EACCES', fdOpen: ['EACCES'], fdOpenRead: ['EACCES'], fdinfo: 'EACCES', mem: 'EACCES', environ: 'EACCES' });
      expect({ pid: p, attach: d.attach, seize: d.seize, pidfdGetfd: d.pidfdGetfd, vmRead: d.vmRead })
        .toEqual({ pid: p, attach: 'EPERM', seize: 'EPERM', pidfdGetfd: d.pidfdOpen === 'ok' ? ['EPERM'] : [], vmRead: 'EPERM' });
    }
    // The connector's line is an unnamed pair made on the host: nothing of it is in the box's
    // network namespace to be dialled.
    expect({ unix, unixDial }).toEqual({ unix: [], unixDial: {} });
    assertHostUntouched('probe');
  });

  test('connect() reaches the box\'s server, on a socket of the box\'s network namespace; the host listener on that port number sees nothing', async () => {
    const { token } = await step('listening');
    for (let i = 1; i <= 3; i += 1) {
      const x = await exchange(`hello ${i}`);
      expect(x.inHostNetns).toBe(false);
      assertHostUntouched(`exchange ${i}`);
      expect(x.remote).toBe(`127.0.0.1:${port}`);
      const answer = JSON.parse(x.reply);
      expect(answer).toMatchObject({ token, n: i, got: `hello ${i}` });
      expect(answer.peer[0]).toBe('127.0.0.1'); // the connector, on the box's loopback
    }
  });

  test('connect() to a port only the host listens on is refused: the connector dials the box\'s loopback, never the host\'s', async () => {
    await expect(proc.connect(other)).rejects.toThrow(SandboxError);
    await expect(proc.connect(other)).rejects.toThrow(new RegExp(`127\\.0\\.0\\.1:${other}`));
    assertHostUntouched('connect(other)');
  });

  test('the process kills the connector: connect() then rejects (a SandboxError, no hang), the process runs on, the host saw nothing', async () => {
    await proc.write('kill-connector\n');
    const { hit } = await step('killed');
    expect(hit).toHaveLength(1);
    expect(hit[0][1]).toBe('ok'); // the same account in the box may end it: only its own connect() suffers
    // At once (EOF: the box holds the line's only far end), not after the answer's deadline.
    await expect(proc.connect(port)).rejects.toThrow(/connector is gone/);
    expect(proc.running).toBe(true);
    await proc.write('quit\n');
    const r = await proc.wait();
    expect({ exitCode: r.exitCode, fault: r.fault }).toEqual({ exitCode: 0, fault: null });
    expect(r.stderr).not.toMatch(/Traceback/);
    expect((await step('done')).served).toBe(3);
    await expect(proc.connect(port)).rejects.toThrow(SandboxError);
    assertHostUntouched('after the process');
  });
});

// The box's process stalls its own connector (SIGSTOP: the same account in the box may signal
// it) while the host waits for an answer, then lets it go on. Its late answer must never be taken
// for a later request's: each connect() gets the socket it asked for, shown by the data the box's
// two servers (one per port, each with a token only it knows) send through it.
const STALLER = PY_PRELUDE + String.raw`
import select, signal, threading, time, uuid
ports = [int(sys.argv[1]), int(sys.argv[2])]
def say(**kw): print(json.dumps(kw), flush=True)
conn = [p for p in (int(x) for x in os.listdir("/proc") if x.isdigit())
        if p not in (1, os.getpid()) and open(f"/proc/{p}/comm").read().strip() == "kern"]
servers = {}
for p in ports:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", p)); s.listen(16)
    servers[s] = {"port": p, "token": uuid.uuid4().hex, "n": 0}
def serve(a, info, n):
    a.settimeout(10)
    try:
        a.sendall((json.dumps({"port": info["port"], "token": info["token"], "n": n}) + "\n").encode())
        got = a.makefile("rb").readline().decode().strip()
        a.sendall((json.dumps({"echo": got}) + "\n").encode())
    except OSError:
        pass
    a.close()
say(step="ready", connector=conn, tokens={str(i["port"]): i["token"] for i in servers.values()})
while True:
    r, _, _ = select.select(list(servers) + [0], [], [])
    if 0 in r:
        line = os.read(0, 100).decode()
        for cmd in line.split():
            if cmd == "quit": sys.exit(0)
            if cmd == "stop": say(step="stop", r=[try_(lambda: os.kill(p, signal.SIGSTOP)) for p in conn])
            if cmd == "cont": say(step="cont", r=[try_(lambda: os.kill(p, signal.SIGCONT)) for p in conn])
            if cmd == "cont-later":
                threading.Timer(1.0, lambda: [os.kill(p, signal.SIGCONT) for p in conn]).start()
                say(step="cont-later")
        if not line: sys.exit(0)
        continue
    for s in r:
        a, _ = s.accept(); info = servers[s]; info["n"] += 1
        threading.Thread(target=serve, args=(a, info, info["n"]), daemon=True).start()
        say(step="accepted", port=info["port"], n=info["n"])
`;

describe('a box that stalls its connector', () => {
  let ssb;
  let sp;
  let out = '';
  const said = [];
  const portA = 41001;
  const portB = 41002;
  let tokens;

  const saidStep = async (name, from = 0) => {
    const m = await waitFor(() => said.slice(from).find((x) => x.step === name), 30000);
    if (!m) throw new Error(`the box never said ${name}: ${out.slice(-2000)}`);
    return m;
  };

  /** connect(port), then the server's greeting and its echo of our line: what came through. */
  async function talk(p, payload) {
    const s = await sp.connect(p);
    const lines = await new Promise((resolve, reject) => {
      let buf = '';
      s.on('data', (d) => {
        buf += d;
        if (buf.split('\n').length === 2) s.write(`${payload}\n`);
        if (buf.split('\n').length >= 3) resolve(buf.trim().split('\n').map((l) => JSON.parse(l)));
      });
      s.on('error', reject);
      s.on('end', () => resolve(buf.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l))));
    });
    s.destroy();
    return lines;
  }

  beforeAll(async () => {
    ssb = await new Sandbox(opts()).open();
    sp = await ssb.spawn(['python3', '-c', STALLER, String(portA), String(portB)], {
      onStdout: (c) => {
        out += c.toString();
        said.length = 0;
        for (const l of out.split('\n').slice(0, -1)) said.push(JSON.parse(l));
      },
    });
    ({ tokens } = await saidStep('ready'));
  }, 60000);

  afterAll(async () => {
    if (ssb) await ssb.close();
  });

  test('control: each connect() gets its own server\'s greeting and echo', async () => {
    const r = await saidStep('ready');
    expect(r.connector).toHaveLength(1);
    expect(await talk(portA, 'a0')).toEqual([{ port: portA, token: tokens[portA], n: 1 }, { echo: 'a0' }]);
    expect(await talk(portB, 'b0')).toEqual([{ port: portB, token: tokens[portB], n: 1 }, { echo: 'b0' }]);
    suite.guard.assertUntouched();
  });

  test('a stalled connector: connect() times out saying so; the late answer is never taken for a later request', async () => {
    const mark = said.length;
    await sp.write('stop\n');
    expect((await saidStep('stop', mark)).r).toEqual(['ok']);
    const stalled = await sp.connect(portA).then(() => null, (e) => e);
    expect(stalled).toBeInstanceOf(SandboxError);
    await sp.write('cont\n');
    await saidStep('cont', mark);
    // The connector now answers the request given up on (server A accepts it). The next
    // requests get their own answers: B's server for B, A's for A, whatever order they come in.
    expect(await talk(portB, 'b1')).toEqual([{ port: portB, token: tokens[portB], n: 2 }, { echo: 'b1' }]);
    const a = await talk(portA, 'a1');
    expect(a[0]).toMatchObject({ port: portA, token: tokens[portA] });
    expect(a[1]).toEqual({ echo: 'a1' });
    // Server A saw the late dial (n 2) before this one (n 3): the host took the newer socket.
    expect(a[0].n).toBe(3);
    for (let i = 0; i < 3; i += 1) {
      expect(await talk(portB, `b-again-${i}`)).toEqual([{ port: portB, token: tokens[portB], n: 3 + i }, { echo: `b-again-${i}` }]);
    }
    // The timeout said what happened, and for which request.
    expect(stalled.message).toMatch(
      new RegExp(`did not answer the request for 127\\.0\\.0\\.1:${portA} within \\d+ s: something in the box stopped or stalled it`),
    );
    suite.guard.assertUntouched();
  }, 60000);

  test('a connector delayed within the deadline: the waiting connect() gets its own answer', async () => {
    const mark = said.length;
    await sp.write('stop\n');
    await saidStep('stop', mark);
    const pending = talk(portA, 'late');
    await sp.write('cont-later\n');
    await saidStep('cont-later', mark);
    const r = await pending;
    expect(r[0]).toMatchObject({ port: portA, token: tokens[portA], n: 4 });
    expect(r[1]).toEqual({ echo: 'late' });
    expect(await talk(portB, 'b-after')).toEqual([{ port: portB, token: tokens[portB], n: 6 }, { echo: 'b-after' }]);
    expect(sp.running).toBe(true);
    await sp.write('quit\n');
    const res = await sp.wait();
    expect({ exitCode: res.exitCode, fault: res.fault }).toEqual({ exitCode: 0, fault: null });
    suite.guard.assertUntouched();
  }, 60000);
});
