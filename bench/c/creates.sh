#!/usr/bin/env bash
# Create rates alone, interleaved, in a minute (the meta kernels' bare-create modes of run.sh):
#   bench/c/creates.sh [--rounds N] [--objects M] [--servers S]
# Per round, on fresh servers: [before build: PDCobj_create], PDCobj_create, PDCXobj_create_many
# (1024 names per call), then HDF5 H5Dcreate of 1-element datasets; 1 rank each. Prints every
# run and the median (min-max) per figure.
# Environment: PDCX (the pdcx binary; default pdcx on PATH), PDC_CFLAGS / PDC_LIBS (default
# `pkg-config pdcx`); for a before/after run BEFORE_PDCX, BEFORE_PDC_CFLAGS, BEFORE_PDC_LIBS.
set -euo pipefail
rounds=5 objects=20000 servers=1
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --objects) objects=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "creates.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
cdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d /tmp/pdcx-creates-XXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pdcx=${PDCX:-$(command -v pdcx)}
make -s -C "$cdir" BUILD="$work/after" "$work/after/meta_pdc" >/dev/null
make -s -C "$cdir" BUILD="$work/after" "$work/after/meta_hdf5" >/dev/null
builds=(after)
if [[ -n ${BEFORE_PDCX:-} ]]; then
  make -s -C "$cdir" BUILD="$work/before" PDC_CFLAGS="${BEFORE_PDC_CFLAGS:-}" PDC_LIBS="$BEFORE_PDC_LIBS" \
    "$work/before/meta_pdc" >/dev/null
  builds=(before after)
fi
results=$work/results.txt
run_pdc() { # build mode
  local b=$1 mode=$2 bin=$pdcx root r
  [[ $b == before ]] && bin=$BEFORE_PDCX
  root=$work/root-$b-$mode
  "$bin" server start -n "$servers" --root "$root" >/dev/null
  r=$(PDCX_ROOT=$root mpirun --allow-run-as-root --oversubscribe --bind-to none -x PDCX_ROOT -n 1 \
    "$work/$b/meta_pdc" -d "$root/f" -S "$servers" -p c -m "$objects" -M "$mode" -L x |
    sed -n 's/.*creates_per_s=\([0-9]*\) .*mode=\([a-z-]*\).*/\1 \2/p')
  "$bin" server stop --root "$root" >/dev/null
  rm -rf "$root"
  if [[ ${r#* } == unsupported ]]; then return; fi
  echo "$b $mode ${r%% *} load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$results"
}
for ((round = 1; round <= rounds; round++)); do
  for b in "${builds[@]}"; do run_pdc "$b" create; done
  run_pdc after create-many
  mkdir -p "$work/h5"
  r=$(mpirun --allow-run-as-root -n 1 "$work/after/meta_hdf5" -d "$work/h5" -S 1 -p c -m "$objects" -M create |
    sed -n 's/.*creates_per_s=\([0-9]*\).*/\1/p')
  rm -rf "$work/h5"
  echo "hdf5 dataset-create $r load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$results"
done
echo "# medians of $rounds rounds, $objects objects, 1 rank, $servers server(s) (creates/s)"
python3 - "$results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    b, mode, v, _ = line.split()
    runs.setdefault(f"{b} {mode}", []).append(float(v))
for k, v in runs.items():
    print(f"{k:28s} {statistics.median(v):>9,.0f} ({min(v):,.0f}-{max(v):,.0f})")
PY
