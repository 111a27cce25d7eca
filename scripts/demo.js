#!/usr/bin/env node
// kern-sandbox demo: run through `bash scripts/demo.sh` (which builds first), or `node scripts/demo.js`
// once built. Every call below runs in its own fresh box: new user, PID, network, IPC and UTS
// namespaces, a read-only root, no network, and only the session's workspace writable. Image "host"
// uses the host's own /usr read-only, so this works offline with nothing to download.
'use strict';

const { withSandbox } = require('..');

const PYTHON = `
import os, socket

primes = [n for n in range(2, 60) if all(n % d for d in range(2, int(n ** 0.5) + 1))]
print("primes below 60:", primes)
with open("primes.txt", "w") as f:
    f.write("\\n".join(map(str, primes)) + "\\n")

uid_map = open("/proc/self/uid_map").read().split()
print("uid in the box:", os.getuid(), "= host uid", uid_map[1] if uid_map else "?", "(user namespace)")
print("hostname:", socket.gethostname())
print("network interfaces:", [name for _, name in socket.if_nameindex()])
home = sorted(os.listdir("/home")) if os.path.isdir("/home") else None
print("host's /home:", "VISIBLE: %s" % home if home else "not visible (%s)" % ("empty" if home == [] else "absent"))
print("cwd:", os.getcwd())
`;

const BASH = `
echo "bash $BASH_VERSION in $(pwd)"
echo "the file python left in the workspace has $(wc -l < primes.txt) lines"
echo "processes this box can see:"
ps -eo pid,user,comm 2>/dev/null || ls /proc | grep -E '^[0-9]+$'
touch /etc/kern-demo 2>&1 || echo "(writing outside the workspace fails: the root is read-only)"
`;

function indent(text) {
  const t = String(text).replace(/\n$/, '');
  return t === '' ? '    (empty)' : t.split('\n').map((l) => '    ' + l).join('\n');
}

function show(title, r) {
  console.log(`\n=== ${title} ===`);
  console.log('  stdout:');
  console.log(indent(r.stdout));
  const err = r.codeStderr !== undefined ? r.codeStderr : r.stderr;
  if (err && err.trim()) {
    console.log('  stderr:');
    console.log(indent(err));
  }
  if (r.runtimeNotes && r.runtimeNotes.length) {
    console.log('  runtime notes:');
    console.log(indent(r.runtimeNotes.join('\n')));
  }
  console.log(`  exitCode:   ${r.exitCode}`);
  console.log(`  fault:      ${r.fault ? `${r.fault.type} — ${r.fault.message}` : 'null (the sandbox did not intervene)'}`);
  console.log(`  durationMs: ${Number(r.durationMs).toFixed(1)}`);
  if (r.files && r.files.length) {
    console.log(`  files:      ${r.files.map((f) => `${f.path} (${f.change}, ${f.size} B)`).join(', ')}`);
  }
}

async function main() {
  console.log('kern-sandbox demo — each call below runs in a brand-new isolated box (image: "host")');
  await withSandbox({ image: 'host' }, async (sb) => {
    show('python: primes, identity, network, host files', await sb.runCode(PYTHON, { language: 'python' }));
    show('bash: the workspace persists between calls, nothing else does', await sb.runCode(BASH, { language: 'bash' }));
    show('a fault: `sleep 5` with timeoutS: 1', await sb.run(['sleep', '5'], { timeoutS: 1 }));
  });
  console.log('\nThe workspace was a temporary directory; withSandbox() removed it on close.');
}

main().catch((err) => {
  console.error('\ndemo failed:', err && err.stack ? err.stack : err);
  process.exit(1);
});
