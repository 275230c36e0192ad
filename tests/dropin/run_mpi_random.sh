#!/usr/bin/env bash
# Runs mpi_random without the preload (its reference path against MPI itself), then under
# libsncl_mpi.so with SNCL_MPI_DEBUG=1. Both must report no wrong result, and the drop-in
# must have served exactly the calls the program expected it to serve (every served kind
# on every rank; now every call): a drop-in that passed everything to MPI would otherwise
# pass this test. (The fallback path is mpi_dropin's: an intercommunicator.)
#   run_mpi_random.sh <mpi_random> <libsncl_mpi.so> <nranks> [mpi_random arguments...]
set -euo pipefail
prog=$1 lib=$2 np=$3
shift 3
# A sanitized build's library needs its runtime loaded first, even into mpirun and sh.
preload=${SNCL_SANITIZER_RUNTIME:+$SNCL_SANITIZER_RUNTIME }$lib
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np"
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
fail() { echo "FAIL: $*" >&2; exit 1; }

timeout 120 "${mpirun[@]}" "$prog" "$@" >"$out/plain.txt" 2>"$out/plain.err" || {
  cat "$out/plain.txt" "$out/plain.err" >&2
  fail "mpi_random failed without the preload (the reference path or the program is wrong)"
}
grep '^mpi_random: seed' "$out/plain.txt" | sed 's/^/without the preload: /'
SNCL_MPI_DEBUG=1 LD_PRELOAD=$preload timeout 120 "${mpirun[@]}" "$prog" "$@" >"$out/sncl.txt" 2>"$out/debug.txt" || {
  cat "$out/sncl.txt" >&2
  grep -v '^mpi_random: expect\|^sncl_mpi: rank [0-9]*: MPI_' "$out/debug.txt" >&2 || true
  fail "mpi_random failed under the preload"
}
grep '^mpi_random: seed' "$out/sncl.txt" | sed 's/^/under the preload:    /'
grep -q ', wrong 0,' "$out/sncl.txt" || fail "no summary line under the preload"

# What the drop-in counted, rank by rank and kind by kind, against what the program
# expected.
grep -E '^sncl_mpi: rank [0-9]+: MPI_[A-Za-z_]+: [0-9]+ by sncl, [0-9]+ by MPI$' "$out/debug.txt" |
  sed 's/^sncl_mpi: //' | sort >"$out/counted.txt" || true
grep '^mpi_random: expect ' "$out/debug.txt" | sed 's/^mpi_random: expect //' | sort >"$out/expected.txt" || true
diff -u "$out/expected.txt" "$out/counted.txt" || fail "the drop-in served other calls than expected (- expected, + counted)"
for kind in MPI_Allreduce MPI_Bcast MPI_Reduce MPI_Allgather MPI_Reduce_scatter_block MPI_Alltoall MPI_Gather MPI_Scatter MPI_Barrier; do
  ranks=$(grep -cE "^rank [0-9]+: $kind: [1-9][0-9]* by sncl" "$out/counted.txt" || true)
  [ "$ranks" -eq "$np" ] || fail "$kind was not served by sncl on all $np ranks"
done
if grep 'SNCL WARN' "$out/debug.txt" >&2; then fail "sncl warned under the preload (above)"; fi
served=$(awk '{s += $(NF-5)} END {print s}' "$out/counted.txt")
passed=$(awk '{s += $(NF-2)} END {print s}' "$out/counted.txt")
echo "OK: $np ranks, no wrong result with or without the preload; the drop-in served $served rank-calls and passed $passed through, as expected"
