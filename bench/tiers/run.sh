#!/usr/bin/env bash
# Tier split sweep: VPIC-IO write (+ flush to the home tiers) and BDCATS-IO read with
# 0/25/50/75/100% of each object's regions on a fast tier (tmpfs, /dev/shm) and the rest on a
# slow one (a directory on disk, every blob fsynced, page cache dropped before reads; limited to
# --slow-mbps MB/s, default 200, like a shared PFS share: this VM's disk reads as fast as tmpfs).
# Ratios are against the 0% (all slow) run of the same sweep. Also records the servers'
# cache/tier usage over time (pdcx top --csv) during the 50% run.
#
# Usage: bench/tiers/run.sh [--ranks R] [--servers K] [--particles N] [--slow-mbps M (0: no limit)]
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=4 servers=2 particles=$((1 << 20)) slow_mbps=200
while (($#)); do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --particles) particles=$2; shift 2 ;;
    --slow-mbps) slow_mbps=$2; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d "$PWD/bench/out/tiers-XXXX")
fast=$(mktemp -d /dev/shm/pdcx-fast-XXXX)
trap 'pdcx server stop --root "$work/root" >/dev/null 2>&1 || true; rm -rf "$fast" "$work/root" "$work/slow"' EXIT
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(cannot drop the page cache: slow-tier reads may hit memory)" >&2; }
declare -A W R A
for share in 0 25 50 75 100; do
  rm -rf "$work/root" "$work/slow" "$fast"/*; mkdir -p "$work/root"
  cat > "$work/root/pdcx.toml" <<TOML
[[tier]]
name = "fast"
kind = "local"
path = "$fast"

[[tier]]
name = "slow"
kind = "shared"
path = "$work/slow"
$([[ $slow_mbps != 0 ]] && echo "max_mbps = $slow_mbps")

[log]
segment_bytes = "16MiB"
TOML
  pdcx server start -n "$servers" --root "$work/root" --cache-mb 1 >/dev/null
  if [[ $share == 50 ]]; then pdcx top --csv --interval 0.25 --root "$work/root" > "$work/usage.csv" & top_pid=$!; fi
  mpirun -n "$ranks" --oversubscribe python3 bench/tiers/vpic_tiers.py write --root "$work/root" \
    --particles "$particles" --fast-share "$share" --out "$work/w$share.json"
  [[ $share == 50 ]] && { kill "$top_pid" 2>/dev/null || true; wait "$top_pid" 2>/dev/null || true; }
  pdcx server stop --root "$work/root" >/dev/null
  drop_caches
  pdcx server start -n "$servers" --root "$work/root" --cache-mb 1 >/dev/null
  mpirun -n "$ranks" --oversubscribe python3 bench/tiers/vpic_tiers.py read --root "$work/root" \
    --particles "$particles" --fast-share "$share" --out "$work/r$share.json"
  pdcx server stop --root "$work/root" >/dev/null
done
cp "$work/usage.csv" bench/tiers/usage-50pct.csv 2>/dev/null || true
python3 - "$work" "$ranks" "$servers" "$particles" "$slow_mbps" <<'PY'
import json, sys
work, ranks, servers, particles, slow = sys.argv[1:]
rows = []
for s in (0, 25, 50, 75, 100):
    w = json.load(open(f"{work}/w{s}.json")); r = json.load(open(f"{work}/r{s}.json"))
    rows.append((s, w["bytes"] / w["total_s"] / 1e6, w["bytes"] / w["app_s"] / 1e6, r["bytes"] / r["read_s"] / 1e6))
base_w, base_r = rows[0][1], rows[0][3]
print(f"tier split sweep: {ranks} ranks, {servers} servers, {particles} particles/rank, fast=tmpfs slow=disk dir ({slow} MB/s limit)")
print(f"{'fast %':>6} {'write+flush MB/s':>17} {'x vs 0%':>8} {'app write MB/s':>15} {'read MB/s':>10} {'x vs 0%':>8}")
for s, w, app, r in rows:
    print(f"{s:>6} {w:>17.0f} {w / base_w:>8.2f} {app:>15.0f} {r:>10.0f} {r / base_r:>8.2f}")
PY
