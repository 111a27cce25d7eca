'use strict';
// Tools that run code: run_code and run_command (each a fresh box), and the kernels
// (start_kernel, run_cell, close_kernel: one live interpreter whose cells share state).

const { executionResult, keepWhole, text, ToolError } = require('../results.js');

const TIMEOUT = {
  type: 'number', exclusiveMinimum: 0, maximum: 604800,
  description: 'Wall-clock limit in seconds for this call (default: the server\'s, 30 unless configured). Past it the box is killed and the result has a timeout fault.',
};
const CODE_LANGUAGES = ['python', 'node', 'typescript', 'bash', 'sh', 'r'];
const KERNEL_LANGUAGES = ['python', 'node', 'typescript', 'r'];

/** run_code's `r`: Rscript in the image (an exec_failed fault says when it has none). */
function runCode(sb, code, language, opts) {
  if (language === 'r') return sb.run(['Rscript', '-e', code], opts);
  return sb.runCode(code, { language, ...opts });
}

const tools = [
  {
    name: 'run_code',
    title: 'Run code',
    description: 'Run a snippet of code in a fresh, isolated Linux box (no network unless the server allows it) and return what it printed, '
      + 'its exception, its exit code and its rich results: the value of a final expression, and images such as matplotlib figures. '
      + 'Files written under the workspace (the working directory) persist for later calls of this session; variables do not '
      + '(use start_kernel and run_cell for that). Languages: python (default), node, typescript, bash, sh, r (where the image has them).',
    inputSchema: {
      type: 'object',
      properties: {
        code: { type: 'string', description: 'The source code to run.' },
        language: { type: 'string', enum: CODE_LANGUAGES, description: 'The interpreter (default python).' },
        timeout_s: TIMEOUT,
      },
      required: ['code'],
      additionalProperties: false,
    },
    annotations: { title: 'Run code', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    runsCode: true,
    async handler(session, args, ctx) {
      const sb = await session.sandbox();
      const r = await runCode(sb, args.code, args.language || 'python', { timeoutS: args.timeout_s, signal: ctx.signal, ...ctx.streaming() });
      return executionResult(r, await keepWhole(session, r));
    },
  },
  {
    name: 'run_command',
    title: 'Run a command',
    description: 'Run a command in a fresh, isolated Linux box, in the workspace by default. `command` is either a string, run by `sh -c` '
      + '(pipes, globs and && work), or an argv array run as is, without a shell. Returns stdout, stderr, the exit code and whether the '
      + 'sandbox stopped it (timeout, memory). Each call is a new box: only workspace files carry over.',
    inputSchema: {
      type: 'object',
      properties: {
        command: {
          oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' }, minItems: 1 }],
          description: 'A shell command line (run by sh -c), or an argv array such as ["ls", "-la"].',
        },
        cwd: { type: 'string', description: 'Working directory: relative to the workspace, or an absolute path in the box such as /tmp.' },
        stdin: { type: 'string', description: 'Text the command reads on stdin (default: nothing).' },
        timeout_s: TIMEOUT,
      },
      required: ['command'],
      additionalProperties: false,
    },
    annotations: { title: 'Run a command', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    runsCode: true,
    async handler(session, args, ctx) {
      const sb = await session.sandbox();
      const argv = typeof args.command === 'string' ? ['sh', '-c', args.command] : args.command;
      const r = await sb.run(argv, { cwd: args.cwd, stdin: args.stdin, timeoutS: args.timeout_s, signal: ctx.signal, ...ctx.streaming() });
      return executionResult(r, await keepWhole(session, r));
    },
  },
  {
    name: 'start_kernel',
    title: 'Start a kernel',
    description: 'Start a long-lived interpreter (a kernel) in one isolated box and return its kernel_id. Cells sent to it with run_cell share '
      + 'variables, imports and /tmp, like a notebook. Languages: python (default), node, typescript, r (R needs IRkernel in the image). '
      + 'Close it with close_kernel when done; a cell past its timeout ends the kernel.',
    inputSchema: {
      type: 'object',
      properties: {
        language: { type: 'string', enum: KERNEL_LANGUAGES, description: 'The kernel\'s language (default python).' },
        timeout_s: { ...TIMEOUT, description: 'The default wall-clock limit of each cell, in seconds.' },
      },
      additionalProperties: false,
    },
    annotations: { title: 'Start a kernel', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
    runsCode: true,
    async handler(session, args) {
      const id = session.newId('kernel');
      const sb = await session.sandbox();
      const language = args.language || 'python';
      const k = await sb.kernel(language === 'r' ? { jupyter: 'ir', timeoutS: args.timeout_s } : { language, timeoutS: args.timeout_s });
      session.kernels.set(id, k);
      return { content: [text(`kernel_id: ${id} (${language})`)], structuredContent: { kernel_id: id, language } };
    },
  },
  {
    name: 'run_cell',
    title: 'Run a cell in a kernel',
    description: 'Run code as the next cell of a kernel from start_kernel, seeing what earlier cells defined. Returns its output, the value of '
      + 'its last expression, images (matplotlib figures) and its exception, if any.',
    inputSchema: {
      type: 'object',
      properties: {
        kernel_id: { type: 'string', description: 'The id start_kernel returned.' },
        code: { type: 'string', description: 'The cell\'s source code.' },
        timeout_s: TIMEOUT,
      },
      required: ['kernel_id', 'code'],
      additionalProperties: false,
    },
    annotations: { title: 'Run a cell', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    runsCode: true,
    async handler(session, args, ctx) {
      const k = kernelOf(session, args.kernel_id);
      const r = await k.runCode(args.code, { timeoutS: args.timeout_s, signal: ctx.signal, ...ctx.streaming() });
      return executionResult(r, await keepWhole(session, r));
    },
  },
  {
    name: 'close_kernel',
    title: 'Close a kernel',
    description: 'Shut down a kernel from start_kernel, ending its box and forgetting its state.',
    inputSchema: {
      type: 'object',
      properties: { kernel_id: { type: 'string', description: 'The id start_kernel returned.' } },
      required: ['kernel_id'],
      additionalProperties: false,
    },
    annotations: { title: 'Close a kernel', readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    async handler(session, args) {
      const k = kernelOf(session, args.kernel_id);
      session.kernels.delete(args.kernel_id);
      await k.close();
      return { content: [text(`kernel ${args.kernel_id} closed`)] };
    },
  },
];

function kernelOf(session, id) {
  const k = session.kernels.get(id);
  if (!k) throw new ToolError(`no kernel ${JSON.stringify(id)} in this session: start one with start_kernel`);
  return k;
}

module.exports = { tools };
