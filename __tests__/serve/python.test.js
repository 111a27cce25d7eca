// rootless: yes
'use strict';
// `kern serve` with E2B's unmodified Python SDKs (`e2b`, `e2b-code-interpreter` from PyPI,
// pinned by scripts/setup-deps.sh), sync and async: sandboxes, commands, files, code contexts,
// errors and auth, each checked on the host too.

const fs = require('fs');
const path = require('path');
const { requireRootfs, hostProcessesMatching, uniqueName, waitFor } = require('../helpers.js');
const { startServe, py } = require('./serve-helpers.js');

const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';

let srv;
beforeAll(async () => {
  requireRootfs();
  srv = await startServe(['--template', `code-interpreter-v1=${SCI}`]);
});
afterAll(() => srv && srv.close());

test('sandbox, commands and files from the sync SDK; its files land in the workspace on the host', async () => {
  const r = await py(`
    sb = Sandbox.create("base", timeout=120, metadata={"from": "python"}, envs={"FROM_PY": "p1"})
    out = {"id": sb.sandbox_id}
    res = sb.commands.run('echo "$FROM_PY"; pwd')
    out["run"] = [res.stdout, res.exit_code]
    try:
        sb.commands.run("echo partial; exit 4")
    except e2b.CommandExitException as e:
        out["failed"] = [type(e).__name__, e.exit_code, e.stdout]
    sb.files.write("py/a.txt", "from python")
    sb.files.write("py/b.bin", bytes(range(256)))
    out["read"] = sb.files.read("py/a.txt")
    out["bytes"] = list(sb.files.read("py/b.bin", format="bytes")[:4])
    out["ls"] = sorted(e.name for e in sb.files.list("py"))
    out["exists"] = [sb.files.exists("py/a.txt"), sb.files.exists("py/none")]
    h = sb.commands.run("cat", background=True, stdin=True)
    sb.commands.send_stdin(h.pid, "typed\\n")
    sb.commands.close_stdin(h.pid)
    out["stdin"] = h.wait().stdout
    out["listed"] = [s.sandbox_id for s in Sandbox.list(query=e2b.SandboxQuery(metadata={"from": "python"})).next_items()]
    return out`);
  expect(r.run).toEqual(['p1\n' + srv.serve.sandboxes.get(r.id).home + '\n', 0]);
  expect(r.failed).toEqual(['CommandExitException', 4, 'partial\n']);
  expect(r.read).toBe('from python');
  expect(r.bytes).toEqual([0, 1, 2, 3]);
  expect(r.ls).toEqual(['a.txt', 'b.bin']);
  expect(r.exists).toEqual([true, false]);
  expect(r.stdin).toBe('typed\n');
  expect(r.listed).toEqual([r.id]);
  const home = path.join(srv.stateDir, r.id, 'home');
  expect(fs.readFileSync(path.join(home, 'py/a.txt'), 'utf8')).toBe('from python');
  expect(fs.readFileSync(path.join(home, 'py/b.bin')).equals(Buffer.from([...Array(256).keys()]))).toBe(true);
  const killed = await py(`
    Sandbox.kill("${r.id}")
    return Sandbox.connect("${r.id}") and "connected"`);
  expect(killed.thrown.name).toMatch(/NotFound/);
  expect(fs.existsSync(path.join(srv.stateDir, r.id))).toBe(false);
});

test('the async SDK: a background command, killed; its box leaves the host', async () => {
  const marker = uniqueName('pyasync');
  const r = await py(`
    async def go():
        sb = await AsyncSandbox.create("base", timeout=120)
        h = await sb.commands.run("while :; do sleep 0.2; done; : ${marker}", background=True, timeout=0)
        procs = [p.pid for p in await sb.commands.list()]
        killed = await sb.commands.kill(h.pid)
        await sb.kill()
        return {"pid": h.pid, "procs": procs, "killed": killed}
    return asyncio.run(go())`);
  expect(r.procs).toContain(r.pid);
  expect(r.killed).toBe(true);
  expect(await waitFor(() => hostProcessesMatching(marker).length === 0, 10_000)).toBeTruthy();
});

test('the code interpreter from Python: values, stdout, errors, a js context, env vars', async () => {
  const r = await py(`
    sb = CISandbox.create(timeout=120)
    out = {}
    ex = sb.run_code("print('hi')\\nx = 6\\nx * 7")
    out["first"] = [ex.text, "".join(ex.logs.stdout), ex.execution_count]
    ex = sb.run_code("x + 1")
    out["state"] = ex.text
    ex = sb.run_code("import os\\nos.environ.get('CELL')", envs={"CELL": "c"})
    out["env"] = ex.text
    ex = sb.run_code("raise KeyError('k')")
    out["error"] = [ex.error.name, ex.error.value]
    ctx = sb.create_code_context(language="js")
    out["js"] = sb.run_code("[1, 2, 3].map((n) => n * 2).join('-')", context=ctx).text
    out["contexts"] = len(sb.list_code_contexts()) >= 1
    sb.kill()
    return out`);
  // (stdout comes in the chunks the cell wrote it in, as E2B's does: joined here.)
  expect(r).toEqual({ first: ['42', 'hi\n', 1], state: '7', env: "'c'", error: ['KeyError', "'k'"], js: "'2-4-6'", contexts: true });
});

test('a wrong key is refused by the Python SDK too', async () => {
  const r = await py(`
    return Sandbox.create("base")`, { E2B_API_KEY: 'wrong-key-for-kern-serve-000' });
  expect(r.thrown.name).toBe('AuthenticationException');
});

test('the sync SDK\'s polled watcher: events since the last read, then stopped', async () => {
  const r = await py(`
    import time
    sb = Sandbox.create("base", timeout=120)
    sb.files.make_dir("pw")
    h = sb.files.watch_dir("pw", recursive=True)
    sb.commands.run("echo x > pw/f.txt && mkdir pw/d && echo y > pw/d/g.txt")
    events = []
    for _ in range(50):
        events += [[e.type.value if hasattr(e.type, "value") else str(e.type), e.name] for e in h.get_new_events()]
        if any(n == "d/g.txt" for _, n in events):
            break
        time.sleep(0.1)
    h.stop()
    try:
        h.get_new_events()
        after = "read"
    except Exception as e:
        after = type(e).__name__
    sb.kill()
    return {"events": events, "after": after}`);
  const names = r.events.map(([, n]) => n);
  expect(names).toEqual(expect.arrayContaining(['f.txt', 'd', 'd/g.txt']));
  expect(r.events.find(([, n]) => n === 'f.txt')[0]).toMatch(/create/i);
  expect(r.after).toMatch(/NotFound|Exception|Error/);
});
