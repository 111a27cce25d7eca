#!/usr/bin/env node
// What the seccomp filter every box runs under (set-id modes refused, src/engine/boxside/setid.rs) costs
// per syscall, seen from inside a box: 1,000,000 `getppid()` (a syscall the filter lets through
// after its dispatch) and 200,000 `chmod()` (one whose mode it reads), timed in python, medians
// of 7 fresh boxes. Compare two builds by running it in each checkout:
//
//   node bench/syscalls.js                 # this checkout's build
//   node bench/syscalls.js /other/checkout # another's (its js/ and kern)
//
// Prints one JSON line; measurements only, nothing passes or fails on a number.
'use strict';

const path = require('path');
const { REPO, ROOTFS, median } = require('./common');

const repo = path.resolve(process.argv[2] || REPO);
const { Sandbox } = require(path.join(repo, 'js'));

const CODE = `import os, time
open('f', 'w').close()
t = time.perf_counter()
for _ in range(1000000):
    os.getppid()
a = time.perf_counter() - t
t = time.perf_counter()
for _ in range(200000):
    os.chmod('f', 0o644)
b = time.perf_counter() - t
print(a, b)`;

(async () => {
  const sb = await new Sandbox({ image: ROOTFS }).open();
  try {
    const getppid = [];
    const chmod = [];
    for (let i = 0; i < 7; i++) {
      const r = await sb.runCode(CODE, { timeoutS: 120 });
      const [a, b] = r.stdout.trim().split(' ').map(Number);
      getppid.push((a * 1e9) / 1e6);
      chmod.push((b * 1e9) / 2e5);
    }
    const mid = (v) => Math.round(median(v.sort((x, y) => x - y)));
    console.log(JSON.stringify({ repo, getppid_ns: mid(getppid), chmod_ns: mid(chmod) }));
  } finally {
    await sb.close();
  }
})();
