#!/usr/bin/env bash
# 4 KiB write + wait latency, two builds interleaved: p50 of the C kernel `small_pdc -M write`
# (1 rank under mpirun as bench/c/run.sh runs it, 1000 ops) per case and build, fresh servers
# (`--cache-mb 0`) per run. The cases separate what bench/c/run.sh's one row mixes:
#   1 server, the writer's server owns the object (`-p pclean`), memory, unpinned / split
#   2 servers, another server owns it (`-p smallmem`, run.sh's memory row), unpinned / split
#   1 server, owner-local, local durability
# `split` pins the servers to CPU 0 and the client to CPU 1 (`taskset`): a wake-up then always
# crosses CPUs, the case the adaptive socket polling is for (docs/ARCHITECTURE.md, channel).
#
#   bench/c/small-ab.sh ROUNDS BEFORE_PDCX BEFORE_KERNELS AFTER_PDCX AFTER_KERNELS
#
# SMALL_AB_MODE=read measures 4 KiB read + wait instead (each run writes its 1000 slots at
# `local`, then reads them back: the p50 of the reads), in run.sh's case (2 servers) and
# owner-local (1 server). SMALL_AB_MODE=vpic runs the VPIC write kernel instead (4 ranks,
# 1,048,576 particles each, 2 servers, `local` and `memory`; a fresh deployment per run) and
# prints mbps=X.
# *_KERNELS: a directory with `small_pdc` built against that build's libpdcx (bench/c/run.sh
# leaves them in its work dir: build/ and build-before/). Prints one line per run:
#   round=R case=SERVERS-PREFIX-DURABILITY-PIN build=before|after load=L p50_us=X
set -u
if (($# != 5)); then
  sed -n '2,20p' "$0"
  exit 2
fi
rounds=$1
mode=${SMALL_AB_MODE:-write}
m=(-M write)
cases=("1 pclean memory free" "1 pclean memory split" "2 smallmem memory free"
  "2 smallmem memory split" "1 pclean local free")
if [[ $mode == read ]]; then
  m=()
  cases=("2 small local free" "1 pclean local free")
elif [[ $mode == vpic ]]; then
  cases=("2 one local free" "2 onemem memory free")
fi
builds=("before $2 $3" "after $4 $5")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
one() { # round name bin kernels servers prefix durability pin
  local r=$1 name=$2 bin=$3 kd=$4 servers=$5 pfx=$6 dur=$7 pin=$8 s=() c=() y=() root out
  [[ $pin == split ]] && s=(taskset -c 0) c=(taskset -c 1)
  [[ $dur == memory ]] && y=(-y memory)
  root=$(mktemp -d "${TMPDIR:-/tmp}/small-ab.XXXX")
  "${s[@]}" "$bin" server start -n "$servers" --root "$root" --cache-mb 0 >/dev/null 2>&1
  if [[ $mode == vpic ]]; then
    out=$(PDCX_ROOT=$root mpirun --allow-run-as-root --oversubscribe --bind-to none \
      --mca mpi_yield_when_idle 1 -x PDCX_ROOT -n 4 "$kd/vpic_pdc" -d "$root/d" -S "$servers" \
      -n 1048576 -p "$pfx" "${y[@]}" 2>&1 | grep '^RESULT' | grep -o ' mbps=[0-9.]*' | tr -d ' ')
    echo "round=$r case=$servers-$pfx-$dur-$pin build=$name load=$(cut -d' ' -f1 /proc/loadavg) ${out:-mbps=FAILED}"
    "$bin" server stop --root "$root" >/dev/null 2>&1
    rm -rf "$root"
    return
  fi
  out=$(PDCX_ROOT=$root "${c[@]}" mpirun --allow-run-as-root --oversubscribe --bind-to none \
    --mca mpi_yield_when_idle 1 -x PDCX_ROOT -n 1 "$kd/small_pdc" -d "$root/d" -S "$servers" \
    -k 1000 -p "$pfx" "${y[@]}" "${m[@]}" 2>&1 | grep "mode=$mode" | grep -o 'p50_us=[0-9.]*')
  echo "round=$r case=$servers-$pfx-$dur-$pin build=$name load=$(cut -d' ' -f1 /proc/loadavg) ${out:-p50_us=FAILED}"
  "$bin" server stop --root "$root" >/dev/null 2>&1
  rm -rf "$root"
}
for r in $(seq "$rounds"); do
  for cs in "${cases[@]}"; do
    for b in "${builds[@]}"; do
      # shellcheck disable=SC2086 # word splitting of the two lists is intended
      one "$r" $b $cs
    done
  done
done
