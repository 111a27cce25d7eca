'use strict';
// envd's `process.Process` Connect service (vendor/e2b-envd/process/process.proto) over the
// library: a command is `Sandbox.spawn()` (a fresh box on the sandbox's files), a PTY is
// `Sandbox.terminal()`. Pids are the sandbox's own numbering (each command has a PID namespace
// of its own, so in-box pids would repeat), stable for the process's life.

const { ConnectError, Code, toConnectError } = require('../errors.js');
const { SANDBOX } = require('./context.js');
const { requestUser, resolvePath } = require('./paths.js');

const SIGNALS = { 9: 'SIGKILL', 15: 'SIGTERM' };

/** The `Connect-Timeout-Ms` a call carries (the SDK's `timeoutMs`), as seconds, or undefined. */
function deadlineS(header) {
  const v = Number(header.get('connect-timeout-ms'));
  return Number.isFinite(v) && v > 0 ? v / 1000 : undefined;
}

function endEvent(r) {
  const exitCode = r.exitCode ?? -1;
  return {
    kind: 'end',
    exitCode,
    exited: r.signal == null,
    status: r.signal ? `signal: ${r.signal}` : `exit status ${exitCode}`,
    error: r.fault ? r.fault.message : undefined,
  };
}

/** One of our events as envd's `StartResponse`/`ConnectResponse` (a `ProcessEvent`). */
function toProto(ev) {
  switch (ev.kind) {
    case 'start':
      return { event: { event: { case: 'start', value: { pid: ev.pid } } } };
    case 'end':
      return { event: { event: { case: 'end', value: { exitCode: ev.exitCode, exited: ev.exited, status: ev.status, error: ev.error } } } };
    case 'keepalive':
      return { event: { event: { case: 'keepalive', value: {} } } };
    default:
      return { event: { event: { case: 'data', value: { output: { case: ev.kind, value: ev.data } } } } };
  }
}

/** The keepalive interval a call asks for (`Keepalive-Ping-Interval`, seconds), if any. */
function keepaliveMs(header) {
  const v = Number(header.get('keepalive-ping-interval'));
  return Number.isFinite(v) && v > 0 ? Math.max(v, 1) * 1000 : undefined;
}

function mustFind(s, selector) {
  const p = s.findProcess(selector);
  if (!p) {
    const what = selector ? `${selector.case} ${selector.value}` : 'no selector';
    throw new ConnectError(`process ${what} not found`, Code.NotFound);
  }
  return p;
}

function ptySize(pty) {
  const size = pty && pty.size;
  return { cols: size && size.cols ? size.cols : 80, rows: size && size.rows ? size.rows : 24 };
}

/** Starts the process `req` asks for in sandbox `s`, as `user` (undefined: the sandbox's
 * account); its events go to `p`. */
async function launch(s, req, p, ctx, user) {
  const cfg = req.process;
  const argv = [cfg.cmd, ...cfg.args];
  const env = s.callEnv(cfg.envs);
  const cwd = resolvePath(s, cfg.cwd || s.home);
  const timeoutS = deadlineS(ctx.requestHeader);
  let handle;
  if (req.pty) {
    handle = await s.sandbox.terminal({ argv, env, cwd, user, ...ptySize(req.pty) });
    handle.onData((data) => p.emit({ kind: 'pty', data }));
    if (timeoutS !== undefined) {
      const t = setTimeout(() => handle.kill('SIGKILL').catch(() => {}), timeoutS * 1000);
      t.unref();
      handle.wait().finally(() => clearTimeout(t)).catch(() => {});
    }
  } else {
    handle = await s.sandbox.spawn(argv, {
      env,
      cwd,
      user,
      timeoutS,
      onStdout: (data) => p.emit({ kind: 'stdout', data }),
      onStderr: (data) => p.emit({ kind: 'stderr', data }),
    });
    // envd's default is an open stdin; `stdin: false` asks for end-of-file at once.
    if (req.stdin === false) await handle.end();
  }
  p.handle = handle;
  handle.wait().then(
    (r) => p.emit(endEvent(r)),
    (e) => p.emit({ kind: 'end', exitCode: -1, exited: false, status: 'error', error: e.message }),
  ).finally(() => s.retire(p));
}

function processService() {
  return {
    async list(_req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const processes = [...s.processes.values()]
        .filter((p) => p.handle && !p.end)
        .map((p) => ({ pid: p.pid, tag: p.tag, config: p.config }));
      return { processes };
    },

    async *start(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const user = requestUser(ctx.requestHeader);
      if (!req.process || !req.process.cmd) throw new ConnectError('process.cmd is required', Code.InvalidArgument);
      if (req.tag !== undefined && s.findProcess({ case: 'tag', value: req.tag })) {
        throw new ConnectError(`a process tagged ${req.tag} already runs`, Code.AlreadyExists);
      }
      const cfg = { cmd: req.process.cmd, args: [...req.process.args], envs: { ...req.process.envs }, cwd: req.process.cwd };
      const p = s.addProcess(req.tag, cfg, !!req.pty);
      // Subscribed before the start, so no output is lost; ends with the client's call only.
      const events = p.subscribe(ctx.signal, keepaliveMs(ctx.requestHeader));
      try {
        await launch(s, req, p, ctx, user);
      } catch (e) {
        s.processes.delete(p.pid);
        await events.return();
        throw toConnectError(e);
      }
      yield toProto({ kind: 'start', pid: p.pid });
      for await (const ev of events) yield toProto(ev);
    },

    async *connect(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const p = mustFind(s, req.process && req.process.selector);
      const events = p.subscribe(ctx.signal, keepaliveMs(ctx.requestHeader));
      yield toProto({ kind: 'start', pid: p.pid });
      for await (const ev of events) yield toProto(ev);
    },

    async update(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const p = mustFind(s, req.process && req.process.selector);
      if (req.pty) {
        if (!p.pty) throw new ConnectError(`process ${p.pid} has no PTY to resize`, Code.InvalidArgument);
        const { cols, rows } = ptySize(req.pty);
        try {
          p.handle.resize(cols, rows);
        } catch (e) {
          throw toConnectError(e);
        }
      }
      return {};
    },

    async sendInput(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const p = mustFind(s, req.process && req.process.selector);
      const input = req.input && req.input.input;
      if (!input || !input.case) throw new ConnectError('input is required', Code.InvalidArgument);
      await writeInput(p, input);
      return {};
    },

    async streamInput(reqs, ctx) {
      const s = ctx.values.get(SANDBOX);
      let p = null;
      for await (const r of reqs) {
        if (r.event.case === 'start') p = mustFind(s, r.event.value.process && r.event.value.process.selector);
        else if (r.event.case === 'data') {
          if (!p) throw new ConnectError('the first message of StreamInput must name the process', Code.InvalidArgument);
          const input = r.event.value.input && r.event.value.input.input;
          if (input && input.case) await writeInput(p, input);
        }
      }
      return {};
    },

    async sendSignal(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const p = mustFind(s, req.process && req.process.selector);
      const name = SIGNALS[req.signal];
      if (!name) throw new ConnectError(`signal ${req.signal} is not one envd sends (SIGTERM, SIGKILL)`, Code.InvalidArgument);
      await p.handle.kill(name).catch((e) => {
        throw toConnectError(e);
      });
      return {};
    },

    async closeStdin(req, ctx) {
      const s = ctx.values.get(SANDBOX);
      const p = mustFind(s, req.process && req.process.selector);
      if (p.pty) throw new ConnectError('a PTY has no stdin to close: send Ctrl-D (0x04) instead', Code.InvalidArgument);
      await p.handle.end().catch((e) => {
        throw toConnectError(e);
      });
      return {};
    },
  };
}

async function writeInput(p, input) {
  if (input.case === 'pty' && !p.pty) throw new ConnectError(`process ${p.pid} has no PTY`, Code.InvalidArgument);
  if (input.case === 'stdin' && p.pty) throw new ConnectError(`process ${p.pid} runs on a PTY: send its input as pty`, Code.InvalidArgument);
  if (p.end) throw new ConnectError(`process ${p.pid} has ended`, Code.NotFound);
  try {
    await p.handle.write(Buffer.from(input.value));
  } catch (e) {
    throw toConnectError(e);
  }
}

module.exports = { processService };
