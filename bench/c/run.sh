#!/usr/bin/env bash
# One command for the C benchmark kernels: build, fio reference, every kernel on
# pdcx (PDC C API) and on parallel HDF5 in the same directory, ratio table
# against the fast path's targets. See bench/c/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/c/run.sh [--ranks R] [--servers S] [--nodes K] [--particles N]
                      [--steps S] [--compute SEC] [--objects M] [--cache-mb MB]
                      [--only pdc|hdf5] [--timeout SEC] [--repeat N] [--quick] [--keep]

  --ranks R       MPI ranks of the kernels (default 4; the latency probe uses 1)
  --servers S     pdcx servers (default 2)
  --nodes K       nodes (default 1). K > 1 emulates K nodes with network
                  namespaces (scripts/netns.sh, needs root): one pdcx server
                  per node (--servers is set to K), the kernels as one MPI job
                  over all nodes (ceil(R/K) consecutive ranks per node, MPI
                  over TCP on the bridge), HDF5 kernels the same way
  --particles N   particles per rank for VPIC/BDCATS/HACC (default 1048576:
                  32 MiB per rank per VPIC step, 38 MiB per rank for HACC)
  --steps S       steps of the multi-step VPIC run (default 5)
  --compute SEC   emulated compute between steps (default 1.0)
  --objects M     objects of the metadata probe (default 20000)
  --cache-mb MB   data cache of each pdcx server (default: 0 when the page
                  cache can be dropped, so reads come from storage; else the
                  server default)
  --only B        run only the pdc or the hdf5 kernels
  --timeout SEC   longest run of one kernel (default 3600; 600 with --quick):
                  a kernel still running then is killed and reported as failed
  --repeat N      N rounds, backends interleaved (pdc, hdf5, pdc, hdf5, ...;
                  fresh servers and files each round, fio once); the table shows
                  per figure the median over rounds and the min-max (default 1)
  --quick         small sizes for a smoke run (N=131072, M=2000, 200 ops)
  --keep          keep the data directory

Per round, each backend runs: VPIC 1 step (local durability), [drop page cache]
BDCATS cold, BDCATS warm (again, cache kept), VPIC multi-step, HACC (-D), the
4 KiB probe (write, read; hdf5 also pwrite+fdatasync, the device floor), the
consistency probe, the metadata probe; pdc also VPIC, HACC and the 4 KiB probe at
memory durability (-y memory) and bare PDCobj_create from 1 rank (M/4 objects), single
(-M create) and batched (-M create-many, PDCXobj_create_many); hdf5 also M/4 one-element
H5Dcreate from 1 rank, their baseline.

Environment: PDC_CFLAGS / PDC_LIBS override `pkg-config pdcx` for the PDC
kernels (e.g. a libpdcx built elsewhere); PDCX points to the pdcx binary.
Before/after in one run: BEFORE_PDCX, BEFORE_PDC_CFLAGS, BEFORE_PDC_LIBS name a
second build; every round then also runs the pdc kernels on it (the two builds
in alternating order, then hdf5), and the summary adds the before build's table
and an after/before table, each ratio taken within its round.
The kernels are built in the work dir, so two builds never mix.
Output: bench/out/c-run-<date>-XXXX/{pdc,hdf5}-<round>.log (RESULT lines),
table.md; the table is also appended to bench/out/c-last.md. Exits nonzero if
a built kernel failed or its read-back verification failed.
EOF
}

ranks=4 servers=2 nodes=1 particles=1048576 steps=5 compute=1.0 objects=20000 ops_small=1000
cache_mb="" only="" quick=0 keep=0 kernel_timeout="" repeat=1
cmdline="bench/c/run.sh $*"
while (($#)); do
  case $1 in
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --servers) servers=${2:?--servers needs a value}; shift 2 ;;
    --nodes) nodes=${2:?--nodes needs a value}; shift 2 ;;
    --particles) particles=${2:?--particles needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --compute) compute=${2:?--compute needs a value}; shift 2 ;;
    --objects) objects=${2:?--objects needs a value}; shift 2 ;;
    --cache-mb) cache_mb=${2:?--cache-mb needs a value}; shift 2 ;;
    --only) only=${2:?--only needs pdc or hdf5}; shift 2 ;;
    --timeout) kernel_timeout=${2:?--timeout needs a value}; shift 2 ;;
    --repeat) repeat=${2:?--repeat needs a value}; shift 2 ;;
    --quick) quick=1; shift ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if ((quick)); then
  particles=131072 objects=2000 ops_small=200 compute=0.3
fi
if [[ -z $kernel_timeout ]]; then kernel_timeout=$((quick ? 600 : 3600)); fi
for v in ranks servers nodes particles steps objects kernel_timeout repeat; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --$v must be a positive integer" >&2; exit 2; }
done
[[ $compute =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run.sh: --compute must be a number of seconds" >&2; exit 2; }
[[ -z $cache_mb || $cache_mb =~ ^[0-9]+$ ]] || { echo "run.sh: --cache-mb must be an integer" >&2; exit 2; }
[[ -z $only || $only == pdc || $only == hdf5 ]] || { echo "run.sh: --only must be pdc or hdf5" >&2; exit 2; }
if ((nodes > 1)); then
  ((EUID == 0)) || { echo "run.sh: --nodes $nodes needs root (network namespaces)" >&2; exit 2; }
  if ((servers != nodes)); then
    echo "run.sh: --nodes $nodes: one server per node, so --servers $nodes" >&2
    servers=$nodes
  fi
fi

cdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$cdir/../.." && pwd)
cd "$repo"
log() { printf '\033[1m[bench/c]\033[0m %s\n' "$*"; }

# ---- work dir, cleanup ---------------------------------------------------
mkdir -p "$repo/bench/out"
work=$(mktemp -d "$repo/bench/out/c-run-$(date +%Y%m%d-%H%M%S)-XXXX")
data=$work/data
mkdir -p "$data"

# ---- build ---------------------------------------------------------------
# Into the work dir: a run against another libpdcx (PDC_LIBS) never reuses kernels linked
# against the previous one.
bin=$work/build
log "make hdf5 (into $bin)"
make -s -C "$cdir" BUILD="$bin" hdf5
have_pdc=0 have_before=0
if [[ -n ${BEFORE_PDCX:-} ]]; then
  [[ -x $BEFORE_PDCX && -n ${BEFORE_PDC_LIBS:-} ]] ||
    { echo "run.sh: BEFORE_PDCX needs an executable pdcx and BEFORE_PDC_LIBS (and BEFORE_PDC_CFLAGS)" >&2; exit 2; }
  ((nodes == 1)) || { echo "run.sh: BEFORE_PDCX (before/after) runs on one node only" >&2; exit 2; }
fi
if [[ $only != hdf5 ]]; then
  if [[ -n ${PDC_LIBS:-} ]] || pkg-config --exists pdcx 2>/dev/null; then
    log "make pdc"
    if make -s -C "$cdir" BUILD="$bin" pdc; then have_pdc=1; else echo "run.sh: building the PDC kernels failed" >&2; fi
  else
    echo "run.sh: NOTE: libpdcx not found (pkg-config pdcx; or set PDC_CFLAGS/PDC_LIBS): PDC kernels skipped" >&2
  fi
fi
if ((have_pdc)) && [[ -n ${BEFORE_PDCX:-} ]]; then
  log "make pdc, the before build (into $work/build-before)"
  if make -s -C "$cdir" BUILD="$work/build-before" PDC_CFLAGS="${BEFORE_PDC_CFLAGS:-}" PDC_LIBS="$BEFORE_PDC_LIBS" pdc; then
    have_before=1
  else
    echo "run.sh: building the PDC kernels against the before build failed" >&2
    exit 1
  fi
fi
pdcx_bin=${PDCX:-$(command -v pdcx || true)}
if ((have_pdc)) && [[ -z $pdcx_bin ]]; then
  for c in "$repo/target/release/pdcx"; do
    if [[ -x $c ]]; then pdcx_bin=$c; break; fi
  done
  if [[ -z $pdcx_bin ]]; then
    echo "run.sh: the pdcx command is not installed (bash scripts/setup.sh): PDC kernels skipped" >&2
    have_pdc=0
  fi
fi

log "work dir: $work"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
pdcx_root=$data/pdcx
servers_up=0
failed=()

stop_servers() {
  if ((servers_up)); then
    log "pdcx server stop"
    "$pdcx_bin" server stop --root "$pdcx_root" || echo "run.sh: pdcx server stop failed" >&2
    servers_up=0
    if [[ -d $pdcx_root/logs ]]; then mkdir -p "$work/pdcx-logs" && cp -r "$pdcx_root/logs" "$work/pdcx-logs/$(basename "$pdcx_root")" || true; fi
  fi
}
netns_up=0
cleanup() {
  local rc=$?
  stop_servers
  if ((netns_up)); then bash "$repo/scripts/netns.sh" down || true; fi
  if ((!keep)); then rm -rf "$data"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Drop the page cache (needs root); the kernels' own -D does the same inside HACC.
can_drop=0
if [[ -w /proc/sys/vm/drop_caches ]]; then can_drop=1; fi
drop_caches() {
  sync
  if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    echo "NOTE drop_caches failed: reads may be served by the page cache" | tee -a "$work/notes.txt"
  fi
}
if ((!can_drop)); then
  echo "NOTE /proc/sys/vm/drop_caches is not writable: reads may be served by the page cache" | tee -a "$work/notes.txt"
fi
# pdcx servers keep written data in their own memory unless --cache-mb 0: with the page
# cache dropped, run them without it so pdcx reads come from storage like HDF5's.
if [[ -z $cache_mb ]] && ((can_drop)); then cache_mb=0; fi
server_opts=()
if [[ -n $cache_mb ]]; then server_opts+=(--cache-mb "$cache_mb"); fi

# Launch hooks. --nodes K > 1: K network namespaces (scripts/netns.sh) on a bridge, one
# server per node in its namespace, and every kernel as ONE mpirun over all of them (an rsh
# agent starts Open MPI's daemons inside the namespaces), so barriers and reductions span
# all ranks exactly as on a cluster. Ranks are placed ceil(R/K) per node, in rank order.
netns=(bash "$repo/scripts/netns.sh")
if ((nodes > 1)); then
  export PDCX_NETNS_PREFIX=bc$(($$ % 1000000)) PDCX_BIN=$pdcx_bin
  log "netns: $nodes nodes (prefix $PDCX_NETNS_PREFIX)"
  netns_up=1
  "${netns[@]}" up --nodes "$nodes" --subnet "10.76.$(($$ % 250))"
  echo "NOTE --nodes $nodes: network namespaces on one host (scripts/netns.sh); MPI over TCP, 1 server per node." \
    "The nodes share this host's one device and its cores: the device rows compare their aggregate with that" \
    "one device, and aggregate against nodes x a per-node device needs one host per node." >>"$work/notes.txt"
fi
start_servers() {
  servers_up=1 # set first: a start that fails half way may leave some running
  if ((nodes > 1)); then
    "${netns[@]}" servers "$pdcx_root" ${cache_mb:+--cache-mb "$cache_mb"}
  else
    "$pdcx_bin" server start -n "$servers" --root "$pdcx_root" "${server_opts[@]}"
  fi
}
mpi_cmd=() # set_mpi_cmd NRANKS: the launch command for NRANKS ranks
set_mpi_cmd() {
  if ((nodes > 1)); then
    mpi_cmd=("${netns[@]}" mpirun "$1" --bind-to none --mca mpi_yield_when_idle 1 -x PDCX_ROOT)
  else
    mpi_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
      -x PDCX_ROOT -n "$1")
  fi
}

# run_kernel BACKEND NAME NRANKS args...: output to BACKEND.log; failure recorded. A kernel
# that outlives --timeout is killed (mpirun takes its ranks and daemons down) and reported,
# so one stuck run never stalls the whole benchmark.
# cur_tag / cur_bin: the log name and kernel directory of the build being run (pdc and
# $bin; pdc-before and $work/build-before for the before build of a before/after run).
cur_tag="" cur_bin=""
run_kernel() {
  local be=$1 name=$2 n=$3 rc
  shift 3
  local tag=${cur_tag:-$be} kb=${cur_bin:-$bin}
  log "$tag: $name (-n $n) $*"
  set_mpi_cmd "$n"
  rc=0
  local out=$work/$tag-$round.log
  timeout -k 10 "$kernel_timeout" "${mpi_cmd[@]}" "$kb/${name}_$be" "$@" 2>&1 | tee -a "$out" || rc=${PIPESTATUS[0]}
  if ((rc == 124 || rc == 137)); then
    echo "FAILED kernel=$name backend=$be: still running after --timeout $kernel_timeout s; killed" | tee -a "$out"
    failed+=("$name/$tag(timeout)")
  elif ((rc != 0)); then
    echo "FAILED kernel=$name backend=$be (exit status $rc)" | tee -a "$out"
    failed+=("$name/$tag")
  fi
}

# All kernels of one backend, in one order.
run_backend() {
  local be=$1 d=$2
  local common=(-d "$d" -S "$servers")
  # The write rows start on a quiet device: the dirty pages the previous backend's kernels
  # left (HDF5 closes without fsync) would otherwise be written back during this one's write.
  sync
  run_kernel "$be" vpic "$ranks" "${common[@]}" -n "$particles" -p one
  if ((can_drop)); then drop_caches; fi
  run_kernel "$be" bdcats "$ranks" "${common[@]}" -n "$particles" -p one -L cold
  # The same read again at once: the data is in the page cache now (warm).
  run_kernel "$be" bdcats "$ranks" "${common[@]}" -n "$particles" -p one -L warm
  run_kernel "$be" vpic "$ranks" "${common[@]}" -n "$particles" -p multi -s "$steps" -c "$compute"
  sync
  run_kernel "$be" hacc "$ranks" "${common[@]}" -n "$particles" -p hacc -D
  run_kernel "$be" small 1 "${common[@]}" -p small -k "$ops_small"
  run_kernel "$be" consist "$ranks" "${common[@]}" -p consist
  run_kernel "$be" meta "$ranks" "${common[@]}" -p meta -m "$objects"
  if [[ $be == pdc ]]; then
    # memory durability (HDF5's figure without fsync is its baseline) and one client's
    # bare creates: pdcx-only variants, so no HDF5 counterpart runs.
    run_kernel pdc vpic "$ranks" "${common[@]}" -n "$particles" -p onemem -y memory -L memory
    run_kernel pdc hacc "$ranks" "${common[@]}" -n "$particles" -p haccmem -y memory -L memory
    run_kernel pdc small 1 "${common[@]}" -p smallmem -k "$ops_small" -y memory -L memory
    run_kernel pdc meta 1 "${common[@]}" -p meta1 -m "$((objects / 4 > 0 ? objects / 4 : 1))" -M create -L single
    run_kernel pdc meta 1 "${common[@]}" -p metam -m "$((objects / 4 > 0 ? objects / 4 : 1))" -M create-many -L many
  else
    # The counterpart of the bare creates: one-element dataset creates from 1 rank.
    run_kernel hdf5 meta 1 "${common[@]}" -p meta1 -m "$((objects / 4 > 0 ? objects / 4 : 1))" -M create -L single
  fi
}

# ---- rounds: the device, pdc, hdf5, the device, pdc, hdf5, ... --------------
# Interleaved so that both backends see the same background load over the run; every
# round starts fresh servers on a fresh root and writes fresh files. The device's own
# figures (bench/seqbw.sh: direct I/O, the ceiling, and buffered) are measured in every
# round too: on a virtual disk they vary by tens of percent from one minute to the next.
vol_mib=$((ranks * particles * 38 / 1048576))
seq_mib=$((vol_mib > 512 ? vol_mib : 512))
for ((round = 1; round <= repeat; round++)); do
  ((repeat > 1)) && log "round $round of $repeat"
  log "seqbw.sh ($seq_mib MiB)"
  bash "$repo/bench/seqbw.sh" "$data/seqbw" "$seq_mib" | tee "$work/seqbw-$round.txt"
  if ((have_pdc)) && [[ $only != hdf5 ]]; then
    # A before/after run alternates which build goes first, so drift in the background
    # load does not always favour the same one.
    builds=(after)
    if ((have_before)); then
      if ((round % 2)); then builds=(before after); else builds=(after before); fi
    fi
    for build in "${builds[@]}"; do
      pdcx_root=$data/pdcx-$build-$round
      if [[ $build == before ]]; then
        cur_tag=pdc-before cur_bin=$work/build-before pdcx_bin_saved=$pdcx_bin pdcx_bin=$BEFORE_PDCX
      else
        cur_tag="" cur_bin=""
      fi
      log "pdcx${cur_tag:+ ($cur_tag, $pdcx_bin)}: $servers servers (cache ${cache_mb:-default} MiB), $ranks ranks"
      export PDCX_ROOT=$pdcx_root
      if start_servers; then
        run_backend pdc "$data/pdc-files-$build-$round"
      else
        echo "run.sh: pdcx server start failed ($pdcx_bin)" >&2
        failed+=(servers)
      fi
      stop_servers
      if ((!keep)); then rm -rf "$pdcx_root"; fi
      if [[ $build == before ]]; then pdcx_bin=$pdcx_bin_saved; fi
      cur_tag="" cur_bin=""
    done
  fi
  if [[ $only != pdc ]]; then
    export PDCX_ROOT="" # unused by the HDF5 kernels
    mkdir -p "$data/hdf5-$round"
    log "hdf5: $ranks ranks, $data/hdf5-$round"
    run_backend hdf5 "$data/hdf5-$round"
    if ((!keep)); then rm -rf "$data/hdf5-$round"; fi
  fi
done

# ---- table -------------------------------------------------------------------
log "summary (also appended to bench/out/c-last.md)"
pdc_logs=() hdf5_logs=() seq_logs=() before_args=()
for ((round = 1; round <= repeat; round++)); do
  touch "$work/pdc-$round.log" "$work/hdf5-$round.log" "$work/seqbw-$round.txt"
  pdc_logs+=("$work/pdc-$round.log")
  hdf5_logs+=("$work/hdf5-$round.log")
  seq_logs+=("$work/seqbw-$round.txt")
  if ((have_before)); then
    touch "$work/pdc-before-$round.log"
    before_args+=("$work/pdc-before-$round.log")
  fi
done
if ((have_before)); then
  before_args=(--pdc-before "${before_args[@]}" --before-pdcx-bin "$BEFORE_PDCX"
    --before-pdc-lib "$(ldd "$work/build-before/vpic_pdc" | awk '/libpdcx/ {print $3}')")
fi
pdc_lib=""
if ((have_pdc)); then pdc_lib=$(ldd "$bin/vpic_pdc" | awk '/libpdcx/ {print $3}'); fi
python3 "$cdir/summarize.py" --pdc "${pdc_logs[@]}" --hdf5 "${hdf5_logs[@]}" --seqbw "${seq_logs[@]}" \
  --ranks "$ranks" --servers "$servers" --particles "$particles" --cache-mb "${cache_mb:-default}" \
  --load-start "$load_start" --load-end "$(cut -d' ' -f1-3 /proc/loadavg)" --cmd "$cmdline" \
  --notes "$work/notes.txt" --pdc-built "$have_pdc" --pdcx-bin "$pdcx_bin" --pdc-lib "$pdc_lib" "${before_args[@]}" \
  --append "$repo/bench/out/c-last.md" | tee "$work/table.md"

if ((${#failed[@]})); then
  echo "run.sh: FAILED: ${failed[*]} (logs in $work)" >&2
  exit 1
fi
log "done; logs in $work"
