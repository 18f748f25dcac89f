#!/usr/bin/env bash
# The crash harness in one command: kill loops and crash points against real servers, real
# mpirun and a real S3 server, checked by the oracle after every recovery, plus the store's
# power-cut test, printed as one table. Details: bench/reliability/README.md.
#
#   bench/reliability/run.sh --quick                # a few minutes: 12 kill cycles
#   bench/reliability/run.sh                        # the full run: 200 kill cycles + every crash point
#   bench/reliability/run.sh --kills 400 --out DIR  # any harness.py option; an existing DIR resumes
#   bench/reliability/run.sh --no-power-cuts        # skip the cargo power-cut test
#
# Environment: PDCX_BIN (server binary, default `pdcx` on PATH), PDCX_CRASH_BIN (a pdcx built
# with the crash-points feature, for `pdcx debug crash-points` and crash-point runs),
# PDCX_POWER_CUT_CMD (the power-cut test command; default: cargo test of the workspace test
# named *power_cut*, if there is one). Exits 1 if anything was lost, torn or failed to recover.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
quick=0
power=1
out=""
args=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --no-power-cuts) power=0 ;;
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
  export PDCX_POWER_CUTS=${PDCX_POWER_CUTS:-1000}
  preset=(--kills 200 --kills-per-run 6 --servers 3 --ranks 4)
fi
out=${out:-$here/out/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out"

for tool in mpirun python3; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing (scripts/setup.sh)" >&2; exit 2; }
done
python3 -c 'import mpi4py, pdcx' || { echo "run.sh: the pdcx wheel and mpi4py must be installed" >&2; exit 2; }
[[ -x ${VERSITYGW:-/usr/local/bin/versitygw} ]] || { echo "run.sh: versitygw missing (scripts/s3server.sh install)" >&2; exit 2; }

# The power-cut column: the lead's Rust test prints one JSON line with its counts
# ({"power_cuts": N, ...}); without such a test the column says n/a.
power_col="n/a"
if ((power)); then
  cmd=${PDCX_POWER_CUT_CMD:-}
  if [[ -z $cmd ]]; then
    file=$(grep -rlE --include='*.rs' 'fn [a-z0-9_]*power_cut' "$repo/crates" 2>/dev/null | head -1 || true)
    if [[ -n $file ]]; then
      crate_dir=${file%%/src/*}
      crate_dir=${crate_dir%%/tests/*}
      pkg=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$crate_dir/Cargo.toml" | head -1)
      if [[ $file == */tests/* ]]; then
        cmd="cargo test -p $pkg --test $(basename "$file" .rs) -- --nocapture"
      else
        cmd="cargo test -p $pkg power_cut -- --nocapture"
      fi
    fi
  fi
  if [[ -n $cmd ]]; then
    echo "run.sh: power cuts: $cmd (log: $out/power-cut.log)"
    if (cd "$repo" && nice -n 10 bash -c "$cmd") >"$out/power-cut.log" 2>&1; then status=ok; else status=FAILED; fi
    # The summary line: "POWER_CUT_SUMMARY {json}" (or a bare JSON line) with a "power_cuts" key.
    line=$(grep -E '\{.*"power_cuts"' "$out/power-cut.log" | tail -1 | sed 's/^[^{]*//' || true)
    if [[ -n $line ]]; then
      power_col=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(", ".join(f"{k} {v}" for k, v in d.items()))' "$line")
    else
      power_col="no counts printed"
    fi
    [[ $status == ok ]] || { power_col="$power_col (test FAILED, see $out/power-cut.log)"; args+=(--power-failed); }
  fi
fi

cd "$repo"
exec python3 "$here/harness.py" "${preset[@]}" ${args[@]+"${args[@]}"} --out "$out" --power "$power_col"
