#!/usr/bin/env bash
# Installs the dependencies, builds sncl, and runs the main job on 8 ranks:
#  1-2. examples/supernode_job on the emulated supernode bus (2 nodes x 4 NPUs on two bus
#     planes, topologies/supernode-2plane-2x4.json): an All-Reduce sweep with the plan the
#     planner chose, its estimate and the bus's modeled time and bandwidth; then a link
#     taken down mid-job, the reroute and the calls still exact.
#  3. The same sweep on this machine's shared memory (SNCL_TRANSPORT=shm) with
#     MPI_Allreduce beside it in the same run, the ratio in the sncl/mpi column, and a PNG
#     of it (build/quickstart-shm.png) where gnuplot and jq exist.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
mpirun --oversubscribe -np 8 -x SNCL_TRANSPORT=bus -x SNCL_TOPO_FILE="$PWD/topologies/supernode-2plane-2x4.json" \
  build/examples/supernode_job
echo
echo "# Part 3: the same sweep on this machine's shared memory, MPI_Allreduce beside sncl in the same run."
echo "# time: wall time per call (us); algbw = bytes/time; busbw = algbw x 2(n-1)/n (GB/s); #wrong: elements"
echo "# that differ from the exact sum; sncl/mpi: MPI's time over sncl's (above 1: sncl is faster). These"
echo "# ratios mean something only on an otherwise idle machine (perf/README.md)."
mpirun --oversubscribe -np 8 -x SNCL_TRANSPORT=shm build/perf/all_reduce_perf -b 8 -e 64M -f 4 -c 1 \
  --baseline mpi -J build/quickstart-shm.json
if command -v gnuplot >/dev/null && command -v jq >/dev/null; then
  bash perf/plot.sh build/quickstart-shm.json build/quickstart-shm.png && echo "# plot: build/quickstart-shm.png"
fi
