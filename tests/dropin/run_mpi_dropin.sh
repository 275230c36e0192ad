#!/usr/bin/env bash
# Runs an unmodified MPI program with and without libsncl_mpi.so preloaded and requires
# the same output, and that the preloaded run served each collective kind through sncl.
#   run_mpi_dropin.sh <mpi_program> <libsncl_mpi.so> <nranks>
set -euo pipefail
prog=$1 lib=$2 np=$3
# A sanitized build's library needs its runtime loaded first, even into mpirun and sh.
preload=${SNCL_SANITIZER_RUNTIME:+$SNCL_SANITIZER_RUNTIME }$lib
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np"
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)

timeout 120 "${mpirun[@]}" "$prog" >"$out/plain.txt"
SNCL_MPI_DEBUG=1 LD_PRELOAD=$preload timeout 120 "${mpirun[@]}" "$prog" >"$out/sncl.txt" 2>"$out/debug.txt" || {
  cat "$out/debug.txt" >&2
  exit 1
}
if ! diff -u "$out/plain.txt" "$out/sncl.txt"; then
  echo "FAIL: results differ under the preload" >&2
  exit 1
fi
lines=$(wc -l <"$out/plain.txt")
[ "$lines" -gt 0 ] || { echo "FAIL: the program printed nothing" >&2; exit 1; }
grep '^sncl_mpi:' "$out/debug.txt" | grep 'rank 0:' || true
# Every kind the program calls must have gone to sncl on every rank; the fallback cases
# (derived type, logical/user/MAXLOC ops, short) must have gone to MPI.
for kind in MPI_Allreduce MPI_Bcast MPI_Reduce MPI_Allgather MPI_Reduce_scatter_block MPI_Alltoall MPI_Barrier; do
  ranks=$(grep -cE "^sncl_mpi: rank [0-9]+: $kind: [1-9][0-9]* by sncl" "$out/debug.txt" || true)
  [ "$ranks" -eq "$np" ] || { echo "FAIL: $kind not served by sncl on all $np ranks" >&2; cat "$out/debug.txt" >&2; exit 1; }
done
for kind in MPI_Allreduce MPI_Bcast; do
  ranks=$(grep -cE "^sncl_mpi: rank [0-9]+: $kind: [0-9]+ by sncl, [1-9][0-9]* by MPI" "$out/debug.txt" || true)
  [ "$ranks" -eq "$np" ] || { echo "FAIL: $kind fallbacks not counted on all ranks" >&2; exit 1; }
done
# Programs that call none of the served functions (here not even MPI) are unaffected.
said=$(LD_PRELOAD=$preload timeout 60 "${mpirun[@]}" sh -c 'echo unaffected' | grep -c '^unaffected$' || true)
[ "$said" -eq "$np" ] || { echo "FAIL: a plain command under the preload printed $said of $np lines" >&2; exit 1; }
echo "OK: $lines identical result lines with and without the preload on $np ranks"
