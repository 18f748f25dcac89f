#!/usr/bin/env bash
# One MPI rank of a profiled kernel (bench/profile/run.sh): runs the kernel, optionally under
# `strace -c -f`, then records what the kernel cost this rank. The kernel is this shell's
# child, so once it has been reaped the shell's /proc/$$/stat (cutime, cstime) and
# /proc/$$/io hold the kernel's CPU time and I/O counters (the kernel adds a reaped child's
# counters to its parent's).
# Usage: rank.sh OUTDIR TRACE KERNEL ARGS...   TRACE: 0 none, 1 strace -c -f, 2 perf stat
# ($PROFILE_PERF_EVENTS: the syscall tracepoints; perf counts the threads the kernel starts).
set -u
out=$1 trace=$2
shift 2
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
rc=0
if ((trace == 1)); then
  strace -f -c -o "$out/strace-client-$rank.txt" -- "$@" || rc=$?
elif ((trace == 2)); then
  perf stat -x, -o "$out/perf-client-$rank.txt" -e "$PROFILE_PERF_EVENTS" -- "$@" || rc=$?
else
  "$@" || rc=$?
fi
read -r stat </proc/$$/stat
# Fields after the ") " that ends the command name: state is field 3; cutime, cstime are 16, 17.
rest=${stat##*) }
read -r -a f <<<"$rest"
printf 'cutime=%s cstime=%s clk_tck=%s\n' "${f[13]}" "${f[14]}" "$(getconf CLK_TCK)" >"$out/client-$rank.cpu"
cat /proc/$$/io >"$out/client-$rank.io"
exit "$rc"
