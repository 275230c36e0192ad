#!/usr/bin/env bash
# Topology load and route benchmark (not a test): the figures behind issue 4's bound
# "sncl-topo --file <Atlas-950-like> --summary: 8,192 endpoints, load plus one route under
# 1 s and 200 MiB", measured with /usr/bin/time -v, then route rates from tools/topo_bench.
#   perf/topo_load_bench.sh [build-dir]      (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
topo="$build/tools/sncl-topo"
bench="$build/tools/topo_bench"
[[ -x "$topo" && -x "$bench" ]] || { echo "build sncl-topo and topo_bench first (cmake --build $build)"; exit 2; }

status=0
for example in atlas950 atlas960; do
  file="$root/topologies/$example.json"
  last=$(( $("$topo" --file "$file" --summary | awk '/^endpoints/ {print $2}') - 1 ))
  log=$(mktemp)
  /usr/bin/time -v "$topo" --file "$file" --summary --route 0 "$last" --paths 1 >"$log.out" 2>"$log"
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s}' "$log")
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$log")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$log")
  endpoints=$(awk '/^endpoints/ {print $2}' "$log.out")
  verdict=ok
  # Judged on CPU time: on a shared machine wall time also counts waiting for a core.
  if [[ $example == atlas950 ]] && { awk -v c="$cpu" -v m="$rss" 'BEGIN {exit !(c >= 1 || m >= 200)}'; }; then
    verdict="OVER THE 1 s / 200 MiB BOUND"
    status=1
  fi
  printf '%-9s %6s endpoints  load+summary+route %5.2f s wall, %5.2f s CPU  peak %6.1f MiB  %s\n' \
    "$example" "$endpoints" "$wall" "$cpu" "$rss" "$verdict"
  rm -f "$log" "$log.out"
done
echo
for example in cloudmatrix384 atlas950 atlas960; do
  echo "== topo_bench $example"
  "$bench" "$root/topologies/$example.json"
done
exit $status
