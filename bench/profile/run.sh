#!/usr/bin/env bash
# Count what the fast path costs per MB moved ("Count before cutting"): syscalls,
# fsync/fdatasync, round trips, server CPU seconds, bytes through the servers' syscalls and
# shared memory, for the VPIC write, the BDCATS read and the 4 KiB write and read kernels of
# bench/c, on one pdcx build (PDCX=, PDC_CFLAGS/PDC_LIBS). See bench/profile/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/profile/run.sh [--ranks R] [--servers S] [--particles N] [--ops K]
                            [--cache-mb MB] [--durability memory|local] [--label NAME]
                            [--syscalls perf|strace|none] [--perf-record] [--out FILE] [--json FILE]
                            [--small-ranks R] [--bin DIR] [--copies PHASE=TEXT] [--keep]

  --ranks R        MPI ranks of VPIC/BDCATS (default 4; the 4 KiB kernels use 1)
  --servers S      pdcx servers (default 2)
  --particles N    particles per rank (default 1048576: 32 MiB per rank)
  --ops K          4 KiB operations (default 1000)
  --cache-mb MB    data cache of each server (default 0, as bench/c/run.sh when it
                   can drop the page cache; reads then come from the log's page cache)
  --durability D   durability of the writes (default local)
  --label NAME     names the build in the table (default: the pdcx binary's path)
  --syscalls HOW   how syscalls are counted (default perf, else strace if perf does not
                   work here): perf = `perf stat` syscall tracepoints on every server
                   and rank during the measured pass (in-kernel counters, small
                   overhead); strace = a second pass under `strace -c -f` (every
                   syscall by name, but 100x slower: clients may time out); none
  --no-strace      the same as --syscalls none
  --perf-record    also `perf record -g` the servers during each phase (perf.data
                   per phase in the work dir; flame graphs with `perf script`)
  --out FILE       append the markdown table to FILE (default bench/out/profile-last.md)
  --json FILE      also write the per-phase figures as JSON (bench/profile/scale.sh)
  --small-ranks R  ranks of the 4 KiB kernels (default 1)
  --bin DIR        use the kernels already built in DIR (make BUILD=DIR pdc)
  --copies P=TEXT  the payload copies of phase P in this build, for the table (repeatable;
                   default: the path before the fast-path work, see table.py)
  --keep           keep the data

Per phase: CPU seconds (servers: /proc/PID/stat; ranks: their reaped children),
/proc/PID/io byte counters, the servers' metrics (requests, syncs, shm bytes), syscalls
and fsync + fdatasync (--syscalls). With --syscalls strace, a second pass on fresh
objects does the counting (its times are void).
Environment: PDCX (pdcx binary; else `pdcx` on PATH), PDC_CFLAGS / PDC_LIBS (libpdcx; else
pkg-config pdcx), exactly as bench/c/run.sh.
EOF
}

ranks=4 servers=2 particles=1048576 ops=1000 cache_mb=0 durability=local label="" sysmode=perf perf=0
out_md="" keep=0 json="" small_ranks=1 prebuilt="" copies=()
cmdline="bench/profile/run.sh${*:+ $(printf "%q " "$@")}"
while (($#)); do
  case $1 in
    --ranks) ranks=${2:?}; shift 2 ;;
    --servers) servers=${2:?}; shift 2 ;;
    --particles) particles=${2:?}; shift 2 ;;
    --ops) ops=${2:?}; shift 2 ;;
    --cache-mb) cache_mb=${2:?}; shift 2 ;;
    --durability) durability=${2:?}; shift 2 ;;
    --label) label=${2:?}; shift 2 ;;
    --syscalls) sysmode=${2:?}; shift 2 ;;
    --no-strace) sysmode=none; shift ;;
    --perf-record) perf=1; shift ;;
    --out) out_md=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --json) json=${2:?}; shift 2 ;;
    --small-ranks) small_ranks=${2:?}; shift 2 ;;
    --bin) prebuilt=${2:?}; shift 2 ;;
    --copies) copies+=(--copies "${2:?}"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "profile: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in ranks servers particles ops small_ranks; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "profile: --$v must be a positive integer" >&2; exit 2; }
done
[[ $cache_mb =~ ^[0-9]+$ ]] || { echo "profile: --cache-mb must be an integer" >&2; exit 2; }
[[ $durability == memory || $durability == local ]] || { echo "profile: --durability memory|local" >&2; exit 2; }
[[ $sysmode == perf || $sysmode == strace || $sysmode == none ]] || { echo "profile: --syscalls perf|strace|none" >&2; exit 2; }
# The syscalls perf counts by name (tracepoints syscalls:sys_enter_NAME), besides the total.
perf_names="read write pread64 pwrite64 readv writev preadv pwritev preadv2 pwritev2 sendto recvfrom
  sendmsg recvmsg fsync fdatasync sync_file_range futex epoll_wait epoll_pwait poll ppoll sched_yield
  mmap munmap madvise fallocate openat close io_uring_enter nanosleep clock_nanosleep memfd_create
  fcntl setsockopt getsockopt ioctl brk accept4 connect rt_sigprocmask newfstatat statx lseek ftruncate
  rename renameat renameat2 unlink unlinkat fstatfs"
perf_events=raw_syscalls:sys_enter
for n in $perf_names; do
  if [[ -d /sys/kernel/tracing/events/syscalls/sys_enter_$n || -d /sys/kernel/debug/tracing/events/syscalls/sys_enter_$n ]]; then
    perf_events+=,syscalls:sys_enter_$n
  fi
done
export PROFILE_PERF_EVENTS=$perf_events
if [[ $sysmode == perf ]] && ! perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
  echo "profile: perf cannot count syscall tracepoints here: using strace" >&2
  sysmode=strace
fi
if [[ $sysmode == strace ]] && ! command -v strace >/dev/null; then
  echo "profile: strace not found: no syscall counts" >&2
  sysmode=none
fi
if ((perf)) && ! perf stat -e task-clock true >/dev/null 2>&1; then
  echo "profile: perf does not work here: --perf-record ignored" >&2
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
  # How this pass counts syscalls: 0 none, 1 strace, 2 perf.
  local trace=0
  [[ $pass == strace ]] && trace=1
  [[ $pass == clean && $sysmode == perf ]] && trace=2
  log "$pass: $name (-n $n) $kernel $*"
  # The peak resident set is reset, so VmHWM after the phase is this phase's peak.
  for p in "${spids[@]}"; do echo 5 >"/proc/$p/clear_refs" 2>/dev/null || true; done
  snapshot "$d" before
  tracers=()
  if ((trace == 1)); then
    for i in "${!spids[@]}"; do
      strace -f -c -o "$d/strace-server-$i.txt" -p "${spids[$i]}" 2>"$d/strace-server-$i.err" &
      tracers+=($!)
    done
    sleep 1 # attached to every thread before the kernel starts
  elif ((trace == 2)); then
    for i in "${!spids[@]}"; do
      perf stat -x, -o "$d/perf-server-$i.txt" -e "$perf_events" -p "${spids[$i]}" 2>"$d/perf-server-$i.err" &
      tracers+=($!)
    done
    sleep 0.5
  fi
  local perfs=()
  if ((perf)) && [[ $pass == clean ]]; then
    for i in "${!spids[@]}"; do
      perf record -g -o "$d/perf-server-$i.data" -p "${spids[$i]}" 2>"$d/perf-record-$i.err" >/dev/null &
      perfs+=($!)
    done
  fi
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  "${mpi[@]}" -n "$n" bash "$pdir/rank.sh" "$d" "$trace" "$bin/$kernel" "$@" >"$d/kernel.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  for p in "${perfs[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${perfs[@]}"; do wait "$p" || true; done
  # strace and perf stat print their summaries when interrupted.
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
[[ $sysmode == strace ]] && passes+=(strace)
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
  --servers "$servers" --ranks "$ranks" --cache-mb "$cache_mb" --durability "$durability" --syscalls "$sysmode" \
  --load "$load_start; after: $(cut -d' ' -f1-3 /proc/loadavg)" --cmd "$cmdline" --append "$out_md" \
  ${json:+--json "$json"} "${copies[@]}"
log "done; raw data in $work"
