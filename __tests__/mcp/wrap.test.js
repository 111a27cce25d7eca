'use strict';
// rootless: yes
// `kern mcp --wrap -- CMD`: a real stdio MCP server package (@modelcontextprotocol/server-filesystem,
// server-everything) run in a box of the test image (its Node), the package mounted read-only,
// reached through the SDK's Client: its tools work, its files land in the box's workspace, the
// host's environment does not reach it, its network is refused unless --network says so, and
// its end ends kern mcp (and the box) with nothing left.

const fs = require('fs');
const http = require('http');
const path = require('path');
const { requireRootfs, ROOTFS, hostProcessesMatching, uniqueName, waitFor, isAlive } = require('../helpers.js');
const { REPO, tmpDir, connectStdio, textOf } = require('./mcp-helpers.js');

const PKGS = path.join(REPO, 'node_modules');
const IN_BOX = '/mcp/node_modules';
const SERVER = (name) => `${IN_BOX}/@modelcontextprotocol/${name}/dist/index.js`;
const MOUNT = ['--mount', `${PKGS}:${IN_BOX}:ro`];

beforeAll(() => requireRootfs());

test('server-filesystem in a box: its tools run there, on the box\'s workspace, and it can\'t write the mounted package', async () => {
  const ws = tmpDir();
  const { client } = await connectStdio(['--wrap', '--image', ROOTFS, ...MOUNT, '--workspace', ws, '--', 'node', SERVER('server-filesystem'), '/workspace', IN_BOX]);
  try {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['read_text_file', 'write_file', 'list_directory']));
    const w = await client.callTool({ name: 'write_file', arguments: { path: '/workspace/from-wrapped.txt', content: 'written in the box' } });
    expect(w.isError).toBeFalsy();
    expect(fs.readFileSync(path.join(ws, 'from-wrapped.txt'), 'utf8')).toBe('written in the box');
    const r = await client.callTool({ name: 'read_text_file', arguments: { path: '/workspace/from-wrapped.txt' } });
    expect(textOf(r)).toBe('written in the box');
    // The package is mounted read-only: the server itself can't change it.
    const target = `${IN_BOX}/@modelcontextprotocol/server-filesystem/planted.txt`;
    const planted = await client.callTool({ name: 'write_file', arguments: { path: target, content: 'x' } });
    expect(planted.isError).toBe(true);
    expect(fs.existsSync(path.join(PKGS, '@modelcontextprotocol/server-filesystem/planted.txt'))).toBe(false);
  } finally {
    await client.close();
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

describe('server-everything in a box', () => {
  let hits = 0;
  let host;
  beforeAll(async () => {
    host = http.createServer((req, res) => {
      hits++;
      res.end('from the host');
    });
    await new Promise((r) => host.listen(0, '127.0.0.1', r));
  });
  afterAll(() => host && host.close());

  const start = (flags, env) => connectStdio(['--wrap', '--image', ROOTFS, ...MOUNT, ...flags, '--', 'node', SERVER('server-everything'), 'stdio'], { env });
  const fetchFromHost = (client) => client.callTool({ name: 'gzip-file-as-resource', arguments: { name: 'x.gz', data: `http://127.0.0.1:${host.address().port}/f` } });

  test('no network by default: its fetch of a host server fails and the server never sees it; the host\'s env stays out', async () => {
    const canary = uniqueName('mcpenv');
    const { client } = await start([], { KERN_MCP_CANARY: canary });
    try {
      expect(textOf(await client.callTool({ name: 'echo', arguments: { message: 'hi' } }))).toBe('Echo: hi');
      const before = hits;
      const r = await fetchFromHost(client);
      expect(r.isError).toBe(true);
      expect(hits).toBe(before);
      const env = await client.callTool({ name: 'get-env', arguments: {} });
      expect(textOf(env)).not.toContain(canary);
      expect(textOf(env)).toContain('PATH');
    } finally {
      await client.close();
    }
  });

  test('an --egress-allow list that does not name the host refuses the same fetch', async () => {
    const { client } = await start(['--egress-allow', 'example.com']);
    try {
      const before = hits;
      const r = await fetchFromHost(client);
      expect(r.isError).toBe(true);
      expect(hits).toBe(before);
    } finally {
      await client.close();
    }
  });

  test('with --network the same fetch reaches the host server (the refusal above was the policy)', async () => {
    const { client } = await start(['--network']);
    try {
      const before = hits;
      const r = await fetchFromHost(client);
      expect(r.isError).toBeFalsy();
      expect(hits).toBe(before + 1);
    } finally {
      await client.close();
    }
  });
});

test('the client closing ends the wrapped server and its box; the server exiting ends kern mcp with its status', async () => {
  const marker = uniqueName('mcpwrap');
  const { client, transport } = await connectStdio(['--wrap', '--image', ROOTFS, ...MOUNT, '--', 'sh', '-c', `node ${SERVER('server-everything')} stdio; : ${marker}`]);
  expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10000)).toBe(true);
  const pid = transport.pid;
  await client.close();
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 15000)).toBe(true);
  expect(await waitFor(() => !isAlive(pid), 15000)).toBe(true);

  const { spawnSync } = require('child_process');
  const r = spawnSync(process.execPath, [path.join(REPO, 'bin', 'kern.js'), 'mcp', '--wrap', '--image', ROOTFS, '--', 'sh', '-c', 'echo "{}"; echo to-stderr >&2; exit 7'], { input: '', encoding: 'utf8', timeout: 60_000 });
  expect(r.status).toBe(7);
  expect(r.stdout).toBe('{}\n');
  expect(r.stderr).toContain('to-stderr');
});

test('a wrapped server that ignores the end of its stdin is stopped, its box with it', () => {
  const marker = uniqueName('mcpstuck');
  const { spawnSync } = require('child_process');
  const r = spawnSync(process.execPath, [path.join(REPO, 'bin', 'kern.js'), 'mcp', '--wrap', '--image', ROOTFS, '--', 'sh', '-c', `sleep 300; : ${marker}`], { input: '', encoding: 'utf8', timeout: 60_000 });
  expect(r.error).toBeUndefined();
  expect(r.stderr).toContain('stdin ended and the server did not exit: stopping the wrapped server');
  expect(r.status).not.toBe(0);
  expect(hostProcessesMatching(marker)).toEqual([]);
});
