#!/usr/bin/env bash
# Scaling: the VPIC write, BDCATS read and 4 KiB write/read kernels with
# 1, 2, 4, 8 ranks and 1 and 2 servers (weak scaling: N particles per rank, K 4 KiB ops per
# rank), each configuration one bench/profile/run.sh --no-strace on fresh servers; prints
# the cost per byte (us/MB, server CPU s/GB), the 4 KiB latencies and the servers' peak
# memory under load (VmHWM, reset before each phase).
set -euo pipefail

usage() {
  cat <<'EOF2'
Usage: bench/profile/scale.sh [--ranks "1 2 4 8"] [--servers "1 2"] [--particles N]
                              [--ops K] [--cache-mb MB] [--out FILE]

  --ranks LIST     rank counts (default "1 2 4 8")
  --servers LIST   server counts (default "1 2")
  --particles N    particles per rank (default 524288: 16 MiB per rank)
  --ops K          4 KiB operations per rank (default 300)
  --cache-mb MB    data cache of each server (default 0)
  --out FILE       append the table to FILE (default bench/out/scale-last.md)
Environment: PDCX, PDC_CFLAGS / PDC_LIBS as bench/profile/run.sh.
EOF2
}

rank_list="1 2 4 8" server_list="1 2" particles=524288 ops=300 cache_mb=0 out_md=""
cmdline="bench/profile/scale.sh${*:+ $(printf "%q " "$@")}"
while (($#)); do
  case $1 in
    --ranks) rank_list=${2:?}; shift 2 ;;
    --servers) server_list=${2:?}; shift 2 ;;
    --particles) particles=${2:?}; shift 2 ;;
    --ops) ops=${2:?}; shift 2 ;;
    --cache-mb) cache_mb=${2:?}; shift 2 ;;
    --out) out_md=${2:?}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scale: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
pdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$pdir/../.." && pwd)
: "${out_md:=$repo/bench/out/scale-last.md}"
mkdir -p "$repo/bench/out"
work=$(mktemp -d "$repo/bench/out/scale-$(date +%Y%m%d-%H%M%S)-XXXX")
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
make -s -C "$repo/bench/c" BUILD="$work/build" pdc
jsons=()
for s in $server_list; do
  for r in $rank_list; do
    printf '\033[1m[scale]\033[0m %s servers, %s ranks\n' "$s" "$r" >&2
    bash "$pdir/run.sh" --no-strace --bin "$work/build" --servers "$s" --ranks "$r" --small-ranks "$r" \
      --particles "$particles" --ops "$ops" --cache-mb "$cache_mb" --label "scale S=$s R=$r" \
      --out "$work/profiles.md" --json "$work/s$s-r$r.json" >"$work/s$s-r$r.log" 2>&1 ||
      echo "scale: $s servers, $r ranks failed (log: $work/s$s-r$r.log); its row shows FAILED" >&2
    jsons+=("$work/s$s-r$r.json")
  done
done
pdcx_bin=${PDCX:-$(command -v pdcx || true)}
python3 "$pdir/scale.py" "${jsons[@]}" --pdcx "$pdcx_bin" --lib "$(ldd "$work/build/vpic_pdc" | awk '/libpdcx/ {print $3}')" \
  --particles "$particles" --ops "$ops" --cache-mb "$cache_mb" \
  --load "$load_start; after: $(cut -d' ' -f1-3 /proc/loadavg)" --cmd "$cmdline" --append "$out_md"
printf '\033[1m[scale]\033[0m done; per-configuration profiles in %s/profiles.md\n' "$work" >&2
