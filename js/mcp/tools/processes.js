'use strict';
// Background processes: start_process (each in a fresh box of the session, on its workspace),
// read_process_output (what arrived since the last read, and whether it exited),
// write_process_input and kill_process.

const { text, ToolError } = require('../results.js');

/** The most output of one stream held between two reads; older output beyond it is dropped. */
const MAX_PENDING = 1 << 20;

/** A stream's output not read yet, bounded: past MAX_PENDING the oldest bytes go. */
class Pending {
  constructor() {
    this.chunks = [];
    this.bytes = 0;
    this.dropped = 0;
  }

  push(chunk) {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    while (this.bytes > MAX_PENDING && this.chunks.length > 1) {
      const c = this.chunks.shift();
      this.bytes -= c.length;
      this.dropped += c.length;
    }
  }

  take() {
    const out = { text: Buffer.concat(this.chunks).toString('utf8'), dropped: this.dropped };
    this.chunks = [];
    this.bytes = 0;
    this.dropped = 0;
    return out;
  }
}

function processOf(session, id) {
  const p = session.processes.get(id);
  if (!p) throw new ToolError(`no process ${JSON.stringify(id)} in this session: start one with start_process`);
  return p;
}

const ID = { type: 'string', description: 'The id start_process returned.' };

const tools = [
  {
    name: 'start_process',
    title: 'Start a background process',
    description: 'Start a long-running command (a server, a watcher, an interactive program) in the background, in a fresh isolated box on '
      + 'the workspace, and return its process_id at once. Read its output with read_process_output, send it input with '
      + 'write_process_input, and stop it with kill_process. `command` is a string run by sh -c, or an argv array.',
    inputSchema: {
      type: 'object',
      properties: {
        command: {
          oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' }, minItems: 1 }],
          description: 'A shell command line (run by sh -c), or an argv array.',
        },
        cwd: { type: 'string', description: 'Working directory: relative to the workspace, or an absolute path in the box.' },
        timeout_s: { type: 'number', exclusiveMinimum: 0, maximum: 604800, description: 'End it after this many seconds (default: runs until killed or the session ends).' },
      },
      required: ['command'],
      additionalProperties: false,
    },
    annotations: { title: 'Start a background process', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    runsCode: true,
    async handler(session, args) {
      const id = session.newId('proc');
      const sb = await session.sandbox();
      const argv = typeof args.command === 'string' ? ['sh', '-c', args.command] : args.command;
      const out = new Pending();
      const err = new Pending();
      const proc = await sb.spawn(argv, {
        cwd: args.cwd,
        timeoutS: args.timeout_s,
        onStdout: (c) => out.push(c),
        onStderr: (c) => err.push(c),
      });
      const entry = { proc, out, err, result: null };
      proc.wait().then((r) => {
        entry.result = r;
      }, () => {});
      session.processes.set(id, entry);
      return { content: [text(`process_id: ${id} (pid ${proc.pid} in its box)`)], structuredContent: { process_id: id, pid: proc.pid } };
    },
  },
  {
    name: 'read_process_output',
    title: 'Read a process\'s output',
    description: 'Return the stdout and stderr a background process wrote since the last read, and whether it is still running (with its exit '
      + 'code once it ended). Set wait to true to wait for it to end first (bounded by the call\'s cancellation).',
    inputSchema: {
      type: 'object',
      properties: {
        process_id: ID,
        wait: { type: 'boolean', description: 'Wait until the process has ended before reading (default false).' },
      },
      required: ['process_id'],
      additionalProperties: false,
    },
    annotations: { title: 'Read process output', readOnlyHint: true, destructiveHint: false, idempotentHint: false, openWorldHint: false },
    async handler(session, args, ctx) {
      const entry = processOf(session, args.process_id);
      if (args.wait && !entry.result) {
        await new Promise((resolve, reject) => {
          const onAbort = () => reject(ctx.signal.reason);
          ctx.signal.addEventListener('abort', onAbort, { once: true });
          entry.proc.wait().then(resolve, resolve).finally(() => ctx.signal.removeEventListener('abort', onAbort));
        });
        if (!entry.result) await entry.proc.wait().then((r) => (entry.result = r), () => {});
      }
      const o = entry.out.take();
      const e = entry.err.take();
      const r = entry.result;
      const lines = [];
      if (o.dropped) lines.push(`[${o.dropped} older bytes of stdout dropped]`);
      if (o.text) lines.push(`stdout:\n${o.text}`);
      if (e.dropped) lines.push(`[${e.dropped} older bytes of stderr dropped]`);
      if (e.text) lines.push(`stderr:\n${e.text}`);
      if (!o.text && !e.text) lines.push('(no new output)');
      lines.push(r ? `exited: exit code ${r.exitCode}${r.signal ? ` (${r.signal})` : ''}${r.fault ? `, fault ${r.fault.type}: ${r.fault.message}` : ''}` : 'running');
      if (r) session.processes.delete(args.process_id);
      return {
        content: [text(lines.join('\n'))],
        structuredContent: {
          stdout: o.text,
          stderr: e.text,
          running: !r,
          exitCode: r ? r.exitCode : null,
          fault: r && r.fault ? { type: r.fault.type, message: r.fault.message } : null,
        },
      };
    },
  },
  {
    name: 'write_process_input',
    title: 'Write to a process\'s stdin',
    description: 'Send text to a background process\'s stdin (add "\\n" to end a line). Set eof to true to close its stdin afterwards.',
    inputSchema: {
      type: 'object',
      properties: {
        process_id: ID,
        data: { type: 'string', description: 'The text to write.' },
        eof: { type: 'boolean', description: 'Close stdin after writing (default false).' },
      },
      required: ['process_id', 'data'],
      additionalProperties: false,
    },
    annotations: { title: 'Write process input', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    async handler(session, args) {
      const { proc } = processOf(session, args.process_id);
      try {
        if (args.data) await proc.write(args.data);
        if (args.eof) await proc.end();
      } catch (e) {
        throw new ToolError(`write_process_input ${args.process_id}: ${e.message}`);
      }
      return { content: [text(`wrote ${Buffer.byteLength(args.data)} bytes${args.eof ? ' and closed stdin' : ''}`)] };
    },
  },
  {
    name: 'kill_process',
    title: 'Kill a process',
    description: 'Stop a background process: SIGTERM by default (its box is ended 2 s later if it still runs), or SIGKILL at once. Its last '
      + 'output can still be read with read_process_output.',
    inputSchema: {
      type: 'object',
      properties: {
        process_id: ID,
        signal: { type: 'string', enum: ['SIGTERM', 'SIGKILL', 'SIGINT', 'SIGHUP'], description: 'The signal (default SIGTERM).' },
      },
      required: ['process_id'],
      additionalProperties: false,
    },
    annotations: { title: 'Kill a process', readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    async handler(session, args) {
      const entry = processOf(session, args.process_id);
      await entry.proc.kill(args.signal || 'SIGTERM');
      const r = await entry.proc.wait().catch(() => null);
      entry.result = r;
      return {
        content: [text(`process ${args.process_id} ended${r ? `: exit code ${r.exitCode}${r.signal ? ` (${r.signal})` : ''}` : ''}`)],
        structuredContent: { process_id: args.process_id, exitCode: r ? r.exitCode : null },
      };
    },
  },
];

module.exports = { tools };
