#!/usr/bin/env bash
# A rank lost mid-job (mpi_lost_rank.c), plain and under libsncl_mpi.so: Open MPI 4.1 (no
# ULFM) ends the job in both, naming the process that died; the drop-in must end it as
# surely (within its deadline, SNCL_TIMEOUT_MS), with no wrong result before the loss
# (docs/dropin.md, "After a rank loss").
#   run_mpi_lost_rank.sh <mpi_lost_rank> <libsncl_mpi.so> <nranks> <victim> <at>
set -uo pipefail
prog=$1 lib=$2 np=$3 victim=$4 at=$((10#$5))  # CMake's random digits may lead with 0
preload=${SNCL_SANITIZER_RUNTIME:+$SNCL_SANITIZER_RUNTIME }$lib
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
fail=0
for mode in plain sncl; do
  start=$(date +%s)
  if [ $mode = sncl ]; then
    SNCL_TIMEOUT_MS=5000 LD_PRELOAD=$preload timeout -k 5 60 "${mpirun[@]}" "$prog" "$victim" "$at" >"$out/$mode" 2>&1
  else
    timeout -k 5 60 "${mpirun[@]}" "$prog" "$victim" "$at" >"$out/$mode" 2>&1
  fi
  rc=$? secs=$(( $(date +%s) - start ))
  echo "$mode: exit $rc after $secs s"
  # mpirun exits 137 itself (the lost process's signal); timeout's 124 or the full minute: a hang.
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $secs -ge 60 ]; then
    echo "FAIL ($mode): the job did not end with an error (exit $rc after $secs s: 0 = went on, 124 = hung)"; fail=1
  fi
  if grep -q 'wrong' "$out/$mode"; then echo "FAIL ($mode): a wrong result before the loss"; fail=1; fi
  if ! grep -q "killing itself before call $at" "$out/$mode"; then echo "FAIL ($mode): the victim never got there"; fail=1; fi
  if ! grep -qiE 'signal 9|killed' "$out/$mode"; then echo "FAIL ($mode): mpirun did not name the lost process"; fail=1; fi
  [ $fail -eq 0 ] || cat "$out/$mode"
done
exit $fail
