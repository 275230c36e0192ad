#!/usr/bin/env bash
# Runs MPICH's collective tests (built by fetch_and_build.sh) at their testlist process
# counts, under LD_PRELOAD=libsncl_mpi.so and plain, with a per-run timeout, two runs at
# a time. A run passes when it exits 0 and prints MPICH's "No Errors". Prints one row per
# run (plain, preloaded, collective calls served by sncl over all ranks) and fails when a
# run passes plain but not preloaded (a hang counts as a failure).
#   run_suite.sh <out of fetch_and_build.sh> <libsncl_mpi.so> [parallel runs (2)] [name regex]
# MPICH_COLL_TIMEOUT: seconds per run (40). MPICH_COLL_TABLE=<file>: also writes the rows
# per test as a Markdown table (runs passed plain and preloaded, share served).
# MPICH_COLL_PLAIN=failed: the plain run only where the preloaded one failed (a preloaded
# pass needs no comparison; half the time, as ctest runs it); "all" (default) runs both.
set -uo pipefail
out=$(cd "$1" && pwd) lib=$2 jobs=${3:-2} only=${4:-[^ ]+}
limit=${MPICH_COLL_TIMEOUT:-40}
preload=${SNCL_SANITIZER_RUNTIME:+$SNCL_SANITIZER_RUNTIME }$lib
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run_one() {  # index name ranks [testlist fields...]
  local i=$1 name=$2 np=$3
  shift 3
  local args=() f
  for f in "$@"; do
    case $f in arg=*) args+=("${f#arg=}") ;; esac  # timeLimit=, mem=, strict=: not ours to use
  done
  # A session directory of its own: Open MPI 4.1 creates and removes the shared one
  # (/tmp/ompi.<host>.<uid>) at every launch, and a launch that raced another's removal
  # failed in orte_init ("File exists"; one CI run).
  mkdir -p "$logs/session.$i"
  local mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl_tcp_if_include lo
                --mca oob_tcp_if_include lo --mca orte_tmpdir_base "$logs/session.$i" "$out/bin/$name" "${args[@]}")
  verdict() {  # exit status, log: PASS, HANG or FAIL
    if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then echo HANG
    elif [ "$1" -eq 0 ] && grep -q 'No Errors' "$2"; then echo PASS
    else echo FAIL; fi
  }
  local t0 t1 plain sncl rc
  t0=$(date +%s.%N)
  SNCL_MPI_DEBUG=1 SNCL_TIMEOUT_MS=${SNCL_TIMEOUT_MS:-10000} LD_PRELOAD=$preload \
    timeout -k 5 "$limit" "${mpirun[@]}" >"$logs/$i.sncl" 2>&1
  rc=$?
  sncl=$(verdict $rc "$logs/$i.sncl")
  plain=-
  if [ "${MPICH_COLL_PLAIN:-all}" = all ] || [ "$sncl" != PASS ]; then
    timeout -k 5 "$limit" "${mpirun[@]}" >"$logs/$i.plain" 2>&1
    plain=$(verdict $? "$logs/$i.plain")
  fi
  t1=$(date +%s.%N)
  # "served S of T collective calls" per rank; a rank that made no collective call says nothing.
  local served
  served=$(awk '/^sncl_mpi: rank [0-9]+: served [0-9]+ of [0-9]+ collective calls/ { s += $5; t += $7 }
                END { printf "%d %d", s, t }' "$logs/$i.sncl")
  printf '%s %s %s %s %s %.1f %s\n' "$name" "$np" "$plain" "$sncl" "$served" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "${args[*]:-}" \
    >"$logs/$i.row"
  if [ "$plain" = PASS ] && [ "$sncl" != PASS ]; then
    { echo "--- $name $np ${args[*]:-} under the preload: $sncl"; grep -v '^sncl_mpi: rank [0-9]*: MPI_' "$logs/$i.sncl" | tail -20; } \
      >"$logs/$i.why"
  fi
}
export -f run_one
export out preload limit logs

start=$(date +%s)
# (xargs -L would join a line with a trailing blank to the next.)
grep -E "^($only)( |$)" "$out/testlist" | sed -E 's/[[:space:]]+$//' | awk '{ print NR, $0 }' | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _
printf '%-22s %3s %-5s %-5s %9s %9s %6s  %s\n' test ranks plain sncl served calls secs args
rows=$(cat "$logs"/*.row 2>/dev/null | sort -k1,1 -k2,2n)
echo "$rows" | awk '{ args = ""; for (i = 8; i <= NF; ++i) args = args " " $i
  printf "%-22s %3s %-5s %-5s %9s %9s %6s %s\n", $1, $2, $3, $4, $5, $6, $7, args }'
cat "$logs"/*.why 2>/dev/null
if [ -n "${MPICH_COLL_TABLE:-}" ]; then
  echo "$rows" | grep . | awk '
    { if (!($1 in runs)) order[++n] = $1
      runs[$1]++; plain[$1] += $3 == "PASS"; pre[$1] += $4 == "PASS"; s[$1] += $5; t[$1] += $6
      np[$1] = np[$1] (np[$1] == "" ? "" : ",") $2 }
    END { print "| test | ranks | plain | preloaded | calls served |"; print "|---|---|---|---|---|"
          for (i = 1; i <= n; ++i) { k = order[i]
            printf "| %s | %s | %d/%d | %d/%d | %s |\n", k, np[k], plain[k], runs[k], pre[k], runs[k],
                   t[k] ? sprintf("%d of %d (%.1f%%)", s[k], t[k], 100 * s[k] / t[k]) : "none" } }' >"$MPICH_COLL_TABLE"
fi
echo "$rows" | grep . | awk -v secs=$(( $(date +%s) - start )) '
  { n++; if ($3 == "PASS") pp++; if ($4 == "PASS") sp++; if ($4 == "HANG") hang++
    if ($3 == "PASS" && $4 != "PASS") bad++; s += $5; t += $6 }
  END { fmt = "mpich_coll: %d runs: %d pass plain (- not run), %d pass preloaded, %d preload-only failures, %d hangs preloaded; "
        fmt = fmt "sncl served %d of %d collective calls (%.1f%%); %d s\n"
        printf fmt, n, pp, sp, bad, hang, s, t, t ? 100 * s / t : 0, secs
        exit bad > 0 }'
