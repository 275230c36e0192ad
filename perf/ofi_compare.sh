#!/usr/bin/env bash
# sncl over libfabric tcp, beside MPI over TCP and raw fi_pingpong, all on loopback.
#
#   perf/ofi_compare.sh [build-dir]            (default: build)
#   SIZE=4M ITERS=50 PROVIDER="tcp;ofi_rxm" perf/ofi_compare.sh
#
# 1. fi_pingpong -p tcp -e rdm -m tagged: libfabric alone, one message in flight; its
#    MB/sec is one-way bandwidth at SIZE.
# 2. pingpong_perf, 2 ranks, every pair on ofi (SNCL_TRANSPORT=ofi), MPI (btl self,tcp)
#    beside: one message in flight, as fi_pingpong; its busbw is one-way bandwidth, as
#    fi_pingpong's MB/sec. Then sendrecv_perf, both directions at once.
# 3. all_reduce_perf -c 1: 2 ranks on ofi, then 2 virtual hosts x 4 ranks (SNCL_HOSTID per
#    rank: shm within a host, ofi between), MPI over TCP beside.
# While (2) runs, `ss -tnp` lists the benchmark's TCP sockets: every address must be 127.0.0.1.
# The last line compares sncl's bandwidth at SIZE with fi_pingpong's (goal: >= 0.9x).
set -euo pipefail

BUILD=${1:-build}
SIZE=${SIZE:-4M}
ITERS=${ITERS:-50}
PROVIDER=${PROVIDER:-tcp;ofi_rxm}
PORT=${PORT:-47611}

bytes_of() {
  local n=${1%[KkMmGg]} u=${1: -1}
  case $u in K|k) echo $((n << 10)) ;; M|m) echo $((n << 20)) ;; G|g) echo $((n << 30)) ;; *) echo "$1" ;; esac
}
SIZE_BYTES=$(bytes_of "$SIZE")

export FI_TCP_IFACE=lo SNCL_SOCKET_IFNAME=lo SNCL_OFI_PROVIDER="$PROVIDER"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none
        --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
        -x FI_TCP_IFACE -x SNCL_SOCKET_IFNAME -x SNCL_OFI_PROVIDER)

for tool in mpirun fi_pingpong ss; do
  command -v "$tool" > /dev/null || { echo "ofi_compare: $tool not found" >&2; exit 2; }
done
for bench in all_reduce_perf pingpong_perf sendrecv_perf; do
  [[ -x $BUILD/perf/$bench ]] || { echo "ofi_compare: $BUILD/perf/$bench not built" >&2; exit 2; }
done

echo "# fi_pingpong -p ${PROVIDER%%;*} -e rdm -m tagged -S $SIZE_BYTES -I $ITERS on 127.0.0.1"
fi_pingpong -p "${PROVIDER%%;*}" -e rdm -m tagged -I "$ITERS" -S "$SIZE_BYTES" -B "$PORT" > /dev/null 2>&1 &
server=$!
sleep 1
pp_line=$(fi_pingpong -p "${PROVIDER%%;*}" -e rdm -m tagged -I "$ITERS" -S "$SIZE_BYTES" -P "$PORT" 127.0.0.1 | tail -1)
wait "$server" || true
echo "$pp_line"
pp_mbps=$(awk '{print $6}' <<< "$pp_line")

# The row of size SIZE_BYTES in a *_perf output: its out-of-place algbw (GB/s) and MPI's busbw.
row_of() { awk -v s="$SIZE_BYTES" '$1 == s {print}' <<< "$1"; }

# Samples the TCP sockets of a running benchmark and reports any address that is not loopback.
check_sockets() {
  sleep "${1:-2}"
  local socks
  socks=$(ss -tnp 2>/dev/null | grep -E '_perf|fi_pingpong' || true)
  local n foreign
  n=$(grep -c . <<< "$socks" || true)
  foreign=$(awk '{print $4; print $5}' <<< "$socks" | grep -v -E '^127\.0\.0\.1:|^\[::1\]:|^\[::ffff:127\.0\.0\.1\]:|^$' || true)
  if [[ -n $foreign ]]; then
    echo "# ss -tnp: NOT ONLY LOOPBACK: $foreign"
  else
    echo "# ss -tnp: $n TCP sockets of the benchmark, all on 127.0.0.1"
  fi
}

echo "# pingpong_perf, 2 ranks, SNCL_TRANSPORT=ofi ($PROVIDER), MPI over TCP beside"
out_file=$(mktemp)
SNCL_TRANSPORT=ofi "${MPIRUN[@]}" -x SNCL_TRANSPORT -np 2 "$BUILD/perf/pingpong_perf" -b 64K -e "$((SIZE_BYTES * 4))" -f 4 \
  -n "$ITERS" -w 5 -c 1 > "$out_file" 2>&1 &
runner=$!
check_sockets 3
wait "$runner" || { cat "$out_file"; echo "ofi_compare: pingpong_perf failed" >&2; exit 1; }
out=$(cat "$out_file")
rm -f "$out_file"
echo "$out"
row=$(row_of "$out")
sncl_gbps=$(awk '{print $8}' <<< "$row")

echo "# sendrecv_perf, 2 ranks, SNCL_TRANSPORT=ofi: both directions at once (algbw is each direction's)"
SNCL_TRANSPORT=ofi "${MPIRUN[@]}" -x SNCL_TRANSPORT -np 2 "$BUILD/perf/sendrecv_perf" -b 64K -e "$((SIZE_BYTES * 4))" -f 4 \
  -n "$ITERS" -w 5 -c 1

echo "# all_reduce_perf -c 1, 2 ranks, SNCL_TRANSPORT=ofi"
SNCL_TRANSPORT=ofi "${MPIRUN[@]}" -x SNCL_TRANSPORT -np 2 "$BUILD/perf/all_reduce_perf" -b 8 -e 64M -f 4 -n "$ITERS" -w 5 -c 1

echo "# all_reduce_perf -c 1, 2 virtual hosts x 4 ranks (shm within a host, ofi between)"
"${MPIRUN[@]}" -np 8 sh -c 'SNCL_HOSTID=vhost$((OMPI_COMM_WORLD_RANK / 4)) exec "$0" "$@"' \
  "$BUILD/perf/all_reduce_perf" -b 8 -e 64M -f 4 -n 10 -w 2 -c 1

awk -v pp="$pp_mbps" -v s="$sncl_gbps" -v b=pingpong_perf -v size="$SIZE" 'BEGIN {
  r = s * 1000 / pp
  printf "# %s at %s: sncl %.0f MB/s, fi_pingpong %.0f MB/s: %.2fx (goal >= 0.90) %s\n",
         b, size, s * 1000, pp, r, (r >= 0.9 ? "OK" : "BELOW GOAL")
}'
