// Drives kern-sandbox/ai through the real AI SDK (ESM-only, so outside Jest's module system):
// generateText with the SDK's own MockLanguageModelV4 issuing tool calls, and every member of
// the session called directly. Prints what it saw as JSON; ai.test.js asserts on it and on the
// host workspace. argv[2]: JSON { image, workspace }.
import { createRequire } from 'node:module';
import { generateText, tool, ToolLoopAgent, isStepCount } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';

const require = createRequire(import.meta.url);
const { image, workspace } = JSON.parse(process.argv[2]);
const { createKernSandbox, codeInterpreter } = require('kern-sandbox/ai');

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};
const call = (id, toolName, input) => ({ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(input) });
const step = (content, unified) => ({ content, finishReason: { unified, raw: undefined }, usage, warnings: [] });
const settle = async (p) => {
  try {
    return { value: await p };
  } catch (e) {
    return { error: { name: e && e.name, code: e && e.code, message: String(e && e.message) } };
  }
};
const text = async (stream) => Buffer.from(await new Response(stream).arrayBuffer()).toString('utf8');

const out = {};
// A cell whose value is a valid 1x1 PNG (as matplotlib's would be), built without matplotlib.
const PNG_CELL = [
  'import struct, zlib',
  'def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))',
  'png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(b"\\x00\\xff\\x00\\x00")) + chunk(b"IEND", b"")',
  'class Figure:',
  '    def _repr_png_(self): return png',
  'Figure()',
].join('\n');
const sandbox = createKernSandbox({ image, workspace });

// 1. A tool call travels model -> AI SDK -> tool -> session -> box.
const shell = tool({
  description: 'run a shell command',
  inputSchema: { '~standard': { version: 1, vendor: 'test', validate: (v) => ({ value: v }), jsonSchema: { input: () => ({ type: 'object' }), output: () => ({ type: 'object' }) } } },
  execute: async ({ command }, { experimental_sandbox: sb }) => sb.run({ command }),
});
const model = new MockLanguageModelV4({
  doGenerate: [
    step([
      call('c1', 'shell', { command: 'echo "$((6 * 7))" > from-shell.txt && cat from-shell.txt && id -u' }),
      call('c2', 'codeInterpreter', { code: "open('from-python.txt', 'w').write('py')\nprint(sum(range(10)))\n2 ** 10" }),
      call('c3', 'codeInterpreter', { code: '1 / 0' }),
      call('c4', 'codeInterpreter', { code: 'print(1)', language: 'cobol' }),
      call('c5', 'codeInterpreter', { code: 'console.log([1, 2].map((x) => x * 3).join(","))', language: 'node' }),
      call('c6', 'codeInterpreter', { code: PNG_CELL }),
    ], 'tool-calls'),
    step([{ type: 'text', text: 'done' }], 'stop'),
  ],
});
const r = await generateText({
  model,
  tools: { shell, codeInterpreter },
  experimental_sandbox: sandbox,
  stopWhen: isStepCount(3),
  prompt: 'go',
});
out.text = r.text;
out.toolResults = r.steps[0].content
  .filter((c) => c.type === 'tool-result' || c.type === 'tool-error')
  .map((c) => ({ id: c.toolCallId, type: c.type, output: c.output, error: c.error && String(c.error.message || c.error) }));
out.secondCallSawResults = model.doGenerateCalls[1].prompt.filter((m) => m.role === 'tool').length;
// What the model was given for the image cell: text without the payload, the image as a file part.
const parts = model.doGenerateCalls[1].prompt.filter((m) => m.role === 'tool').flatMap((m) => m.content);
const c6 = parts.find((p) => p.toolCallId === 'c6');
out.imageToModel = c6 && c6.output.type === 'content' ? c6.output.value.map((v) => (v.type === 'text' ? { type: 'text', text: JSON.parse(v.text) } : { type: v.type, mediaType: v.mediaType, bytes: Buffer.from(typeof v.data === 'string' ? v.data : v.data.data instanceof Uint8Array ? Buffer.from(v.data.data).toString('base64') : v.data.data, 'base64').subarray(0, 8).toString('hex') })) : c6;
out.textToModel = (parts.find((p) => p.toolCallId === 'c2') || {}).output;

// 2. An agent: ToolLoopAgent.generate with the session.
const agentModel = new MockLanguageModelV4({
  doGenerate: [step([call('a1', 'codeInterpreter', { code: "print(open('from-shell.txt').read().strip())" })], 'tool-calls'), step([{ type: 'text', text: 'ok' }], 'stop')],
});
const agent = new ToolLoopAgent({ model: agentModel, tools: { codeInterpreter }, stopWhen: isStepCount(3) });
const ar = await agent.generate({ prompt: 'go', experimental_sandbox: sandbox });
out.agent = ar.steps[0].content.filter((c) => c.type === 'tool-result').map((c) => c.output.stdout);

// 3. Every member, directly.
out.description = sandbox.description;
out.runMissingCwd = await settle(sandbox.run({ command: 'pwd', workingDirectory: 'sub' }));
await sandbox.writeTextFile({ path: 'sub/a.txt', content: 'one\ntwo\nthree\n' });
out.run = await sandbox.run({ command: 'pwd; echo "$GREETING"; echo err >&2; exit 3', workingDirectory: 'sub', env: { GREETING: 'hi' } });
out.runCut = await sandbox.run({ command: 'printf 0123456789; printf abcdef >&2', maxOutputLength: 4 });
out.readText = await sandbox.readTextFile({ path: 'sub/a.txt' });
out.readLines = await sandbox.readTextFile({ path: '/workspace/sub/a.txt', startLine: 2, endLine: 9 });
await sandbox.writeBinaryFile({ path: 'bin/b.dat', content: new Uint8Array([0, 255, 1, 128]) });
out.readBinary = Array.from(await sandbox.readBinaryFile({ path: 'bin/b.dat' }));
await sandbox.writeFile({ path: 'streamed.txt', content: new Blob(['stre', 'amed']).stream() });
out.readStream = await text(await sandbox.readFile({ path: 'streamed.txt' }));
await sandbox.writeTextFile({ path: 'latin.txt', content: 'café', encoding: 'latin1' });
out.latinBytes = Array.from(await sandbox.readBinaryFile({ path: 'latin.txt' }));
out.latinText = await sandbox.readTextFile({ path: 'latin.txt', encoding: 'latin1' });
out.readMissing = await sandbox.readTextFile({ path: 'nope.txt' });
out.readOutside = (await sandbox.readTextFile({ path: '/etc/os-release' })).split('\n')[0];
await sandbox.run({ command: 'ln -s sub/a.txt link.txt' });
out.readSymlink = await sandbox.readTextFile({ path: 'link.txt' });
out.stat = {
  file: await sandbox.stat({ path: 'sub/a.txt' }),
  dir: await sandbox.stat({ path: '/workspace/sub' }),
  missing: await sandbox.stat({ path: 'nope' }),
  dev: await sandbox.stat({ path: '/dev/null' }),
};
out.list = (await sandbox.listDirectory({ path: '.' })).sort((a, b) => a.name.localeCompare(b.name));
out.listMissing = await sandbox.listDirectory({ path: 'nope' });
out.listFile = await settle(sandbox.listDirectory({ path: 'sub/a.txt' }));
out.deleted = await sandbox.deleteFile({ path: 'streamed.txt' });
out.deletedAgain = await sandbox.deleteFile({ path: 'streamed.txt' });
out.deleteDir = await settle(sandbox.deleteFile({ path: 'sub' }));
out.deleteLink = await sandbox.deleteFile({ path: 'link.txt' });
out.writeDir = await settle(sandbox.writeTextFile({ path: 'sub', content: 'x' }));

// spawn, without and with stdin
const p1 = await sandbox.spawn({ command: 'cat; echo "no stdin: $?"; echo e >&2' });
out.spawnNoStdin = { hasStdin: 'stdin' in p1, pid: typeof p1.pid, stdout: await text(p1.stdout), stderr: await text(p1.stderr), wait: await p1.wait() };
const p2 = await sandbox.spawn({ command: 'tr a-z A-Z > upper.txt; cat upper.txt; exit 5', stdin: true });
const w = p2.stdin.getWriter();
await w.write(new TextEncoder().encode('hello '));
await w.write(new TextEncoder().encode('stdin'));
await w.close();
out.spawnStdin = { stdout: await text(p2.stdout), wait: await p2.wait() };
const p3 = await sandbox.spawn({ command: 'sleep 600' });
await p3.kill();
await p3.kill();
out.spawnKilled = await p3.wait();

// abortSignal
const ac = new AbortController();
const slow = sandbox.run({ command: 'sleep 600', abortSignal: ac.signal });
setTimeout(() => ac.abort(), 200);
out.aborted = await settle(slow);
const ac2 = new AbortController();
const p4 = await sandbox.spawn({ command: 'sleep 600', abortSignal: ac2.signal });
ac2.abort();
out.spawnAborted = await settle(p4.wait());

// bad input: kern's SandboxError, never a crash
out.bad = {
  runNoCommand: await settle(sandbox.run({})),
  runNotObject: await settle(sandbox.run('ls')),
  maxOutput: await settle(sandbox.run({ command: 'true', maxOutputLength: -1 })),
  readNoPath: await settle(sandbox.readTextFile({})),
  writeNotBytes: await settle(sandbox.writeBinaryFile({ path: 'x', content: 'str' })),
  badEncoding: await settle(sandbox.readTextFile({ path: 'sub/a.txt', encoding: 'nope-enc' })),
  badLine: await settle(sandbox.readTextFile({ path: 'sub/a.txt', startLine: 0 })),
  escapeCwd: await settle(sandbox.run({ command: 'pwd', workingDirectory: '../..' })),
};
// The tool outside a kern session: the SDK's tool-error, not a crash.
const lone = await generateText({
  model: new MockLanguageModelV4({ doGenerate: [step([call('x1', 'codeInterpreter', { code: 'print(1)' })], 'tool-calls'), step([{ type: 'text', text: 'k' }], 'stop')] }),
  tools: { codeInterpreter },
  stopWhen: isStepCount(3),
  prompt: 'go',
});
out.lone = lone.steps[0].content.filter((c) => c.type === 'tool-error').map((c) => String(c.error.message || c.error));

await sandbox.close();
out.afterClose = await settle(sandbox.run({ command: 'true' }));
process.stdout.write(JSON.stringify(out));
