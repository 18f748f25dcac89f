#!/usr/bin/env bash
# Unmodified MPI-IO programs written directly vs through `pdcx run`: build, run
# both in the same run (interleaved, fresh files and servers each time), ratio tables against
# the targets set for them. See bench/mpiio/README.md.
# The whole script is one brace group, read before any of it runs: editing run.sh while
# it runs (a long benchmark) cannot change what the running copy does next.
{
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/mpiio/run.sh [--only LIST] [--repeat N] [--ranks R] [--micro-ranks R]
                          [--servers S] [--home DIR] [--home-mbps MB] [--home-kind KIND]
                          [--every "K ..."] [--steps S] [--mib M] [--compute SEC]
                          [--recovery-outputs N] [--rate N] [--quiet-wait SEC]
                          [--micro-home DIR] [--micro-mib M] [--micro-dir DIR]
                          [--seqbw-mib M] [--quick] [--keep]

  --only LIST     comma-separated subset of seg,append,e2e,recovery (default: all four)
  --repeat N      rounds; within a round every figure is measured directly and through
                  pdcx, in alternating order; tables show median (min-max) (default 3)
  --ranks R       ranks of the end-to-end program (default 2: the machine has 2 cores and
                  its compute phase is a busy loop)
  --micro-ranks R ranks of seg_create / append_seek (default 1, as ParaLog §8.7)
  --servers S     pdcx servers (default 1: one node)
  --home DIR      the end-to-end home (shared directory): use DIR as it is (not throttled
                  by this script). Default: a fresh ext4 file system on a loop device,
                  write bandwidth limited to --home-mbps (needs root; see README.md)
  --home-mbps MB  the limit of that home, in MB/s (10^6 B) (default 100); also the S3
                  home's link: tc tbf at 8*MB mbit on both ends of its veth pair
  --home-kind K   file, s3 or both: the homes of e2e and recovery (default both when
                  /usr/local/bin/versitygw (or $VERSITYGW), root and `ip netns` are there,
                  else file). s3: versitygw in its own network namespace behind that link;
                  the direct baseline writes each checkpoint to a local directory with
                  MPI-IO, then uploads it (s3tool.py serve: boto3 multipart, 8 MiB parts,
                  8 at once) before the next compute phase
  --rate N        iterations/s of e2e's compute loop instead of calibrating it (once, at
                  start): on a loaded machine the calibration is low and every compute
                  phase short; pass the figure of a quiet moment (e2e -P) to keep the
                  compute work fixed across runs
  --quiet-wait SEC  before each end-to-end pair and recovery run, wait up to SEC seconds
                  until the CPU is >= 80 % idle over 2 s (other users' compiles done; the
                  machine has 2 cores). The idle figure at each start is recorded either
                  way (idle=N on the RESULT lines, summarised in the table) (default 0)
  --recovery-outputs N  checkpoints the recovery writer logs before every server is
                  killed (-9) (default 16; x ranks x --mib MiB each)
  --every "K ..." output every K steps, one end-to-end run per K (default "1 4 20")
  --steps S       steps of the end-to-end program (default 20)
  --mib M         MiB written per rank per output (default 32)
  --compute SEC   compute phase per step (default 0.5)
  --micro-home DIR  home of the pdcx microbenchmark runs (default: a directory in
                  /dev/shm when it exists, else on the local disk). On another device than
                  the log, the background home copy does not compete with the log writes
                  being measured (paper §8.7 measures the logging path; the copy's cost is
                  what the end-to-end runs show)
  --micro-mib M   MiB each seg_create / append_seek run writes per size (files of SIZE,
                  at least 16 and at most 200 of them) (default 256: a run of large files
                  then lasts ~0.2-1 s, long enough that one slow fsync or page fault does
                  not decide the figure)
  --micro-dir DIR where seg_create / append_seek write, directly and through pdcx (the
                  pdcx deployment of those runs, its log included, lives there too)
                  (default: under bench/out, the repository's disk). ParaLog §8.7 also
                  measures a RAM disk: e.g. an ext4 on a loop device over a file in /dev/shm
                  (README.md shows how), where the device costs little and the software shows
  --seqbw-mib M   the device's own figures: bench/seqbw.sh (fio; direct I/O, the ceiling,
                  and buffered) with M MiB at the start of every round, on the directory of
                  the pdcx log (--micro-dir's, else the repository's disk); the tables give
                  each pdcx MB/s row as a % of that round's direct-I/O figure (default 512;
                  0: not measured, the tables say so)
  --quick         smoke run: 1 round, fewer sizes, --steps 8 --mib 8 --compute 0.2 --every "1 4"
  --keep          keep the data directory

seg_create and append_seek write to a local directory (bench/out/..., the repository's
disk): directly, and through `pdcx run --prefix LOCAL --home LOCALHOME` (paper §8.7: the
log vs direct local writes); each in two variants, with MPI_File_sync before close (sync=1,
the same durability as a pdcx consistency point) and without (sync=0). e2e writes its
checkpoints directly to the home, and through `pdcx run --prefix LOCAL --home HOME`; the pdcx
runs are followed by a timed `pdcx flush` (the home copy complete).

recovery (paper §8.6): per round and home kind, e2e without compute phases under `pdcx run`
writes --recovery-outputs checkpoints; right after it exits (its last consistency point) every
server is killed -9 by PID while home copies are pending; then `pdcx recover` is timed until
the home holds every version, and the home copies are compared with a direct run (sha256).

The pdcx runs need `pdcx run` ($PDCX_BIN, else pdcx on PATH): without it only the direct
figures are measured (the tables say so). Output: bench/out/mpiio-run-<date>-XXXX/
{micro,e2e}.log (RESULT lines), seqbw-ROUND.txt (the device), table.md; the table is also appended to
bench/out/mpiio-last.md.
EOF
}

only="seg,append,e2e,recovery" repeat=3 ranks=2 micro_ranks=1 servers=1 home="" home_mbps=100
every="1 4 20" steps=20 mib=32 compute=0.5 quick=0 keep=0 micro_home="" home_kind=""
rec_outputs=16 rate="" quiet_wait=0 micro_mib=256 micro_dir="" seqbw_mib=512
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
    --home-kind) home_kind=${2:?}; shift 2 ;;
    --recovery-outputs) rec_outputs=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --quiet-wait) quiet_wait=${2:?}; shift 2 ;;
    --every) every=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    --mib) mib=${2:?}; shift 2 ;;
    --compute) compute=${2:?}; shift 2 ;;
    --micro-home) micro_home=${2:?}; shift 2 ;;
    --micro-mib) micro_mib=${2:?}; shift 2 ;;
    --micro-dir) micro_dir=${2:?}; shift 2 ;;
    --seqbw-mib) seqbw_mib=${2:?}; shift 2 ;;
    --quick) quick=1; shift ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
seg_sizes=(1K 4K 16K 64K 256K 1M 4M 16M)
app_sizes=(4K 64K 1M 4M)
if ((quick)); then
  repeat=1 steps=8 mib=8 compute=0.2 every="1 4" rec_outputs=6
  seg_sizes=(4K 256K 4M) app_sizes=(64K 1M)
fi
for v in repeat ranks micro_ranks servers home_mbps steps mib rec_outputs micro_mib; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --${v//_/-} must be a positive integer" >&2; exit 2; }
done
[[ $seqbw_mib =~ ^[0-9]+$ ]] && ((seqbw_mib == 0 || seqbw_mib >= 2)) ||
  { echo "run.sh: --seqbw-mib takes MiB (0, or at least 2)" >&2; exit 2; }
[[ $quiet_wait =~ ^[0-9]+$ ]] || { echo "run.sh: --quiet-wait takes seconds" >&2; exit 2; }
[[ -z $rate || $rate =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --rate must be a positive integer" >&2; exit 2; }
for k in $every; do [[ $k =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --every takes positive integers" >&2; exit 2; }; done
[[ $compute =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run.sh: --compute must be a number of seconds" >&2; exit 2; }
want() { [[ ,$only, == *,$1,* ]]; }
versitygw=${VERSITYGW:-/usr/local/bin/versitygw}
if [[ -z $home_kind ]]; then
  home_kind="file"
  if [[ -x $versitygw ]] && ((EUID == 0)) && ip netns list >/dev/null 2>&1; then home_kind=both; fi
fi
case $home_kind in
  file) kinds=(file) ;;
  s3) kinds=(s3) ;;
  both) kinds=(file s3) ;;
  *) echo "run.sh: --home-kind must be file, s3 or both" >&2; exit 2 ;;
esac
has_kind() { [[ " ${kinds[*]} " == *" $1 "* ]]; }

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
touch "$notes" "$work/micro.log" "$work/e2e.log" "$work/recovery.log"
mkdir -p "$work/sums"
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
start_servers() { # start_servers NAME [DIR]: fresh deployment root (in DIR, default $data)
  root=${2:-$data}/root-$1
  servers_up=1
  "$pdcx_bin" server start -n "$servers" --root "$root" >/dev/null
}
stop_servers() {
  if ((servers_up)); then
    "$pdcx_bin" server stop --root "$root" >/dev/null || echo "run.sh: pdcx server stop failed" >&2
    servers_up=0
    if [[ -d $root/logs ]]; then { mkdir -p "$work/pdcx-logs" && cp -r "$root/logs" "$work/pdcx-logs/$(basename "$root")"; } || true; fi
    rm -rf "$root"
  fi
}

# ---- the throttled home ------------------------------------------------------------------
loopdev="" mnt="" throttle_file="" majmin="" cgv2=""
netns="" veth_host="" s3pid="" uppid="" home_probe="" s3_put_probe=""
# shellcheck disable=SC2317 # called by the EXIT trap (shellcheck misreads the brace group)
cleanup() {
  local rc=$?
  stop_servers
  stop_pid "$uppid" python3
  stop_pid "$s3pid" versitygw
  if [[ -n $veth_host ]]; then ip link del "$veth_host" 2>/dev/null || true; fi
  if [[ -n $netns ]]; then ip netns del "$netns" 2>/dev/null || true; fi
  if [[ -n $cgv2 ]]; then
    echo $$ >/sys/fs/cgroup/cgroup.procs 2>/dev/null || true
    rmdir "$cgv2" 2>/dev/null || true
  fi
  if [[ -n $throttle_file ]]; then echo "$majmin 0" >"$throttle_file" 2>/dev/null || true; fi
  if [[ -n $mnt ]]; then umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; fi
  if [[ -n $loopdev ]]; then losetup -d "$loopdev" 2>/dev/null || true; fi
  if ((!keep)); then rm -rf "$data"; fi
  if [[ -n $micro_home && $micro_home == /dev/shm/pdcx-bench-mpiio-* ]]; then rm -rf "$micro_home"; fi
  if [[ $micro_dir == */pdcx-bench-mpiio-* ]]; then rm -rf "$micro_dir"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# stop_pid PID NAME: SIGTERM, then SIGKILL after 5 s, only if PID still runs NAME (PIDs are
# reused).
stop_pid() {
  local pid=$1 name=$2
  [[ -n $pid && -r /proc/$pid/cmdline ]] || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$name" || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

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
  # Both e2e runs' checkpoints at once at most (each run's are deleted after it), or one
  # recovery run's, plus room for ext4.
  local mibs=$((steps * ranks * mib * 2)) rec=$((rec_outputs * ranks * mib))
  if ((rec > mibs)); then mibs=$rec; fi
  local gib=$(((mibs + 1024) / 1024 + 1))
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
  home_probe=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", 268435456/(b-a)/1e6}')
  note "home: dd 256 MiB + fsync: $home_probe MB/s"
}

# ---- the S3 home behind a 100 MB/s link ---------------------------------------------------
# versitygw in its own network namespace, reached over a veth pair whose two ends each
# shape their egress with tc tbf at --home-mbps: uploads (host -> namespace) and downloads
# alike. The pdcx servers, the baseline's uploader and the checks all go through that link.
s3_net=10.87.0 # not scripts/netns.sh's default 10.77.0, so the tests' namespaces can coexist
s3_bucket=pdcx-bench s3data=""
s3tool() { python3 "$mdir/s3tool.py" "$@"; }
setup_s3() {
  ((EUID == 0)) || { echo "run.sh: the S3 home needs root (network namespace, tc)" >&2; exit 1; }
  [[ -x $versitygw ]] || { echo "run.sh: $versitygw is missing (scripts/s3server.sh install)" >&2; exit 1; }
  python3 -c 'import boto3' 2>/dev/null || { echo "run.sh: the S3 home needs python3 boto3" >&2; exit 1; }
  netns=pdcxb-$$
  veth_host=pbh$$
  local veth_ns=pbn$$ mbit=$((home_mbps * 8)) port=7070
  ip netns add "$netns"
  ip link add "$veth_host" type veth peer name "$veth_ns" netns "$netns"
  ip addr add "$s3_net.1/24" dev "$veth_host"
  ip link set "$veth_host" up
  ip -n "$netns" addr add "$s3_net.2/24" dev "$veth_ns"
  ip -n "$netns" link set "$veth_ns" up
  ip -n "$netns" link set lo up
  # burst 256 kB: a few 64 kB GSO packets (tbf splits larger ones); latency bounds the queue.
  tc qdisc add dev "$veth_host" root tbf rate "${mbit}mbit" burst 256kb latency 100ms
  ip netns exec "$netns" tc qdisc add dev "$veth_ns" root tbf rate "${mbit}mbit" burst 256kb latency 100ms
  s3data=$data/s3
  mkdir -p "$s3data"
  local access secret
  access=bench$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
  secret=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
  # Credentials through the environment, not argv (ps shows argv). setsid: a Ctrl-C in the
  # terminal does not reach it; cleanup stops it by PID. `ip netns exec` and setsid each
  # exec the next, so $! is versitygw's PID.
  ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret ip netns exec "$netns" \
    setsid "$versitygw" --port "$s3_net.2:$port" --keep-alive --quiet posix "$s3data" \
    >"$work/versitygw.log" 2>&1 </dev/null &
  s3pid=$!
  # What the pdcx servers (started below, inheriting this environment), the uploader and
  # s3tool.py use.
  export AWS_ENDPOINT_URL=http://$s3_net.2:$port AWS_ACCESS_KEY_ID=$access \
    AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=us-east-1
  s3tool ready "$s3_bucket" || { echo "run.sh: versitygw did not start: $(tail -3 "$work/versitygw.log")" >&2; exit 1; }
  note "S3 home: versitygw (pid $s3pid) at $AWS_ENDPOINT_URL in netns $netns, bucket $s3_bucket, data on the local disk; link: tc tbf ${mbit}mbit (burst 256kb, latency 100ms) on both veth ends"
  # What the link gives: 256 MiB PUT and GET with curl (one stream; SigV4 with an unsigned
  # payload, so no client-side hashing is timed), checked by size.
  head -c 268435456 /dev/urandom >"$data/probe.bin"
  local up down
  up=$(curl -s -f -o /dev/null -w '%{speed_upload}' -X PUT -T "$data/probe.bin" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$access:$secret" "$AWS_ENDPOINT_URL/$s3_bucket/.probe") || { echo "run.sh: S3 probe PUT failed" >&2; exit 1; }
  down=$(curl -s -f -o "$data/probe.back" -w '%{speed_download}' \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$access:$secret" "$AWS_ENDPOINT_URL/$s3_bucket/.probe") || { echo "run.sh: S3 probe GET failed" >&2; exit 1; }
  cmp -s "$data/probe.bin" "$data/probe.back" || { echo "run.sh: S3 probe read back differs" >&2; exit 1; }
  rm -f "$data/probe.bin" "$data/probe.back" "$s3data/$s3_bucket/.probe"
  s3_put_probe=$(awk -v v="$up" 'BEGIN{printf "%.1f", v/1e6}')
  note "S3 home: curl 256 MiB PUT $s3_put_probe MB/s, GET $(awk -v v="$down" 'BEGIN{printf "%.1f", v/1e6}') MB/s (limit $home_mbps MB/s on the wire)"
}
# S3 prefixes are cleared through versitygw's posix back end (one directory per prefix):
# instant, and not through the link being measured.
s3_clear() { rm -rf "${s3data:?}/$s3_bucket/$1"; }

mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
failed=()
# run LOG LABEL NRANKS DIR PROGRAM ARGS...: DIR is where the program writes; label pdcx runs
# it under `pdcx run --prefix DIR --home $phome` on the current deployment.
phome="" tags=""
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
    sed -u "s/^RESULT /RESULT round=$round $tags/" | tee -a "$work/$logf" || rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    echo "FAILED bench=$prog label=$label exit=$rc args=$*" | tee -a "$work/$logf"
    failed+=("$prog/$label")
  fi
}
# timed_flush LOG KEY=VALUE...: `pdcx flush` until every home copy is complete, timed.
# ($tags, e.g. home=s3, is added to the line as run() adds it to the program's.)
timed_flush() {
  local logf=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  if "$pdcx_bin" flush -q --root "$root" >>"$work/flush.out" 2>&1; then
    t1=$(date +%s.%N)
    echo "RESULT round=$round ${tags}bench=flush label=pdcx $* seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" | tee -a "$work/$logf"
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

# ---- end to end and recovery ----------------------------------------------------------
# cpu_idle: % of CPU time idle over the next 2 s (all cores; nothing of ours runs then).
cpu_ticks() { awk '/^cpu /{t=0; for (j = 2; j <= NF; j++) t += $j; print t, $5 + $6}' /proc/stat; }
cpu_idle() {
  local t1 i1 t2 i2
  read -r t1 i1 < <(cpu_ticks)
  sleep 2
  read -r t2 i2 < <(cpu_ticks)
  echo $(((i2 - i1) * 100 / (t2 - t1 > 0 ? t2 - t1 : 1)))
}
# proc_cpu PID...: CPU seconds (user + system) these processes have used so far.
clk_tck=$(getconf CLK_TCK)
proc_cpu() {
  local pid
  for pid; do awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0; done |
    awk -v t="$clk_tck" '{s += $1} END {printf "%.2f", s / t}'
}
server_pids() {
  python3 -c 'import json,sys; print(" ".join(str(s["pid"]) for s in json.load(open(sys.argv[1]))["servers"]))' "$root/cluster.json"
}
# wait_quiet: sets $idle to the CPU idle % once >= 80 or after --quiet-wait seconds.
idle=""
wait_quiet() {
  local deadline=$((SECONDS + quiet_wait))
  idle=$(cpu_idle)
  while ((idle < 80 && SECONDS < deadline)); do idle=$(cpu_idle); done
  log "CPU idle ${idle}% (load average $(cut -d' ' -f1 /proc/loadavg))"
}
# sums_dir DIR OUT / sums_s3 PREFIX OUT: "SHA256  NAME" per checkpoint file, sorted.
sums_dir() { (cd "$1" && sha256sum -- ckpt.* | sort -k2) >"$2"; }
sums_s3() { s3tool sums "$s3_bucket" "$1" | awk '{print $1 "  " $2}' >"$2"; }
# verify_pair LOG DIRECT_SUMS PDCX_SUMS TAGS: the pdcx home copies against the direct run's
# files, byte for byte (sha256); one VERIFY line.
verify_pair() {
  local n same np
  [[ -f $2 && -f $3 ]] || { echo "VERIFY round=$round $4 missing=1" | tee -a "$work/$1"; return; }
  n=$(wc -l <"$2")
  np=$(wc -l <"$3")
  same=$(comm -12 "$2" "$3" | wc -l)
  echo "VERIFY round=$round $4 direct_files=$n pdcx_files=$np identical=$same" | tee -a "$work/$1"
  if ((n == 0 || same != n || np != n)); then failed+=("verify/$4"); fi
}
# e2e_once KIND LABEL K: one end-to-end run. file: direct writes into the (limited) home,
# pdcx logs in a local prefix with that home. s3: direct writes to a local staging directory
# and uploads each checkpoint before the next compute phase (the e2e -u/-a hook, s3tool.py
# serve); pdcx logs locally with --home s3://BUCKET/pdcx.
e2e_once() {
  local kind=$1 k=$3 d req ack sums
  label=$2 tags="home=$kind idle=$idle "
  sums=$work/sums/$kind-$label-$round-$k
  local args=(-s "$steps" -k "$k" -m "$mib" -c "$compute" -r "$rate")
  rm -rf "$local_dir/e2e" "$local_dir/stage"
  if [[ $kind == file ]]; then rm -rf "$home/pdcx" "$home/direct"; else s3_clear pdcx; s3_clear direct; fi
  if [[ $label == pdcx ]]; then
    start_servers "e2e-$kind-$round-$k"
    d=$local_dir/e2e
    if [[ $kind == file ]]; then phome=$home/pdcx; else phome=s3://$s3_bucket/pdcx; fi
  elif [[ $kind == file ]]; then
    d=$home/direct
  else
    d=$local_dir/stage
    req=$work/upload.req ack=$work/upload.ack
    rm -f "$req" "$ack" && mkfifo "$req" "$ack"
    s3tool serve "$s3_bucket" direct "$req" "$ack" &
    uppid=$!
    args+=(-u "$req" -a "$ack")
  fi
  mkdir -p "$d"
  if [[ $kind == file ]]; then mkdir -p "$home/pdcx"; fi
  sync
  # CPU besides the ranks' (2 cores: what runs in the background is taken from the compute
  # phases): the pdcx servers' over their whole life (started for this run), versitygw's
  # over the run (and the flush after it).
  local gw0="" gw1=""
  if [[ $kind == s3 ]]; then gw0=$(proc_cpu "$s3pid"); fi
  run e2e.log "$label" "$ranks" "$d" e2e "${args[@]}" "$d"
  if [[ $label == pdcx ]]; then
    timed_flush e2e.log of=e2e every="$k"
    if [[ $kind == s3 ]]; then gw1=$(proc_cpu "$s3pid"); fi
    local spids
    read -r -a spids <<<"$(server_pids)"
    echo "RESULT round=$round ${tags}bench=cpu label=pdcx every=$k pdcx_servers_cpu_s=$(proc_cpu "${spids[@]}") versitygw_cpu_s=$(awk -v a="${gw0:-0}" -v b="${gw1:-0}" 'BEGIN{printf "%.2f", b-a}')" | tee -a "$work/e2e.log"
    if [[ $kind == file ]]; then sums_dir "$home/pdcx" "$sums"; else sums_s3 pdcx "$sums"; fi
    stop_servers
  else
    if [[ -n $uppid ]]; then
      # The uploader exits at the program's EOF; stop it if the program failed first.
      for _ in $(seq 1 50); do kill -0 "$uppid" 2>/dev/null || break; sleep 0.1; done
      stop_pid "$uppid" python3
      uppid=""
    fi
    if [[ $kind == s3 ]]; then
      gw1=$(proc_cpu "$s3pid")
      echo "RESULT round=$round ${tags}bench=cpu label=direct every=$k versitygw_cpu_s=$(awk -v a="$gw0" -v b="$gw1" 'BEGIN{printf "%.2f", b-a}')" | tee -a "$work/e2e.log"
    fi
    sums_dir "$d" "$sums"
  fi
  rm -rf "$local_dir/e2e" "$local_dir/stage"
  if [[ $kind == file ]]; then rm -rf "$home/pdcx" "$home/direct"; else s3_clear pdcx; s3_clear direct; fi
  tags=""
  sync
}
# kill9_servers: SIGKILL every server of the current deployment, by the PIDs in its
# cluster.json, and wait until they are gone.
kill9_servers() {
  local pids pid
  pids=$(server_pids)
  for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  echo "$pids" | wc -w
}
# home_bytes KIND: bytes of complete checkpoint copies at the recovery home (a file copy
# appears at its name only when complete (atomic rename); an S3 object only when its
# upload completed), counting only copies of the full expected size.
home_bytes() {
  local want=$((ranks * mib * 1048576))
  if [[ $1 == file ]]; then
    find "$home/rec" -maxdepth 1 -name 'ckpt.*' -size "${want}c" -printf '%s\n' | awk '{s+=$1} END{print s+0}'
  else
    s3tool list "$s3_bucket" rec | awk -v w="$want" '$2 == w {s+=$2} END{print s+0}'
  fi
}
# recovery_once KIND (paper §8.6): a writer logs --recovery-outputs checkpoints with no
# compute in between; right after it exits (its last consistency point passed) every server
# is killed -9 while home copies are pending; `pdcx recover` (servers restarted, interrupted
# copies finished) is timed; the home copies are compared with a direct run's files.
rec_golden=""
recovery_once() {
  local kind=$1 d=$local_dir/rec total before after t0 t1 secs n out
  local args=(-s "$rec_outputs" -k 1 -m "$mib" -c 0 -r "$rate")
  total=$((rec_outputs * ranks * mib * 1048576))
  if [[ -z $rec_golden ]]; then
    label=direct tags="phase=golden "
    rm -rf "$local_dir/rec-golden" && mkdir -p "$local_dir/rec-golden"
    run recovery.log direct "$ranks" "$local_dir/rec-golden" e2e "${args[@]}" "$local_dir/rec-golden"
    rec_golden=$work/sums/rec-golden
    sums_dir "$local_dir/rec-golden" "$rec_golden"
    rm -rf "$local_dir/rec-golden"
  fi
  label=pdcx tags="home=$kind phase=write idle=$idle "
  rm -rf "$d" && mkdir -p "$d"
  if [[ $kind == file ]]; then rm -rf "$home/rec" && mkdir -p "$home/rec"; phome=$home/rec; else s3_clear rec; phome=s3://$s3_bucket/rec; fi
  start_servers "rec-$kind-$round"
  run recovery.log pdcx "$ranks" "$d" e2e "${args[@]}" "$d"
  n=$(kill9_servers)
  before=$(home_bytes "$kind")
  t0=$(date +%s.%N)
  if out=$("$pdcx_bin" recover -q --stall 120 --root "$root" 2>&1); then
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
    after=$(home_bytes "$kind")
    local raw=$home_probe
    if [[ $kind == s3 ]]; then raw=$s3_put_probe; fi
    echo "RESULT round=$round bench=recovery label=pdcx home=$kind idle=$idle servers_killed=$n bytes_total=$total bytes_home_at_kill=$before bytes_home_after=$after seconds=$secs raw_mbps=${raw:-0} recover_says=$(echo "$out" | tail -n 1 | tr ' ' '_')" | tee -a "$work/recovery.log"
    if [[ $kind == file ]]; then sums_dir "$home/rec" "$work/sums/rec-$kind-$round"; else sums_s3 rec "$work/sums/rec-$kind-$round"; fi
    verify_pair recovery.log "$rec_golden" "$work/sums/rec-$kind-$round" "bench=recovery home=$kind"
  else
    echo "FAILED bench=recovery home=$kind: pdcx recover: $(echo "$out" | tail -n 2 | tr '\\n' ' ')" | tee -a "$work/recovery.log"
    failed+=("recovery/$kind")
  fi
  stop_servers
  rm -rf "$d"
  if [[ $kind == file ]]; then rm -rf "$home/rec"; else s3_clear rec; fi
  tags=""
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
# The compute loop's speed, measured once: every e2e run then does the same work, so a
# direct and a pdcx run differ only in their I/O (and in what it costs the compute).
if [[ -n $rate ]]; then
  note "e2e compute loop: $rate iterations/s per rank (--rate; not calibrated)"
elif want e2e || want recovery; then
  rate=$("${mpi[@]}" -n "$ranks" "$bin/e2e" -P | sed -n 's/^CALIBRATE rate=//p')
  [[ $rate =~ ^[0-9]+$ ]] || { echo "run.sh: calibrating e2e failed" >&2; exit 1; }
  note "e2e compute loop: $rate iterations/s per rank (calibrated once, $ranks ranks at once)"
fi
local_dir=$data/local # the repository's disk
if [[ -n $micro_dir ]]; then
  [[ -d $micro_dir && -w $micro_dir ]] || { echo "run.sh: --micro-dir $micro_dir is not a writable directory" >&2; exit 2; }
  micro_dir=$(mktemp -d "$micro_dir/pdcx-bench-mpiio-XXXX")
else
  micro_dir=$local_dir
fi
if [[ -z $micro_home ]]; then
  if [[ -d /dev/shm && -w /dev/shm ]]; then micro_home=/dev/shm/pdcx-bench-mpiio-$$; else micro_home=$local_dir/home; fi
fi
if want seg || want append; then
  where="the local disk"
  if [[ $micro_dir != "$local_dir" ]]; then where="$micro_dir ($(df --output=fstype,source "$micro_dir" | tail -n 1 | tr -s ' '))"; fi
  if ((have_pdcx)); then note "microbenchmarks: pdcx home $micro_home, log and direct files on $where"; else note "microbenchmarks: direct files on $where"; fi
fi
# The device the pdcx log writes to (the micro runs' directory, else the e2e runs' local
# prefix and deployment), measured by bench/seqbw.sh at the start of every round: on a
# virtual disk its figures vary by tens of percent from one minute to the next.
seqbw_dir=$local_dir
if want seg || want append; then seqbw_dir=$micro_dir; fi
if ((seqbw_mib)); then
  note "the device: bench/seqbw.sh $seqbw_mib MiB in $seqbw_dir at the start of every round"
else
  note "the device: not measured (--seqbw-mib 0)"
fi
# seqbw ROUND: bench/seqbw.sh's line into $work/seqbw-ROUND.txt (empty when it fails: the
# tables then say "device not measured").
seqbw() {
  local f=$work/seqbw-$1.txt
  : >"$f"
  ((seqbw_mib)) || return 0
  log "the device: bench/seqbw.sh $seqbw_dir/seqbw $seqbw_mib"
  mkdir -p "$seqbw_dir/seqbw"
  if bash "$repo/bench/seqbw.sh" "$seqbw_dir/seqbw" "$seqbw_mib" >"$f" 2>"$work/seqbw-$1.err"; then
    cat "$f"
  else
    note "round $1: bench/seqbw.sh failed: $(tail -n 1 "$work/seqbw-$1.err")"
    : >"$f"
  fi
  rm -rf "$seqbw_dir/seqbw"
}
if want e2e || want recovery; then
  if has_kind file; then setup_home; fi
  if has_kind s3; then setup_s3; fi
fi
for ((round = 1; round <= repeat; round++)); do
  log "round $round of $repeat"
  note "round $round: load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
  seqbw "$round"
  # ---- §8.7 microbenchmarks ------------------------------------------------------------
  # Each size is measured directly and through pdcx back to back (in alternating order), so
  # the two figures of a pair see the same state of the machine (page cache, the VM's memory
  # and disk): a slow phase of the host then slows both, not one side of a ratio.
  if want seg || want append; then
    if ((have_pdcx)); then
      start_servers "micro-$round" "$micro_dir"
      phome=$micro_home
    fi
    for sync in 1 0; do
      sflag=()
      if ((sync)); then sflag=(-S); fi
      # One size per program run, and between runs the previous run's data settled (the
      # direct run's dirty pages written back, the pdcx run's home copies done): otherwise
      # one run's background writes would land in the next one's figure. Each run writes
      # into a new subdirectory: new files (for pdcx, new streams mpiio/SUB/NAME), never a
      # rewrite of the previous run's names.
      for size in "${seg_sizes[@]}"; do
        if ! want seg; then break; fi
        for label in $(labels_for_round "$round"); do
          d=$micro_dir/$label
          rm -rf "$d" "$micro_home" && mkdir -p "$d/s$sync-$size" "$micro_home"
          run micro.log "$label" "$micro_ranks" "$d" seg_create "${sflag[@]}" -t "$micro_mib" -m 16 "$d/s$sync-$size" "$size"
          settle micro.log of=seg_create sync=$sync size="$size"
        done
      done
      for size in "${app_sizes[@]}"; do
        if ! want append; then break; fi
        for label in $(labels_for_round "$round"); do
          d=$micro_dir/$label
          rm -rf "$d" "$micro_home" && mkdir -p "$d/a$sync-$size" "$micro_home"
          run micro.log "$label" "$micro_ranks" "$d" append_seek "${sflag[@]}" "$d/a$sync-$size" "$size"
          settle micro.log of=append_seek sync=$sync size="$size"
        done
      done
      rm -rf "$micro_dir/direct" "$micro_dir/pdcx" "$micro_home"
    done
    if ((have_pdcx)); then stop_servers; fi
  fi
  # ---- §8.1-8.4 end to end ---------------------------------------------------------------
  if want e2e; then
    for k in $every; do
      for kind in "${kinds[@]}"; do
        wait_quiet
        for label in $(labels_for_round "$round"); do e2e_once "$kind" "$label" "$k"; done
        if ((have_pdcx)); then verify_pair e2e.log "$work/sums/$kind-direct-$round-$k" \
          "$work/sums/$kind-pdcx-$round-$k" "home=$kind every=$k"; fi
      done
    done
  fi
  # ---- §8.6 recovery -----------------------------------------------------------------------
  if want recovery && ((have_pdcx)); then
    for kind in "${kinds[@]}"; do
      wait_quiet
      recovery_once "$kind"
    done
  fi
done

log "summary (also appended to bench/out/mpiio-last.md)"
seq_files=()
for ((round = 1; round <= repeat; round++)); do seq_files+=("$work/seqbw-$round.txt"); done
python3 "$mdir/summarize.py" --micro "$work/micro.log" --e2e "$work/e2e.log" \
  --recovery "$work/recovery.log" --notes "$notes" \
  --seqbw "${seq_files[@]}" --seqbw-dir "$seqbw_dir" \
  --cmd "$cmdline" --load-start "$load_start" --load-end "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --have-pdcx "$have_pdcx" --pdcx-bin "${pdcx_bin:-none}" --home-mbps "$home_mbps" \
  --append "$repo/bench/out/mpiio-last.md" | tee "$work/table.md"

if ((${#failed[@]})); then
  echo "run.sh: FAILED: ${failed[*]} (logs in $work)" >&2
  exit 1
fi
log "done; logs in $work"
exit
}
