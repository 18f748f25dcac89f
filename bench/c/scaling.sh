#!/usr/bin/env bash
# Scaling across emulated nodes that each have a device of their own (item "scaling" of the
# device-limit work; docs/MULTINODE.md). On one host the emulated nodes of `run.sh --nodes`
# share one disk, so "aggregate >= 80 % of nodes x the one-node figure" would ask that disk for
# 1.6x / 3.2x its own rate. Here every node's pdcx server keeps its log and metadata on an ext4
# of its own: a loop device over a file in /dev/shm, limited to --node-mbps by cgroup blkio (the
# root group's throttle: every bio to that device, the server's writes and the kernel's
# writeback alike). The limit is set well below what this host's cores move (2 vCPUs run every
# node's ranks and server), so the per-node devices, not the shared CPUs, bound each node, as
# on a cluster.
#
# Per round and node count K: K devices, each measured with bench/seqbw.sh (direct I/O, the
# per-node ceiling); K network-namespace nodes (scripts/netns.sh), one server per node, the
# kernels as one MPI job of K x --ranks-per-node ranks; VPIC write (local), BDCATS cold read,
# HACC write (local) and read. Prints per K the aggregate MB/s, K x the one-node figure of the
# same round, their ratio (the target: writes >= 0.80), and the aggregate against K x the
# per-node device.
#
# Usage: bench/c/scaling.sh [--nodes "1 2 4"] [--ranks-per-node R] [--node-mbps M]
#                           [--particles N] [--repeat N] [--keep]
#   --nodes LIST         node counts, the first is the one-node reference (default "1 2 4")
#   --ranks-per-node R   MPI ranks per node (default 2)
#   --node-mbps M        each node's device limit, MB/s, 10..1000 (default 100)
#   --particles N        particles per rank (default 2097152: 64 MiB per rank per VPIC write)
#   --repeat N           rounds, node counts interleaved within each (default 1)
#   --keep               keep the work dir's data
# Needs root (namespaces, loop devices, cgroup v1 blkio or v2 io), losetup, mkfs.ext4, fio.
# PDC_CFLAGS / PDC_LIBS (or pkg-config pdcx) select libpdcx as for run.sh; PDCX the binary.
# Output: bench/out/c-scaling-<date>-XXXX/{K-rN.log,seqbw-K-rN.txt,table.md}.
set -euo pipefail

nodes_list="1 2 4" rpn=2 node_mbps=100 particles=2097152 repeat=1 keep=0
while (($#)); do
  case $1 in
    --nodes) nodes_list=${2:?--nodes needs a list}; shift 2 ;;
    --ranks-per-node) rpn=${2:?--ranks-per-node needs a value}; shift 2 ;;
    --node-mbps) node_mbps=${2:?--node-mbps needs a value}; shift 2 ;;
    --particles) particles=${2:?--particles needs a value}; shift 2 ;;
    --repeat) repeat=${2:?--repeat needs a value}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n 2,32p "$0"; exit 0 ;;
    *) echo "scaling.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in rpn node_mbps particles repeat; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "scaling.sh: ${v//_/-} must be a positive integer" >&2; exit 2; }
done
((node_mbps >= 10 && node_mbps <= 1000)) || { echo "scaling.sh: --node-mbps must be 10..1000" >&2; exit 2; }
((rpn <= 16)) || { echo "scaling.sh: --ranks-per-node must be at most 16" >&2; exit 2; }
for k in $nodes_list; do
  [[ $k =~ ^[1-9][0-9]*$ ]] && ((k <= 8)) || { echo "scaling.sh: --nodes takes counts 1..8: $k" >&2; exit 2; }
done
((EUID == 0)) || { echo "scaling.sh: needs root (network namespaces, loop devices, cgroup blkio)" >&2; exit 2; }
for c in losetup mkfs.ext4 fio mpirun; do
  command -v "$c" >/dev/null || { echo "scaling.sh: $c is not installed" >&2; exit 2; }
done
throttle_w=/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device
throttle_r=/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device
[[ -w $throttle_w && -w $throttle_r ]] ||
  { echo "scaling.sh: needs cgroup v1 blkio throttling ($throttle_w) to give each node its device's limit" >&2; exit 2; }
# Each node's device holds its ranks' VPIC and HACC data plus ext4's own: room for 3x.
per_node_mib=$((rpn * particles * 70 * 3 / 1048576 + 256))
shm_free_mib=$(($(df --output=avail -k /dev/shm | tail -1) / 1024))
max_k=0
for k in $nodes_list; do ((k > max_k)) && max_k=$k; done
((max_k * per_node_mib < shm_free_mib)) ||
  { echo "scaling.sh: /dev/shm has $shm_free_mib MiB free; $max_k nodes need $((max_k * per_node_mib)) MiB (lower --particles)" >&2; exit 2; }

cdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$cdir/../.." && pwd)
cd "$repo"
log() { printf '\033[1m[bench/c scaling]\033[0m %s\n' "$*"; }
mkdir -p bench/out
work=$(mktemp -d "$repo/bench/out/c-scaling-$(date +%Y%m%d-%H%M%S)-XXXX")
bin=$work/build
log "make pdc (into $bin)"
make -s -C "$cdir" BUILD="$bin" pdc
pdcx_bin=${PDCX:-$(command -v pdcx || echo "$repo/target/release/pdcx")}
[[ -x $pdcx_bin ]] || { echo "scaling.sh: no pdcx binary (set PDCX)" >&2; exit 2; }
export PDCX_NETNS_PREFIX=sc$(($$ % 100000)) PDCX_BIN=$pdcx_bin OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
netns=(bash "$repo/scripts/netns.sh")
shm=/dev/shm/pdcx-scaling-$$

# What is up now, for the cleanup: devices (loop, mount point, maj:min), namespaces, servers.
loops=() mounts=() majmins=() netns_up=0 root=""
teardown() {
  if [[ -n $root && -f $root/cluster.json ]]; then "${netns[@]}" stop "$root" >/dev/null 2>&1 || true; fi
  root=""
  if ((netns_up)); then "${netns[@]}" down >/dev/null 2>&1 || true; netns_up=0; fi
  local i
  for i in "${!majmins[@]}"; do
    echo "${majmins[i]} 0" >"$throttle_w" 2>/dev/null || true
    echo "${majmins[i]} 0" >"$throttle_r" 2>/dev/null || true
  done
  for i in "${!mounts[@]}"; do umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" 2>/dev/null || true; done
  for i in "${!loops[@]}"; do losetup -d "${loops[i]}" 2>/dev/null || true; done
  loops=() mounts=() majmins=()
  rm -rf "$shm"
}
cleanup() {
  local rc=$?
  teardown
  if ((!keep)); then rm -rf "$work/data"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# devices K ROOT: K throttled ext4 devices mounted at ROOT/server-000I (where server I keeps
# its log and metadata).
devices() {
  local k=$1 r=$2 i img loop mnt mm bps=$((node_mbps * 1000000))
  mkdir -p -m 700 "$shm" # the node images are private to this user, as every file pdcx writes
  for ((i = 0; i < k; i++)); do
    img=$shm/node-$i.img
    truncate -s "${per_node_mib}M" "$img"
    loop=$(losetup -f --show "$img")
    loops+=("$loop")
    mkfs.ext4 -q -F "$loop"
    mnt=$r/$(printf 'server-%04d' "$i")
    mkdir -p "$mnt"
    mount "$loop" "$mnt"
    mounts+=("$mnt")
    mm=$(cat "/sys/block/$(basename "$loop")/dev")
    majmins+=("$mm")
    echo "$mm $bps" >"$throttle_w"
    echo "$mm $bps" >"$throttle_r"
  done
}

# kernel K NAME ARGS...: one MPI job of K x rpn ranks over the K nodes; RESULT lines to the log.
kernel() {
  local k=$1 name=$2
  shift 2
  "${netns[@]}" mpirun "$((k * rpn))" --bind-to none --mca mpi_yield_when_idle 1 -x PDCX_ROOT \
    "$bin/${name}_pdc" "$@" 2>&1 | tee -a "$logf" | grep -E '^RESULT|FAILED' || true
}

cat >"$work/notes.txt" <<EOF
command: bench/c/scaling.sh --nodes "$nodes_list" --ranks-per-node $rpn --node-mbps $node_mbps --particles $particles --repeat $repeat
per node: one pdcx server, $rpn ranks, an ext4 on a loop device over /dev/shm limited to $node_mbps MB/s (cgroup v1 blkio, reads and writes)
host: $(nproc) CPUs shared by every node; load at start $(cut -d' ' -f1-3 /proc/loadavg)
EOF
for ((round = 1; round <= repeat; round++)); do
  for k in $nodes_list; do
    log "round $round: $k node(s)"
    logf=$work/$k-r$round.log
    root=$work/data/root-$k-r$round
    mkdir -p "$root" "$work/data/files"
    devices "$k" "$root"
    # The per-node ceiling: node 0's device, direct I/O (and buffered), before the servers use it.
    bash "$repo/bench/seqbw.sh" "$root/server-0000/seqbw" 256 | tee "$work/seqbw-$k-r$round.txt"
    rm -rf "$root/server-0000/seqbw"
    "${netns[@]}" up --nodes "$k" --subnet "10.78.$(((round * 10 + k) % 250))" >/dev/null
    netns_up=1
    "${netns[@]}" servers "$root" --cache-mb 0 >/dev/null
    export PDCX_ROOT=$root
    common=(-d "$work/data/files" -S "$k" -n "$particles")
    kernel "$k" vpic "${common[@]}" -p "v$k$round"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    kernel "$k" bdcats "${common[@]}" -p "v$k$round" -L cold
    kernel "$k" hacc "${common[@]}" -p "h$k$round" -D
    teardown
  done
done
python3 "$cdir/scaling_summary.py" "$work" --nodes "$nodes_list" --repeat "$repeat" | tee "$work/table.md"
log "done; logs in $work"
