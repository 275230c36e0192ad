#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time (CI: 30 s each):
# the topology file parser and the topology cache reader.
#   tools/run_fuzz.sh [seconds]      (default 30; 0: build only; build directory: build-fuzz)
# Exits non-zero when a target crashes, leaks or times out; the reproducer is left in
# build-fuzz/crashes/. SNCL_FUZZ_TIMEOUT: seconds one input may take (10), wall time: longer
# where the fuzzers only get the CPU other work leaves (tools/test.sh).
set -euo pipefail
seconds="${1:-30}"
timeout="${SNCL_FUZZ_TIMEOUT:-10}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SNCL_FUZZ_BUILD:-$root/build-fuzz}"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSNCL_FUZZ=ON -DSNCL_BUILD_TESTS=OFF -DSNCL_BUILD_PERF=OFF -DSNCL_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j2 --target fuzz_topo_file fuzz_graph_binary
[[ $seconds == 0 ]] && exit 0
mkdir -p "$build/crashes" "$build/corpus/topo_file" "$build/corpus/graph_binary"
# The two targets run at once, one per core. Seeds: the checked-in corpus and the example
# topologies; for the topology cache reader, small graphs in their binary form.
"$build/fuzz/fuzz_topo_file" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 \
  -max_len=65536 -artifact_prefix="$build/crashes/" -print_final_stats=1 \
  "$build/corpus/topo_file" "$root/fuzz/corpus/topo_file" "$root/topologies" &
topo_file=$!
status=0
"$build/fuzz/fuzz_graph_binary" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 \
  -max_len=65536 -artifact_prefix="$build/crashes/" -print_final_stats=1 \
  "$build/corpus/graph_binary" "$root/fuzz/corpus/graph_binary" || status=1
wait "$topo_file" || status=1
exit $status
