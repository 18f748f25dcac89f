#!/usr/bin/env bash
# Runs every check CI runs: installs what is missing, then formatting and lint (Rust + Python),
# Rust unit/integration tests, and the Python integration tests that start real server
# processes and real MPI launches.
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean clone builds everything once: incremental state would only add ~13 GB to target/.
export CARGO_INCREMENTAL=0
# Line tables are enough for a test's backtrace; full debug info made target/ several GB larger,
# and a CI machine once ran out of disk building the fuzz targets after the tests.
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
disk() { echo "== disk ($1): $(df -h --output=avail . | tail -1 | tr -d ' ') free here, $(df -h --output=avail /tmp | tail -1 | tr -d ' ') in /tmp, target/ $(du -sh target 2>/dev/null | cut -f1)"; }
# --test: besides what the demo needs, OpenMPI, pytest, ruff, libpdcx and the S3 server.
bash scripts/setup.sh --test
disk "after setup"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# S3 tests fail instead of skipping when no S3 server is available (setup.sh --test installs one).
export PDCX_REQUIRE_S3=1
# ... and the h5py `mpio` tests fail instead of skipping without a parallel h5py (setup builds it).
export PDCX_REQUIRE_H5PY=1
# ... and the xarray/dask tests without xarray or dask (setup.sh --test installs them).
export PDCX_REQUIRE_XARRAY=1
# ... and the Montage/CFITSIO tests without Montage, fitscopy or astropy (setup.sh --test).
export PDCX_REQUIRE_MONTAGE=1
# ... and every other Python test that would skip (tests/conftest.py): setup.sh --test installs
# what each one needs, so here a skip is a test that checked nothing.
export PDCX_NO_SKIPS=1
# Every process that dies at a named crash point appends its name here (crates/fsio/src/crash.rs);
# scripts/crash_coverage.py then fails unless every point of the source was reached.
export PDCX_CRASH_LEDGER=/tmp/pdcx-crash-ledger
rm -f "$PDCX_CRASH_LEDGER"

echo "== rust: fmt, clippy"
cargo fmt --all --check
cargo clippy -q --workspace --all-targets -- -D warnings
echo "== python: ruff"
python3 -m ruff check tests bench examples crates/python/python
python3 -m ruff format --check tests bench examples crates/python/python
echo "== rust: tests"
# The status is taken from cargo itself: under pipefail, `cargo ... | grep ... || true` ran
# `true` when cargo failed, and PIPESTATUS then said 0 (a failing Rust test passed CI).
cargo_rc=0
cargo test -q --workspace >/tmp/pdcx-cargo-test.log 2>&1 || cargo_rc=$?
grep -E '^(test result|running|error|failures)|FAILED|panicked' /tmp/pdcx-cargo-test.log || true
[[ $cargo_rc -eq 0 ]] || { echo "cargo test failed ($cargo_rc); full log in /tmp/pdcx-cargo-test.log"; exit 1; }
echo "== rust: crash points of the data path (real SIGKILL at each, then recovery)"
cargo clippy -q -p pdcx-server --features crash-points --all-targets -- -D warnings
crash_rc=0
cargo test -q -p pdcx-server --features crash-points --test crashpoints --test crash --test homecrash --test compact \
  --test seqmark -- --nocapture >/tmp/pdcx-crash-test.log 2>&1 || crash_rc=$?
grep -E "^(test result|CRASH_SUMMARY)|panicked|FAILED" /tmp/pdcx-crash-test.log || true
[[ $crash_rc -eq 0 ]] || { echo "crash-point tests failed ($crash_rc); full log in /tmp/pdcx-crash-test.log"; exit 1; }
# The group shards' crash test alone (the rest of groupshard.rs ran above without crash points).
# A filter that matches nothing passes too, so the run must say it ran exactly that one test.
crash_rc=0
cargo test -q -p pdcx-server --features crash-points --test groupshard -- --exact \
  sigkill_between_the_group_put_and_the_members_records_loses_nothing >/tmp/pdcx-crash-groupshard.log 2>&1 || crash_rc=$?
grep -E "^test result|panicked|FAILED" /tmp/pdcx-crash-groupshard.log || true
[[ $crash_rc -eq 0 ]] && grep -q "^test result: ok. 1 passed" /tmp/pdcx-crash-groupshard.log \
  || { echo "the group shards' crash test did not pass ($crash_rc); full log in /tmp/pdcx-crash-groupshard.log"; exit 1; }
disk "after the Rust tests"
# The test executables have run; nothing below uses them (the libraries they linked stay, so the
# crash-point build below relinks only pdcx; proc-macro .so files stay). Their gigabytes go
# before the fuzz build needs room.
find target/debug/deps -maxdepth 1 -type f -executable ! -name '*.so' ! -name '*.rlib' -delete
disk "test executables removed"
echo "== fuzz: a short run of every cargo-fuzz target (nightly toolchain)"
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz
FUZZ_DEV=1 FUZZ_SECONDS=10 bash scripts/fuzz-smoke.sh
disk "after the fuzz run"
# A pdcx whose servers die at named crash points, for the kill-loop harness's crash-point test
# (tests/test_reliability.py); copied out, since the next plain build replaces target/debug/pdcx.
cargo build -q -p pdcx-cli --features crash-points
cp target/debug/pdcx target/pdcx-crash-points
export PDCX_CRASH_BIN=$PWD/target/pdcx-crash-points
echo "== python: integration tests (real servers, mpirun)"
# A module that cannot be collected (a module-level skip under PDCX_NO_SKIPS, an import error)
# fails the run without keeping the other modules from running.
python3 -m pytest -q --continue-on-collection-errors tests
# Every named crash point of the source was reached by a real kill: the Rust crash tests above
# (the S3 ones included) and the crash-point build under pytest (a resize, `tests/test_resize.py`).
python3 scripts/crash_coverage.py "$PDCX_CRASH_LEDGER"
