#!/usr/bin/env bash
# S3 tier benchmark: starts a private versitygw (scripts/s3server.sh), then measures in one run
#   (a) multipart upload throughput, pdcx S3 tier vs raw object_store put_multipart
#       (same part size, same parts in flight), and
#   (b) ranged-read throughput (1 MiB ranges, 1 and 4 in flight), pdcx vs raw object_store
#       get_range,
# prints the table and writes it to bench/s3/RESULTS.md (previous results are replaced).
# The baseline is the raw object_store client (the library the tier is built on), so no Python
# package is needed. Arguments go to the example, e.g.:
#   bench/s3/run.sh --blobs 8 --size-mib 64 --part-mib 8 --concurrency 8 --reads 256 --reps 5
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/s3/RESULTS.md

bash scripts/s3server.sh install
work=$(mktemp -d)
# The server is killed by PID whatever happens below.
trap 'bash scripts/s3server.sh stop "$work" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
eval "$(bash scripts/s3server.sh start "$work")"
export PDCX_TEST_S3_ENDPOINT PDCX_TEST_S3_BUCKET PDCX_TEST_S3_ACCESS_KEY_ID PDCX_TEST_S3_SECRET_ACCESS_KEY

cargo build --release -q -p pdcx-tiers --example s3_bench
args=("$@")
load=$(cut -d' ' -f1-3 /proc/loadavg)
table=$(target/release/examples/s3_bench "${args[@]}" 2>"$work/reps.txt")
cat "$work/reps.txt"
echo "$table"

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
{
  echo "# S3 tier benchmark"
  echo
  echo "Command: \`bench/s3/run.sh${args[*]:+ ${args[*]}}\` ($(date -u +%Y-%m-%d))"
  echo
  echo "Machine: $(nproc) vCPU VM ($cpu), $(free -g | awk '/Mem:/{print $2}') GiB RAM, $(uname -sr)."
  echo "Load average when it started: $load (the VM is shared with other builds; numbers move ±30%"
  echo "between runs, so compare pdcx and raw within one run)."
  echo "Server: versitygw $(grep -m1 '^VERSION=' scripts/s3server.sh | cut -d= -f2) (posix backend on $(df -T "$work" | awk 'NR==2{print $2}'),"
  echo "127.0.0.1, keep-alive), on the same 2 vCPUs as the client."
  echo
  echo "Baseline: raw \`object_store\` (same crate version as the tier, same part size, same parts"
  echo "in flight, same 2-worker tokio runtime) fed zero-copy \`Bytes\`; the tier copies each part out"
  echo "of the caller's slice because the Tier API borrows the data. Median of the repetitions;"
  echo "pdcx and raw take turns going first. Target: pdcx ≥ 80% of raw."
  echo
  echo "$table" | grep -v '^#'
  echo
  echo "Parameters: $(echo "$table" | grep '^#' | sed 's/^# //')"
  echo
  echo "Per repetition (MiB/s):"
  echo
  sed 's/^/    /' "$work/reps.txt"
} >"$out"
echo "wrote $out"
