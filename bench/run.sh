#!/usr/bin/env bash
# The one benchmark command: fio reference bandwidth, VPIC/BDCATS on pdcx and on
# parallel HDF5, summary table. See bench/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/run.sh [--ranks R] [--servers K] [--particles N] [--steps S]
                    [--evict-cache] [--no-setup] [--keep]

  --ranks R       MPI ranks of the benchmark (default 4)
  --servers K     pdcx servers (default 2)
  --particles N   particles per rank (default 1048576 = 4 MiB per variable,
                  8 variables = 32 MiB per rank per step)
  --steps S       time steps (default 1)
  --evict-cache   between write and read, drop the benchmark's own files from
                  the page cache (fadvise DONTNEED; other files untouched)
  --no-setup      skip `scripts/setup.sh --bench` (dependencies + pdcx build)
  --keep          keep the data files (default: removed at the end)

Steps: scripts/setup.sh --bench; work dir bench/out/run-<date>/; seqbw.sh
there; `pdcx server start -n K`; vpic_bdcats.py --backend pdcx; server stop;
vpic_bdcats.py --backend hdf5; summary table, also appended to
bench/out/last.md. Exits nonzero if either backend failed.
EOF
}

ranks=4 servers=2 particles=1048576 steps=1 evict=0 setup=1 keep=0
cmdline="bench/run.sh $*"
while (($#)); do
  case $1 in
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --servers) servers=${2:?--servers needs a value}; shift 2 ;;
    --particles) particles=${2:?--particles needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --evict-cache) evict=1; shift ;;
    --no-setup) setup=0; shift ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in ranks servers particles steps; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --$v must be a positive integer" >&2; exit 2; }
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
log() { printf '\033[1m[bench]\033[0m %s\n' "$*"; }

if ((setup)); then
  log "bash scripts/setup.sh --bench"
  bash scripts/setup.sh --bench
fi

mkdir -p "$repo/bench/out"
work=$(mktemp -d "$repo/bench/out/run-$(date +%Y%m%d-%H%M%S)-XXXX")
log "work dir: $work"

servers_up=0
cleanup() {
  local rc=$?
  if ((servers_up)); then
    log "pdcx server stop"
    pdcx server stop --root "$work/pdcx" || true
    servers_up=0
  fi
  if ((!keep)); then
    rm -rf "$work/pdcx" "$work/hdf5" "$work/seqbw"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none
  --mca mpi_yield_when_idle 1 -n "$ranks")
bench_args=(--particles "$particles" --steps "$steps")
if ((evict)); then bench_args+=(--evict-cache); fi

# Reference bandwidth: at least 1 GiB, or the benchmark's data volume.
data_mib=$((ranks * particles * steps * 32 / 1048576))
seq_mib=$((data_mib > 1024 ? data_mib : 1024))
log "seqbw.sh ($seq_mib MiB)"
bench/seqbw.sh "$work/seqbw" "$seq_mib" | tee "$work/seqbw.txt"

failed=()

log "pdcx: $servers servers, $ranks ranks"
if ! command -v pdcx >/dev/null 2>&1; then
  echo "run.sh: the pdcx command is not installed (scripts/setup.sh builds it)" >&2
  failed+=(pdcx)
elif ! pdcx server start -n "$servers" --root "$work/pdcx"; then
  echo "run.sh: pdcx server start failed" >&2
  failed+=(pdcx)
else
  servers_up=1
  if ! PDCX_ROOT=$work/pdcx "${mpi[@]}" -x PDCX_ROOT python3 bench/vpic_bdcats.py \
    --backend pdcx "${bench_args[@]}" --json "$work/pdcx.json" 2>&1 | tee "$work/pdcx.log"; then
    failed+=(pdcx)
  fi
  # Stop the servers now so they do not compete for the CPUs during the hdf5 run.
  log "pdcx server stop"
  pdcx server stop --root "$work/pdcx" || echo "run.sh: pdcx server stop failed" >&2
  servers_up=0
fi

log "hdf5: $ranks ranks"
if ! "${mpi[@]}" python3 bench/vpic_bdcats.py --backend hdf5 "${bench_args[@]}" \
  --dir "$work/hdf5" --json "$work/hdf5.json" 2>&1 | tee "$work/hdf5.log"; then
  failed+=(hdf5)
fi
# A failed backend must show as FAILED, not with numbers from a partial run.
for b in "${failed[@]}"; do rm -f "$work/$b.json"; done

log "summary (also appended to bench/out/last.md)"
python3 bench/summarize.py --pdcx "$work/pdcx.json" --hdf5 "$work/hdf5.json" \
  --seqbw "$work/seqbw.txt" --servers "$servers" --workdir "$work" \
  --cmd "$cmdline" --append "$repo/bench/out/last.md" || true

if ((${#failed[@]})); then
  echo "run.sh: FAILED: ${failed[*]} (logs in $work)" >&2
  exit 1
fi
log "done; logs and JSON in $work"
