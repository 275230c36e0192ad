#!/usr/bin/env bash
# Runs an unmodified MPI program with and without libsncl_mpi.so preloaded and requires
# the same output, that the preloaded run served each collective kind (blocking and
# nonblocking) through sncl and at least 90% of all collective calls on every rank, and
# that nothing printed an SNCL warning (a clean teardown prints none).
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
# A clean run, teardown included, prints no SNCL warning.
if grep 'SNCL WARN' "$out/debug.txt" >&2; then
  echo "FAIL: sncl warned under the preload (above)" >&2
  exit 1
fi
# Every kind the program calls must have gone to sncl on every rank; the intercommunicator
# must have gone to MPI, and nothing else: types with gaps, ranks with different layouts,
# zero counts, user and MAXLOC ops and types sncl cannot reduce (short) are served.
for kind in Allreduce Bcast Reduce Allgather Allgatherv Alltoall Alltoallv Gather Gatherv Scatter Scatterv \
            Reduce_scatter Reduce_scatter_block Scan Exscan Barrier \
            Iallreduce Ibcast Ireduce Iallgather Iallgatherv Ialltoall Ialltoallv Igather Igatherv Iscatter \
            Iscatterv Ireduce_scatter Ireduce_scatter_block Iscan Iexscan Ibarrier; do
  kind=MPI_$kind
  ranks=$(grep -cE "^sncl_mpi: rank [0-9]+: $kind: [1-9][0-9]* by sncl" "$out/debug.txt" || true)
  [ "$ranks" -eq "$np" ] || { echo "FAIL: $kind not served by sncl on all $np ranks" >&2; cat "$out/debug.txt" >&2; exit 1; }
done
for kind in MPI_Allreduce; do
  ranks=$(grep -cE "^sncl_mpi: rank [0-9]+: $kind: [0-9]+ by sncl, [1-9][0-9]* by MPI" "$out/debug.txt" || true)
  [ "$ranks" -eq "$np" ] || { echo "FAIL: $kind fallbacks not counted on all ranks" >&2; exit 1; }
done
unexpected=$(grep -E '^sncl_mpi: rank [0-9]+: MPI_[A-Za-z_]+ -> MPI \(' "$out/debug.txt" |
  grep -vE '\(intercommunicator, failed sncl init, or MPI not initialized\)' || true)
[ -z "$unexpected" ] || { echo "$unexpected" >&2; echo "FAIL: calls fell back for another reason" >&2; exit 1; }
# Communicators: the world, two duplicates and a split get sncl comms of their own (a
# duplicate must not share its parent's); MPI_Comm_free releases the three, MPI_Finalize the
# world's (the intercommunicator gets none).
comms=$(grep -cE '^sncl_mpi: rank [0-9]+: sncl comms: 4 built, 3 released at MPI_Comm_free, 1 at MPI_Finalize, 0 by MPI$' \
          "$out/debug.txt" || true)
[ "$comms" -eq "$np" ] || {
  grep 'sncl comms' "$out/debug.txt" >&2
  echo "FAIL: sncl comms not built and released as expected" >&2
  exit 1
}
# The share served, per rank: at least 90% of the collective calls.
shares=$(grep -E '^sncl_mpi: rank [0-9]+: served [0-9]+ of [0-9]+ collective calls' "$out/debug.txt" || true)
echo "$shares"
[ "$(echo "$shares" | grep -c served)" -eq "$np" ] || { echo "FAIL: no served share from every rank" >&2; exit 1; }
echo "$shares" | awk '{ if ($5 * 10 < $7 * 9) bad = 1 } END { exit bad }' ||
  { echo "FAIL: a rank served less than 90% of its collective calls through sncl" >&2; exit 1; }
# Programs that call none of the served functions (here not even MPI) are unaffected.
said=$(LD_PRELOAD=$preload timeout 60 "${mpirun[@]}" sh -c 'echo unaffected' | grep -c '^unaffected$' || true)
[ "$said" -eq "$np" ] || { echo "FAIL: a plain command under the preload printed $said of $np lines" >&2; exit 1; }
echo "OK: $lines identical result lines with and without the preload on $np ranks"
