#!/usr/bin/env bash
# Codec benchmark: compression ratio, encode/decode speed and ZFP max error per codec on
# VPIC-like particle data (crates/codec/examples/codec_bench.rs; data: pdcx_codec::synth).
#
#   bench/codec/run.sh                 vpic float32 (4 Mi particles), vpic float64 (2 Mi), uniform float32 (4 Mi)
#   bench/codec/run.sh --quick         1 Mi particles, one timed pass (a smoke test)
#   bench/codec/run.sh -- ARGS...      one run of codec_bench with ARGS (see its --help)
#
# Prints markdown and keeps a copy in bench/out/codec-<date>.md (with the machine description).
set -euo pipefail
cd "$(dirname "$0")/../.."

particles=$((4 << 20)) repeat=3 custom=()
while (($#)); do
  case "$1" in
    --quick) particles=$((1 << 20)) repeat=1 ;;
    --) shift; custom=("$@"); break ;;
    *) echo "usage: $0 [--quick] [-- codec_bench args]" >&2; exit 2 ;;
  esac
  shift
done

dpkg -s libzfp-dev >/dev/null 2>&1 || { echo "libzfp-dev is missing: run scripts/setup.sh" >&2; exit 1; }
cargo build --release -q -p pdcx-codec --example codec_bench
bin=target/release/examples/codec_bench
mkdir -p bench/out
out=bench/out/codec-$(date +%Y%m%d-%H%M%S).md

machine() {
  echo "- machine: $(nproc) vCPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/Mem:/{print $2}') GiB RAM, $(uname -sr)"
  echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the 2 vCPUs are shared with other work)"
  echo "- $(rustc --version), libzfp $(dpkg-query -W -f='${Version}' libzfp-dev 2>/dev/null), commit $(git rev-parse --short HEAD)"
}

{
  echo "# codec benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "command: \`bench/codec/run.sh $*\`"
  echo
  machine
  if ((${#custom[@]})); then
    echo; "$bin" "${custom[@]}"
  else
    # float64 with half the particles: the same number of bytes as float32.
    for cfg in "vpic f32 $particles" "vpic f64 $((particles / 2))" "uniform f32 $particles"; do
      set -- $cfg
      echo; "$bin" --data "$1" --float "$2" --particles "$3" --repeat "$repeat"
    done
  fi
} 2>&1 | tee "$out"
echo
echo "saved to $out"
