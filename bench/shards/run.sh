#!/usr/bin/env bash
# Paper 003 object-sharding strategies (Table II, Fig. 3/4/7): time to store VPIC-IO (basic
# and composite objects) and HACC-IO (composite, 9 variables) on a home tier, per [shard]
# setting: off (one blob per extent) and strategies 2..5 (1/2/4/8 objects per shard per
# server), against parallel HDF5 (VPIC basic) and MPI-IO one-shared-file (composite kernels)
# writing the same bytes to the same kind of directory in the same run, fsynced.
#
# Usage: bench/shards/run.sh [--ranks R] [--servers K] [--particles N] [--chunks C]
#                            [--tier shared|s3] [--repeat N] [--kernels "vpic-basic hacc"]
#                            [--root-dir DIR]
# The home tier is a shared directory on disk (default) or a private versitygw (--tier s3:
# one S3 request per blob, where the blob count matters most). Prints MB/s as the median of
# --repeat runs (min-max) and the ratio to the baseline's median. --root-dir puts the servers'
# log and metadata elsewhere, e.g. /dev/shm to stand for node-local NVMe in front of the PFS
# (paper 001's setup); by default they share the disk with the home tier, so every byte is
# written to that disk twice (log, then tier) while the baseline writes it once.
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=4 servers=2 particles=$((1 << 18)) chunks=8 tier=shared repeat=3 root_dir=
kernels="vpic-basic vpic-composite hacc"
while (($#)); do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --particles) particles=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --tier) tier=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --root-dir) root_dir=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $tier == shared || $tier == s3 ]] || { echo "--tier must be shared or s3" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "--repeat must be a positive integer" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p bench/out
work=$(mktemp -d "$PWD/bench/out/shards-XXXX")
root=$work/root
[[ -n $root_dir ]] && root=$(mktemp -d "$root_dir/pdcx-shards-XXXX")
cleanup() {
  pdcx server stop --root "$root" >/dev/null 2>&1 || true
  [[ $tier == s3 ]] && bash scripts/s3server.sh stop "$work/s3" >/dev/null 2>&1
  rm -rf "$root" "$work/pfs" "$work/s3"
}
trap cleanup EXIT
if [[ $tier == s3 ]]; then
  bash scripts/s3server.sh install
  mkdir -p "$work/s3"
  eval "$(bash scripts/s3server.sh start "$work/s3")"
  export AWS_ACCESS_KEY_ID=$PDCX_TEST_S3_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$PDCX_TEST_S3_SECRET_ACCESS_KEY
fi
home_tier() {
  if [[ $tier == s3 ]]; then
    printf '[[tier]]\nname = "home"\nkind = "s3"\nendpoint = "%s"\nbucket = "%s"\nregion = "us-east-1"\n' \
      "$PDCX_TEST_S3_ENDPOINT" "$PDCX_TEST_S3_BUCKET"
  else
    printf '[[tier]]\nname = "home"\nkind = "shared"\npath = "%s"\n' "$work/pfs"
  fi
}
baseline_of() { [[ $1 == vpic-basic ]] && echo hdf5 || echo mpiio; }
load=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$repeat"); do
  for kernel in $kernels; do
    base=$(baseline_of "$kernel")
    rm -rf "$work/pfs"; mkdir -p "$work/pfs"
    mpirun -n "$ranks" --oversubscribe python3 bench/shards/kernel.py "$base" "$kernel" --dir "$work/pfs" \
      --particles "$particles" --chunks "$chunks" --out "$work/$kernel-$base-r$round.json"
    for strategy in off 2 3 4 5; do
      # Composite kernels have one object: strategies 2..5 all group the same way.
      [[ $kernel != vpic-basic && $strategy != off && $strategy != 2 ]] && continue
      rm -rf "$root" "$work/pfs"; mkdir -p "$root" "$work/pfs"
      { home_tier
        printf '\n[log]\nsegment_bytes = "16MiB"\n\n[flush]\ninterval_ms = 600000\n'
        [[ $strategy != off ]] && printf '\n[shard]\nstrategy = %s\n' "$strategy"
      } > "$root/pdcx.toml"
      pdcx server start -n "$servers" --root "$root" >/dev/null
      mpirun -n "$ranks" --oversubscribe python3 bench/shards/kernel.py pdcx "$kernel" --root "$root" \
        --particles "$particles" --chunks "$chunks" --out "$work/$kernel-$strategy-r$round.json"
      dep=$(cat "$root/deployment-id")
      find "$work/pfs" "$work/s3" -type f -path "*$dep/*" 2>/dev/null | grep -c . > "$work/$kernel-$strategy-r$round.blobs" || true
      pdcx server stop --root "$root" >/dev/null
    done
  done
done
python3 bench/shards/summarize.py "$work" --ranks "$ranks" --servers "$servers" --particles "$particles" \
  --chunks "$chunks" --tier "$tier" --repeat "$repeat" --kernels "$kernels" --load "$load" \
  --log-on "$(df --output=fstype "$root" | tail -1) ($root_dir${root_dir:-same disk as the tier})"
