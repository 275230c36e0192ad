#!/usr/bin/env bash
# Turns a benchmark's JSON (-J) into a PNG of bus bandwidth against size: sncl (out of
# place), each peer it ran beside (MPI, Gloo), and the machine's ceiling if measured.
# Rows of the first type and op in the file are plotted.
#
#   perf/plot.sh results.json [out.png]        (needs jq and gnuplot)
set -euo pipefail
in=${1:?usage: perf/plot.sh results.json [out.png]}
out=${2:-${in%.json}.png}
for tool in jq gnuplot; do
  command -v "$tool" > /dev/null || { echo "plot: $tool not found (apt-get install jq gnuplot-nox)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

title=$(jq -r '"sncl \(.collective), \(.nranks) ranks (\(.processes) processes x \(.threads) threads), \(.date)"' "$in")
type=$(jq -r '.rows[0].type' "$in")
op=$(jq -r '.rows[0].op' "$in")
jq -r --arg t "$type" --arg o "$op" \
  '.rows[] | select(.type == $t and .op == $o and .bytes > 0) | [.bytes, .sncl.busbw_GBs] | @tsv' "$in" > "$tmp/sncl.tsv"
plots=("'$tmp/sncl.tsv' using 1:2 with linespoints lw 2 title 'sncl'")
for peer in $(jq -r '.peers[]' "$in"); do
  jq -r --arg t "$type" --arg o "$op" --arg p "$peer" \
    '.rows[] | select(.type == $t and .op == $o and .bytes > 0 and .[$p] != null) | [.bytes, .[$p].busbw_GBs] | @tsv' \
    "$in" > "$tmp/$peer.tsv"
  [[ -s $tmp/$peer.tsv ]] && plots+=("'$tmp/$peer.tsv' using 1:2 with linespoints title '$peer'")
done
ceiling=$(jq -r 'if .ceiling then (if (.rows[0].op != "none") then .ceiling.add_GBs else .ceiling.memcpy_GBs end) else empty end' "$in")
[[ -n $ceiling ]] && plots+=("$ceiling with lines dt 2 title 'ceiling per rank'")

gnuplot <<GP
set terminal pngcairo size 900,560 noenhanced
set output '$out'
set title "$title ($type $op)"
set logscale x 2
set logscale y 10
set format y '%g'
set format x '%.0b%B'
set xlabel 'size (bytes)'
set ylabel 'bus bandwidth (GB/s)'
set key top left
set grid
plot $(IFS=,; echo "${plots[*]}")
GP
echo "$out"
