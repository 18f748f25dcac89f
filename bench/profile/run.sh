#!/usr/bin/env bash
# Count what the fast path costs per MB moved (issue 10, "Count before cutting"): syscalls,
# fsync/fdatasync, round trips, server CPU seconds, bytes through the servers' syscalls and
# shared memory, for the VPIC write, the BDCATS read and the 4 KiB write and read kernels of
# bench/c, on one pdcx build (PDCX=, PDC_CFLAGS/PDC_LIBS). See bench/profile/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/profile/run.sh [--ranks R] [--servers S] [--particles N] [--ops K]
                            [--cache-mb MB] [--durability memory|local] [--label NAME]
                            [--no-strace] [--perf] [--out FILE] [--json FILE]
                            [--small-ranks R] [--bin DIR] [--keep]

  --ranks R        MPI ranks of VPIC/BDCATS (default 4; the 4 KiB kernels use 1)
  --servers S      pdcx servers (default 2)
  --particles N    particles per rank (default 1048576: 32 MiB per rank)
  --ops K          4 KiB operations (default 1000)
  --cache-mb MB    data cache of each server (default 0, as bench/c/run.sh when it
                   can drop the page cache; reads then come from the log's page cache)
  --durability D   durability of the writes (default local)
  --label NAME     names the build in the table (default: the pdcx binary's path)
  --no-strace      skip the strace pass (no syscall counts; faster)
  --perf           also `perf record -g` the servers during each phase (perf.data
                   per phase in the work dir; flame graphs with `perf script`)
  --out FILE       append the markdown table to FILE (default bench/out/profile-last.md)
  --json FILE      also write the per-phase figures as JSON (bench/profile/scale.sh)
  --small-ranks R  ranks of the 4 KiB kernels (default 1)
  --bin DIR        use the kernels already built in DIR (make BUILD=DIR pdc)
  --keep           keep the data

Two passes over the same four phases, each on fresh objects:
  clean pass   CPU seconds (servers: /proc/PID/stat; ranks: their reaped children),
               /proc/PID/io byte counters, the servers' metrics (requests, syncs, shm bytes)
  strace pass  `strace -c -f` attached to every server and wrapping every rank:
               syscalls by name, fsync + fdatasync counts (times from this pass are void)
Environment: PDCX (pdcx binary; else `pdcx` on PATH), PDC_CFLAGS / PDC_LIBS (libpdcx; else
pkg-config pdcx), exactly as bench/c/run.sh.
EOF
}

ranks=4 servers=2 particles=1048576 ops=1000 cache_mb=0 durability=local label="" strace=1 perf=0
out_md="" keep=0 json="" small_ranks=1 prebuilt=""
cmdline="bench/profile/run.sh $*"
while (($#)); do
  case $1 in
    --ranks) ranks=${2:?}; shift 2 ;;
    --servers) servers=${2:?}; shift 2 ;;
    --particles) particles=${2:?}; shift 2 ;;
    --ops) ops=${2:?}; shift 2 ;;
    --cache-mb) cache_mb=${2:?}; shift 2 ;;
    --durability) durability=${2:?}; shift 2 ;;
    --label) label=${2:?}; shift 2 ;;
    --no-strace) strace=0; shift ;;
    --perf) perf=1; shift ;;
    --out) out_md=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --json) json=${2:?}; shift 2 ;;
    --small-ranks) small_ranks=${2:?}; shift 2 ;;
    --bin) prebuilt=${2:?}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "profile: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in ranks servers particles ops small_ranks; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "profile: --$v must be a positive integer" >&2; exit 2; }
done
[[ $cache_mb =~ ^[0-9]+$ ]] || { echo "profile: --cache-mb must be an integer" >&2; exit 2; }
[[ $durability == memory || $durability == local ]] || { echo "profile: --durability memory|local" >&2; exit 2; }
if ((strace)) && ! command -v strace >/dev/null; then
  echo "profile: strace not found: running without syscall counts (--no-strace)" >&2
  strace=0
fi
if ((perf)) && ! perf stat -e task-clock true >/dev/null 2>&1; then
  echo "profile: perf does not work here: --perf ignored" >&2
  perf=0
fi

pdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$pdir/../.." && pwd)
cdir=$repo/bench/c
cd "$repo"
log() { printf '\033[1m[profile]\033[0m %s\n' "$*" >&2; }
pdcx_bin=${PDCX:-$(command -v pdcx || true)}
[[ -n $pdcx_bin && -x $pdcx_bin ]] || { echo "profile: no pdcx binary (set PDCX=...)" >&2; exit 2; }
: "${out_md:=$repo/bench/out/profile-last.md}"

mkdir -p "$repo/bench/out"
work=$(mktemp -d "$repo/bench/out/profile-$(date +%Y%m%d-%H%M%S)-XXXX")
log "work dir: $work"
if [[ -n $prebuilt ]]; then
  bin=$prebuilt
else
  bin=$work/build
  log "make pdc (into $bin)"
  make -s -C "$cdir" BUILD="$bin" pdc
fi
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

root=$work/pdcx
export PDCX_ROOT=$root OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
servers_up=0 tracers=()
cleanup() {
  local rc=$?
  local p
  for p in "${tracers[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  if ((servers_up)); then "$pdcx_bin" server stop --root "$root" >/dev/null 2>&1 || true; fi
  if ((!keep)); then rm -rf "$root" "$work/files"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

servers_up=1
# Port 0: every server picks a free metrics port and logs it (server-RANK.log).
"$pdcx_bin" server start -n "$servers" --root "$root" --cache-mb "$cache_mb" --metrics 127.0.0.1:0 >"$work/start.txt"
"$pdcx_bin" server status --root "$root" --json >"$work/status.json"
mapfile -t spids < <(python3 -c 'import json,sys; [print(s["pid"]) for s in json.load(open(sys.argv[1]))]' "$work/status.json")
((${#spids[@]} == servers)) || { echo "profile: expected $servers server pids, got ${#spids[@]}" >&2; exit 1; }
metrics_urls=()
for ((r = 0; r < servers; r++)); do
  url=""
  for _ in $(seq 50); do
    url=$(grep -ao "metrics on http://[^ ]*/metrics" "$root/logs/server-$r.log" 2>/dev/null | tail -1 | cut -d' ' -f3 || true)
    [[ -n $url ]] && break
    sleep 0.1
  done
  metrics_urls+=("${url:-none}")
done
log "servers: pids ${spids[*]}; metrics ${metrics_urls[*]}"

# snapshot DIR TAG: every server's CPU ticks, I/O counters, memory and metrics.
snapshot() {
  local d=$1 tag=$2 i
  for i in "${!spids[@]}"; do
    cat "/proc/${spids[$i]}/stat" >"$d/server-$i.$tag.stat"
    cat "/proc/${spids[$i]}/io" >"$d/server-$i.$tag.io"
    grep -E '^(VmHWM|VmRSS)' "/proc/${spids[$i]}/status" >"$d/server-$i.$tag.mem"
    if [[ ${metrics_urls[$i]} != none ]]; then
      curl -s --max-time 5 "${metrics_urls[$i]}" >"$d/server-$i.$tag.metrics" || true
    fi
  done
}

mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -x PDCX_ROOT)
# phase PASS NAME NRANKS KERNEL ARGS...: one measured kernel run.
phase() {
  local pass=$1 name=$2 n=$3 kernel=$4 i p
  shift 4
  local d=$work/$pass/$name
  mkdir -p "$d"
  local trace=0
  [[ $pass == strace ]] && trace=1
  log "$pass: $name (-n $n) $kernel $*"
  # The peak resident set is reset, so VmHWM after the phase is this phase's peak.
  for p in "${spids[@]}"; do echo 5 >"/proc/$p/clear_refs" 2>/dev/null || true; done
  snapshot "$d" before
  tracers=()
  if ((trace)); then
    for i in "${!spids[@]}"; do
      strace -f -c -o "$d/strace-server-$i.txt" -p "${spids[$i]}" 2>"$d/strace-server-$i.err" &
      tracers+=($!)
    done
    sleep 1 # attached to every thread before the kernel starts
  fi
  local perfs=()
  if ((perf)) && [[ $pass == clean ]]; then
    for i in "${!spids[@]}"; do
      perf record -g -o "$d/perf-server-$i.data" -p "${spids[$i]}" 2>"$d/perf-server-$i.err" >/dev/null &
      perfs+=($!)
    done
  fi
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  "${mpi[@]}" -n "$n" bash "$pdir/rank.sh" "$d" "$trace" "$bin/$kernel" "$@" >"$d/kernel.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  for p in "${perfs[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${perfs[@]}"; do wait "$p" || true; done
  # strace prints its summary when it detaches (SIGINT).
  for p in "${tracers[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${tracers[@]}"; do wait "$p" || true; done
  tracers=()
  snapshot "$d" after
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "wall_s=%.6f\n", b - a }' >"$d/wall.txt"
  grep -E '^(RESULT|VERIFY)' "$d/kernel.log" || true
  if ((rc != 0)); then
    echo "profile: $pass/$name failed (exit $rc); see $d/kernel.log" >&2
    tail -20 "$d/kernel.log" >&2
    exit 1
  fi
}

files=$work/files
mkdir -p "$files"
y=()
[[ $durability == memory ]] && y=(-y memory)
passes=(clean)
((strace)) && passes+=(strace)
for pass in "${passes[@]}"; do
  pfx=p$pass
  phase "$pass" vpic-write "$ranks" vpic_pdc -d "$files" -S "$servers" -n "$particles" -p "$pfx" "${y[@]}"
  phase "$pass" bdcats-read "$ranks" bdcats_pdc -d "$files" -S "$servers" -n "$particles" -p "$pfx"
  phase "$pass" small-write "$small_ranks" small_pdc -d "$files" -S "$servers" -k "$ops" -p "$pfx" -M write "${y[@]}"
  phase "$pass" small-read "$small_ranks" small_pdc -d "$files" -S "$servers" -k "$ops" -p "$pfx" -M read
done

"$pdcx_bin" server stop --root "$root" >/dev/null || echo "profile: pdcx server stop failed" >&2
servers_up=0

lib=$(ldd "$bin/vpic_pdc" | awk '/libpdcx/ {print $3}')
python3 "$pdir/table.py" "$work" --label "${label:-$pdcx_bin}" --pdcx "$pdcx_bin" --lib "$lib" \
  --servers "$servers" --ranks "$ranks" --cache-mb "$cache_mb" --durability "$durability" \
  --load "$load_start; after: $(cut -d' ' -f1-3 /proc/loadavg)" --cmd "$cmdline" --append "$out_md" \
  ${json:+--json "$json"}
log "done; raw data in $work"
