'use strict';
// Shared by the `kern serve` suites: a real server on a free loopback port, in this process, and
// the E2B SDKs pointed at it the way a user points them, through E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { parseArgs } = require('../../js/serve/config.js');
const { createServe } = require('../../js/serve/server.js');
const { createLogger } = require('../../js/serve/log.js');
const { ROOTFS } = require('../helpers.js');

const KEY = 'kern-test-key-0123456789abcdef';
const OTHER_KEY = 'kern-test-key-fedcba9876543210';

/** Starts a server with `args` (over a test image and two keys); sets the SDK's variables. */
async function startServe(args = [], env = { KERN_API_KEYS: `${KEY},${OTHER_KEY}` }) {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kern-serve-test-'));
  // No pool unless a test asks (--pool N): the suites check the state directory holds exactly
  // the sandboxes they made.
  const cfg = parseArgs(['--listen', '127.0.0.1:0', '--image', ROOTFS, '--state-dir', stateDir, '--pool', '0', ...args], env);
  // (A later --listen in `args` wins.)
  const logs = [];
  const log = createLogger('debug', { write: (line) => logs.push(line) });
  const serve = createServe(cfg, { log });
  const addr = await serve.listen();
  const url = `http://127.0.0.1:${addr.port}`;
  process.env.E2B_API_URL = url;
  process.env.E2B_SANDBOX_URL = url;
  process.env.E2B_API_KEY = KEY;
  const close = async () => {
    await serve.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
  };
  return { serve, url, stateDir, logs, close };
}

/** Runs `body` (the inside of an async function) in a separate Node program that imports the
 * unmodified SDKs as a user's program would (`Sandbox`, the `e2b` module as `e2b`, the code
 * interpreter's as `ci`, `CISandbox`), with the variables `startServe` set plus `env`. Resolves
 * to what `body` returns (JSON), or `{ thrown: { name, message } }`. */
function sdk(body, env = {}) {
  const program = `
import * as e2b from 'e2b';
import * as ci from '@e2b/code-interpreter';
const { Sandbox } = e2b;
const CISandbox = ci.Sandbox;
const main = async () => { ${body}\n};
// Exits once written: an SDK call that threw may leave its own request timer behind.
const done = (o) => process.stdout.write(JSON.stringify(o), () => process.exit(0));
main().then(
  (v) => done({ value: v === undefined ? null : v }),
  (e) => done({ thrown: { name: e && e.constructor ? e.constructor.name : 'Error', message: String(e && e.message) } }),
);`;
  return runProgram(process.execPath, ['--input-type=module', '-e', program], { cwd: path.join(__dirname, '..', '..'), env }, 'the SDK program');
}

/** Runs a client program that writes one JSON object, `{ value }` or `{ thrown }`; resolves to
 * the value, or to `{ thrown }`. */
function runProgram(cmd, args, { cwd, env }, what) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        const r = JSON.parse(out);
        resolve(r.thrown ? r : r.value);
      } catch {
        reject(new Error(`${what} exited ${code} without a result: ${out}${err}`));
      }
    });
  });
}

/** E2B's Python SDKs, pinned, where scripts/setup-deps.sh puts them. */
const PY_SDK = path.join(__dirname, '..', '..', 'target', 'tools', 'e2b-python');

/** As `sdk`, with E2B's Python SDKs: `body` is the inside of a Python function (indented by
 * 4), with `e2b`, `Sandbox`, `CISandbox`, `AsyncSandbox` and `asyncio` in scope; it returns
 * JSON-able data, or the result is `{ thrown: { name, message } }`. */
function py(body, env = {}) {
  const program = `
import asyncio, json, sys
import e2b
from e2b import Sandbox, AsyncSandbox
from e2b_code_interpreter import Sandbox as CISandbox
def main():
${body}
try:
    out = {"value": main()}
except Exception as e:
    out = {"thrown": {"name": type(e).__name__, "message": str(e)}}
sys.stdout.write(json.dumps(out))
`;
  if (!fs.existsSync(PY_SDK)) return Promise.reject(new Error(`E2B's Python SDKs are missing at ${PY_SDK}: run bash scripts/setup-deps.sh`));
  return runProgram('python3', ['-c', program], { env: { PYTHONPATH: PY_SDK, ...env } }, 'the Python SDK program');
}

module.exports = { startServe, sdk, py, KEY, OTHER_KEY };
