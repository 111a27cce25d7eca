'use strict';
// rootless: yes
// `kern mcp` from an outside client: the MCP Inspector's CLI (@modelcontextprotocol/inspector-cli),
// over stdio (it spawns kern mcp) and over Streamable HTTP with the bearer token.

const fs = require('fs');
const path = require('path');
const { execFile } = require('child_process');
const { requireRootfs, ROOTFS } = require('../helpers.js');
const { REPO, KERN_JS, SCI, tmpDir, startHttp, exited } = require('./mcp-helpers.js');

// inspector-cli 1.0.3 finds its own package.json relative to the working directory
// ("../package.json"), so it runs from its build directory.
const INSPECTOR_DIR = path.join(REPO, 'node_modules', '@modelcontextprotocol', 'inspector-cli', 'build');

/** Runs the Inspector CLI with `args`; resolves with { code, stdout, stderr }. */
function inspector(args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(INSPECTOR_DIR, 'index.js'), ...args], { cwd: INSPECTOR_DIR, timeout: 120_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? err.code : 0, stdout, stderr });
    });
  });
}

/** The Inspector against `kern mcp flags` over stdio. */
const overStdio = (method, flags, extra = []) => inspector([process.execPath, '--method', method, ...extra, '--', KERN_JS, 'mcp', ...flags]);

beforeAll(() => requireRootfs());

test('stdio: tools/list lists the thirteen tools with their schemas and annotations', async () => {
  const r = await overStdio('tools/list', ['--image', ROOTFS]);
  expect(r.code).toBe(0);
  const { tools } = JSON.parse(r.stdout);
  expect(tools).toHaveLength(13);
  const runCommand = tools.find((t) => t.name === 'run_command');
  expect(runCommand.inputSchema.required).toEqual(['command']);
  expect(runCommand.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true, openWorldHint: false });
});

test('stdio: tools/call of run_code, run_command (argv), write_file then read_file, and an error as isError', async () => {
  const code = await overStdio('tools/call', ['--image', ROOTFS], ['--tool-name', 'run_code', '--tool-arg', 'code=print(6 * 7)']);
  expect(JSON.parse(code.stdout)).toMatchObject({ isError: false, structuredContent: { exitCode: 0 }, content: [{ type: 'text', text: expect.stringContaining('42') }] });
  const cmd = await overStdio('tools/call', ['--image', ROOTFS], ['--tool-name', 'run_command', '--tool-arg', 'command=["echo", "a; b"]']);
  expect(JSON.parse(cmd.stdout).content[0].text).toContain('a; b');
  // A workspace of the inspector's own so a file outlives one run of kern mcp.
  const ws = tmpDir();
  try {
    const flags = ['--image', ROOTFS, '--workspace', ws];
    await overStdio('tools/call', flags, ['--tool-name', 'write_file', '--tool-arg', 'path=hello.txt', '--tool-arg', 'content=from the inspector']);
    expect(fs.readFileSync(path.join(ws, 'hello.txt'), 'utf8')).toBe('from the inspector');
    const read = await overStdio('tools/call', flags, ['--tool-name', 'read_file', '--tool-arg', 'path=/workspace/hello.txt']);
    expect(JSON.parse(read.stdout).content[0].text).toBe('from the inspector');
    const res = await overStdio('resources/list', flags);
    expect(JSON.parse(res.stdout).resources).toEqual([expect.objectContaining({ uri: 'file:///workspace/hello.txt' })]);
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
  const bad = await overStdio('tools/call', ['--image', ROOTFS], ['--tool-name', 'run_code', '--tool-arg', 'code=raise ValueError("nope")']);
  expect(JSON.parse(bad.stdout)).toMatchObject({ isError: true, structuredContent: { error: { name: 'ValueError', value: 'nope' } } });
});

test('stdio: a matplotlib figure is image content', async () => {
  const r = await overStdio('tools/call', ['--image', SCI], ['--tool-name', 'run_code', '--tool-arg', 'code=import matplotlib.pyplot as plt; plt.plot([1, 2], [3, 4])']);
  const images = JSON.parse(r.stdout).content.filter((c) => c.type === 'image');
  expect(images).toEqual([expect.objectContaining({ type: 'image', mimeType: 'image/png' })]);
});

test('http: with the token it lists and calls; with a wrong one it fails', async () => {
  const token = 'inspector-token-0123456789';
  const srv = await startHttp(['--image', ROOTFS], { env: { KERN_MCP_TOKEN: token } });
  try {
    const list = await inspector([srv.url, '--transport', 'http', '--header', `Authorization: Bearer ${token}`, '--method', 'tools/list']);
    expect(list.code).toBe(0);
    expect(JSON.parse(list.stdout).tools.map((t) => t.name)).toContain('start_kernel');
    const called = await inspector([srv.url, '--transport', 'http', '--header', `Authorization: Bearer ${token}`, '--method', 'tools/call', '--tool-name', 'run_command', '--tool-arg', 'command=echo over http']);
    expect(JSON.parse(called.stdout).content[0].text).toContain('over http');
    const wrong = await inspector([srv.url, '--transport', 'http', '--header', 'Authorization: Bearer not-the-token-0123456789', '--method', 'tools/list']);
    expect(wrong.code).not.toBe(0);
    expect(wrong.stdout).not.toContain('start_kernel');
  } finally {
    srv.child.kill('SIGTERM');
    await exited(srv.child);
  }
});
