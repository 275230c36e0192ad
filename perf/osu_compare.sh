#!/usr/bin/env bash
# osu_allreduce with plain MPI and under the sncl drop-in, side by side (microseconds).
#   perf/osu_compare.sh <build> [np] [osu_allreduce arguments...]
# Both runs must check every result; the script fails if either does not.
set -euo pipefail
build=$1 np=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
prog=$build/perf/osu_allreduce lib=$build/bindings/mpi/libsncl_mpi.so
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
export SNCL_SOCKET_IFNAME=${SNCL_SOCKET_IFNAME:-lo}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
timeout 600 "${mpirun[@]}" "$prog" "$@" >"$out/mpi.txt"
LD_PRELOAD=$lib timeout 600 "${mpirun[@]}" "$prog" "$@" >"$out/sncl.txt"
echo "# $np ranks; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '# %10s | %14s %14s | %14s %14s\n' bytes "MPI Allreduce" "MPI Iallr+Wait" "sncl Allreduce" "sncl Iallr+Wait"
paste <(grep -v '^#' "$out/mpi.txt") <(grep -v '^#' "$out/sncl.txt") |
  awk '{ printf "  %10s | %14s %14s | %14s %14s\n", $1, $2, $3, $5, $6 }'
