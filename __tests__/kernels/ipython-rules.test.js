'use strict';
// rootless: yes
// IPython's cell rules in the python driver (E2B's code interpreter runs cells under IPython):
// an indented cell is dedented, `!cmd` runs a shell command and `name = !cmd` captures its
// lines. Only a cell Python refuses as written is read this way; valid Python never changes.

const { Sandbox } = require('../..');
const { opts, withKernel } = require('../helpers');

test('a kernel cell: dedented, shell lines in order with print, captured lines, state kept', async () => {
  await withKernel({}, {}, async (k) => {
    const a = await k.runCode('    x = 6\n    print(x * 7)');
    // (Rootless on cgroup v1, a kernel's first cell also carries the best-effort caps' warnings.)
    expect(a.error).toBeNull();
    expect(a.stderr).not.toMatch(/Error/);
    expect(a.stdout).toBe('42\n');
    const b = await k.runCode('print("before")\n!echo from-the-shell; echo to-err >&2\nprint("after", x)');
    expect(b.stdout).toBe('before\nfrom-the-shell\nafter 6\n');
    expect(b.stderr).toMatch(/(^|\n)to-err\n$/);
    const c = await k.runCode('names = !ls /\nprint("bin" in names, "etc" in names, type(names).__name__)');
    expect(c.stdout).toBe('True True list\n');
    // An indented block with a shell line inside it.
    const d = await k.runCode('  for i in range(2):\n      !echo line-$((1+1))\n');
    expect(d.stdout).toBe('line-2\nline-2\n');
  });
});

test('valid Python is never rewritten; a cell that fails either way reports its own error', async () => {
  const sb = await new Sandbox(opts()).open();
  try {
    // `!` at a line's start inside a string, and `!=`: Python as written.
    const s = await sb.runCode('s = """\n!not a shell line\n"""\nprint(s.strip(), 1 != 2)');
    expect(s.stdout).toBe('!not a shell line True\n');
    // One-shot runCode follows the same rules.
    const one = await sb.runCode('  print("dedented")');
    expect(one.stdout).toBe('dedented\n');
    const bad = await sb.runCode('  x = (');
    expect(bad.exitCode).toBe(1);
    // Python's own verdict on the cell as written (unexpected indent), not the dedented one's.
    expect(bad.error).toMatchObject({ name: 'IndentationError' });
    expect(bad.stderr).toMatch(/  x = \(/);
  } finally {
    await sb.close();
  }
});

test('IPython\'s own display(), imported by a cell, shows rich results as in a notebook', async () => {
  // The science image has IPython (from ipykernel); outside a shell its display() would print
  // a repr to stdout.
  const SCI = process.env.KERN_TEST_ROOTFS_SCI || '/var/cache/kern-sandbox-test/rootfs-bookworm-sci';
  const sb = await new Sandbox({ image: SCI }).open();
  try {
    const code = 'from IPython.display import display, HTML, Markdown\n'
      + 'display(HTML("<b>hi</b>"))\nimport IPython.display as d\nd.display(Markdown("*m*"), HTML("<i>2</i>"))';
    for (const run of [(c) => sb.runCode(c), async (c) => {
      const k = await sb.kernel();
      try {
        return await k.runCode(c);
      } finally {
        await k.close();
      }
    }]) {
      const r = await run(code);
      expect(r.error).toBeNull();
      expect(r.stdout).toBe('');
      expect(r.results.map((x) => x.html ?? x.markdown)).toEqual(['<b>hi</b>', '*m*', '<i>2</i>']);
    }
  } finally {
    await sb.close();
  }
});
