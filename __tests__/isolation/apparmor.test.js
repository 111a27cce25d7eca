'use strict';
// rootless: yes
// `apparmor`: the workload enters a named, pre-loaded AppArmor profile at exec, and the box fails
// closed when it can't. This machine has no AppArmor, so what is shown here is the closed side:
// the box never runs unconfined, and its code never starts.

const fs = require('fs');
const path = require('path');
const { requireRootfs, opts, tempDirs, expectSandboxError } = require('../helpers');
const { Sandbox, SandboxError } = require('../..');

const { temp, removeAll } = tempDirs();
const apparmorOn = (() => {
  try {
    return fs.readFileSync('/sys/module/apparmor/parameters/enabled', 'utf8').trim() === 'Y';
  } catch {
    return false;
  }
})();

beforeAll(() => requireRootfs());
afterAll(() => removeAll());

test('a profile that is not loaded (or no AppArmor at all) is a startup_failed box, and the code never runs', async () => {
  const ws = temp('kern-aa-');
  const sb = await new Sandbox(opts({ workspace: ws, apparmor: 'kern-test-no-such-profile' })).open();
  try {
    const r = await sb.run(['sh', '-c', 'touch /workspace/ran']);
    expect(r.fault && r.fault.type).toBe('startup_failed');
    expect(r.fault.message).toMatch(apparmorOn ? /not loaded/ : /AppArmor is not enabled/);
    expect(r.fault.message).toMatch(/fails closed/);
    expect(r.success).toBe(false);
    const py = await sb.runCode('open("/workspace/ran-py", "w").write("x")');
    expect(py.fault && py.fault.type).toBe('startup_failed');
    expect(fs.existsSync(path.join(ws, 'ran'))).toBe(false);
    expect(fs.existsSync(path.join(ws, 'ran-py'))).toBe(false);
  } finally {
    await sb.close();
  }
});

test('null is no profile; a bad name is a SandboxError naming the option', async () => {
  const sb = await new Sandbox(opts({ apparmor: null })).open();
  try {
    expect((await sb.run(['true'])).fault).toBeNull();
  } finally {
    await sb.close();
  }
  for (const bad of ['', 'two words', 'line\nbreak', 42]) {
    const b = new Sandbox(opts({ apparmor: bad }));
    await expectSandboxError(() => b.open(), SandboxError, /apparmor/);
    await b.close();
  }
});
