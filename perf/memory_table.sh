#!/usr/bin/env bash
# Memory per rank of an 8-rank All-Reduce on heap buffers (-R 0), by transport, size and
# fault retry on or off: one all_reduce_perf run per cell (out of place and in place, no
# peer, `mpirun --bind-to none`), its max RSS (largest rank) and what sncl holds at the
# end (snclCommGetMemoryUsage: every part, and the retry history's resident pages).
# Transports: shm (one host), the bus on topologies/supernode-2plane-2x4.json, and ofi
# between 2 virtual hosts x 4 (SNCL_HOSTID: shm inside, ofi `tcp;ofi_rxm` between; retry
# needs two rails there, so only off). Needs python3 for the JSON.
#
#   perf/memory_table.sh [build-dir] [sizes...]     e.g. perf/memory_table.sh build 1M 64M 256M
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build=${1:-$root/build}
shift $(( $# >= 1 ? 1 : 0 ))
sizes=("$@")
(( ${#sizes[@]} )) || sizes=(1M 64M 256M)
[[ -x $build/perf/all_reduce_perf ]] || { echo "memory_table: build the benchmarks first" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo
topo=$root/topologies/supernode-2plane-2x4.json
status=0
run() {  # tag, env settings..., then -- and the rank command's prefix (may be empty)
  local tag=$1 size=$2; shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=(-x "$1"); shift; done
  shift
  if ! timeout 1200 mpirun --allow-run-as-root --oversubscribe --bind-to none \
      --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x SNCL_SOCKET_IFNAME -x FI_TCP_IFACE "${envs[@]}" \
      -np 8 "$@" "$build/perf/all_reduce_perf" -b "$size" -e "$size" -n 5 -w 2 -R 0 --baseline none \
      -J "$out/$tag.json" > "$out/$tag.txt" 2>&1; then
    echo "memory_table: $tag failed:" >&2
    tail -5 "$out/$tag.txt" >&2
    status=1
  fi
}
for size in "${sizes[@]}"; do
  run "shm-off-$size" "$size" SNCL_TRANSPORT=shm SNCL_RETRY=0 --
  run "bus-on-$size" "$size" SNCL_TRANSPORT=bus SNCL_TOPO_FILE="$topo" SNCL_RETRY=1 --
  run "bus-off-$size" "$size" SNCL_TRANSPORT=bus SNCL_TOPO_FILE="$topo" SNCL_RETRY=0 --
  run "ofi-off-$size" "$size" SNCL_OFI_PROVIDER="tcp;ofi_rxm" SNCL_RETRY=0 -- \
    sh -c 'SNCL_HOSTID=vhost$((OMPI_COMM_WORLD_RANK / 4)) exec "$0" "$@"'
done
python3 - "$out" "${sizes[@]}" <<'PY'
import json, os, sys
out, sizes = sys.argv[1], sys.argv[2:]
def cell(tag):
    p = os.path.join(out, tag + ".json")
    if not os.path.exists(p): return None
    j = json.load(open(p))
    rss = max(j.get("max_rss_kib", [0])) / 1024
    own = j.get("sncl_memory_kib", [0, 0])
    total = max(own[0::2]) / 1024
    retry = max(own[1::2]) / 1024
    return rss, total, retry
print("| transport, retry | size | max RSS per rank (MiB) | sncl's own (MiB) | retry history resident (MiB) |")
print("|---|---|---|---|---|")
for size in sizes:
    for tag, name in (("shm-off", "shm, off"), ("bus-on", "bus, on"), ("bus-off", "bus, off"), ("ofi-off", "ofi 2x4, off")):
        c = cell(f"{tag}-{size}")
        print(f"| {name} | {size} | " + (" | ".join(f"{v:.1f}" for v in c) if c else "failed | | ") + " |")
PY
exit $status
