'use strict';
// rootless: yes
// `kern mcp`'s command line: every bad flag is a clear message and exit 2 before anything
// starts (no box, no listener); --help; without the optional MCP SDK, exit 2 with the command
// that installs it; the native `kern mcp` runs the same server as `npx kern mcp`.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { requireRootfs, ROOTFS } = require('../helpers.js');
const { REPO, KERN_JS, tmpDir, workspacesIn, connectStdio, textOf } = require('./mcp-helpers.js');
const { Volume } = require('../..');

beforeAll(() => requireRootfs());

/** Runs `node bin/kern.js mcp args` to its end, stdin closed. */
function mcpOnce(args, { env = {}, tmp } = {}) {
  return spawnSync(process.execPath, [KERN_JS, 'mcp', ...args], {
    env: { ...process.env, KERN_MCP_TOKEN: '', ...(tmp ? { TMPDIR: tmp } : {}), ...env },
    input: '',
    encoding: 'utf8',
    timeout: 60_000,
  });
}

test('bad flags: exit 2 with a message naming the flag and the fix, before any box', () => {
  const tmp = tmpDir();
  const cfg = path.join(tmp, 'bad.json');
  fs.writeFileSync(cfg, '{"memoryMb": 1}');
  const notJson = path.join(tmp, 'not.json');
  fs.writeFileSync(notJson, '{nope');
  const cases = [
    [['--bogus'], /unknown argument "--bogus"\nusage: kern mcp/],
    [['--memory-mb', 'lots'], /--memory-mb "lots": give a whole number/],
    [['--memory-mb', '8'], /--memory-mb: at least 32/],
    [['--timeout-s', '0'], /--timeout-s "0": give a number above 0/],
    [['--mount', 'relative:/x'], /--mount "relative:\/x": give HOST:BOX/],
    [['--mount', '/etc:/x'], /refused source "\/etc"/],
    [['--secret', 'KERN_MCP_UNSET_VAR=api.example.com'], /the environment variable KERN_MCP_UNSET_VAR is not set/],
    [['--secret', 'NOHOSTS'], /--secret "NOHOSTS": give NAME=HOST/],
    [['--secret', 'KERN_MCP_SET_VAR=api.example.com'], /`secrets` needs `egressAllow`/, { KERN_MCP_SET_VAR: 'sekrit' }],
    [['--workspace', 'rel/dir'], /--workspace "rel\/dir": give an absolute directory/],
    [['--http', 'nope'], /--http "nope": give PORT or HOST:PORT/],
    [['--http', '0.0.0.0:0'], /not a loopback address\) needs a token you chose/],
    [['--http', '0', '--token-file', path.join(tmp, 'missing')], /--token-file .*missing: no such file/],
    [['--token-file', cfg], /--token-file is for --http/],
    [['--http', '0'], /the token is shorter than 16 characters/, { KERN_MCP_TOKEN: 'short' }],
    [['--config', path.join(tmp, 'missing.json')], /--config .*missing.json: no such file/],
    [['--config', notJson], /--config .*not.json: .*JSON/],
    [['--config', cfg], /option `memoryMb` is 1 MiB/],
    [['--image'], /--image needs a value/],
    [['--wrap'], /--wrap needs the server's command after "--"/],
    [['--wrap', '--http', '0', '--', 'true'], /--wrap relays stdio: it does not take --http/],
    [['--', 'true'], /"--" is for --wrap/],
    [['--volume', 'novol'], /--volume "novol": give NAME:BOX/],
    [['--volume', 'v:/d:rw'], /--volume "v:\/d:rw": give NAME:BOX/],
    [['--volume', 'kern-mcp-no-such-volume:/data'], /no volume named "kern-mcp-no-such-volume"/],
  ];
  try {
    for (const [args, message, env] of cases) {
      const r = mcpOnce(['--image', ROOTFS, ...args], { env, tmp });
      expect({ args, status: r.status, stderr: r.stderr, stdout: r.stdout }).toEqual({ args, status: 2, stderr: expect.stringMatching(message), stdout: '' });
    }
    expect(workspacesIn(tmp)).toEqual([]);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('--help prints the usage and exits 0; a good command line with stdin closed exits 0 and leaves nothing', () => {
  const help = mcpOnce(['--help']);
  expect(help.status).toBe(0);
  expect(help.stderr).toMatch(/usage: kern mcp \[--http \[HOST:\]PORT\]/);
  const tmp = tmpDir();
  try {
    const r = mcpOnce(['--image', ROOTFS, '--memory-mb', '256', '--egress-allow', 'example.com'], { tmp });
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
    expect(workspacesIn(tmp)).toEqual([]);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('without @modelcontextprotocol/sdk installed: exit 2 with the one command that installs it', () => {
  // The package's own files, where no node_modules above them holds the SDK.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-mcp-nosdk-'));
  try {
    fs.cpSync(path.join(REPO, 'js', 'mcp'), path.join(dir, 'js', 'mcp'), { recursive: true });
    fs.mkdirSync(path.join(dir, 'js', 'serve'));
    fs.copyFileSync(path.join(REPO, 'js', 'serve', 'config.js'), path.join(dir, 'js', 'serve', 'config.js'));
    const r = spawnSync(process.execPath, [path.join(dir, 'js', 'mcp', 'main.js'), '--image', ROOTFS], { input: '', encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/kern mcp needs the MCP SDK, an optional peer dependency: npm install @modelcontextprotocol\/sdk/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  // Where it is installed, the same command line does not say so.
  const here = mcpOnce(['--image', ROOTFS]);
  expect(here.stderr).not.toMatch(/needs the MCP SDK/);
});

test('package.json: the SDK is an optional peer dependency, and js/mcp/ ships', () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8'));
  expect(pkg.peerDependencies['@modelcontextprotocol/sdk']).toMatch(/^\^1\./);
  expect(pkg.peerDependenciesMeta['@modelcontextprotocol/sdk']).toEqual({ optional: true });
  expect(pkg.dependencies['@modelcontextprotocol/sdk']).toBeUndefined();
  expect(pkg.files).toContain('js/mcp/');
});

test('the native kern mcp execs node on the same server', async () => {
  const kern = path.join(REPO, 'kern');
  const help = spawnSync(kern, ['mcp', '--help'], { encoding: 'utf8' });
  expect(help.status).toBe(0);
  expect(help.stderr).toMatch(/^kern mcp: usage: kern mcp/);
  const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
  const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
  const client = new Client({ name: 'native', version: '1.0.0' });
  await client.connect(new StdioClientTransport({ command: kern, args: ['mcp', '--image', ROOTFS], env: { ...process.env }, stderr: 'pipe' }));
  try {
    const r = await client.callTool({ name: 'run_command', arguments: { command: 'echo native' } });
    expect(r.content[0].text).toContain('native');
  } finally {
    await client.close();
  }
});

test('--volume: what a session\'s code keeps in a named volume is there for the next session, and on the host', async () => {
  const name = `kmcp${process.pid}`;
  const tmp = tmpDir();
  const v = await Volume.create(name);
  try {
    for (const [i, script] of [[1, 'echo kept > /data/f'], [2, 'cat /data/f']]) {
      const mcp = await connectStdio(['--image', ROOTFS, '--volume', `${name}:/data`], { tmp });
      try {
        const r = await mcp.client.callTool({ name: 'run_command', arguments: { command: script } });
        expect({ i, error: r.isError ?? false }).toEqual({ i, error: false });
        if (i === 2) expect(textOf(r)).toContain('kept');
      } finally {
        await mcp.client.close();
      }
    }
    expect(fs.readFileSync(path.join(v.path, 'f'), 'utf8')).toBe('kept\n');
  } finally {
    await Volume.remove(name);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
