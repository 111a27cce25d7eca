'use strict';
// rootless: yes
// kern-sandbox/openai-agents (issue 32, part 4) against the real OpenAI Agents SDK: a
// SandboxAgent run with KernSandboxClient, driven by the SDK's own ScriptedModel, whose calls
// (exec_command, apply_patch create/update, view_image) travel runner -> capability tools ->
// KernSandboxSession -> box, with a manifest materialized first; what the boxes did is checked
// on the host workspace. Then the session directly, bad input included.

const fs = require('fs');
const path = require('path');
const { opts, requireRootfs, tempDirs } = require('../helpers');
const { KernSandboxClient, KernSandboxSession } = require('../../js/integrations/openai-agents.js');
const { run, setTracingDisabled } = require('@openai/agents');
const sdk = require('@openai/agents/sandbox');
const { ScriptedModel, functionCall, assistantMessage } = require('@openai/agents/testing');

const { SandboxAgent, Manifest } = sdk;
const dirs = tempDirs();
const PNG = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');

beforeAll(() => {
  requireRootfs();
  setTracingDisabled(true);
});
afterAll(() => dirs.removeAll());

const patchCall = (callId, operation) => ({ type: 'apply_patch_call', callId, status: 'completed', operation });

/** Tool outputs of a run by call id. */
function outputs(result) {
  const out = {};
  for (const it of result.newItems) {
    if (it.type === 'tool_call_output_item') out[it.rawItem.callId] = it.rawItem;
  }
  return out;
}

test('a SandboxAgent run: manifest, exec_command, apply_patch and view_image run in kern boxes', async () => {
  const ws = dirs.temp('kern-oa-');
  fs.writeFileSync(path.join(ws, 'img.png'), PNG);
  const client = new KernSandboxClient(opts({ workspace: ws }));
  const model = new ScriptedModel([
    [
      functionCall('exec_command', { cmd: 'echo "$((6 * 7))" > answer.txt; cat answer.txt seed.txt; echo; echo "$GREETING"; ls -d emptydir' }, { callId: 'c1' }),
      patchCall('c2', { type: 'create_file', path: 'notes/plan.md', diff: '+step one\n+step two\n' }),
    ],
    [
      patchCall('c3', { type: 'update_file', path: 'notes/plan.md', diff: '@@\n step one\n-step two\n+step TWO\n' }),
      functionCall('view_image', { path: 'img.png' }, { callId: 'c4' }),
      functionCall('exec_command', { cmd: 'pwd', workdir: '../../etc' }, { callId: 'c5' }),
      patchCall('c6', { type: 'update_file', path: 'missing.md', diff: '@@\n-a\n+b\n' }),
    ],
    [assistantMessage('done')],
  ]);
  const agent = new SandboxAgent({ name: 'kern', model, instructions: 'work in the sandbox' });
  const manifest = new Manifest({
    entries: { 'seed.txt': { type: 'file', content: 'seeded' }, emptydir: { type: 'dir' } },
    environment: { GREETING: 'hello' },
  });
  const result = await run(agent, 'go', { sandbox: { client, manifest } });
  const o = outputs(result);

  expect(o.c1.output.text).toMatch(/^Chunk ID: [0-9a-f]+\nWall time: [\d.]+ seconds\nProcess exited with code 0\nOutput:\n42\nseeded\nhello\nemptydir\n$/);
  expect(fs.readFileSync(path.join(ws, 'answer.txt'), 'utf8')).toBe('42\n');
  expect(fs.readFileSync(path.join(ws, 'seed.txt'), 'utf8')).toBe('seeded');
  expect(o.c2).toMatchObject({ type: 'apply_patch_call_output', status: 'completed', output: 'Created notes/plan.md' });
  expect(o.c3).toMatchObject({ status: 'completed', output: 'Updated notes/plan.md' });
  expect(fs.readFileSync(path.join(ws, 'notes', 'plan.md'), 'utf8')).toBe('step one\nstep TWO'); // the SDK's applyDiff: created lines joined
  expect(o.c4.output).toEqual([{ type: 'input_image', image: `data:image/png;base64,${PNG.toString('base64')}` }]);
  // Bad input from the model: the SDK's own tool-error result, and the run goes on.
  expect(o.c5.output.text).toMatch(/error occurred while running the tool/);
  expect(o.c6.status).toBe('failed');
  expect(result.finalOutput).toBe('done');
  // The run closed the session it created: the workspace stays (a given directory), nothing runs.
  expect(fs.existsSync(path.join(ws, 'answer.txt'))).toBe(true);
});

describe('the session, directly', () => {
  let ws;
  let session;
  beforeAll(async () => {
    ws = dirs.temp('kern-oa-s-');
    session = await new KernSandboxClient(opts({ workspace: ws })).create({ manifest: new Manifest({ entries: { 'a.txt': { type: 'file', content: 'one\ntwo\n' } } }) });
    await session.start();
  });
  afterAll(() => session && session.close());

  test('it is a SandboxSession of the SDK: running, no pty', async () => {
    expect(session).toBeInstanceOf(KernSandboxSession);
    expect(await session.running()).toBe(true);
    expect(session.supportsPty()).toBe(false);
    expect(session.state.workspaceReady).toBe(true);
    expect(session.state.manifest).toBeInstanceOf(Manifest);
  });

  test('exec: stdout, stderr, exit code, workdir, shell, maxOutputTokens', async () => {
    const r = await session.exec({ cmd: 'echo out; echo err >&2; exit 4' });
    expect(r).toMatchObject({ output: 'out\nerr\n', stdout: 'out\n', stderr: 'err\n', exitCode: 4 });
    expect(typeof r.wallTimeSeconds).toBe('number');
    fs.mkdirSync(path.join(ws, 'sub'), { recursive: true });
    expect((await session.exec({ cmd: 'pwd', workdir: 'sub' })).stdout).toBe('/workspace/sub\n');
    expect((await session.exec({ cmd: 'echo ${BASH_VERSION:+bash}', shell: 'bash' })).stdout).toBe('bash\n');
    const cut = await session.exec({ cmd: 'head -c 4000 /dev/zero | tr "\\0" x', maxOutputTokens: 10 });
    expect(cut.originalTokenCount).toBe(1000);
    expect(cut.output).toMatch(/^x{20}\.\.\.990 tokens truncated\.\.\.x{20}$/);
  });

  test('files: readFile (maxBytes), listDir, pathExists, directoryExists', async () => {
    expect(Buffer.from(await session.readFile({ path: 'a.txt' })).toString()).toBe('one\ntwo\n');
    expect(Buffer.from(await session.readFile({ path: '/workspace/a.txt', maxBytes: 3 })).toString()).toBe('one');
    expect(Buffer.from(await session.readFile({ path: '/etc/debian_version' })).toString()).toMatch(/^12/);
    await expect(session.readFile({ path: 'nope' })).rejects.toBeInstanceOf(sdk.SandboxWorkspaceReadNotFoundError);
    const list = await session.listDir({ path: '.' });
    expect(list).toEqual(expect.arrayContaining([{ name: 'a.txt', path: 'a.txt', type: 'file' }, { name: 'sub', path: 'sub', type: 'dir' }]));
    expect(await session.pathExists('a.txt')).toBe(true);
    expect(await session.pathExists('nope')).toBe(false);
    expect(await session.directoryExists('sub')).toBe(true);
    expect(await session.directoryExists('a.txt')).toBe(false);
  });

  test('the editor: create, update with a move, delete; a bad diff is the SDK\'s diff error', async () => {
    const ed = session.createEditor();
    await ed.createFile({ type: 'create_file', path: 'e/x.txt', diff: '+alpha\n+beta\n' });
    await ed.updateFile({ type: 'update_file', path: 'e/x.txt', diff: '@@\n alpha\n-beta\n+gamma\n', moveTo: 'e/y.txt' });
    expect(fs.existsSync(path.join(ws, 'e', 'x.txt'))).toBe(false);
    expect(fs.readFileSync(path.join(ws, 'e', 'y.txt'), 'utf8')).toBe('alpha\ngamma');
    await expect(ed.updateFile({ type: 'update_file', path: 'e/y.txt', diff: '@@\n-nothing-like-this\n+z\n' })).rejects.toBeInstanceOf(sdk.SandboxApplyPatchDiffError);
    await ed.deleteFile({ type: 'delete_file', path: 'e/y.txt' });
    expect(fs.existsSync(path.join(ws, 'e', 'y.txt'))).toBe(false);
    await expect(ed.deleteFile({ type: 'delete_file', path: 'e/y.txt' })).rejects.toBeInstanceOf(sdk.SandboxApplyPatchFileNotFoundError);
  });

  test('viewImage: the SDK\'s image output; not an image is a UserError', async () => {
    fs.writeFileSync(path.join(ws, 'i.png'), PNG);
    const img = await session.viewImage({ path: 'i.png' });
    expect(img.type).toBe('image');
    expect(img.image.mediaType).toBe('image/png');
    expect(Buffer.from(img.image.data).equals(PNG)).toBe(true);
    await expect(session.viewImage({ path: 'a.txt' })).rejects.toThrow(/Unsupported image format/);
  });

  test('bad input: the SDK\'s sandbox error classes, kern\'s message kept', async () => {
    const e = await session.exec({ cmd: 'pwd', workdir: '../..' }).catch((x) => x);
    expect(e).toBeInstanceOf(sdk.SandboxConfigurationError);
    expect(e.message).toMatch(/leads out of the workspace/);
    expect(e.details).toMatchObject({ provider: 'kern-sandbox', kernCode: 'ERR_INVALID_OPTION' });
    await expect(session.exec({})).rejects.toBeInstanceOf(sdk.SandboxConfigurationError);
    await expect(session.exec({ cmd: 'id', runAs: 'root' })).rejects.toBeInstanceOf(sdk.SandboxUnsupportedFeatureError);
    await expect(session.materializeEntry({ path: 'x', entry: { type: 'local_file', src: '/etc/passwd' } })).rejects.toBeInstanceOf(sdk.SandboxUnsupportedFeatureError);
    expect(fs.existsSync(path.join(ws, 'x'))).toBe(false);
  });
});

test('bad client options and manifest roots: the SDK\'s configuration error', async () => {
  expect(() => new KernSandboxClient('python')).toThrow(sdk.SandboxConfigurationError);
  const s = await new KernSandboxClient(opts({ memoryMb: 'lots' })).create();
  const e = await s.start().catch((x) => x);
  expect(e).toBeInstanceOf(sdk.SandboxConfigurationError);
  expect(e.message).toMatch(/option `memoryMb`/);
  await s.close();
  await expect(new KernSandboxClient(opts({ workspaceMount: '/home/user' })).create({ manifest: new Manifest({ root: '/srv' }) })).rejects.toBeInstanceOf(sdk.SandboxConfigurationError);
});

test('a manifest root is the box\'s workspace mount; close ends the session', async () => {
  const s = await new KernSandboxClient(opts()).create({ manifest: new Manifest({ root: '/home/user', entries: { 'f.txt': { type: 'file', content: 'x' } } }) });
  await s.start();
  expect((await s.exec({ cmd: 'pwd; cat f.txt' })).stdout).toBe('/home/user\nx');
  await s.close();
  expect(await s.running()).toBe(false);
  await expect(s.exec({ cmd: 'true' })).rejects.toBeInstanceOf(sdk.SandboxLifecycleError);
});
