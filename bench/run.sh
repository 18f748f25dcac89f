#!/usr/bin/env bash
# The one benchmark command: fio reference bandwidth, VPIC/BDCATS on pdcx and on
# parallel HDF5, summary table. See bench/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/run.sh [--ranks R] [--servers K] [--particles N] [--steps S]
                    [--repeat N] [--cache-mb MB] [--evict-cache] [--no-setup] [--keep]

  --ranks R       MPI ranks of the benchmark (default 4)
  --servers K     pdcx servers (default 2)
  --particles N   particles per rank (default 1048576 = 4 MiB per variable,
                  8 variables = 32 MiB per rank per step)
  --steps S       time steps (default 1)
  --repeat N      run both backends N times (fresh deployment / file each
                  time) and report the median and min-max (default 1)
  --cache-mb MB   data cache of each pdcx server (default: the server's
                  default, 256; 0 with --evict-cache)
  --evict-cache   between write and read, drop the benchmark's own files from
                  the page cache (fadvise DONTNEED; other files untouched) and
                  run the pdcx servers without their in-memory data cache
  --no-setup      skip `scripts/setup.sh --bench` (dependencies + pdcx build)
  --keep          keep the data files (default: removed at the end)

Steps: scripts/setup.sh --bench; work dir bench/out/run-<date>/; N times:
seqbw.sh there (the device), `pdcx server start -n K`, vpic_bdcats.py --backend pdcx,
server stop, vpic_bdcats.py --backend hdf5; summary table, also appended to
bench/out/last.md. Exits nonzero if either backend failed.
EOF
}

ranks=4 servers=2 particles=1048576 steps=1 repeat=1 cache_mb="" evict=0 setup=1 keep=0
cmdline="bench/run.sh $*"
while (($#)); do
  case $1 in
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --servers) servers=${2:?--servers needs a value}; shift 2 ;;
    --particles) particles=${2:?--particles needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --repeat) repeat=${2:?--repeat needs a value}; shift 2 ;;
    --cache-mb) cache_mb=${2:?--cache-mb needs a value}; shift 2 ;;
    --evict-cache) evict=1; shift ;;
    --no-setup) setup=0; shift ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in ranks servers particles steps repeat; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --$v must be a positive integer" >&2; exit 2; }
done
if [[ -n $cache_mb && ! $cache_mb =~ ^[0-9]+$ ]]; then
  echo "run.sh: --cache-mb must be a non-negative integer" >&2
  exit 2
fi
# The pdcx servers keep recently written data in their own memory (256 MiB each by
# default), which fadvise cannot drop: with --evict-cache they run without it, so pdcx
# reads come from its log files like HDF5's come from its file.
if ((evict)) && [[ -z $cache_mb ]]; then cache_mb=0; fi
server_opts=()
if [[ -n $cache_mb ]]; then server_opts+=(--cache-mb "$cache_mb"); fi

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
# Other processes running now (a build, a test suite) skew every number: recorded in the block.
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

pdcx_root=""
servers_up=0
stop_servers() {
  if ((servers_up)); then
    log "pdcx server stop"
    pdcx server stop --root "$pdcx_root" || echo "run.sh: pdcx server stop failed" >&2
    servers_up=0
  fi
  # The server logs live under the deployment root, which is deleted with the data.
  if [[ -n $pdcx_root && -d $pdcx_root/logs ]]; then
    mkdir -p "$work/pdcx-logs/$(basename "$pdcx_root")"
    cp -r "$pdcx_root/logs/." "$work/pdcx-logs/$(basename "$pdcx_root")/" || true
  fi
}
cleanup() {
  local rc=$?
  stop_servers
  if ((!keep)); then
    rm -rf "$work/data" "$work/seqbw"
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
failed=()
pdcx_jsons=() hdf5_jsons=() seq_files=()
for ((i = 1; i <= repeat; i++)); do
  sfx="" && ((repeat > 1)) && sfx="-$i"
  ((repeat > 1)) && log "repetition $i of $repeat"
  # The device in every repetition: a virtual disk's figures move between minutes.
  log "seqbw.sh ($seq_mib MiB)"
  bench/seqbw.sh "$work/seqbw" "$seq_mib" | tee "$work/seqbw$sfx.txt"
  seq_files+=("$work/seqbw$sfx.txt")

  log "pdcx: $servers servers, $ranks ranks"
  pdcx_root=$work/data/pdcx$sfx
  if ! command -v pdcx >/dev/null 2>&1; then
    echo "run.sh: the pdcx command is not installed (scripts/setup.sh builds it)" >&2
    failed+=(pdcx)
  else
    # Set before starting: a start that fails half way may leave some servers running.
    servers_up=1
    if ! pdcx server start -n "$servers" --root "$pdcx_root" "${server_opts[@]}"; then
      echo "run.sh: pdcx server start failed" >&2
      failed+=(pdcx)
    elif PDCX_ROOT=$pdcx_root "${mpi[@]}" -x PDCX_ROOT python3 bench/vpic_bdcats.py \
      --backend pdcx "${bench_args[@]}" --json "$work/pdcx$sfx.json" 2>&1 |
      tee "$work/pdcx$sfx.log"; then
      pdcx_jsons+=("$work/pdcx$sfx.json")
    else
      failed+=(pdcx)
    fi
    # Stop the servers now so they do not compete for the CPUs during the hdf5 run.
    stop_servers
    if ((!keep)); then rm -rf "$pdcx_root"; fi
  fi

  log "hdf5: $ranks ranks"
  if "${mpi[@]}" python3 bench/vpic_bdcats.py --backend hdf5 "${bench_args[@]}" \
    --dir "$work/data/hdf5$sfx" --json "$work/hdf5$sfx.json" 2>&1 | tee "$work/hdf5$sfx.log"; then
    hdf5_jsons+=("$work/hdf5$sfx.json")
  else
    failed+=(hdf5)
  fi
  if ((!keep)); then rm -rf "$work/data/hdf5$sfx"; fi
done
# A failed backend must show as FAILED, not with numbers from a partial run.
for b in $(printf '%s\n' "${failed[@]}" | sort -u); do
  [[ $b == pdcx ]] && pdcx_jsons=()
  [[ $b == hdf5 ]] && hdf5_jsons=()
done

log "summary (also appended to bench/out/last.md)"
python3 bench/summarize.py --pdcx "${pdcx_jsons[@]}" --hdf5 "${hdf5_jsons[@]}" \
  --seqbw "${seq_files[@]}" --servers "$servers" --cache-mb "${cache_mb:-256}" --load-start "$load_start" \
  --workdir "$work" --cmd "$cmdline" --append "$repo/bench/out/last.md" || true

if ((${#failed[@]})); then
  echo "run.sh: FAILED: $(printf '%s\n' "${failed[@]}" | sort -u | xargs) (logs in $work)" >&2
  exit 1
fi
log "done; logs and JSON in $work"
