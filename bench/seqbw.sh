#!/usr/bin/env bash
# Sequential write/read bandwidth of a directory, as the reference for the
# VPIC/BDCATS numbers. See bench/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/seqbw.sh DIR [SIZE_MB]

Measures DIR's sequential write and read bandwidth with fio, two ways:

- the device (the ceiling): direct I/O (O_DIRECT, libaio, queue depth 16),
  2 jobs of SIZE_MB/2 each, bs=1M; the write goes over files fio preallocates
  and ends with an fsync, the read follows;
- buffered (through the page cache, psync): the same sizes; the write includes
  a final fsync, the read starts after fio drops the files from the page cache.

Falls back to dd (oflag=direct / conv=fdatasync writes, iflag=direct /
iflag=nocache reads) if fio is not installed. SIZE_MB (units of 2^20 bytes)
defaults to 1024; results are in MB/s with MB = 10^6 bytes. The test files
are removed.

Prints one line:
  seq_write_MBps=<f> seq_read_MBps=<f> dev_write_MBps=<f> dev_read_MBps=<f> tool=<fio|dd>
(seq_*: buffered; dev_*: direct I/O, the device's figure).

Environment: SEQBW_TOOL=dd forces the dd fallback.
EOF
}

case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
dir=$1
size_mb=${2:-1024}
if ! [[ $size_mb =~ ^[0-9]+$ ]] || ((size_mb < 2)); then
  echo "seqbw.sh: SIZE_MB must be an integer >= 2" >&2
  exit 2
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/seqbw.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

tool=${SEQBW_TOOL:-fio}
if [[ $tool == fio ]] && ! command -v fio >/dev/null 2>&1; then
  echo "seqbw.sh: fio not found, falling back to dd" >&2
  tool="dd"
fi

# bytes/second of fio's aggregated (group_reporting) result; $1 = json file, $2 = read|write
fio_bw() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["jobs"][0][sys.argv[2]]["bw_bytes"] / 1e6)' "$1" "$2"
}

if [[ $tool == fio ]]; then
  common=(--name=seqbw --directory="$tmp" --numjobs=2 --size="$((size_mb / 2))M"
    --bs=1M --direct=0 --ioengine=psync --group_reporting --output-format=json)
  fio "${common[@]}" --rw=write --end_fsync=1 --output="$tmp/write.json" >/dev/null
  # invalidate=1 (fio's default): drop the files' pages first, so this reads storage.
  fio "${common[@]}" --rw=read --invalidate=1 --output="$tmp/read.json" >/dev/null
  wbw=$(fio_bw "$tmp/write.json" write)
  rbw=$(fio_bw "$tmp/read.json" read)
  rm -f "$tmp"/seqbw.*
  # The device: O_DIRECT with 16 requests in flight per job, over preallocated files
  # (fallocate=native, fio's default where supported), then read back the same way.
  direct=(--name=devbw --directory="$tmp" --numjobs=2 --size="$((size_mb / 2))M"
    --bs=1M --direct=1 --ioengine=libaio --iodepth=16 --fallocate=native
    --group_reporting --output-format=json)
  fio "${direct[@]}" --rw=write --end_fsync=1 --output="$tmp/dwrite.json" >/dev/null
  fio "${direct[@]}" --rw=read --output="$tmp/dread.json" >/dev/null
  dwbw=$(fio_bw "$tmp/dwrite.json" write)
  drbw=$(fio_bw "$tmp/dread.json" read)
else
  now() { date +%s.%N; }
  f="$tmp/seqbw.dd"
  t0=$(now)
  dd if=/dev/zero of="$f" bs=1M count="$size_mb" conv=fdatasync status=none
  t1=$(now)
  # Drop this file (only) from the page cache, then read it back.
  dd if=/dev/null of="$f" oflag=nocache conv=notrunc,fdatasync count=0 status=none
  t2=$(now)
  dd if="$f" of=/dev/null bs=1M iflag=nocache status=none
  t3=$(now)
  bytes=$((size_mb * 1048576))
  wbw=$(awk -v b="$bytes" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f", b / (z - a) / 1e6 }')
  rbw=$(awk -v b="$bytes" -v a="$t2" -v z="$t3" 'BEGIN { printf "%.1f", b / (z - a) / 1e6 }')
  # The device: O_DIRECT, one request in flight (dd has no queue depth).
  d="$tmp/seqbw.direct"
  t0=$(now)
  dd if=/dev/zero of="$d" bs=1M count="$size_mb" oflag=direct conv=fsync status=none
  t1=$(now)
  dd if="$d" of=/dev/null bs=1M iflag=direct status=none
  t2=$(now)
  dwbw=$(awk -v b="$bytes" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f", b / (z - a) / 1e6 }')
  drbw=$(awk -v b="$bytes" -v a="$t1" -v z="$t2" 'BEGIN { printf "%.1f", b / (z - a) / 1e6 }')
fi

printf 'seq_write_MBps=%.1f seq_read_MBps=%.1f dev_write_MBps=%.1f dev_read_MBps=%.1f tool=%s\n' \
  "$wbw" "$rbw" "$dwbw" "$drbw" "$tool"
