#!/bin/sh
# Scale benchmark of the simulator: 1 GiB All-Reduce on 16,384 ranks (topologies/clos16k.json)
# with ring, tree, halving-doubling and the hierarchical All-Reduce (rings inside the nodes,
# a ring or a tree across them); prints the simulated time and what the run cost
# (wall and CPU seconds, peak RSS from getrusage). The goal is <= 10 s and <= 2 GiB.
#   perf/sim_scale.sh [build dir] [topology]
set -eu
build=${1:-build}
topo=${2:-$(dirname "$0")/../topologies/clos16k.json}
sim=$build/tools/sncl-sim
[ -x "$sim" ] || { echo "no $sim: build the sncl-sim target" >&2; exit 1; }
printf '%-22s %8s %14s %10s %8s %8s %10s\n' algorithm ranks "time (us)" "busbw" "wall s" "cpu s" "RSS MiB"
for algo in ring tree hd 'hier[node](ring/ring)' 'hier[node](ring/tree)'; do
  "$sim" --topo "$topo" --algo "$algo" --size 1G --json |
    jq -r '"\(.algorithm) \(.ranks) \(.time_us) \(.busbw_gbs) \(.wall_s) \(.cpu_s) \(.peak_rss_mib)"' |
    while read -r a n t b w c m; do
      printf '%-22s %8s %14.1f %10.1f %8.2f %8.2f %10.0f\n' "$a" "$n" "$t" "$b" "$w" "$c" "$m"
    done
done
