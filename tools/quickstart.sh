#!/usr/bin/env bash
# Installs the dependencies, builds sncl, and runs the main job: an 8-rank All-Reduce
# benchmark on the emulated supernode bus (default topology: 2 nodes x 4 NPUs on a bus
# Clos, docs/bus.md), with MPI_Allreduce beside it, that prints the plan sncl chose.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo SNCL_DEBUG=INFO SNCL_DEBUG_SUBSYS=PLAN
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
mpirun --oversubscribe -np 8 -x SNCL_TRANSPORT=bus build/perf/all_reduce_perf -b 8 -e 64M -f 4 -c 1
