#!/bin/sh
# The simulator's study table (docs/simulator.md): 1 GiB All-Reduce on a topology, every
# algorithm and the planner's choice, healthy and with the faults given.
#   perf/sim_study.sh TOPOLOGY FAULTS [build dir] [algorithms]
set -euf  # -f: hierarchical names hold brackets, not globs
topo=$1
faults=$2
build=${3:-build}
algos=${4:-"auto ring tree hd hier hier[node](ring/tree) direct"}
sim=$build/tools/sncl-sim
err=$(mktemp)
trap 'rm -f "$err"' EXIT
echo "| algorithm | faults | time (us) | algbw (GB/s) | busbw (GB/s) | bounded by |"
echo "|---|---|---|---|---|---|"
for f in "" "$faults"; do
  for algo in $algos; do
    if out=$("$sim" --topo "$topo" --algo "$algo" --size 1G --faults "$f" --json 2>"$err"); then
      echo "$out" | jq -r --arg f "${f:-none}" '"| \(if $ARGS.named.a == "auto" then "auto: " else "" end)\(.algorithm) | \($f) | \(.time_us | floor) | \(.algbw_gbs * 10 | floor / 10) | \(.busbw_gbs * 10 | floor / 10) | step \(.critical.step) x\(.critical.repeats), rank \(.critical.rank) \(if .critical.sending then "to" else "from" end) \(.critical.peer), \(.critical.bottleneck) |"' --arg a "$algo"
    else
      echo "| $algo | ${f:-none} | - | - | - | $(tail -1 "$err" | sed 's/^sncl-sim: //') |"
    fi
  done
done
