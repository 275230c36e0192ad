#!/usr/bin/env bash
# Correctness sweep: every *_perf binary with every datatype and op (-d all -o all -c 1)
# under mpirun at each rank count; fails if any row reports #wrong != 0 or a run fails.
#
#   perf/check_all.sh [build-dir] [rank counts...]     (default: build 2 3 8)
#   MAXBYTES=1M perf/check_all.sh build 2 8
set -uo pipefail

BUILD=${1:-build}
shift || true
RANKS=("$@")
[[ ${#RANKS[@]} -gt 0 ]] || RANKS=(2 3 8)
MAXBYTES=${MAXBYTES:-1M}

export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x SNCL_SOCKET_IFNAME -x FI_TCP_IFACE)

failed=0
for n in "${RANKS[@]}"; do
  for bin in "$BUILD"/perf/*_perf; do
    name=$(basename "$bin")
    log=$(mktemp)
    # -n 2 -w 1: correctness, not speed; sizes from 1 byte through odd and chunk-crossing ones.
    if ! timeout 900 "${MPIRUN[@]}" -np "$n" "$bin" -b 1 -e "$MAXBYTES" -f 7 -n 2 -w 1 -d all -o all -c 1 > "$log" 2>&1; then
      echo "FAIL $name np=$n: run failed"; tail -5 "$log"; failed=1
    else
      # #wrong columns: the harness prints "#wrong" headers; a row is wrong if any of its
      # wrong counters is non-zero. Rows are the lines that start with a size.
      rows=$(grep -cE '^ +[0-9]+ ' "$log")
      bad=$(sed 's/mpi time/mpi_time/' "$log" | awk '/^#.*#wrong/ && !cols { for (i = 1; i <= NF; ++i) if ($i == "#wrong") w[++k] = i - 1; cols = 1 }
                 /^ +[0-9]+ / { for (j in w) if ($(w[j]) != 0 && $(w[j]) != "N/A") { print; break } }' | wc -l)
      if [[ $bad -ne 0 || $rows -eq 0 ]]; then
        echo "FAIL $name np=$n: $bad of $rows rows wrong"; failed=1
      else
        echo "ok   $name np=$n: $rows rows, #wrong 0"
      fi
    fi
    rm -f "$log"
  done
done
exit $failed
