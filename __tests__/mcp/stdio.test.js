'use strict';
// rootless: yes
// `kern mcp` over stdio through the MCP SDK's own Client, as an MCP host (an editor, an agent)
// runs it: the tools' list and schemas, every tool called, images as image content, errors as
// tool results with isError, resources, progress, cancellation ending the box, and a client
// that dies leaving nothing running on the host.

const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const { requireRootfs, ROOTFS, hostProcessesMatching, uniqueName, waitFor, isAlive, sleep } = require('../helpers.js');
const { KERN_JS, SCI, tmpDir, workspacesIn, connectStdio, exited, textOf } = require('./mcp-helpers.js');

const TOOL_NAMES = [
  'close_kernel', 'kill_process', 'list_files', 'read_file', 'read_process_output', 'remove_file', 'run_cell', 'run_code',
  'run_command', 'start_kernel', 'start_process', 'write_file', 'write_process_input',
];

let mcp;
let tmp;
beforeAll(async () => {
  requireRootfs();
  tmp = tmpDir();
  mcp = await connectStdio(['--image', SCI, '--timeout-s', '60'], { tmp });
});
afterAll(async () => {
  await mcp?.client.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

const call = (name, args, opts) => mcp.client.callTool({ name, arguments: args }, undefined, opts);

test('tools/list: the fixed names, each with a JSON schema, a description and the four annotations', async () => {
  const { tools } = await mcp.client.listTools();
  expect(tools.map((t) => t.name).sort()).toEqual(TOOL_NAMES);
  for (const t of tools) {
    expect(t.inputSchema.type).toBe('object');
    expect(t.description.length).toBeGreaterThan(40);
    for (const hint of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']) expect(typeof t.annotations[hint]).toBe('boolean');
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  expect(byName.read_file.annotations.readOnlyHint).toBe(true);
  expect(byName.list_files.annotations.readOnlyHint).toBe(true);
  expect(byName.remove_file.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
  expect(byName.run_code.inputSchema.required).toEqual(['code']);
  expect(byName.run_code.inputSchema.properties.language.enum).toEqual(expect.arrayContaining(['python', 'node', 'bash', 'sh', 'typescript', 'r']));
  expect(byName.run_command.inputSchema.properties.command.oneOf).toHaveLength(2);
});

test('run_code: python\'s output and final value, node and shells; code failing is isError with its exception', async () => {
  const py = await call('run_code', { code: 'print("from python")\n6 * 7' });
  expect(py.isError).toBe(false);
  expect(textOf(py)).toContain('from python');
  expect(textOf(py)).toContain('result: 42');
  expect(py.structuredContent).toMatchObject({ exitCode: 0, success: true, fault: null, error: null });
  const node = await call('run_code', { code: 'console.log([1, 2].map((x) => x * 3).join(","))', language: 'node' });
  expect(textOf(node)).toContain('3,6');
  const sh = await call('run_code', { code: 'echo "$((6 * 7))"; echo oops >&2; exit 3', language: 'sh' });
  expect(sh.isError).toBe(true);
  expect(textOf(sh)).toMatch(/stdout:\n42\n[\s\S]*stderr:\noops/);
  expect(sh.structuredContent.exitCode).toBe(3);
  const err = await call('run_code', { code: '1 / 0' });
  expect(err.isError).toBe(true);
  expect(err.structuredContent.error).toEqual({ name: 'ZeroDivisionError', value: 'division by zero' });
});

test('R where the image has it: run_code with Rscript, and an IRkernel kernel keeping its state', async () => {
  const r = await call('run_code', { code: 'cat(6 * 7, "\\n")', language: 'r' });
  expect(textOf(r)).toContain('stdout:\n42');
  const k = await call('start_kernel', { language: 'r' });
  expect(k.isError).toBeFalsy();
  const id = k.structuredContent.kernel_id;
  try {
    await call('run_cell', { kernel_id: id, code: 'x <- 20' });
    expect(textOf(await call('run_cell', { kernel_id: id, code: 'x * 2 + 2' }))).toMatch(/42/);
  } finally {
    await call('close_kernel', { kernel_id: id });
  }
});

test('openWorldHint: false while the boxes have no network; true for the tools that run code under --network', async () => {
  const { tools } = await mcp.client.listTools();
  expect(tools.filter((t) => t.annotations.openWorldHint)).toEqual([]);
  const open = await connectStdio(['--image', ROOTFS, '--network']);
  try {
    const hinted = (await open.client.listTools()).tools.filter((t) => t.annotations.openWorldHint).map((t) => t.name).sort();
    expect(hinted).toEqual(['run_cell', 'run_code', 'run_command', 'start_kernel', 'start_process']);
  } finally {
    await open.client.close();
  }
});

test('a matplotlib figure comes back as PNG image content, with its chart summarised as text', async () => {
  const r = await call('run_code', { code: 'import matplotlib.pyplot as plt\nplt.bar(["a", "b"], [3, 5]); plt.title("Sales")' });
  const images = r.content.filter((c) => c.type === 'image');
  expect(images).toHaveLength(1);
  expect(images[0].mimeType).toBe('image/png');
  expect(Buffer.from(images[0].data, 'base64').subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  expect(textOf(r)).toMatch(/chart: \{"type":"bar".*"title":"Sales"/);
});

test('the sandbox stopping a call (timeout) is a tool error whose structuredContent names the fault', async () => {
  const r = await call('run_code', { code: 'while True: pass', timeout_s: 1 });
  expect(r.isError).toBe(true);
  expect(r.structuredContent.fault.type).toBe('timeout');
  expect(textOf(r)).toContain('fault: timeout');
});

test('run_command: a string through sh -c, an argv without a shell, cwd and stdin', async () => {
  const s = await call('run_command', { command: 'echo a | tr a b && pwd' });
  expect(textOf(s)).toContain('stdout:\nb\n/workspace\n');
  const argv = await call('run_command', { command: ['echo', '$HOME; not a shell'] });
  expect(textOf(argv)).toContain('$HOME; not a shell');
  const cwd = await call('run_command', { command: 'pwd; cat', cwd: '/tmp', stdin: 'piped in' });
  expect(textOf(cwd)).toContain('/tmp\npiped in');
});

test('bad arguments, an unknown tool and paths out of the workspace are tool errors that say what to send', async () => {
  const cases = [
    [{ name: 'run_code', arguments: {} }, /"code" is required/],
    [{ name: 'run_code', arguments: { code: 1 } }, /"code" must be a string/],
    [{ name: 'run_code', arguments: { code: 'x', language: 'cobol' } }, /"language" must be one of "python"/],
    [{ name: 'run_code', arguments: { code: 'x', bogus: 1 } }, /unknown argument "bogus"/],
    [{ name: 'run_command', arguments: { command: [] } }, /"command" must be a string or an array \(not empty\)/],
    [{ name: 'run_code', arguments: { code: 'x', timeout_s: -1 } }, /"timeout_s" must be a number/],
    [{ name: 'no_such_tool', arguments: {} }, /unknown tool "no_such_tool"; the tools are run_code/],
    [{ name: 'read_file', arguments: { path: '/etc/passwd' } }, /outside the workspace/],
    [{ name: 'write_file', arguments: { path: '../escape.txt', content: 'x' } }, /"\.\." is not allowed/],
    [{ name: 'read_file', arguments: { path: 'missing.txt' } }, /no such file/],
    [{ name: 'run_cell', arguments: { kernel_id: 'kernel-nope', code: '1' } }, /no kernel "kernel-nope"/],
    [{ name: 'read_process_output', arguments: { process_id: 'proc-nope' } }, /no process "proc-nope"/],
  ];
  for (const [params, message] of cases) {
    const r = await mcp.client.callTool(params);
    expect({ params, isError: r.isError, text: textOf(r) }).toEqual({ params, isError: true, text: expect.stringMatching(message) });
  }
  // The session still works after them.
  expect(textOf(await call('run_code', { code: 'print("alive")' }))).toContain('alive');
});

test('files: write, read whole, by bytes and by lines, list, images, binary, remove; and as resources', async () => {
  const w = await call('write_file', { path: 'notes/a.txt', content: 'one\ntwo\nthree\n' });
  expect(w.isError).toBeFalsy();
  expect(textOf(await call('read_file', { path: '/workspace/notes/a.txt' }))).toBe('one\ntwo\nthree\n');
  expect(textOf(await call('read_file', { path: 'notes/a.txt', offset: 4, length: 3 }))).toBe('two');
  expect(textOf(await call('read_file', { path: 'notes/a.txt', start_line: 2, end_line: 3 }))).toBe('two\nthree');
  // Code in a box sees what write_file wrote, and read_file sees what code wrote.
  await call('run_code', { code: 'open("notes/b.txt", "w").write(open("notes/a.txt").read().upper())' });
  expect(textOf(await call('read_file', { path: 'notes/b.txt' }))).toBe('ONE\nTWO\nTHREE\n');
  const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
  await call('write_file', { path: 'dot.png', content: png.toString('base64'), encoding: 'base64' });
  const img = await call('read_file', { path: 'dot.png' });
  expect(img.content[0]).toEqual({ type: 'image', mimeType: 'image/png', data: png.toString('base64') });
  await call('write_file', { path: 'blob.bin', content: Buffer.from([0xff, 0xfe, 0x00, 0x80]).toString('base64'), encoding: 'base64' });
  expect(textOf(await call('read_file', { path: 'blob.bin' }))).toMatch(/4 bytes of binary data/);

  const list = await call('list_files', {});
  expect(list.structuredContent.files.map((f) => f.path)).toEqual(expect.arrayContaining(['notes/a.txt', 'notes/b.txt', 'dot.png', 'blob.bin']));
  expect((await call('list_files', { path: 'notes' })).structuredContent.files.map((f) => f.path).sort()).toEqual(['notes/a.txt', 'notes/b.txt']);

  const { resources } = await mcp.client.listResources();
  expect(resources).toEqual(expect.arrayContaining([expect.objectContaining({ uri: 'file:///workspace/notes/a.txt', name: 'notes/a.txt' })]));
  const res = await mcp.client.readResource({ uri: 'file:///workspace/notes/a.txt' });
  expect(res.contents).toEqual([{ uri: 'file:///workspace/notes/a.txt', mimeType: 'text/plain', text: 'one\ntwo\nthree\n' }]);
  await expect(mcp.client.readResource({ uri: 'file:///etc/passwd' })).rejects.toThrow(/outside the workspace/);

  expect((await call('remove_file', { path: 'notes' })).isError).toBeFalsy();
  expect((await call('read_file', { path: 'notes/a.txt' })).isError).toBe(true);
  const again = await call('remove_file', { path: 'notes' });
  expect(again.isError).toBe(true);
  expect(textOf(again)).toMatch(/no such file/);
});

test('long output is kept whole in the workspace and the result says where; read_file pages through it; a background process streams on', async () => {
  const r = await call('run_code', { code: 'for i in range(1, 400001): print(i)' });
  expect(r.isError).toBeFalsy();
  const spill = r.structuredContent.stdoutSpill;
  expect(spill).toEqual({ path: expect.stringMatching(/^\.kern-output\/.+\.stdout$/), bytes: 2_688_895, complete: true });
  expect(textOf(r)).toContain(`[stdout is longer than shown here: all of it (2688895 bytes) is in ${spill.path}; read_file it`);
  // What the model was shown stops at the capture limit; the rest is a read away.
  expect(textOf(r)).not.toContain('\n400000\n');
  expect(textOf(await call('read_file', { path: spill.path, start_line: 399999, end_line: 400000 }))).toBe('399999\n400000');
  expect(textOf(await call('read_file', { path: spill.path, offset: 0, length: 6 }))).toBe('1\n2\n3\n');
  // A background process's output is not held to what a result shows: it streams whole.
  const p = await call('start_process', { command: 'seq 1 100000; echo done' });
  const o = await call('read_process_output', { process_id: p.structuredContent.process_id, wait: true });
  expect({ running: o.structuredContent.running, bytes: o.structuredContent.stdout.length }).toEqual({ running: false, bytes: 588895 + 5 });
  expect(o.structuredContent.stdout.endsWith('99999\n100000\ndone\n')).toBe(true);
  const past = await call('read_file', { path: spill.path, start_line: 400001 });
  expect({ isError: past.isError, text: textOf(past) }).toEqual({ isError: true, text: expect.stringMatching(/fewer than 400001 lines/) });
});

test('remove_file follows no symlink the code planted to the host: the removal happens in the box', async () => {
  const canary = path.join(tmp, uniqueName('mcp-canary'));
  fs.mkdirSync(canary);
  fs.writeFileSync(path.join(canary, 'keep'), 'host data');
  await call('run_command', { command: ['ln', '-s', canary, 'link'] });
  expect((await call('remove_file', { path: 'link' })).isError).toBeFalsy();
  expect(fs.readFileSync(path.join(canary, 'keep'), 'utf8')).toBe('host data');
});

test('kernels: state carries from cell to cell; a closed kernel is gone', async () => {
  const k = await call('start_kernel', {});
  const id = k.structuredContent.kernel_id;
  expect(id).toMatch(/^kernel-/);
  await call('run_cell', { kernel_id: id, code: 'x = 20' });
  const r = await call('run_cell', { kernel_id: id, code: 'x * 2 + 2' });
  expect(textOf(r)).toContain('result: 42');
  // A fresh run_code does not see the kernel's variables.
  expect((await call('run_code', { code: 'x' })).structuredContent.error.name).toBe('NameError');
  expect((await call('close_kernel', { kernel_id: id })).isError).toBeFalsy();
  expect((await call('run_cell', { kernel_id: id, code: 'x' })).isError).toBe(true);
});

test('background processes: output since the last read, stdin, exit; kill ends its box', async () => {
  const p = await call('start_process', { command: 'echo ready; read line; echo "got $line"; read never' });
  const id = p.structuredContent.process_id;
  let out = '';
  for (let i = 0; i < 100 && !out.includes('ready'); i++) {
    out += (await call('read_process_output', { process_id: id })).structuredContent.stdout;
    if (!out.includes('ready')) await sleep(100);
  }
  expect(out).toContain('ready');
  await call('write_process_input', { process_id: id, data: 'hello\n' });
  const marker = uniqueName('mcpproc');
  const second = await call('start_process', { command: `sleep 300; : ${marker}` });
  expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10000)).toBe(true);
  await call('write_process_input', { process_id: id, data: 'x\n', eof: true });
  const done = await call('read_process_output', { process_id: id, wait: true });
  expect(done.structuredContent).toMatchObject({ running: false, exitCode: 0 });
  expect(done.structuredContent.stdout).toContain('got hello');
  const killed = await call('kill_process', { process_id: second.structuredContent.process_id, signal: 'SIGKILL' });
  expect(killed.isError).toBeFalsy();
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10000)).toBe(true);
});

test('a session holds at most 16 live kernels and processes; an ended one makes room', async () => {
  const marker = uniqueName('mcpcap');
  const ids = [];
  try {
    for (let i = 0; i < 16; i++) {
      const p = await call('start_process', { command: `sleep 300; : ${marker}` });
      expect(p.isError).toBeFalsy();
      ids.push(p.structuredContent.process_id);
    }
    const over = await call('start_kernel', {});
    expect(over.isError).toBe(true);
    expect(textOf(over)).toMatch(/already holds 16 kernels and running processes/);
    await call('kill_process', { process_id: ids.pop(), signal: 'SIGKILL' });
    const room = await call('start_process', { command: `sleep 300; : ${marker}` });
    expect(room.isError).toBeFalsy();
    ids.push(room.structuredContent.process_id);
  } finally {
    for (const id of ids) await call('kill_process', { process_id: id, signal: 'SIGKILL' });
  }
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10000)).toBe(true);
});

test('progress: a call with a progressToken gets each output line as notifications/progress, before its result', async () => {
  // Read off the wire: the SDK's client may drop progress that reaches it in the same read as
  // the result (it handles notifications a microtask late), so the order is checked here.
  const child = spawn(process.execPath, [KERN_JS, 'mcp', '--image', ROOTFS], { stdio: ['pipe', 'pipe', 'inherit'] });
  const messages = [];
  let buf = '';
  const got = (pred) => new Promise((resolve) => {
    const check = () => {
      if (messages.some(pred)) resolve();
      else child.stdout.once('data', check);
    };
    check();
  });
  child.stdout.on('data', (c) => {
    buf += c;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      messages.push(JSON.parse(buf.slice(0, nl)));
      buf = buf.slice(nl + 1);
    }
  });
  const send = (m) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...m })}\n`);
  try {
    send({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
    await got((m) => m.id === 1);
    send({ method: 'notifications/initialized' });
    send({ id: 2, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'for i in 1 2 3; do echo "line $i"; done; echo oops >&2' }, _meta: { progressToken: 'tok' } } });
    await got((m) => m.id === 2);
    const progress = messages.filter((m) => m.method === 'notifications/progress');
    expect(progress.map((m) => m.params.message)).toEqual(expect.arrayContaining(['stdout: line 1', 'stdout: line 2', 'stdout: line 3', 'stderr: oops']));
    expect(progress.every((m) => m.params.progressToken === 'tok')).toBe(true);
    expect(progress.map((m) => m.params.progress)).toEqual(progress.map((_, i) => i + 1));
    const result = messages.findIndex((m) => m.id === 2);
    expect(messages.findLastIndex((m) => m.method === 'notifications/progress')).toBeLessThan(result);
    // Without a token, no progress.
    send({ id: 3, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'echo quiet' } } });
    await got((m) => m.id === 3);
    expect(messages.slice(result + 1).filter((m) => m.method === 'notifications/progress')).toEqual([]);
  } finally {
    child.stdin.end();
    await exited(child);
  }
});

test('cancellation: notifications/cancelled aborts the call and its box ends on the host', async () => {
  const marker = uniqueName('mcpcancel');
  const ac = new AbortController();
  const pending = call('run_command', { command: `sleep 300; : ${marker}` }, { signal: ac.signal, timeout: 600_000 });
  expect(await waitFor(() => hostProcessesMatching(marker).length > 0, 10000)).toBe(true);
  ac.abort('changed my mind');
  await expect(pending).rejects.toBeTruthy();
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10000)).toBe(true);
  expect(textOf(await call('run_code', { code: 'print("after")' }))).toContain('after');
});

test('a client that dies (SIGKILL) leaves nothing: no box process, no kern mcp, no temp workspace', async () => {
  const dir = tmpDir();
  const marker = uniqueName('mcpdrop');
  const child = spawn(process.execPath, [path.join(__dirname, 'client-that-drops.js'), marker, '--image', SCI], {
    env: { ...process.env, TMPDIR: dir },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const line = await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (c) => {
        out += c;
        if (out.includes('\n')) resolve(out.split('\n')[0]);
      });
      child.once('exit', (code) => reject(new Error(`client exited ${code}`)));
    });
    const { serverPid } = JSON.parse(line);
    // The marker is in the client's own argv too: count the boxes' processes by their suffix.
    const boxes = () => hostProcessesMatching(`${marker}-process`).length + hostProcessesMatching(`${marker}-call`).length;
    expect(await waitFor(() => boxes() === 2, 10000)).toBe(true);
    expect(isAlive(serverPid)).toBe(true);
    expect(workspacesIn(dir)).toHaveLength(1);
    child.kill('SIGKILL');
    await exited(child);
    expect(await waitFor(() => boxes() === 0 && !isAlive(serverPid), 15000)).toBe(true);
    expect(await waitFor(() => workspacesIn(dir).length === 0, 10000)).toBe(true);
  } finally {
    child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
