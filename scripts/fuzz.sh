#!/usr/bin/env bash
# Coverage-guided fuzzing of the host-side parsers (docs/fuzzing.md): builds the libFuzzer
# targets of fuzz/ on the stable toolchain and runs each for a bounded time. Fails on any crash,
# panic, timeout or out-of-memory, and prints the reproducer's path.
#
#   bash scripts/fuzz.sh                      # every target, FUZZ_SECONDS each
#   bash scripts/fuzz.sh proxy_head zmtp      # only these
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh     # a longer run
#   bash scripts/fuzz.sh --repro fuzz/artifacts/zmtp/crash-...   # run one input again
#
# Environment:
#   FUZZ_SECONDS=N   seconds per target (default 15: the eleven targets take ~3 minutes)
#   FUZZ_JOBS=N      targets run at once (default 1)
#   FUZZ_FLAGS=...   more libFuzzer flags for every run
#   KERN_FUZZ_TARGET=dir  where the instrumented build goes (default
#                    /var/cache/kern-sandbox-test/fuzz-target, beside the test rootfs: every
#                    dependency is compiled again with the coverage flags, which takes many minutes
#                    the first time, so a fresh clone on the same machine reuses it; fuzz/target
#                    when that is not writable)
#
# The build: RUSTFLAGS with SanitizerCoverage (what cargo-fuzz passes, less the sanitizer, which
# needs a nightly toolchain), `--cfg fuzzing`, and the `fuzz` profile of fuzz/Cargo.toml (debug
# assertions and overflow checks on). Into $KERN_FUZZ_TARGET, not the main target/.
# The runs: each in a mount namespace of its own where every mount is read-only but fuzz/ and a
# tmpfs scratch directory (the layer and restore targets write files; a parser bug must not write
# to the host). Inputs libFuzzer finds go to fuzz/corpus-run/<target> (not committed); the
# committed seeds in fuzz/corpus/<target> are only read; crashes go to fuzz/artifacts/<target>/.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export PATH="${HOME:-/root}/.cargo/bin:/root/.cargo/bin:$PATH"

seconds="${FUZZ_SECONDS:-15}"
jobs="${FUZZ_JOBS:-1}"
fuzz="$repo/fuzz"
targets_all=(layer_unpack snapshot_restore image_archive registry proxy_head tls_client_hello zmtp jupyter_message driver_frames kern_protocol kern_toml)

die() {
  echo "fuzz: ERROR: $*" >&2
  exit 1
}

# --- what the build needs ------------------------------------------------------------------------
command -v cargo >/dev/null || die "cargo not found: install Rust with rustup"
# libfuzzer-sys compiles libFuzzer (C++) with the cc crate.
if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null; then
  [[ "$(id -u)" == 0 ]] || die "no C++ compiler: apt-get install g++"
  echo "fuzz: installing g++ (libFuzzer is C++)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null ||
    die "apt-get install g++ failed"
fi
command -v unshare >/dev/null || die "unshare not found (util-linux)"

host="$(rustc -vV | sed -n 's/^host: //p')"
build_dir="${KERN_FUZZ_TARGET:-/var/cache/kern-sandbox-test/fuzz-target}"
mkdir -p "$build_dir" 2>/dev/null && [[ -w "$build_dir" ]] || build_dir="$fuzz/target"
bin_dir="$build_dir/$host/fuzz"

build() {
  local t0 rc=0
  t0=$(date +%s)
  echo "fuzz: building the targets ($build_dir, profile fuzz)"
  RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cforce-frame-pointers=yes ${FUZZ_RUSTFLAGS:-}" \
    CARGO_TARGET_DIR="$build_dir" cargo build --quiet --locked --manifest-path "$fuzz/Cargo.toml" --profile fuzz --target "$host" --bins || rc=$?
  echo "fuzz: build took $(($(date +%s) - t0)) s"
  return "$rc"
}

# Runs "$@" in a private mount namespace where only fuzz/ and a fresh tmpfs (the scratch
# directory, $KERN_FUZZ_SCRATCH and $TMPDIR) are writable. As root; otherwise in a user
# namespace, and without it only with KERN_FUZZ_UNSANDBOXED=1.
sandboxed() {
  local scratch="$fuzz/target/scratch"
  mkdir -p "$scratch"
  local setup='
    set -e
    fuzz=$1 scratch=$2
    shift 2
    mount --make-rprivate /
    mount --bind "$fuzz" "$fuzz"
    for m in $(awk "{print \$5}" /proc/self/mountinfo); do
      mount -o remount,bind,ro "$(printf "%b" "$m")" 2>/dev/null || true
    done
    mount -o remount,bind,rw "$fuzz"
    mount -t tmpfs -o size=2g,mode=0755 kern-fuzz "$scratch"
    # The proof: the repository beside fuzz/ and the system temp directory refuse writes.
    for probe in "$fuzz/../.kern-fuzz-probe" /tmp/.kern-fuzz-probe /etc/.kern-fuzz-probe; do
      if (: >"$probe") 2>/dev/null; then
        rm -f "$probe"
        echo "fuzz: ERROR: the sandbox left $probe writable" >&2
        exit 1
      fi
    done
    export KERN_FUZZ_SCRATCH=$scratch TMPDIR=$scratch
    exec "$@"'
  if [[ "$(id -u)" == 0 ]]; then
    unshare --mount sh -c "$setup" sh "$fuzz" "$scratch" "$@"
  elif unshare --user --map-root-user --mount true 2>/dev/null; then
    unshare --user --map-root-user --mount sh -c "$setup" sh "$fuzz" "$scratch" "$@"
  elif [[ "${KERN_FUZZ_UNSANDBOXED:-0}" == 1 ]]; then
    KERN_FUZZ_SCRATCH="$scratch" TMPDIR="$scratch" "$@"
  else
    die "no mount namespace for the fuzzers (not root, and no user namespaces); KERN_FUZZ_UNSANDBOXED=1 runs them without one"
  fi
}

if [[ "${1:-}" == "--repro" ]]; then
  [[ $# == 2 ]] || die "usage: scripts/fuzz.sh --repro fuzz/artifacts/<target>/<file>"
  input="$(realpath "$2")"
  target="$(basename "$(dirname "$input")")"
  build >&2 || die "building the fuzz targets failed"
  exec_rc=0
  sandboxed "$bin_dir/$target" "$input" || exec_rc=$?
  exit "$exec_rc"
fi

targets=("$@")
((${#targets[@]})) || targets=("${targets_all[@]}")
for t in "${targets[@]}"; do
  [[ -f "$fuzz/fuzz_targets/$t.rs" ]] || die "no target $t (fuzz/fuzz_targets/$t.rs); targets: ${targets_all[*]}"
done

build || die "building the fuzz targets failed"

# One target: its libFuzzer run, its output in a log; prints the final stats line.
run_one() {
  local t=$1 log=$2 dict=() rc=0
  mkdir -p "$fuzz/corpus-run/$t" "$fuzz/artifacts/$t"
  [[ -f "$fuzz/dict/$t.dict" ]] && dict=("-dict=$fuzz/dict/$t.dict")
  # The CPU seconds the run used (user + system), for the record: time's report goes to $log.cpu.
  local TIMEFORMAT='%U %S'
  # shellcheck disable=SC2086
  { time sandboxed "$bin_dir/$t" "$fuzz/corpus-run/$t" "$fuzz/corpus/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$fuzz/artifacts/$t/" -print_final_stats=1 "${dict[@]}" ${FUZZ_FLAGS:-} \
    >"$log" 2>&1 || rc=$?; } 2>"$log.cpu"
  echo "$rc" >"$log.rc"
}

logs="$fuzz/target/logs"
mkdir -p "$logs"
failed=()
t_run=$(date +%s)
running=0
for t in "${targets[@]}"; do
  echo "fuzz: $t (${seconds} s)"
  rm -f "$logs/$t.log.rc"
  touch "$logs/$t.log.start"
  run_one "$t" "$logs/$t.log" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
for t in "${targets[@]}"; do
  rc="$(cat "$logs/$t.log.rc" 2>/dev/null || echo "no exit status")"
  # libFuzzer's last status line: "#N DONE cov: C ft: F corp: ..." and the final stats.
  line="$(grep -E '^#[0-9]+[[:space:]]+(DONE|INITED|NEW|REDUCE|pulse)' "$logs/$t.log" | tail -1 | tr -s '[:space:]' ' ' || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -1)"
  cpu="$(awk '{printf "%.0f", $1 + $2}' "$logs/$t.log.cpu" 2>/dev/null || true)"
  printf 'fuzz: %-17s rc=%s cpu=%ss execs=%s %s\n' "$t" "$rc" "${cpu:-?}" "${execs:-?}" "${line:-(no status line)}"
  if [[ "$rc" != 0 ]]; then
    failed+=("$t")
    echo "---- $t: the end of its log ($logs/$t.log) ----" >&2
    tail -40 "$logs/$t.log" >&2
    # This run's reproducers (earlier runs' stay in the directory until removed).
    find "$fuzz/artifacts/$t" -type f -newer "$logs/$t.log.start" | while read -r a; do
      echo "fuzz: $t: reproducer: $a (bash scripts/fuzz.sh --repro $a)" >&2
    done
  fi
done
echo "fuzz: runs took $(($(date +%s) - t_run)) s"
if ((${#failed[@]})); then
  die "failed: ${failed[*]}"
fi
echo "fuzz: no crash in ${targets[*]}"
