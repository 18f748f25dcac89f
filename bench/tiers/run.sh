#!/usr/bin/env bash
# Tier split sweep: VPIC-IO write (+ flush to the home tiers) and BDCATS-IO read with a share
# (0/25/50/75/100%) of each object's regions on a fast tier (tmpfs, /dev/shm) and the rest on a
# slow one (a directory on disk, every blob fsynced, page cache dropped before reads; limited to
# --slow-mbps MB/s, default 200, like a shared PFS share: this VM's disk reads as fast as tmpfs).
# Each point runs --repeat times (default 3), interleaved: round 1 runs every share, then round
# 2, ..., so drift of the machine's load hits all points alike. Prints the median (min-max) of
# each metric; ratios are medians against the lowest share's median (0% = all slow). One JSON
# per run stays in bench/out/tiers-XXXX/ (w<share>-r<round>.json, r<share>-r<round>.json).
# During every 50% run it records the servers' cache/tier usage (pdcx top --csv); the CSV of the
# 50% run with the median write+flush time goes to bench/tiers/usage-50pct.csv and is plotted
# by bench/plot_usage.py (--trim-idle: from just before the first change) into
# bench/tiers/usage-50pct.svg.
#
# Usage: bench/tiers/run.sh [--ranks R] [--servers K] [--particles N] [--slow-mbps M (0: no limit)]
#                           [--repeat N] [--shares "0,50,100"]
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=4 servers=2 particles=$((1 << 20)) slow_mbps=200 repeat=3 shares_arg=0,25,50,75,100
while (($#)); do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --particles) particles=$2; shift 2 ;;
    --slow-mbps) slow_mbps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --shares) shares_arg=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "--repeat takes a count >= 1, not '$repeat'" >&2; exit 2; }
IFS=', ' read -r -a shares <<< "$shares_arg"
((${#shares[@]})) || { echo "--shares is empty" >&2; exit 2; }
for i in "${!shares[@]}"; do
  s=${shares[i]}
  [[ $s =~ ^[0-9]+$ ]] && ((10#$s <= 100)) || { echo "--shares takes percentages 0..100, not '$s'" >&2; exit 2; }
  shares[i]=$((10#$s))
done
mapfile -t shares < <(printf '%s\n' "${shares[@]}" | sort -n -u)
# Only sealed 16 MiB log segments are retired after the flush; extents still in a server's log
# can be read from there instead of from their tier. With little data per server that is most.
per_server_mib=$((32 * particles * ranks / servers >> 20))
if ((per_server_mib < 64)); then
  echo "warning: ~$per_server_mib MiB per server: up to 16 MiB of it may still be in the server's log" \
    "when read, and come from there, not from the tiers (read MB/s then understates the tier split)" >&2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p bench/out
work=$(mktemp -d "$PWD/bench/out/tiers-XXXX")
fast=$(mktemp -d /dev/shm/pdcx-fast-XXXX)
top_pid=
cleanup() {
  [[ -n $top_pid ]] && kill "$top_pid" 2>/dev/null
  pdcx server stop --root "$work/root" >/dev/null 2>&1 || true
  rm -rf "$fast" "$work/root" "$work/slow"
}
trap cleanup EXIT
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(cannot drop the page cache: slow-tier reads may hit memory)" >&2; }

run_point() { # share round
  local share=$1 round=$2
  rm -rf "$work/root" "$work/slow" "${fast:?}"/*; mkdir -p "$work/root"
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
  if [[ $share == 50 ]]; then
    pdcx top --csv --interval 0.25 --root "$work/root" > "$work/usage50-r$round.csv" &
    top_pid=$!
  fi
  mpirun -n "$ranks" --oversubscribe python3 bench/tiers/vpic_tiers.py write --root "$work/root" \
    --particles "$particles" --fast-share "$share" --out "$work/w$share-r$round.json"
  if [[ -n $top_pid ]]; then
    kill "$top_pid" 2>/dev/null || true
    wait "$top_pid" 2>/dev/null || true
    top_pid=
  fi
  pdcx server stop --root "$work/root" >/dev/null
  drop_caches
  pdcx server start -n "$servers" --root "$work/root" --cache-mb 1 >/dev/null
  mpirun -n "$ranks" --oversubscribe python3 bench/tiers/vpic_tiers.py read --root "$work/root" \
    --particles "$particles" --fast-share "$share" --out "$work/r$share-r$round.json"
  pdcx server stop --root "$work/root" >/dev/null
}

for ((round = 1; round <= repeat; round++)); do
  for share in "${shares[@]}"; do
    echo "round $round/$repeat: $share% fast" >&2
    run_point "$share" "$round"
  done
done

# Prints the table; writes summary.json and, with a 50% point, the round of its median run.
python3 - "$work" "$ranks" "$servers" "$particles" "$slow_mbps" "$repeat" "${shares[*]}" <<'PY'
import json, statistics, sys
work, ranks, servers, particles, slow, repeat, shares = sys.argv[1:]
repeat, shares = int(repeat), [int(s) for s in shares.split()]
def load(kind, s, r):
    with open(f"{work}/{kind}{s}-r{r}.json") as f:
        return json.load(f)
metrics = ("write_flush", "app_write", "read")
runs = {}  # share -> metric -> MB/s per round
for s in shares:
    ws = [load("w", s, r) for r in range(1, repeat + 1)]
    rs = [load("r", s, r) for r in range(1, repeat + 1)]
    runs[s] = {
        "write_flush": [w["bytes"] / w["total_s"] / 1e6 for w in ws],
        "app_write": [w["bytes"] / w["app_s"] / 1e6 for w in ws],
        "read": [r["bytes"] / r["read_s"] / 1e6 for r in rs],
    }
med = {s: {m: statistics.median(v[m]) for m in metrics} for s, v in runs.items()}
base = shares[0]
def cell(s, m):
    v = runs[s][m]
    return f"{med[s][m]:.0f} ({min(v):.0f}-{max(v):.0f})" if len(v) > 1 else f"{v[0]:.0f}"
mb = 8 * 4 * int(particles) * int(ranks) / 1e6
out = sys.stdout
print(f"tier split sweep: {ranks} ranks, {servers} servers, {particles} particles/rank ({mb:.1f} MB per run), "
      f"fast=tmpfs slow=disk dir ({slow} MB/s limit; 0 = none)", file=out)
print(f"{repeat} run(s) per point, interleaved; MB/s as median (min-max); ratios of medians vs {base}% fast; "
      f"JSON per run in {work}", file=out)
x = f"x vs {base}%"
print(f"{'fast %':>6} {'write+flush MB/s':>18} {x:>9} {'app write MB/s':>18} {'read MB/s':>18} {x:>9}", file=out)
for s in shares:
    wf, rd = med[s]["write_flush"] / med[base]["write_flush"], med[s]["read"] / med[base]["read"]
    print(f"{s:>6} {cell(s, 'write_flush'):>18} {wf:>9.2f} {cell(s, 'app_write'):>18} {cell(s, 'read'):>18} {rd:>9.2f}",
          file=out)
with open(f"{work}/summary.json", "w") as f:
    json.dump({"ranks": int(ranks), "servers": int(servers), "particles": int(particles), "slow_mbps": int(slow),
               "repeat": repeat, "baseline_share": base, "runs_MBps": runs, "median_MBps": med}, f, indent=1)
if 50 in shares:
    # The round whose 50% write+flush is the median (the lower middle one for an even count).
    order = sorted(range(repeat), key=lambda r: runs[50]["write_flush"][r])
    with open(f"{work}/usage-round", "w") as f:
        print(order[(repeat - 1) // 2] + 1, file=f)
PY
if [[ -f $work/usage-round ]]; then
  usage_round=$(<"$work/usage-round")
  cp "$work/usage50-r$usage_round.csv" bench/tiers/usage-50pct.csv
  python3 bench/plot_usage.py bench/tiers/usage-50pct.csv -o bench/tiers/usage-50pct.svg --trim-idle \
    --title "pdcx tiers: usage during the 50% fast write + flush (round $usage_round of $repeat)"
  echo "usage over time: bench/tiers/usage-50pct.csv, bench/tiers/usage-50pct.svg (50% run of round $usage_round)" >&2
else
  echo "(no 50% point in --shares: bench/tiers/usage-50pct.csv not updated)" >&2
fi
