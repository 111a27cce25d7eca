#!/usr/bin/env bash
# THE test command (README, `npm test`, and CI through .ci/run):
#
#   bash scripts/test.sh
#
# Steps: install deps -> build (napi addon + kern binary) -> npm tarballs (dev) -> lints (oxlint,
# py_compile + ruff, cargo fmt), while the test rootfs, images, Node 24 and the Podman test
# container are made in the background -> clippy, rustdoc and cargo test (pure Rust) started in
# the background at nice 19, beside everything after -> Jest as root (with
# the container tests: kern-sandbox inside Podman; the longest suites, `side_tests`, in a second
# Jest beside it) -> Jest again as the unprivileged user `kerntest` for the files marked
# `// rootless: yes` (the rootless path; scripts/rootless-tests.sh; its side suites beside it
# too), and all through both, from the root run's start, the core, pause, fork, checkpoint,
# limits, isolation, lifecycle, process, isolation-report and zygote suites in a cgroup-v2 +
# systemd guest, as root and rootless (scripts/test-cgv2.sh); the fuzz run (scripts/fuzz.sh)
# goes on at nice 19 beside the Jest runs
# -> summary. A build failure stops at once; every other failure is recorded and the remaining
# steps still run, so one report shows everything. The very last line is always
# `N passed, N failed`, summed over all the Jest runs.
#
# Environment:
#   KERN_SKIP_ROOTLESS=1     skip the run as `kerntest` (quick local runs)
#   KERN_SKIP_CGV2=1         skip the cgroup-v2 guest runs (quick local runs; CI never sets it)
#   KERN_TEST_FILTER=regex   only Jest test files whose path matches (Jest's positional pattern);
#                            the rootless and guest runs are skipped when it matches none of
#                            their suites
#   KERN_TEST_ROOTFS=dir     test rootfs location (default: see scripts/build-test-rootfs.sh)
#   KERN_TEST_ROOTFS_SCI=dir the rootfs with matplotlib/pandas/numpy (scripts/build-test-rootfs-sci.sh)
#   KERN_TEST_NODE_TS=dir    a Node that strips TypeScript types (scripts/fetch-test-node.sh)
#   KERN_TEST_IMAGES=dir     the OCI test images (scripts/build-test-images.sh)
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
export PATH="${HOME:-/root}/.cargo/bin:/root/.cargo/bin:$PATH"
export NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false

filter="${KERN_TEST_FILTER:-}"
skip_rootless="${KERN_SKIP_ROOTLESS:-0}"
rootless_user=kerntest

# The suites that run in the cgroup-v2 + systemd guest, as root and rootless: scripts/test-cgv2.sh's.
mapfile -t cgv2_tests < <(bash "$repo/scripts/test-cgv2.sh" --list)

# The longest suites run in a second Jest beside each run's main one: the image pulls (each into
# a store of its own), the Jupyter kernels, the result fields (its process checks are of this
# Jest's own descendants), and (root only: they are not rootless suites) the README and guide
# examples, the package's install and the integrations' type checks. They mostly
# wait on boxes, pulls, npm and tsc, none looks at host-wide state (process or mount tables,
# cgroup listings) that the other run's boxes change (the mounts they make stay in a mount
# namespace of their own, below), and one after the other they were well over
# a third of the root run (and the whole run went past 35 minutes with them in it).
# The workspace snapshot and file API suites, the python driver's (no box) and the output suite
# joined them when the run grew past 35 minutes again: none of them lists processes, mounts or
# cgroups, and they evened the two Jests out (the main one was 1010 s, the side one 875). The
# type checks (tsc twice, 76 s) joined them at 1124 s against 984, and the MCP Inspector's suite
# (59 s, no host-wide look) at 1073 s against 888.
side_tests=(__tests__/images/images.test.js __tests__/kernels/jupyter.test.js __tests__/packaging/readme.test.js
  __tests__/packaging/install.test.js __tests__/integrations/types.test.js __tests__/sandbox/result-fields.test.js
  __tests__/files/snapshot.test.js __tests__/files/files.test.js __tests__/kernels/driver.test.js __tests__/sandbox/output.test.js
  __tests__/packaging/types.test.js __tests__/mcp/inspector.test.js)
side_ignore=(--testPathIgnorePatterns)
for t in "${side_tests[@]}"; do
  side_ignore+=("/${t//./\\.}\$")
done

# Beside the rootless main run only, also these suites: forgery/results looks at this user's own
# processes and the host's mount table, which no rootless box changes (beside the root run, the
# container suite's Podman mounts would show); the E2B file routes' look at neither, and even the
# two rootless Jests out (beside the root run they'd lengthen its side one).
rootless_side_extra=(__tests__/attack/forgery/results.test.js __tests__/serve/files.test.js)

root_report="$repo/.jest-results.json"
root_side_report="$repo/.jest-results-side.json"
cgv2_out="$repo/.cgv2-results" # the guest runs' reports and logs (scripts/test-cgv2.sh)
cgv2_expected=0        # 1 when the guest runs are part of this invocation
rootless_report=""     # set once the rootless run has an output location
rootless_expected=0    # 1 when the rootless run is part of this invocation
rootless_copy=""       # temp copy of the repo, when kerntest cannot read it in place
rootless_outdir=""
cgv2_pid=""            # the guest runs, while they run in the background
cgv2_log=""            # their output, shown once they are done
images_pid=""          # the background image builds, and their output
images_log=""
fuzz_pid=""            # the background fuzz run, and its output
fuzz_log=""
rust_pid=""            # the background Rust lints and unit tests, and their output
rust_log=""
rust_failed=""
root_rc=""             # Jest exit statuses, for the summary
root_side_rc=""
rootless_rc=""
rootless_side_rc=""
rootless_side_report=""
root_side_expected=0   # 1 when the side runs are part of this invocation
rootless_side_run=()   # the rootless suites of the side run, and of the main one
rootless_main=()
side_pid=""            # a side Jest, while it runs in the background
failures=()

# Each step's line says how long the one before it took, and the time since the start, so a
# CI log shows where its minutes go.
t_start=$(date +%s)
t_step=$t_start
step() {
  local now
  now=$(date +%s)
  ((now > t_step)) && printf '    (that took %s s; %s s so far)\n' "$((now - t_step))" "$((now - t_start))"
  t_step=$now
  printf '\n==> %s\n' "$*"
}
fail() {
  failures+=("$1")
  printf '!!! FAILED: %s\n' "$1" >&2
}

cleanup() {
  [[ -n "$images_pid" ]] && kill -- "-$images_pid" 2>/dev/null
  [[ -n "$images_log" ]] && rm -f "$images_log"
  [[ -n "$fuzz_pid" ]] && kill -- "-$fuzz_pid" 2>/dev/null
  [[ -n "$fuzz_log" ]] && rm -f "$fuzz_log"
  [[ -n "$rust_pid" ]] && kill -- "-$rust_pid" 2>/dev/null
  [[ -n "$rust_log" ]] && rm -f "$rust_log" "$rust_failed"
  [[ -n "$cgv2_pid" ]] && kill -- "-$cgv2_pid" 2>/dev/null
  [[ -n "$side_pid" ]] && kill "$side_pid" 2>/dev/null
  [[ -n "$cgv2_log" ]] && rm -f "$cgv2_log" "$cgv2_log.rc"
  [[ -n "$rootless_copy" ]] && rm -rf "$rootless_copy"
  [[ -n "$rootless_outdir" ]] && rm -rf "$rootless_outdir"
}
trap cleanup EXIT

# Prints the summary; the LAST line is `N passed, N failed` over the Jest runs. A Jest run that
# was expected but left no report, or whose suites failed to run, counts as failed.
summary() {
  local counts g runs=(root "$root_report" "$root_rc" 0)
  [[ "$root_side_expected" == 1 ]] && runs+=("root (side)" "$root_side_report" "$root_side_rc" 0)
  [[ "$rootless_expected" == 1 && ${#rootless_main[@]} -gt 0 ]] &&
    runs+=(rootless "$rootless_report" "$rootless_rc" 0)
  [[ "$rootless_expected" == 1 && ${#rootless_side_run[@]} -gt 0 ]] &&
    runs+=("rootless (side)" "$rootless_side_report" "$rootless_side_rc" 0)
  if [[ "$cgv2_expected" == 1 ]]; then
    # Strict (the last field): a test skipped in the guest was not run there, so it counts as failed.
    for g in root rootless; do
      runs+=("cgv2 $g" "$cgv2_out/cgv2-$g.json" "$(cat "$cgv2_out/cgv2-$g.rc" 2>/dev/null)" 1)
    done
  fi
  printf '\n==> summary\n'
  counts="$(node - "${runs[@]}" <<'EOF'
const fs = require('fs');
const args = process.argv.slice(2);
let passed = 0, failed = 0;
// Four arguments per Jest run: name, report file, exit status, strict (1: skipped = failed).
for (let i = 0; i < args.length; i += 4) {
  const [name, file, rc, strict] = args.slice(i, i + 4);
  let r;
  try {
    r = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    console.error(`jest ${name}: no report (${file || 'not run'}) -> counted as 1 failure`);
    failed += 1;
    continue;
  }
  const p = r.numPassedTests || 0;
  let f = (r.numFailedTests || 0) + (r.numRuntimeErrorTestSuites || 0);
  // A run Jest itself called failed (success false, or a non-zero exit: no tests found, a
  // run-level error) never reads as "0 failed".
  if (f === 0 && (r.success === false || (rc !== '' && rc !== '0'))) f = 1;
  const skipped = (r.numPendingTests || 0) + (r.numTodoTests || 0);
  if (strict === '1') f += skipped;
  console.error(`jest ${name}: ${p} passed, ${f} failed` +
    (r.numRuntimeErrorTestSuites ? ` (${r.numRuntimeErrorTestSuites} suite(s) failed to run)` : '') +
    (skipped ? `, ${skipped} skipped` + (strict === '1' ? ' (counted as failed: this run is strict)' : '') : ''));
  passed += p;
  failed += f;
}
console.log(`${passed} passed, ${failed} failed`);
EOF
)" || counts="0 passed, 1 failed"
  if ((${#failures[@]})); then
    printf 'failed steps:\n'
    printf '  - %s\n' "${failures[@]}"
  else
    printf 'all steps passed\n'
  fi
  echo "$counts"
}

# Stop now (a build step failed): still end with the summary line.
abort() {
  fail "$1"
  summary
  exit 1
}

rm -f "$root_report" "$root_side_report"
# The suites of a run that this invocation runs: all of them, or those the filter matches.
matching() {
  local t
  for t in "$@"; do
    [[ -z "$filter" || "$t" =~ $filter ]] && printf '%s\n' "$t"
  done
}
# The suites that run a second time as an unprivileged user (the rootless path is real): each
# test file says whether at its top (`// rootless: yes` / `// rootless: no — why`); a file that
# says neither is a failed step (scripts/rootless-tests.sh).
rootless_list="$(bash scripts/rootless-tests.sh)" ||
  fail "rootless list: a test file lacks its '// rootless:' line (bash scripts/rootless-tests.sh)"
rootless_tests=()
[[ -z "$rootless_list" ]] || mapfile -t rootless_tests <<<"$rootless_list"
mapfile -t rootless_run < <(matching "${rootless_tests[@]}")
if [[ "$skip_rootless" != 1 && ${#rootless_run[@]} -gt 0 ]]; then
  rootless_expected=1
fi
mapfile -t cgv2_run < <(matching "${cgv2_tests[@]}")
if [[ "${KERN_SKIP_CGV2:-0}" != 1 && ${#cgv2_run[@]} -gt 0 ]]; then
  cgv2_expected=1
fi
rm -rf "$cgv2_out"

step "setup: Debian packages, toolchain check, npm ci (scripts/setup-deps.sh)"
bash scripts/setup-deps.sh || abort "setup-deps.sh"

# The test images need nothing this repo builds, and mostly wait on the package mirrors and the
# disk, so they are made in the background while the build, lints and unit tests use the CPU;
# their output is shown, and their failure stops the run, before the first Jest run.
images_log="$(mktemp /tmp/kern-images-step.XXXXXX)"
# shellcheck disable=SC2016
setsid bash -c '
  run() { local t0=$(date +%s); echo "==> image: $1"; shift; "$@" || { echo "!!! FAILED: $*"; return 1; }; echo "    (took $(($(date +%s) - t0)) s)"; }
  run "test rootfs" bash scripts/build-test-rootfs.sh &&
    run "test rootfs (sci)" bash scripts/build-test-rootfs-sci.sh &&
    run "test images" bash scripts/build-test-images.sh &&
    run "a Node that strips TypeScript types (Node 24 from PyPI)" bash scripts/fetch-test-node.sh || exit 1
  # Built now, not by the guest runs beside the Jest ones: building it mounts /proc in its
  # tree, a host mount the attack suites would see appear.
  if [[ "$1" == 1 ]]; then
    run "the cgroup-v2 guest (scripts/cgv2-vm.sh --build-only; once per machine)" bash scripts/cgv2-vm.sh --build-only || exit 1
  fi
  # Only the container tests need this one: its failure fails only them.
  run "the Podman test container" bash scripts/build-test-container.sh || exit 2' -- "$cgv2_expected" \
  >"$images_log" 2>&1 </dev/null &
images_pid=$!

# The dev profile (Cargo.toml: dependencies optimised, our crate incremental); the release
# profile's LTO is for packaging (`npm run build`) and took 21 of a first run's 27 minutes.
step "build: npm run build:debug (napi addon + kern binary, dev profile)"
npm run build:debug || abort "npm run build:debug"
[[ -x "$repo/kern" ]] || abort "npm run build:debug did not produce ./kern"

# The npm tarballs of that same build (no release build: --dev), for __tests__/packaging/install.test.js,
# which publishes them to a local registry and installs kern-sandbox by name.
step "pack: npm run pack:all -- --dev (dist/*.tgz)"
npm run pack:all -- --dev || fail "npm run pack:all -- --dev"

# A failing lint is recorded like clippy's, not an abort. Both take about a second.
step "lint: npm run lint (oxlint, .oxlintrc.json: js/ bin/ scripts/*.js bench/ __tests__/)"
npm run --silent lint || fail "npm run lint (oxlint)"

step "lint: npm run lint:py (py_compile + ruff, ruff.toml: the .py of src/ and scripts/)"
npm run --silent lint:py || fail "npm run lint:py (scripts/check-python.py)"

step "lint: vendored code, code generated from it and third-party notices (scripts/vendor.sh --check, scripts/gen-envd.sh --check, scripts/notices.sh --check)"
bash scripts/vendor.sh --check || fail "scripts/vendor.sh --check (vendor/README.md)"
bash scripts/gen-envd.sh --check || fail "scripts/gen-envd.sh --check (js/serve/gen/ from vendor/e2b-envd/)"
bash scripts/notices.sh --check || fail "scripts/notices.sh --check (run: bash scripts/notices.sh)"

step "lint: cargo fmt --check"
cargo fmt --check || fail "cargo fmt --check (run: cargo fmt)"

# The napi build names its target triple, so cargo keeps its artefacts under target/<triple>:
# the lints and unit tests name it too and reuse the dependencies it built, instead of building
# them all again under target/debug.
host_triple="$(rustc -vV | sed -n 's/^host: //p')"

# clippy (twice: with and without the napi feature), rustdoc and the Rust unit tests need nothing
# after them and nothing after them needs them: in the background at nice 19, beside the Jest
# runs (whose boxes mostly wait), they took 4 of the run's minutes off its critical path. None of
# them mounts, or starts a box or a kern: nothing a Jest suite's host-wide checks could see.
# Their output, and each failure, comes before the summary.
step "lint + unit (Rust): cargo clippy (--all-targets --no-default-features, --lib), cargo doc, cargo test, started in the background at nice 19; their output comes before the summary"
rust_log="$(mktemp /tmp/kern-rust-step.XXXXXX)"
rust_failed="$rust_log.failed"
# shellcheck disable=SC2016
setsid nice -n 19 bash -c '
  triple="$1" failed="$2"
  run() {
    local name="$1" t0
    shift
    t0=$(date +%s)
    echo "==> $name"
    "$@" || { echo "!!! FAILED: $name"; echo "$name" >>"$failed"; }
    echo "    (took $(($(date +%s) - t0)) s)"
  }
  run "cargo clippy --all-targets --no-default-features" cargo clippy --quiet --target "$triple" --all-targets --no-default-features -- -D warnings
  run "cargo clippy --lib" cargo clippy --quiet --target "$triple" --lib -- -D warnings
  run "cargo doc (RUSTDOCFLAGS=\"-D warnings\"): broken doc links, stray HTML in doc comments" env RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps --target "$triple" --no-default-features
  run "cargo test --no-default-features" cargo test --target "$triple" --no-default-features
  exit 0' -- "$host_triple" "$rust_failed" >"$rust_log" 2>&1 </dev/null &
rust_pid=$!

# The fuzz build (every dependency compiled again with coverage counters) and runs take many
# minutes of CPU and need nothing after them: they go in the background at the lowest priority,
# so they take the CPU the Jest runs leave idle (boxes mostly wait), and their output is shown
# before the summary. Each target still runs for FUZZ_SECONDS of wall time.
step "fuzz: scripts/fuzz.sh (libFuzzer, every host-side parser for FUZZ_SECONDS each; docs/fuzzing.md), started in the background at nice 19; its output comes before the summary"
fuzz_log="$(mktemp /tmp/kern-fuzz-step.XXXXXX)"
setsid nice -n 19 bash scripts/fuzz.sh >"$fuzz_log" 2>&1 </dev/null &
fuzz_pid=$!

step "image: the test rootfs, images, Node 24 and the Podman test container (started in the background after setup; scripts/build-test-*.sh, scripts/fetch-test-node.sh)"
wait "$images_pid"
images_rc=$?
images_pid=""
cat "$images_log"
case "$images_rc" in
  0) ;;
  2) fail "scripts/build-test-container.sh" ;;
  *) abort "the test images (see the lines above)" ;;
esac

# The guest runs go alongside both Jest runs, from the start of the root one: the guest is one
# CPU busy in a VM and the Jest runs mostly wait on boxes (half the CPU sat idle in the root run's
# second half). Started with the rootless run, they were its critical path once it shrank.
# Their output is shown after the rootless run. (The guest is a VM: its boxes, mounts and cgroups
# are its own kernel's, which no host suite sees.)
if [[ "$cgv2_expected" == 1 ]]; then
  # Boots scripts/cgv2-vm.sh's guest twice (its first run on a machine builds the guest image).
  step "jest (cgroup v2 + systemd guest, root and rootless): ${cgv2_run[*]} (scripts/test-cgv2.sh), started in the background beside the root and rootless runs; its output follows the rootless run"
  cgv2_log="$(mktemp /tmp/kern-cgv2-step.XXXXXX)"
  # A session of its own, so an early exit can end the guest and everything under it.
  # shellcheck disable=SC2016
  KERN_CGV2_SUITES="${cgv2_run[*]}" setsid bash -c '
    t0=$(date +%s)
    bash scripts/test-cgv2.sh "$1" >"$2" 2>&1
    echo $? >"$2.rc"
    echo "cgroup v2 guest runs: $(($(date +%s) - t0)) s" >>"$2"' -- "$cgv2_out" "$cgv2_log" </dev/null &
  cgv2_pid=$!
elif [[ "${KERN_SKIP_CGV2:-0}" == 1 ]]; then
  step "jest (cgroup v2 guest): skipped (KERN_SKIP_CGV2=1)"
else
  step "jest (cgroup v2 guest): skipped (KERN_TEST_FILTER='$filter' matches none of ${cgv2_tests[*]})"
fi

mapfile -t side_run < <(matching "${side_tests[@]}")
if ((${#side_run[@]})); then
  root_side_expected=1
  step "jest (root, side): npx jest ${side_run[*]}, in the background beside the main run"
  # In a mount namespace of its own: its suites mount on the host (images.test.js fills a tmpfs
  # KERN_HOME) and the main run's attack suites compare the host's mount table before and after
  # each attack; a mount made beside them read as an escape (CI at 49cfed1). Private propagation
  # keeps each run's mounts to itself, and nothing the side suites check needs the host's table.
  isolate=()
  ((EUID == 0)) && isolate=(unshare --mount --propagation private)
  "${isolate[@]}" npx jest "${side_run[@]}" --json "--outputFile=$root_side_report" >"$root_side_report.log" 2>&1 </dev/null &
  side_pid=$!
fi
step "jest (root): npx jest${filter:+ $filter} (but ${side_tests[*]})"
jest_args=(--json "--outputFile=$root_report" "${side_ignore[@]}")
# A filter may match only side suites.
[[ -n "$filter" ]] && jest_args+=(--passWithNoTests "$filter")
npx jest "${jest_args[@]}"
root_rc=$?
((root_rc == 0)) || fail "jest (root)"
if [[ -n "$side_pid" ]]; then
  step "jest (root, side): waiting for it, then its output"
  wait "$side_pid"
  root_side_rc=$?
  side_pid=""
  cat "$root_side_report.log"
  rm -f "$root_side_report.log"
  ((root_side_rc == 0)) || fail "jest (root, side)"
fi

if [[ "$rootless_expected" == 1 ]]; then
  step "jest (rootless, as $rootless_user): npx jest ${rootless_run[*]}"
  ok=1
  if ! id -u "$rootless_user" >/dev/null 2>&1; then
    if [[ "$(id -u)" != 0 ]]; then
      fail "rootless: user $rootless_user does not exist and only root can create it"
      ok=0
    else
      useradd --create-home --shell /bin/bash "$rootless_user" || {
        fail "rootless: useradd $rootless_user"
        ok=0
      }
    fi
  fi
  if ((ok)) && [[ "$(id -u)" != 0 && "$(id -un)" != "$rootless_user" ]]; then
    fail "rootless: must run as root (to su to $rootless_user)"
    ok=0
  fi
  if ((ok)); then
    rootless_home="$(getent passwd "$rootless_user" | cut -d: -f6)"
    run_dir="$repo"
    # KERN_ROOTLESS_FORCE_COPY=1 takes the copy path even when the repo is readable (to test it).
    if [[ "${KERN_ROOTLESS_FORCE_COPY:-0}" == 1 ]] ||
      ! su "$rootless_user" -s /bin/bash -c "test -r '$repo/package.json' && test -x '$repo/kern' && test -r '$repo/node_modules/.bin/jest'" 2>/dev/null; then
      # Some parent of the repo is not traversable by kerntest: test a copy it owns.
      rootless_copy="$(mktemp -d /tmp/kern-rootless.XXXXXX)"
      echo "rootless: testing a copy owned by $rootless_user in $rootless_copy ($rootless_user cannot read $repo in place, or KERN_ROOTLESS_FORCE_COPY=1)"
      tar -C "$repo" --exclude=./target -cf - . | tar -C "$rootless_copy" -xf - &&
        chown -R "$rootless_user:" "$rootless_copy" && chmod 755 "$rootless_copy" ||
        { fail "rootless: copying the repo to $rootless_copy"; ok=0; }
      run_dir="$rootless_copy"
    fi
  fi
  if ((ok)); then
    rootless_outdir="$(mktemp -d /tmp/kern-rootless-out.XXXXXX)"
    chown "$rootless_user:" "$rootless_outdir"
    rootless_report="$rootless_outdir/jest-rootless.json"
    rootless_env=(HOME="$rootless_home" USER="$rootless_user" LOGNAME="$rootless_user"
      PATH="/usr/local/bin:/usr/bin:/bin" LANG="${LANG:-C.UTF-8}" NPM_CONFIG_UPDATE_NOTIFIER=false)
    [[ -n "${CI:-}" ]] && rootless_env+=(CI="$CI")
    [[ -n "${KERN_TEST_ROOTFS:-}" ]] && rootless_env+=(KERN_TEST_ROOTFS="$KERN_TEST_ROOTFS")
    [[ -n "${KERN_TEST_IMAGES:-}" ]] && rootless_env+=(KERN_TEST_IMAGES="$KERN_TEST_IMAGES")
    [[ -n "${KERN_TEST_ROOTFS_SCI:-}" ]] && rootless_env+=(KERN_TEST_ROOTFS_SCI="$KERN_TEST_ROOTFS_SCI")
    [[ -n "${KERN_TEST_NODE_TS:-}" ]] && rootless_env+=(KERN_TEST_NODE_TS="$KERN_TEST_NODE_TS")
    as_rootless() {
      # shellcheck disable=SC2016
      su "$rootless_user" -s /bin/bash -c 'cd "$1" && shift && exec env -i "$@"' -- \
        kern-rootless "$run_dir" "${rootless_env[@]}" "$@" </dev/null
    }
    # The side suites in a Jest of their own beside the main one, as for root.
    for t in "${rootless_run[@]}"; do
      if [[ " ${side_tests[*]} ${rootless_side_extra[*]} " == *" $t "* ]]; then rootless_side_run+=("$t"); else rootless_main+=("$t"); fi
    done
    if ((${#rootless_side_run[@]})); then
      rootless_side_report="$rootless_outdir/jest-rootless-side.json"
      echo "rootless (side): npx jest ${rootless_side_run[*]}, in the background beside the main run"
      as_rootless npx jest "${rootless_side_run[@]}" --json "--outputFile=$rootless_side_report" >"$rootless_outdir/side.log" 2>&1 &
      side_pid=$!
    fi
    rootless_rc=0
    if ((${#rootless_main[@]})); then
      as_rootless npx jest "${rootless_main[@]}" --json "--outputFile=$rootless_report"
      rootless_rc=$?
    fi
    ((rootless_rc == 0)) || fail "jest (rootless, as $rootless_user)"
    if [[ -n "$side_pid" ]]; then
      echo "rootless (side): waiting for it, then its output"
      wait "$side_pid"
      rootless_side_rc=$?
      side_pid=""
      cat "$rootless_outdir/side.log"
      ((rootless_side_rc == 0)) || fail "jest (rootless, side, as $rootless_user)"
    fi
  fi
elif [[ "$skip_rootless" == 1 ]]; then
  step "jest (rootless): skipped (KERN_SKIP_ROOTLESS=1)"
else
  step "jest (rootless): skipped (KERN_TEST_FILTER='$filter' matches none of ${rootless_tests[*]})"
fi

if [[ -n "$cgv2_pid" ]]; then
  step "jest (cgroup v2 + systemd guest): waiting for the background runs, then their output"
  wait "$cgv2_pid"
  cgv2_pid=""
  cat "$cgv2_log"
  [[ "$(cat "$cgv2_log.rc" 2>/dev/null)" == 0 ]] ||
    fail "jest (cgroup v2 guest): see $cgv2_out/cgv2-*.log"
fi

if [[ -n "$rust_pid" ]]; then
  step "lint + unit (Rust): waiting for the background run, then its output"
  wait "$rust_pid" || fail "lint + unit (Rust): the background run itself failed"
  rust_pid=""
  cat "$rust_log"
  if [[ -s "$rust_failed" ]]; then
    while IFS= read -r what; do fail "$what"; done <"$rust_failed"
  fi
fi

if [[ -n "$fuzz_pid" ]]; then
  step "fuzz: waiting for the background run, then its output"
  wait "$fuzz_pid"
  fuzz_rc=$?
  fuzz_pid=""
  cat "$fuzz_log"
  ((fuzz_rc == 0)) || fail "scripts/fuzz.sh (a reproducer's path is printed above)"
fi

summary
((${#failures[@]} == 0))
