#!/usr/bin/env bash
# The object-sharding strategies of "Object sharding across storage layers" (Table II, Fig.
# 3/4/7): time to store VPIC-IO (basic and composite objects) and HACC-IO (composite, 9
# variables) on a home tier, per [shard] setting: off (one blob per extent); basic strategies
# 1..5 for VPIC basic objects (1: one shard per variable across all servers, `servers = "all"`;
# 2..5: 1/2/4/8 objects per shard per server); for the composite kernels basic strategy 2 and
# composite strategies 1, 3 and (with 4 or more servers) 4 (`composite = true`: one object per
# shard, shared by all / 2 / 4 servers; a composite strategy whose group spans every server is
# strategy 1 and is not run twice).
# Against parallel HDF5 (VPIC basic) and MPI-IO one-shared-file (composite kernels) writing the
# same bytes to the same kind of directory in the same run, fsynced. Prints, per setting, the
# blobs found on the home tier after the run next to Table II's count for the server count.
#
# Usage: bench/shards/run.sh [--ranks R] [--servers K] [--particles N] [--chunks C]
#                            [--tier shared|s3] [--repeat N] [--kernels "vpic-basic hacc"]
#                            [--root-dir DIR] [--timeout S] [--seqbw-mb M] [--steps S]
# The home tier is a shared directory on disk (default) or a private versitygw (--tier s3: one
# S3 request per blob, where the blob count matters most). Prints MB/s as the median of --repeat
# runs (min-max) and the ratio to the baseline's median. --root-dir puts the servers' log and
# metadata elsewhere, e.g. /dev/shm to stand for node-local NVMe in front of the PFS (the setup
# of Proactive Data Containers); by default they share the disk with the home tier, so every
# byte is written to that disk twice (log, then tier) while the baseline writes it once. A pdcx
# run that fails or takes longer than --timeout seconds (default 300) is reported as FAILED in
# the table (its servers' logs are kept under bench/out/shards-*/failed/) and the sweep goes on.
# Every round first measures the device of the tier directory (the one the strategies' shared
# tier and the baselines write to) with bench/seqbw.sh, --seqbw-mb MiB (default 512, 0 = skip),
# into seqbw-rN.txt; the table gives each MB/s as a share of its round's direct-I/O write figure.
# --steps S (default 1, at most 64) writes S bursts back to back: pdcx hands each to its flushers
# as it ends, so its flush overlaps the next burst; the baselines fsync once after the last (the
# same durability at the end). Every run also reports the machine's CPU time over its clock.
# pdcx is the one on PATH (e.g. PATH=$SNAP:$PATH for a snapshot build in $SNAP).
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=4 servers=2 particles=$((1 << 18)) chunks=8 tier=shared repeat=3 root_dir='' timeout_s=300
seqbw_mb=512 steps=1
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
    --timeout) timeout_s=$2; shift 2 ;;
    --seqbw-mb) seqbw_mb=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n 2,31p "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $tier == shared || $tier == s3 ]] || { echo "--tier must be shared or s3" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "--repeat must be a positive integer" >&2; exit 2; }
[[ $servers =~ ^[1-9][0-9]*$ ]] || { echo "--servers must be a positive integer" >&2; exit 2; }
[[ $steps =~ ^[1-9][0-9]*$ ]] && ((steps <= 64)) || { echo "--steps must be an integer 1..64" >&2; exit 2; }
[[ $seqbw_mb =~ ^[0-9]+$ ]] && ((seqbw_mb == 0 || seqbw_mb >= 2)) \
  || { echo "--seqbw-mb must be 0 or an integer >= 2" >&2; exit 2; }
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
# Settings per kernel: off, N (basic strategy N), cN (composite strategy N). Composite kernels
# have one object, so basic strategies 2..5 all group as strategy 2 (one object per shard per
# server); their composite strategies group servers instead.
settings_of() {
  if [[ $1 == vpic-basic ]]; then echo "off 1 2 3 4 5"; return; fi
  local out="off 2 c1" s g
  for s in 3 4; do
    g=$((1 << (s - 2)))
    # Groups of g >= all servers are strategy 1 (servers = "all"): already measured as c1.
    if ((g < servers)); then out+=" c$s"; fi
  done
  echo "$out"
}
shard_toml() {
  case $1 in
    off) ;;
    c*) printf '\n[shard]\nstrategy = %s\ncomposite = true\n' "${1#c}" ;;
    *) printf '\n[shard]\nstrategy = %s\n' "$1" ;;
  esac
}
# Ranks waiting in MPI (barriers, collectives) yield their core instead of spinning: this
# machine may have fewer cores than ranks plus servers, and a spinning rank takes a core the
# ranks still writing (baseline and pdcx alike) or the servers need (as bench/c/run.sh).
mpi=(mpirun -n "$ranks" --oversubscribe --mca mpi_yield_when_idle 1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$repeat"); do
  # The device under the tier directory, this round (on a virtual disk it drifts between
  # minutes): direct I/O (the ceiling) and buffered. A failure leaves no figure, not a stop.
  if ((seqbw_mb > 0)); then
    rm -rf "$work/pfs"; mkdir -p "$work/pfs"
    bash bench/seqbw.sh "$work/pfs" "$seqbw_mb" > "$work/seqbw-r$round.txt" \
      || { echo "seqbw.sh failed (round $round): device not measured" >&2; rm -f "$work/seqbw-r$round.txt"; }
  fi
  for kernel in $kernels; do
    base=$(baseline_of "$kernel")
    rm -rf "$work/pfs"; mkdir -p "$work/pfs"
    "${mpi[@]}" python3 bench/shards/kernel.py "$base" "$kernel" --dir "$work/pfs" \
      --particles "$particles" --chunks "$chunks" --steps "$steps" --out "$work/$kernel-$base-r$round.json"
    for setting in $(settings_of "$kernel"); do
      tag=$kernel-$setting-r$round
      rm -rf "$root" "$work/pfs"; mkdir -p "$root" "$work/pfs"
      { home_tier
        printf '\n[log]\nsegment_bytes = "16MiB"\n\n[flush]\ninterval_ms = 600000\n'
        shard_toml "$setting"
      } > "$root/pdcx.toml"
      if ! pdcx server start -n "$servers" --root "$root" > "$work/$tag.start" 2>&1; then
        echo "FAILED: pdcx server start ($tag): $(tail -3 "$work/$tag.start")" | tee "$work/$tag.fail" >&2
        mkdir -p "$work/failed/$tag"; cp -r "$root"/. "$work/failed/$tag/"
        pdcx server stop --root "$root" >/dev/null 2>&1 || true
        continue
      fi
      rc=0
      timeout --kill-after=10 "$timeout_s" "${mpi[@]}" python3 bench/shards/kernel.py pdcx \
        "$kernel" --root "$root" --particles "$particles" --chunks "$chunks" --steps "$steps" \
        --out "$work/$tag.json" || rc=$?
      dep=$(cat "$root/deployment-id")
      # Blobs of this deployment on the home tier: all of them, the shards among them (per-server
      # DEP/sRANK/shard/..., group DEP/gLEADER/shard/...), upload markers left (should be 0), bytes.
      find "$work/pfs" "$work/s3" -type f -path "*$dep/*" -printf '%s %p\n' 2>/dev/null > "$work/$tag.files" || true
      printf '%s %s %s %s %s\n' "$(grep -c . "$work/$tag.files")" "$(grep -c '/shard/' "$work/$tag.files")" \
        "$(grep -c '/g[0-9]*/shard/' "$work/$tag.files")" "$(grep -c '/uploads/' "$work/$tag.files")" \
        "$(awk '{s += $1} END {print s + 0}' "$work/$tag.files")" > "$work/$tag.blobs" || true
      if ((rc != 0)); then
        echo "FAILED: kernel.py pdcx $kernel, setting $setting, round $round: exit $rc (124 = timeout ${timeout_s}s)" \
          | tee "$work/$tag.fail" >&2
        rm -f "$work/$tag.json"
        mkdir -p "$work/failed/$tag"; cp -r "$root"/. "$work/failed/$tag/" 2>/dev/null || true
      fi
      pdcx server stop --root "$root" >/dev/null || echo "pdcx server stop failed ($tag)" >&2
    done
  done
done
python3 bench/shards/summarize.py "$work" --ranks "$ranks" --servers "$servers" --particles "$particles" \
  --chunks "$chunks" --steps "$steps" --tier "$tier" --repeat "$repeat" --kernels "$kernels" --load "$load" \
  --load-end "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --log-on "$(df --output=fstype "$root" | tail -1) (${root_dir:-same disk as the tier})"
