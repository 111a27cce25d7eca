'use strict';
// A client the dropped-client test kills (SIGKILL): it starts `kern mcp` over stdio, starts a
// background process and a long command in its box, prints the server's pid, and waits.
// argv: the marker for the box's processes, then kern mcp's flags.

const path = require('path');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');

const [marker, ...flags] = process.argv.slice(2);

(async () => {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [path.join(__dirname, '..', '..', 'bin', 'kern.js'), 'mcp', ...flags],
    // The SDK passes on only a few variables by default; TMPDIR is where the test looks.
    env: { ...process.env },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'dropped', version: '1.0.0' });
  await client.connect(transport);
  await client.callTool({ name: 'write_file', arguments: { path: 'kept.txt', content: 'x' } });
  await client.callTool({ name: 'start_process', arguments: { command: `sleep 300; : ${marker}-process` } });
  // Never answered: the client dies while it runs.
  client.callTool({ name: 'run_command', arguments: { command: `sleep 300; : ${marker}-call` } }, undefined, { timeout: 600_000 }).catch(() => {});
  process.stdout.write(`${JSON.stringify({ serverPid: transport.pid })}\n`);
  setInterval(() => {}, 1 << 30);
})().catch((e) => {
  process.stderr.write(`client-that-drops: ${e.stack}\n`);
  process.exit(1);
});
