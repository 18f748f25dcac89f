#!/usr/bin/env bash
# Soak: 2 pdcx servers (`pdcx server start -n 2`) on a fresh root, then pdcx-soak against them
# (1,000 client connections by default). Usage:
#   bench/soak/run.sh [--servers N] [--keep] [-- PDCX-SOAK ARGS...]
# e.g. bench/soak/run.sh -- --seconds 60 --stalled-readers 25 --stalled-writers 25
# Environment: PDCX (the pdcx binary), SOAK (the pdcx-soak binary), PDCX_* server limits.
# Exit status: pdcx-soak's (0: no errors).
set -euo pipefail
servers=2 keep=0 soak_args=()
while (($#)); do
  case $1 in
    --servers) servers=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; soak_args=("$@"); break ;;
    *) soak_args+=("$1"); shift ;;
  esac
done
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
pdcx=${PDCX:-$(command -v pdcx || echo "$target/release/pdcx")}
soak=${SOAK:-$target/release/pdcx-soak}
if [[ ! -x $soak ]]; then
  echo "soak: building pdcx-soak (cargo build --release -p pdcx-soak)" >&2
  (cd "$repo" && cargo build --release -p pdcx-soak)
fi
[[ -x $pdcx ]] || { echo "soak: the pdcx binary is missing (set PDCX)" >&2; exit 2; }
root=$(mktemp -d "${TMPDIR:-/tmp}/pdcx-soak-XXXX")
cleanup() {
  "$pdcx" server stop --root "$root" >/dev/null 2>&1 || true
  if ((keep)); then echo "soak: root kept at $root" >&2; else rm -rf "$root"; fi
}
trap cleanup EXIT
"$pdcx" server start -n "$servers" --root "$root" >/dev/null
echo "soak: $("$pdcx" --version 2>/dev/null || echo pdcx) x $servers servers at $root; $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$soak" --root "$root" "${soak_args[@]}"
