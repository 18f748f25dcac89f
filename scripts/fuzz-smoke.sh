#!/usr/bin/env bash
# Short fuzz run of every cargo-fuzz target in fuzz/: builds all targets once with
# the nightly toolchain, then runs each for FUZZ_SECONDS (default 15) starting from its corpus
# in fuzz/corpus/TARGET. Fails on the first crash, panic, leak or oversized allocation, and
# prints the input that caused it. The repo corpus is only read: new inputs go to a temp dir.
#
#   scripts/fuzz-smoke.sh                 # every target
#   scripts/fuzz-smoke.sh frame store     # some targets
#   FUZZ_SECONDS=60 scripts/fuzz-smoke.sh
#
# Needs: rustup's nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Build dir: FUZZ_TARGET_DIR, else CARGO_TARGET_DIR with a `-fuzz` suffix (fuzz builds use
# other flags), else fuzz/target. A cold build of all targets takes long (51 min on a loaded
# 2-core machine); keep that directory between runs.
set -euo pipefail
# sqlite3.c (bundled by rusqlite) has two static arrays named aiOff: not a real ODR violation.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0}
cd "$(dirname "$0")/../fuzz"

secs=${FUZZ_SECONDS:-15}
# FUZZ_DEV=1: unoptimised targets (a cold build takes minutes instead of tens of minutes; each
# input runs slower). The test suite uses it.
dev=()
[ "${FUZZ_DEV:-0}" = 1 ] && dev=(--dev)
target_dir=${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR-fuzz}}
target_dir=${target_dir:-$PWD/target}
fuzz=(cargo +nightly fuzz)

if ! "${fuzz[@]}" --version >/dev/null 2>&1; then
    echo "fuzz-smoke: needs the nightly toolchain and cargo-fuzz" \
        "(rustup toolchain install nightly; cargo install cargo-fuzz)" >&2
    exit 2
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <("${fuzz[@]}" list)
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
start=$(date +%s)
# One build for all targets (release, debug assertions, AddressSanitizer: cargo-fuzz defaults).
if ! "${fuzz[@]}" build "${dev[@]}" --target-dir "$target_dir" >"$scratch/build.log" 2>&1; then
    tail -n 60 "$scratch/build.log" >&2
    echo "fuzz-smoke: build failed" >&2
    exit 1
fi
echo "fuzz-smoke: built the targets in $(($(date +%s) - start)) s"

failed=()
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t" "corpus/$t"
    log="$scratch/$t.log"
    # -malloc_limit_mb: no single input may make a parser allocate more than this (frames may
    # legitimately allocate up to MAX_BODY = 64 MiB).
    extra=()
    # The in-process server allocates on its own threads between inputs: libFuzzer's
    # per-input leak check would only report its caches.
    [ "$t" = server ] && extra=(-detect_leaks=0)
    if "${fuzz[@]}" run "${dev[@]}" --target-dir "$target_dir" "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$secs" -malloc_limit_mb=256 -rss_limit_mb=2048 \
        -artifact_prefix="$scratch/$t-" -print_final_stats=1 "${extra[@]}" >"$log" 2>&1; then
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
        echo "fuzz-smoke: $t ok ($execs runs in ${secs} s)"
    else
        echo "fuzz-smoke: $t FAILED; last lines of its log:" >&2
        tail -n 40 "$log" >&2
        for a in "$scratch/$t"-*; do
            [ -e "$a" ] || continue
            echo "fuzz-smoke: crashing input ($a), as hex:" >&2
            od -An -tx1 -v "$a" | head -n 20 >&2
        done
        failed+=("$t")
    fi
done
echo "fuzz-smoke: $((${#targets[@]} - ${#failed[@]}))/${#targets[@]} targets clean in $(($(date +%s) - start)) s"
[ ${#failed[@]} -eq 0 ]
