#!/usr/bin/env bash
# Unmodified MPI-IO programs written directly vs through `pdcx run` (issue 11): build, run
# both in the same run (interleaved, fresh files and servers each time), ratio tables against
# the issue's targets. See bench/mpiio/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/mpiio/run.sh [--only LIST] [--repeat N] [--ranks R] [--micro-ranks R]
                          [--servers S] [--home DIR] [--home-mbps MB] [--every "K ..."]
                          [--steps S] [--mib M] [--compute SEC] [--micro-home DIR]
                          [--quick] [--keep]

  --only LIST     comma-separated subset of seg,append,e2e (default: all three)
  --repeat N      rounds; within a round every figure is measured directly and through
                  pdcx, in alternating order; tables show median (min-max) (default 3)
  --ranks R       ranks of the end-to-end program (default 2: the machine has 2 cores and
                  its compute phase is a busy loop)
  --micro-ranks R ranks of seg_create / append_seek (default 1, as paper 002 §8.7)
  --servers S     pdcx servers (default 1: one node)
  --home DIR      the end-to-end home (shared directory): use DIR as it is (not throttled
                  by this script). Default: a fresh ext4 file system on a loop device,
                  write bandwidth limited to --home-mbps (needs root; see README.md)
  --home-mbps MB  the limit of that home, in MB/s (10^6 B) (default 100)
  --every "K ..." output every K steps, one end-to-end run per K (default "1 4 20")
  --steps S       steps of the end-to-end program (default 20)
  --mib M         MiB written per rank per output (default 32)
  --compute SEC   compute phase per step (default 0.5)
  --micro-home DIR  home of the pdcx microbenchmark runs (default: a directory in
                  /dev/shm when it exists, else on the local disk). On another device than
                  the log, the background home copy does not compete with the log writes
                  being measured (paper §8.7 measures the logging path; the copy's cost is
                  what the end-to-end runs show)
  --quick         smoke run: 1 round, fewer sizes, --steps 8 --mib 8 --compute 0.2 --every "1 4"
  --keep          keep the data directory

seg_create and append_seek write to a local directory (bench/out/..., the repository's
disk): directly, and through `pdcx run --prefix LOCAL --home LOCALHOME` (paper §8.7: the
log vs direct local writes); each in two variants, with MPI_File_sync before close (sync=1,
the same durability as a pdcx consistency point) and without (sync=0). e2e writes its
checkpoints directly to the home, and through `pdcx run --prefix LOCAL --home HOME`; the pdcx
runs are followed by a timed `pdcx flush` (the home copy complete).

The pdcx runs need `pdcx run` ($PDCX_BIN, else pdcx on PATH): without it only the direct
figures are measured (the tables say so). Output: bench/out/mpiio-run-<date>-XXXX/
{micro,e2e}.log (RESULT lines), table.md; the table is also appended to
bench/out/mpiio-last.md.
EOF
}

only="seg,append,e2e" repeat=3 ranks=2 micro_ranks=1 servers=1 home="" home_mbps=100
every="1 4 20" steps=20 mib=32 compute=0.5 quick=0 keep=0 micro_home=""
cmdline="bench/mpiio/run.sh $*"
while (($#)); do
  case $1 in
    --only) only=${2:?}; shift 2 ;;
    --repeat) repeat=${2:?}; shift 2 ;;
    --ranks) ranks=${2:?}; shift 2 ;;
    --micro-ranks) micro_ranks=${2:?}; shift 2 ;;
    --servers) servers=${2:?}; shift 2 ;;
    --home) home=${2:?}; shift 2 ;;
    --home-mbps) home_mbps=${2:?}; shift 2 ;;
    --every) every=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    --mib) mib=${2:?}; shift 2 ;;
    --compute) compute=${2:?}; shift 2 ;;
    --micro-home) micro_home=${2:?}; shift 2 ;;
    --quick) quick=1; shift ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
seg_sizes=(1K 4K 16K 64K 256K 1M 4M 16M)
app_sizes=(4K 64K 1M 4M)
if ((quick)); then
  repeat=1 steps=8 mib=8 compute=0.2 every="1 4"
  seg_sizes=(4K 256K 4M) app_sizes=(64K 1M)
fi
for v in repeat ranks micro_ranks servers home_mbps steps mib; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --${v//_/-} must be a positive integer" >&2; exit 2; }
done
for k in $every; do [[ $k =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --every takes positive integers" >&2; exit 2; }; done
[[ $compute =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run.sh: --compute must be a number of seconds" >&2; exit 2; }
want() { [[ ,$only, == *,$1,* ]]; }

mdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$mdir/../.." && pwd)
cd "$repo"
log() { printf '\033[1m[bench/mpiio]\033[0m %s\n' "$*"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mkdir -p "$repo/bench/out"
work=$(mktemp -d "$repo/bench/out/mpiio-run-$(date +%Y%m%d-%H%M%S)-XXXX")
data=$work/data
bin=$work/build
mkdir -p "$data" "$bin"
notes=$work/notes.txt
touch "$notes" "$work/micro.log" "$work/e2e.log"
note() { echo "NOTE $*" | tee -a "$notes"; }

# ---- build -------------------------------------------------------------------------------
log "mpicc (into $bin)"
for p in seg_create append_seek e2e; do
  mpicc -O2 -Wall -Wextra -o "$bin/$p" "$mdir/$p.c"
done

# ---- pdcx --------------------------------------------------------------------------------
pdcx_bin=${PDCX_BIN:-$(command -v pdcx || true)}
have_pdcx=0
if [[ -n $pdcx_bin ]] && "$pdcx_bin" run --help >/dev/null 2>&1; then
  have_pdcx=1
else
  note "\`${pdcx_bin:-pdcx} run\` is not available: only the direct figures are measured"
fi
root="" servers_up=0
start_servers() { # start_servers NAME: fresh deployment root
  root=$data/root-$1
  servers_up=1
  "$pdcx_bin" server start -n "$servers" --root "$root" >/dev/null
}
stop_servers() {
  if ((servers_up)); then
    "$pdcx_bin" server stop --root "$root" >/dev/null || echo "run.sh: pdcx server stop failed" >&2
    servers_up=0
    if [[ -d $root/logs ]]; then mkdir -p "$work/pdcx-logs" && cp -r "$root/logs" "$work/pdcx-logs/$(basename "$root")" || true; fi
    rm -rf "$root"
  fi
}

# ---- the throttled home ------------------------------------------------------------------
loopdev="" mnt="" throttle_file="" majmin="" cgv2=""
cleanup() {
  local rc=$?
  stop_servers
  if [[ -n $cgv2 ]]; then
    echo $$ >/sys/fs/cgroup/cgroup.procs 2>/dev/null || true
    rmdir "$cgv2" 2>/dev/null || true
  fi
  if [[ -n $throttle_file ]]; then echo "$majmin 0" >"$throttle_file" 2>/dev/null || true; fi
  if [[ -n $mnt ]]; then umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; fi
  if [[ -n $loopdev ]]; then losetup -d "$loopdev" 2>/dev/null || true; fi
  if ((!keep)); then rm -rf "$data"; fi
  if [[ -n $micro_home && $micro_home == /dev/shm/pdcx-bench-mpiio-* ]]; then rm -rf "$micro_home"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A loop-device ext4 whose writes are limited to --home-mbps. cgroup v2 io.max first (it
# limits the processes inside the group: this script moves itself there, so mpirun, the
# ranks and the pdcx servers it starts are all inside); else cgroup v1 blkio on the ROOT
# group, which limits every bio on the device whoever issues it (the ranks' fsync and the
# kernel's background writeback alike). Both the direct runs and the pdcx servers write it.
setup_home() {
  if [[ -n $home ]]; then
    mkdir -p "$home"
    note "home: $home as given (run.sh did not limit its bandwidth)"
    return
  fi
  if ((EUID != 0)); then
    home=$data/home
    mkdir -p "$home"
    note "home: $home, NOT bandwidth-limited (a limited home needs root)"
    return
  fi
  local gib=$(((steps * ranks * mib * 2 + 1024) / 1024 + 1))
  truncate -s "${gib}G" "$data/home.img"
  loopdev=$(losetup -f --show "$data/home.img")
  mkfs.ext4 -q -F "$loopdev"
  mnt=$data/home-mnt
  mkdir -p "$mnt"
  mount "$loopdev" "$mnt"
  home=$mnt
  majmin=$(cat "/sys/block/$(basename "$loopdev")/dev")
  local bps=$((home_mbps * 1000000))
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw io /sys/fs/cgroup/cgroup.controllers; then
    cgv2=/sys/fs/cgroup/pdcx-bench-mpiio-$$
    echo +io >/sys/fs/cgroup/cgroup.subtree_control
    mkdir "$cgv2"
    echo "$majmin wbps=$bps" >"$cgv2/io.max"
    echo $$ >"$cgv2/cgroup.procs"
    note "home: ext4 on $loopdev ($majmin), cgroup v2 io.max wbps=$bps on $cgv2"
  elif [[ -w /sys/fs/cgroup/blkio/blkio.throttle.write_bps_device ]]; then
    throttle_file=/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device
    echo "$majmin $bps" >"$throttle_file"
    note "home: ext4 on $loopdev ($majmin), cgroup v1 blkio.throttle.write_bps_device $bps (root group: every writer)"
  else
    note "home: ext4 on $loopdev, NOT bandwidth-limited (no cgroup io controller found)"
  fi
  # What the limit gives: 256 MiB written and fsynced.
  local t0 t1
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$home/.probe" bs=1M count=256 conv=fsync status=none
  t1=$(date +%s.%N)
  rm -f "$home/.probe"
  note "home: dd 256 MiB + fsync: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f MB/s", 268435456/(b-a)/1e6}')"
}

mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
failed=()
# run LOG LABEL NRANKS DIR PROGRAM ARGS...: DIR is where the program writes; label pdcx runs
# it under `pdcx run --prefix DIR --home $phome` on the current deployment.
phome=""
run() {
  local logf=$1 label=$2 n=$3 dir=$4 prog=$5 rc=0
  shift 5
  local cmd=("${mpi[@]}" -n "$n")
  if [[ $label == pdcx ]]; then
    cmd+=("$pdcx_bin" run --prefix "$dir" --home "$phome" --root "$root" --)
  fi
  log "$label: $(basename "$prog") $*"
  # Each RESULT line gets its round, so summarize.py pairs a figure with the baseline
  # measured next to it.
  timeout -k 10 1800 "${cmd[@]}" "$bin/$prog" -b "$label" "$@" 2>&1 |
    sed -u "s/^RESULT /RESULT round=$round /" | tee -a "$work/$logf" || rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    echo "FAILED bench=$prog label=$label exit=$rc args=$*" | tee -a "$work/$logf"
    failed+=("$prog/$label")
  fi
}
# timed_flush LOG KEY=VALUE...: `pdcx flush` until every home copy is complete, timed.
timed_flush() {
  local logf=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  if "$pdcx_bin" flush -q --root "$root" >>"$work/flush.out" 2>&1; then
    t1=$(date +%s.%N)
    echo "RESULT round=$round bench=flush label=pdcx $* seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" | tee -a "$work/$logf"
  else
    echo "FAILED bench=flush label=pdcx $* ($(tail -n 1 "$work/flush.out"))" | tee -a "$work/$logf"
    failed+=("flush")
  fi
}
# settle LOG KEY=VALUE...: after a pdcx run, the timed `pdcx flush`; after either, `sync`.
settle() {
  if [[ $label == pdcx ]]; then timed_flush "$@"; fi
  sync
}
labels_for_round() { # alternating order, so drift in the background load favours neither
  if ((!have_pdcx)); then echo direct; elif (($1 % 2)); then echo direct pdcx; else echo pdcx direct; fi
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
# The compute loop's speed, measured once: every e2e run then does the same work, so a
# direct and a pdcx run differ only in their I/O (and in what it costs the compute).
rate=""
if want e2e; then
  rate=$("${mpi[@]}" -n "$ranks" "$bin/e2e" -P | sed -n 's/^CALIBRATE rate=//p')
  [[ $rate =~ ^[0-9]+$ ]] || { echo "run.sh: calibrating e2e failed" >&2; exit 1; }
  note "e2e compute loop: $rate iterations/s per rank (calibrated once, $ranks ranks at once)"
fi
local_dir=$data/local # the repository's disk
if [[ -z $micro_home ]]; then
  if [[ -d /dev/shm && -w /dev/shm ]]; then micro_home=/dev/shm/pdcx-bench-mpiio-$$; else micro_home=$local_dir/home; fi
fi
if (want seg || want append) && ((have_pdcx)); then note "microbenchmarks: pdcx home $micro_home, log and direct files on the local disk"; fi
for ((round = 1; round <= repeat; round++)); do
  log "round $round of $repeat"
  # ---- §8.7 microbenchmarks ------------------------------------------------------------
  for label in $(labels_for_round "$round"); do
    if ! want seg && ! want append; then break; fi
    if [[ $label == pdcx ]]; then
      start_servers "micro-$round"
      phome=$micro_home
    fi
    for sync in 1 0; do
      sflag=()
      if ((sync)); then sflag=(-S); fi
      d=$local_dir/$label
      # One size per program run, and between runs the previous size's data settled (the
      # direct run's dirty pages written back, the pdcx run's home copies done): otherwise
      # one size's background writes would land in the next size's figure.
      # Each run writes into a new subdirectory: new files (for pdcx, new streams
      # mpiio/SUB/NAME), never a rewrite of the previous run's names.
      for size in "${seg_sizes[@]}"; do
        if ! want seg; then break; fi
        rm -rf "$d" "$micro_home" && mkdir -p "$d/s$sync-$size" "$micro_home"
        run micro.log "$label" "$micro_ranks" "$d" seg_create "${sflag[@]}" "$d/s$sync-$size" "$size"
        settle micro.log of=seg_create sync=$sync size="$size"
      done
      for size in "${app_sizes[@]}"; do
        if ! want append; then break; fi
        rm -rf "$d" "$micro_home" && mkdir -p "$d/a$sync-$size" "$micro_home"
        run micro.log "$label" "$micro_ranks" "$d" append_seek "${sflag[@]}" "$d/a$sync-$size" "$size"
        settle micro.log of=append_seek sync=$sync size="$size"
      done
      rm -rf "$d" "$micro_home"
    done
    if [[ $label == pdcx ]]; then stop_servers; fi
  done
  # ---- §8.1-8.4 end to end ---------------------------------------------------------------
  if want e2e; then
    if ((round == 1)); then setup_home; fi
    for k in $every; do
      for label in $(labels_for_round "$round"); do
        if [[ $label == pdcx ]]; then
          start_servers "e2e-$round-$k"
          phome=$home/pdcx
          d=$local_dir/e2e
        else
          d=$home/direct
        fi
        rm -rf "$home/pdcx" "$home/direct" "$local_dir/e2e"
        mkdir -p "$d" "$home/pdcx"
        sync
        run e2e.log "$label" "$ranks" "$d" e2e -s "$steps" -k "$k" -m "$mib" -c "$compute" -r "$rate" "$d"
        if [[ $label == pdcx ]]; then
          timed_flush e2e.log of=e2e every="$k"
          stop_servers
        fi
        rm -rf "$home/pdcx" "$home/direct" "$local_dir/e2e"
        sync
      done
    done
  fi
done

log "summary (also appended to bench/out/mpiio-last.md)"
python3 "$mdir/summarize.py" --micro "$work/micro.log" --e2e "$work/e2e.log" --notes "$notes" \
  --cmd "$cmdline" --load-start "$load_start" --load-end "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --have-pdcx "$have_pdcx" --pdcx-bin "${pdcx_bin:-none}" --home-mbps "$home_mbps" \
  --append "$repo/bench/out/mpiio-last.md" | tee "$work/table.md"

if ((${#failed[@]})); then
  echo "run.sh: FAILED: ${failed[*]} (logs in $work)" >&2
  exit 1
fi
log "done; logs in $work"
