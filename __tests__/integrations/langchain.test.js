'use strict';
// rootless: yes
// kern-sandbox/langchain (issue 32, part 3) against the real deepagents JS: createDeepAgent with
// the KernSandbox backend, driven by @langchain/core's own scripted fake model (fakeModel()),
// whose tool calls (execute, write_file, read_file, edit_file, ls, glob, grep) travel
// agent -> deepagents' filesystem tools -> BaseSandbox -> KernSandbox -> box; what the boxes did
// is checked on the host workspace. Then the backend protocol directly, bad input included.

const fs = require('fs');
const path = require('path');
const { opts, requireRootfs, tempDirs } = require('../helpers');
const { KernSandbox } = require('../../js/integrations/langchain.js');
const { createDeepAgent, SandboxError, isSandboxBackend } = require('deepagents');
const { fakeModel } = require('@langchain/core/testing');
const { AIMessage, ToolMessage } = require('@langchain/core/messages');

const dirs = tempDirs();
let ws;
let backend;

beforeAll(async () => {
  requireRootfs();
  ws = dirs.temp('kern-lc-');
  backend = await KernSandbox.create(opts({ workspace: ws }));
});
afterAll(async () => {
  if (backend) await backend.close();
  dirs.removeAll();
});

/** The ToolMessages of a run, by tool call id: their text. */
function toolTexts(result) {
  const out = {};
  for (const m of result.messages) {
    if (ToolMessage.isInstance(m)) out[m.tool_call_id] = { text: typeof m.content === 'string' ? m.content : JSON.stringify(m.content), status: m.status };
  }
  return out;
}

test('it is a deepagents sandbox backend', () => {
  expect(isSandboxBackend(backend)).toBe(true);
  expect(backend.id).toMatch(/^kern-[0-9a-f-]{36}$/);
  expect(backend.isRunning).toBe(true);
});

test('a deep agent\'s tool calls run in the box: execute, write_file, read_file, edit_file, ls, glob, grep', async () => {
  const model = fakeModel()
    .respondWithTools([
      { name: 'execute', args: { command: 'echo "$((6 * 7))" > answer.txt && python3 -c "print(open(\'answer.txt\').read().strip())"' }, id: 'x1' },
      { name: 'write_file', args: { file_path: '/workspace/notes/plan.md', content: 'step one\nstep two\n' }, id: 'w1' },
    ])
    .respondWithTools([
      { name: 'read_file', args: { file_path: '/workspace/answer.txt' }, id: 'r1' },
      { name: 'edit_file', args: { file_path: '/workspace/notes/plan.md', old_string: 'two', new_string: 'TWO' }, id: 'e1' },
      { name: 'ls', args: { path: '/workspace' }, id: 'l1' },
      { name: 'glob', args: { pattern: '**/*.md', path: '/workspace' }, id: 'g1' },
      { name: 'execute', args: { command: 'echo oops >&2; exit 7' }, id: 'x2' },
      { name: 'read_file', args: { file_path: '/workspace/missing.txt' }, id: 'r2' },
    ])
    // A turn of its own: the tool calls of one turn run concurrently, and grep must see the edit.
    .respondWithTools([
      { name: 'grep', args: { pattern: 'step', path: '/workspace/notes' }, id: 'q1' },
    ])
    .respond(new AIMessage('done'));
  const agent = createDeepAgent({ model, backend });
  const result = await agent.invoke({ messages: [{ role: 'user', content: 'go' }] });
  const t = toolTexts(result);

  expect(t.x1.text).toMatch(/^42\n[\s\S]*\[Command succeeded with exit code 0\]/);
  expect(fs.readFileSync(path.join(ws, 'answer.txt'), 'utf8')).toBe('42\n');
  expect(fs.readFileSync(path.join(ws, 'notes', 'plan.md'), 'utf8')).toBe('step one\nstep TWO\n');
  expect(t.r1.text).toMatch(/42/);
  expect(t.e1.text).toMatch(/plan\.md/);
  expect(t.l1.text.split('\n').sort()).toEqual(['/workspace/.deps/ (directory)', '/workspace/answer.txt (3 bytes)', '/workspace/notes/ (directory)']);
  expect(t.g1.text).toBe('notes/plan.md');
  expect(t.q1.text).toBe('/workspace/notes/plan.md:\n  1: step one\n  2: step TWO');
  expect(t.x2.text).toMatch(/^oops\n[\s\S]*\[Command failed with exit code 7\]/);
  expect(t.r2.text).toMatch(/not found/);
  expect(result.messages.at(-1).content).toBe('done');
});

describe('the backend protocol, directly', () => {
  test('execute: stdout and stderr as one output, the exit code, truncated', async () => {
    const r = await backend.execute('echo out; echo err >&2; exit 3');
    expect(r).toEqual({ output: 'out\nerr\n', exitCode: 3, truncated: false });
    expect((await backend.execute('pwd')).output).toBe('/workspace\n');
  });

  test('uploadFiles/downloadFiles: partial success, the protocol\'s error codes', async () => {
    fs.mkdirSync(path.join(ws, 'adir'), { recursive: true });
    const up = await backend.uploadFiles([
      ['/workspace/up/a.bin', new Uint8Array([0, 1, 255])],
      ['rel.txt', new TextEncoder().encode('relative')],
      ['/workspace/adir', new Uint8Array([1])],
      ['/proc/nope/x', new Uint8Array([1])],
      ['bad\0path', new Uint8Array([1])],
    ]);
    expect(up.map((u) => u.error)).toEqual([null, null, 'is_directory', 'permission_denied', 'invalid_path']);
    expect([...fs.readFileSync(path.join(ws, 'up', 'a.bin'))]).toEqual([0, 1, 255]);
    expect(fs.readFileSync(path.join(ws, 'rel.txt'), 'utf8')).toBe('relative');

    const down = await backend.downloadFiles(['/workspace/up/a.bin', '/workspace/missing', '/workspace/adir', '/etc/hostname', 'rel.txt']);
    expect(down.map((d) => d.error)).toEqual([null, 'file_not_found', 'is_directory', null, null]);
    expect([...down[0].content]).toEqual([0, 1, 255]);
    expect(Buffer.from(down[4].content).toString()).toBe('relative');
  });

  test('a file outside the workspace is read through a box (the box\'s own files)', async () => {
    const r = await backend.read('/etc/os-release');
    expect(r.error).toBeUndefined();
    expect(String(r.content)).toMatch(/Debian/);
  });

  test('delete removes a path (recursively); a missing one is an error result', async () => {
    fs.mkdirSync(path.join(ws, 'gone', 'deep'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'gone', 'deep', 'f'), 'x');
    expect((await backend.delete('/workspace/gone')).error).toBeUndefined();
    expect(fs.existsSync(path.join(ws, 'gone'))).toBe(false);
    expect((await backend.delete('/workspace/gone')).error).toMatch(/not found/);
  });

  test('bad input: deepagents\' SandboxError, kern\'s message kept; never a crash', async () => {
    await expect(backend.execute(42)).rejects.toThrow(SandboxError);
    await expect(backend.uploadFiles('x')).rejects.toThrow(SandboxError);
    await expect(backend.downloadFiles(null)).rejects.toThrow(SandboxError);
    const bad = new KernSandbox(opts({ memoryMb: 'lots' }));
    const e = await bad.execute('true').catch((x) => x);
    expect(SandboxError.isInstance(e)).toBe(true);
    expect(e.code).toBe('COMMAND_FAILED');
    expect(e.message).toMatch(/option `memoryMb`/);
    expect(e.cause).toMatchObject({ name: 'SandboxError', code: 'ERR_INVALID_OPTION' });
    await expect(KernSandbox.create(opts({ memoryMb: 'lots' }))).rejects.toMatchObject({ code: 'NOT_INITIALIZED', message: expect.stringMatching(/memoryMb/) });
    await bad.close();
    expect(() => new KernSandbox('python')).toThrow(SandboxError);
  });

  test('after close: a closed error, in deepagents\' shape', async () => {
    const s = await KernSandbox.create(opts());
    await s.close();
    expect(s.isRunning).toBe(false);
    await expect(s.execute('true')).rejects.toMatchObject({ name: 'SandboxError', code: 'COMMAND_FAILED', message: expect.stringMatching(/closed/) });
  });
});
