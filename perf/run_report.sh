#!/usr/bin/env bash
# Runs the benchmark suite (already built) at sizes that finish within about 10 minutes on
# a 2-core machine, and writes every table, JSON file and plot into one folder.
#
#   perf/run_report.sh [build-dir] [out-dir]     (default: build, perf-report-<date>)
#
# Every run prints sncl beside its peers (MPI; Gloo where it has the collective) and, for
# All-Reduce, the machine's ceiling. Traffic stays on loopback. Exits non-zero if any row
# of any run reports wrong results or a run fails.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build=${1:-$root/build}
out=${2:-perf-report-$(date -u +%Y%m%d-%H%M)}
mkdir -p "$out"
[[ -x $build/perf/all_reduce_perf ]] || { echo "run_report: build the benchmarks first ($build/perf)" >&2; exit 2; }

export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x SNCL_SOCKET_IFNAME -x FI_TCP_IFACE)
status=0

# binary, ranks, extra flags; TAG=x names the output files <coll>-x-np<ranks>
run() {
  local bin=$1 n=$2; shift 2
  local tag="${bin%_perf}${TAG:+-$TAG}-np$n"
  echo "== $bin, $n ranks: $*" | tee -a "$out/summary.txt"
  if ! timeout 600 "${MPIRUN[@]}" -np "$n" "$build/perf/$bin" "$@" -J "$out/$tag.json" > "$out/$tag.txt" 2> "$out/$tag.err"; then
    echo "   FAILED (see $tag.err)" | tee -a "$out/summary.txt"
    status=1
    return
  fi
  grep -E '^# (Out of bounds|Avg bus)' "$out/$tag.txt" | sed 's/^/   /' | tee -a "$out/summary.txt"
  bash "$root/perf/plot.sh" "$out/$tag.json" "$out/$tag.png" > /dev/null || status=1
}

{
  echo "# sncl benchmark report, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
  echo "# commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$out/summary.txt"

for n in 2 4 8; do
  run all_reduce_perf "$n" -b 16 -e 64M -f 4 -n 20 -w 5 --baseline mpi,gloo --ceiling
done
# Small-message latency: many iterations, so that one preempted iteration does not decide it.
for n in 2 8; do
  TAG=8B run all_reduce_perf "$n" -b 8 -e 8 -n 2000 -w 200 --baseline mpi
done
for n in 2 8; do
  run all_gather_perf "$n" -b 64 -e 16M -f 16 --baseline mpi,gloo
  run broadcast_perf "$n" -b 64 -e 16M -f 16 --baseline mpi,gloo
  run alltoall_perf "$n" -b 64 -e 16M -f 16 --baseline mpi,gloo
  run reduce_scatter_perf "$n" -b 64 -e 16M -f 16
  run reduce_perf "$n" -b 64 -e 16M -f 16
  run sendrecv_perf "$n" -b 64 -e 16M -f 16
done
if [[ -x $build/perf/kernels/reduce_kernels_bench ]]; then
  echo "== reduce_kernels_bench" | tee -a "$out/summary.txt"
  "$build/perf/kernels/reduce_kernels_bench" > "$out/kernels.txt" 2>&1 || status=1
fi
echo "report in $out/ (summary.txt, *.txt tables, *.json, *.png)"
exit $status
