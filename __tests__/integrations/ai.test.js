'use strict';
// rootless: yes
// kern-sandbox/ai (issue 32, part 2) against the real AI SDK 7: generateText and a
// ToolLoopAgent driven by the SDK's own MockLanguageModelV4, whose tool calls travel
// SDK -> tool -> session -> box, and every member of Experimental_SandboxSession called
// directly; what the boxes did is checked on the host workspace. The driver runs outside Jest
// (drive.js says why).

const fs = require('fs');
const path = require('path');
const { opts, requireRootfs, tempDirs } = require('../helpers');
const { drive } = require('./drive');
const { createKernSandbox, codeInterpreter, createCodeInterpreter } = require('../../js/integrations/ai.js');
const { SandboxError } = require('../..');

const dirs = tempDirs();
let ws;
let out;

beforeAll(async () => {
  requireRootfs();
  ws = dirs.temp('kern-ai-');
  out = await drive('ai', { image: opts().image, workspace: ws });
}, 120000);
afterAll(() => dirs.removeAll());

describe('a tool call travels generateText -> tool -> session -> box', () => {
  test('a shell command through experimental_sandbox.run wrote to the workspace', () => {
    const r = out.toolResults.find((t) => t.id === 'c1');
    expect(r).toMatchObject({ type: 'tool-result', output: { exitCode: 0, stderr: '' } });
    expect(r.output.stdout.split('\n')[0]).toBe('42');
    expect(fs.readFileSync(path.join(ws, 'from-shell.txt'), 'utf8')).toBe('42\n');
  });

  test('codeInterpreter runs python: stdout, the main result, a workspace file', () => {
    const r = out.toolResults.find((t) => t.id === 'c2');
    expect(r.output).toMatchObject({ stdout: '45\n', exitCode: 0, error: null });
    expect(r.output.results).toEqual([{ isMainResult: true, data: { 'text/plain': '1024' }, chart: null }]);
    expect(fs.readFileSync(path.join(ws, 'from-python.txt'), 'utf8')).toBe('py');
  });

  test('a python exception is the tool result\'s error, not a tool failure', () => {
    const r = out.toolResults.find((t) => t.id === 'c3');
    expect(r.type).toBe('tool-result');
    expect(r.output.error).toMatchObject({ name: 'ZeroDivisionError', value: 'division by zero' });
    expect(r.output.exitCode).not.toBe(0);
  });

  test('node code runs in the box too', () => {
    expect(out.toolResults.find((t) => t.id === 'c5').output).toMatchObject({ stdout: '3,6\n', exitCode: 0 });
  });

  test('bad tool input is the SDK\'s own tool-error (InvalidToolInputError), and the loop goes on', () => {
    const r = out.toolResults.find((t) => t.id === 'c4');
    expect(r.type).toBe('tool-error');
    expect(r.error).toMatch(/Invalid input for tool codeInterpreter/);
    expect(r.error).toMatch(/`language` must be one of python/);
    expect(out.secondCallSawResults).toBe(1);
    expect(out.text).toBe('done');
  });

  test('an image result reaches the model as an image file part, not as base64 in the text', () => {
    const r = out.toolResults.find((t) => t.id === 'c6');
    expect(r.output.results[0].data['image/png']).toMatch(/^iVBORw0KGgo/);
    expect(out.imageToModel).toEqual([
      { type: 'text', text: expect.objectContaining({ exitCode: 0, results: [expect.objectContaining({ isMainResult: true, data: expect.objectContaining({ 'image/png': '(image/png, attached)' }) })] }) },
      { type: 'file', mediaType: 'image/png', bytes: '89504e470d0a1a0a' },
    ]);
    // Without images, the output goes as the JSON it is.
    expect(out.textToModel).toEqual({ type: 'json', value: expect.objectContaining({ stdout: '45\n' }) });
  });

  test('a ToolLoopAgent with the session runs its tool in the same workspace', () => {
    expect(out.agent).toEqual(['42\n']);
  });

  test('the tool without a kern session is a tool-error naming the fix', () => {
    expect(out.lone).toHaveLength(1);
    expect(out.lone[0]).toMatch(/experimental_sandbox: createKernSandbox/);
  });
});

describe('every member of Experimental_SandboxSession', () => {
  test('description tells the model what persists and the network', () => {
    expect(out.description).toMatch(/only files under \/workspace .* persist/);
    expect(out.description).toMatch(/Network access: off/);
  });

  test('run: workingDirectory, env, exit code and both streams; maxOutputLength cuts and reports the lengths', () => {
    expect(out.run).toEqual({ exitCode: 3, stdout: '/workspace/sub\nhi\n', stderr: 'err\n' });
    expect(out.runCut).toEqual({ exitCode: 0, stdout: '0123', stderr: 'abcd', stdoutLength: 10, stderrLength: 6 });
    expect(out.runMissingCwd.error).toMatchObject({ name: 'SandboxError' });
  });

  test('text, binary and stream reads and writes, line ranges and encodings', () => {
    expect(out.readText).toBe('one\ntwo\nthree\n');
    expect(out.readLines).toBe('two\nthree\n');
    expect(out.readBinary).toEqual([0, 255, 1, 128]);
    expect([...fs.readFileSync(path.join(ws, 'bin', 'b.dat'))]).toEqual([0, 255, 1, 128]);
    expect(out.readStream).toBe('streamed');
    expect(out.latinBytes).toEqual([99, 97, 102, 233]);
    expect(out.latinText).toBe('café');
    expect(fs.readFileSync(path.join(ws, 'sub', 'a.txt'), 'utf8')).toBe('one\ntwo\nthree\n');
  });

  test('a missing file reads as null; the box\'s own files and a workspace symlink read through a box', () => {
    expect(out.readMissing).toBeNull();
    expect(out.readOutside).toMatch(/^PRETTY_NAME="Debian/);
    expect(out.readSymlink).toBe('one\ntwo\nthree\n');
  });

  test('stat follows the SDK types; a missing path is null', () => {
    expect(out.stat).toEqual({ file: { type: 'file', size: 14 }, dir: { type: 'directory', size: expect.any(Number) }, missing: null, dev: { type: 'other', size: 0 } });
  });

  test('listDirectory: names and types (symlinks unfollowed), null when missing, rejects on a file', () => {
    const names = Object.fromEntries(out.list.map((e) => [e.name, e.type]));
    expect(names).toMatchObject({ 'from-shell.txt': 'file', bin: 'directory', sub: 'directory', 'link.txt': 'symlink', 'streamed.txt': 'file' });
    expect(out.listMissing).toBeNull();
    expect(out.listFile.error).toMatchObject({ name: 'SandboxError', code: 'ERR_FILE' });
  });

  test('deleteFile: true, then false; a directory rejects; a symlink goes itself', () => {
    expect([out.deleted, out.deletedAgain, out.deleteLink]).toEqual([true, false, true]);
    expect(out.deleteDir.error).toMatchObject({ code: 'ERR_FILE', message: expect.stringMatching(/is a directory/) });
    expect(fs.existsSync(path.join(ws, 'streamed.txt'))).toBe(false);
    expect(fs.existsSync(path.join(ws, 'sub', 'a.txt'))).toBe(true);
    expect(out.writeDir.error).toMatchObject({ code: 'ERR_FILE' });
  });

  test('spawn without stdin: EOF at once, no stdin member, both streams, exit code', () => {
    // The stream is the process's stderr as Sandbox.spawn gives it: with kern's own note:/warning:
    // lines where it wrote some (rootless, best-effort caps), as the streams of spawn() have them.
    const { stderr, ...rest } = out.spawnNoStdin;
    expect(rest).toEqual({ hasStdin: false, pid: 'number', stdout: 'no stdin: 0\n', wait: { exitCode: 0 } });
    expect(stderr.split('\n').filter((l) => !/^(note|warning): /.test(l))).toEqual(['e', '']);
  });

  test('spawn with stdin: written bytes reach the process, close is EOF', () => {
    expect(out.spawnStdin).toEqual({ stdout: 'HELLO STDIN', wait: { exitCode: 5 } });
    expect(fs.readFileSync(path.join(ws, 'upper.txt'), 'utf8')).toBe('HELLO STDIN');
  });

  test('kill ends a process (idempotent); abortSignal rejects run and a spawned wait with the abort', () => {
    expect(out.spawnKilled.exitCode).not.toBe(0);
    expect(out.aborted.error.name).toBe('AbortError');
    expect(out.spawnAborted.error.name).toBe('AbortError');
  });

  test('bad input rejects with kern\'s SandboxError and its message, never a crash', () => {
    for (const [k, v] of Object.entries(out.bad)) {
      expect([k, v.error && v.error.name, v.error && v.error.code]).toEqual([k, 'SandboxError', 'ERR_INVALID_OPTION']);
    }
    expect(out.bad.escapeCwd.error.message).toMatch(/leads out of the workspace/);
    expect(out.afterClose.error).toMatchObject({ name: 'SandboxError', code: 'ERR_CLOSED' });
  });
});

describe('in this process', () => {
  test('bad Sandbox options: a SandboxError naming the option, at open() or the first call', async () => {
    const s = createKernSandbox(opts({ memoryMb: 'lots' }));
    await expect(s.open()).rejects.toThrow(SandboxError);
    await expect(s.run({ command: 'true' })).rejects.toThrow(/option `memoryMb`/);
    await s.close();
    expect(() => createKernSandbox('python')).toThrow(SandboxError);
    expect(() => createKernSandbox({ sandbox: {} })).toThrow(/must be a Sandbox/);
    expect(() => createCodeInterpreter({})).toThrow(SandboxError);
  });

  test('the tool\'s schema is a Standard Schema with its JSON Schema', async () => {
    const std = codeInterpreter.inputSchema['~standard'];
    expect(std.jsonSchema.input({ target: 'draft-07' })).toMatchObject({ type: 'object', required: ['code'] });
    expect(await std.validate({ code: 'x' })).toEqual({ value: { code: 'x', language: 'python' } });
    expect((await std.validate({ code: 1, extra: 2 })).issues.map((i) => i.path)).toEqual([['code'], ['extra']]);
  });

  test('a session on a Sandbox the caller owns leaves it open; createCodeInterpreter runs on it', async () => {
    const { Sandbox } = require('../..');
    const sb = await new Sandbox(opts()).open();
    try {
      const session = createKernSandbox({ sandbox: sb });
      const tool = createCodeInterpreter(session);
      const r = await tool.execute({ code: 'print(2 + 2)', language: 'python' }, { toolCallId: 't', messages: [] });
      expect(r.stdout).toBe('4\n');
      await session.close();
      expect((await sb.run(['echo', 'still open'])).stdout).toBe('still open\n');
    } finally {
      await sb.close();
    }
  });

  test('a timeout is said on stderr, as the sandbox ending the code', async () => {
    const session = createKernSandbox(opts({ timeoutS: 1 }));
    try {
      const r = await session.run({ command: 'sleep 30' });
      expect(r.exitCode).not.toBe(0);
      expect(r.stderr).toMatch(/^\[kern-sandbox\] timeout: /m);
    } finally {
      await session.close();
    }
  });
});
