'use strict';
// rootless: yes
// `kern mcp --http` through the SDK's StreamableHTTPClientTransport: the bearer token (a wrong
// or missing one is 401, a random one printed when none was given), one Sandbox per session
// (separate workspaces), a session's DELETE ending its boxes, and SIGTERM leaving nothing.

const fs = require('fs');
const { requireRootfs, ROOTFS, hostProcessesMatching, uniqueName, waitFor, isAlive } = require('../helpers.js');
const { tmpDir, workspacesIn, startHttp, connectHttp, exited, textOf } = require('./mcp-helpers.js');

const TOKEN = 'test-token-0123456789abcdef';

let srv;
let tmp;
beforeAll(async () => {
  requireRootfs();
  tmp = tmpDir();
  srv = await startHttp(['--image', ROOTFS], { env: { KERN_MCP_TOKEN: TOKEN }, tmp });
});
afterAll(async () => {
  if (srv) {
    srv.child.kill('SIGTERM');
    await exited(srv.child);
  }
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

const initialize = (token) => fetch(srv.url, {
  method: 'POST',
  headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...(token === null ? {} : { authorization: `Bearer ${token}` }) },
  body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'curl', version: '1' } } }),
});

test('a wrong or missing token is 401 with WWW-Authenticate: Bearer; the right one initializes', async () => {
  for (const token of [null, 'wrong-token-0123456789abcdef', TOKEN.slice(0, -1), `${TOKEN}x`, '']) {
    const res = await initialize(token);
    expect({ token, status: res.status }).toEqual({ token, status: 401 });
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
    await res.text();
  }
  const ok = await initialize(TOKEN);
  expect(ok.status).toBe(200);
  expect(ok.headers.get('mcp-session-id')).toMatch(/^[0-9a-f-]{36}$/);
  await ok.text();
  // A session id alone is not enough: every request needs the token.
  const res = await fetch(srv.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': ok.headers.get('mcp-session-id') },
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
  });
  expect(res.status).toBe(401);
  await res.text();
});

test('the SDK client over Streamable HTTP: tools, a call, an error as isError', async () => {
  const { client } = await connectHttp(srv.url, TOKEN);
  try {
    const { tools } = await client.listTools();
    expect(tools).toHaveLength(13);
    const r = await client.callTool({ name: 'run_code', arguments: { code: 'print(6 * 7)' } });
    expect(textOf(r)).toContain('42');
    const bad = await client.callTool({ name: 'read_file', arguments: { path: '/etc/shadow' } });
    expect(bad.isError).toBe(true);
  } finally {
    await client.close();
  }
});

test('each session has its own Sandbox: a file one writes the other can\'t read', async () => {
  const a = await connectHttp(srv.url, TOKEN);
  const b = await connectHttp(srv.url, TOKEN);
  try {
    await a.client.callTool({ name: 'write_file', arguments: { path: 'mine.txt', content: 'a' } });
    expect(textOf(await a.client.callTool({ name: 'read_file', arguments: { path: 'mine.txt' } }))).toBe('a');
    const other = await b.client.callTool({ name: 'read_file', arguments: { path: 'mine.txt' } });
    expect(other.isError).toBe(true);
  } finally {
    await a.client.close();
    await b.client.close();
  }
});

test('DELETE of a session ends its boxes and its temp workspace; the session id is then unknown', async () => {
  const marker = uniqueName('mcphttp');
  const before = workspacesIn(tmp).length;
  const { client, transport } = await connectHttp(srv.url, TOKEN);
  await client.callTool({ name: 'start_process', arguments: { command: `sleep 300; : ${marker}` } });
  expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10000)).toBe(true);
  expect(workspacesIn(tmp).length).toBe(before + 1);
  const id = transport.sessionId;
  await transport.terminateSession();
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10000)).toBe(true);
  expect(await waitFor(() => workspacesIn(tmp).length === before, 10000)).toBe(true);
  const res = await fetch(srv.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${TOKEN}`, 'mcp-session-id': id },
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
  });
  expect(res.status).toBe(404);
  await res.text();
  await client.close();
});

test('--session-idle-s: a session with no request for that long ends, and its boxes', async () => {
  const own = await startHttp(['--image', ROOTFS, '--session-idle-s', '1'], { env: { KERN_MCP_TOKEN: TOKEN } });
  const marker = uniqueName('mcpidle');
  try {
    const { client } = await connectHttp(own.url, TOKEN);
    // A call running past the idle time keeps its session.
    const long = await client.callTool({ name: 'run_command', arguments: { command: 'sleep 3; echo still here' } });
    expect(textOf(long)).toContain('still here');
    await client.callTool({ name: 'start_process', arguments: { command: `sleep 300; : ${marker}` } });
    expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10000)).toBe(true);
    expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 20000)).toBe(true);
    // Said before the boxes went; the pipe may not have been read yet when they are seen gone.
    await waitFor(() => /session \S+ idle for 1 s: ended/.test(own.stderr()), 10000, 20);
    expect(own.stderr()).toMatch(/session \S+ idle for 1 s: ended/);
    await client.close();
  } finally {
    own.child.kill('SIGTERM');
    await exited(own.child);
  }
});

test('--max-sessions: past it a new session is 503; ending one makes room', async () => {
  const own = await startHttp(['--image', ROOTFS, '--max-sessions', '1'], { env: { KERN_MCP_TOKEN: TOKEN } });
  try {
    const first = await connectHttp(own.url, TOKEN);
    await expect(connectHttp(own.url, TOKEN)).rejects.toThrow(/503|sessions are open/);
    await first.transport.terminateSession();
    await first.client.close();
    const next = await connectHttp(own.url, TOKEN);
    expect((await next.client.listTools()).tools).toHaveLength(13);
    await next.client.close();
  } finally {
    own.child.kill('SIGTERM');
    await exited(own.child);
  }
});

test('without a token it makes one, prints it on stderr, and accepts only it; SIGTERM ends every session', async () => {
  const dir = tmpDir();
  const own = await startHttp(['--image', ROOTFS], { env: { KERN_MCP_TOKEN: '' }, tmp: dir });
  let client;
  try {
    const m = /token \(send as Authorization: Bearer <token>\): ([0-9a-f]{48})/.exec(own.stderr());
    expect(m).not.toBeNull();
    const wrong = await fetch(own.url, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: '{}' });
    expect(wrong.status).toBe(401);
    const marker = uniqueName('mcpterm');
    ({ client } = await connectHttp(own.url, m[1]));
    await client.callTool({ name: 'start_process', arguments: { command: `sleep 300; : ${marker}` } });
    expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10000)).toBe(true);
    own.child.kill('SIGTERM');
    expect(await exited(own.child)).toBe(0);
    expect(hostProcessesMatching(marker)).toEqual([]);
    expect(workspacesIn(dir)).toEqual([]);
    expect(isAlive(own.child.pid)).toBe(false);
  } finally {
    await client?.close();
    own.child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
