#!/usr/bin/env bash
# The crash harness in one command: kill loops and crash points against real servers, real
# mpirun and a real S3 server, checked by the oracle after every recovery, plus the store's
# power-cut test, printed as one table. Details: bench/reliability/README.md.
#
#   bench/reliability/run.sh --quick                # a few minutes: 12 kill cycles
#   bench/reliability/run.sh                        # the full run: 200 kill cycles + every crash point
#   bench/reliability/run.sh --kills 400 --out DIR  # any harness.py option; an existing DIR resumes
#   bench/reliability/run.sh --no-power-cuts        # skip the cargo power-cut test
#   bench/reliability/run.sh --no-mpiio             # skip the MPI-IO crash runs
#
# Environment: PDCX_BIN (server binary, default `pdcx` on PATH), PDCX_CRASH_BIN (a pdcx built
# with the crash-points feature, for `pdcx server crash-points` and crash-point runs),
# PDCX_POWER_CUT_CMD (the power-cut test command; default: every crates/*/tests target that
# prints a *_SUMMARY line with power_cuts), PDCX_POWER_CUTS / PDCX_CRASH_RUNS (their sizes).
# Exits 1 if anything was lost, torn or failed to recover.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
quick=0
power=1
mpiio=1
out=""
args=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --no-power-cuts) power=0 ;;
    --no-mpiio) mpiio=0 ;;
    --out) out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    -h | --help) sed -n '2,15p' "$0"; exec python3 "$here/harness.py" --help ;;
    *) args+=("$1") ;;
  esac
  shift
done
if ((quick)); then
  export PDCX_POWER_CUTS=${PDCX_POWER_CUTS:-300}
  preset=(--kills 12 --kills-per-run 6 --servers 2 --ranks 3 --particles 8192 --max-delay 2 --crash-wait 20 --cycle-kinds-in-order)
else
  export PDCX_POWER_CUTS=${PDCX_POWER_CUTS:-1000} PDCX_CRASH_RUNS=${PDCX_CRASH_RUNS:-4}
  preset=(--kills 200 --kills-per-run 6 --servers 3 --ranks 4)
fi
out=${out:-$here/out/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out"

for tool in mpirun python3; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing (scripts/setup.sh)" >&2; exit 2; }
done
python3 -c 'import mpi4py, pdcx' || { echo "run.sh: the pdcx wheel and mpi4py must be installed" >&2; exit 2; }
[[ -x ${VERSITYGW:-/usr/local/bin/versitygw} ]] || { echo "run.sh: versitygw missing (scripts/s3server.sh install)" >&2; exit 2; }

# The power-cut column: the Rust crash tests print one summary line each with their counts
# (`POWER_CUT_SUMMARY {"layer":"log","power_cuts":N,...}`, `CRASH_SUMMARY {"layer":"server",...}`);
# without such a test the column says n/a.
power_col="n/a"
if ((power)); then
  cmds=()
  if [[ -n ${PDCX_POWER_CUT_CMD:-} ]]; then
    cmds=("$PDCX_POWER_CUT_CMD")
  else
    # Every test target that prints such a line: the store's (the log alone) and the server's
    # (the whole durable path; with its crash points compiled in where the crate has the feature).
    while IFS= read -r file; do
      crate_dir=${file%%/tests/*}
      pkg=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$crate_dir/Cargo.toml" | head -1)
      feat=""
      grep -q '^crash-points *=' "$crate_dir/Cargo.toml" && feat=" --features crash-points"
      cmds+=("cargo test -p $pkg --test $(basename "$file" .rs)$feat -- --nocapture")
    done < <(grep -rlE --include='*.rs' '_SUMMARY \{' "$repo"/crates/*/tests 2>/dev/null | xargs -r grep -l power_cuts | sort)
  fi
  parts=()
  for i in "${!cmds[@]}"; do
    cmd=${cmds[$i]}
    log=$out/power-cut-$i.log
    echo "run.sh: power cuts: $cmd (log: $log)"
    if (cd "$repo" && nice -n 10 bash -c "$cmd") >"$log" 2>&1; then status=ok; else status=FAILED; fi
    lines=$(grep -E '_SUMMARY \{.*"power_cuts"|^\{.*"power_cuts"' "$log" | sed 's/^[^{]*//' || true)
    if [[ -n $lines ]]; then
      parts+=("$(python3 -c 'import json, sys
for line in sys.argv[1].splitlines():
    d = json.loads(line)
    layer = d.pop("layer", "?")
    print(layer + ": " + ", ".join(f"{k} {v}" for k, v in d.items()))' "$lines" | paste -sd';' -)")
    else
      parts+=("no counts printed by: $cmd")
    fi
    [[ $status == ok ]] || { parts+=("FAILED, see $log"); args+=(--power-failed); }
  done
  ((${#cmds[@]})) && power_col=$(printf '%s; ' "${parts[@]}" | sed 's/; $//')
fi

# The MPI-IO row: unmodified MPI-IO programs logged by `pdcx run` (tests/test_mpiio_crash.py:
# kill -9 of a rank, of every server, of a server at the seal and home-copy crash points, then
# `pdcx recover`; each run checks that the home holds one whole epoch, at least the last one
# whose MPI_File_sync returned, and that a rerun completes). Seeds vary the kill times.
mpiio_col="n/a"
if ((mpiio)); then
  runs=$((quick ? 1 : 3)); ok=0; failed=0
  for ((i = 1; i <= runs; i++)); do
    log=$out/mpiio-$i.log
    echo "run.sh: MPI-IO crash run $i/$runs (log: $log)"
    if (cd "$repo" && PDCX_CRASH_SEED=$((1000 + i)) nice -n 10 python3 -m pytest -q tests/test_mpiio_crash.py) >"$log" 2>&1; then
      ok=$((ok + 1))
    else
      failed=$((failed + 1))
    fi
    passed=$(grep -oE '[0-9]+ passed' "$log" | tail -1 || true)
    skipped=$(grep -oE '[0-9]+ skipped' "$log" | tail -1 || true)
    echo "run.sh:   ${passed:-0 passed}${skipped:+, $skipped}"
  done
  scen=$(grep -ohE '[0-9]+ passed' "$out"/mpiio-*.log | awk '{s+=$1} END {print s+0}')
  mpiio_col="$runs runs, $scen scenarios passed, $failed runs failed (0 lost synced epochs and 0 torn home files in every passed scenario)"
  ((failed == 0)) || { mpiio_col="$mpiio_col, see $out/mpiio-*.log"; args+=(--mpiio-failed); }
fi

cd "$repo"
exec python3 "$here/harness.py" "${preset[@]}" ${args[@]+"${args[@]}"} --out "$out" --power "$power_col" --mpiio "$mpiio_col"
