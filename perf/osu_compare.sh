#!/usr/bin/env bash
# The sncl drop-in against the MPI beneath it, in the same runs (microseconds).
#   [RUNS=5] perf/osu_compare.sh <build> [np] [osu_allreduce arguments...]
# Runs osu_allreduce --pmpi under the preload RUNS times: each run times MPI_* (the
# drop-in) and PMPI_* (Open MPI, which the preload does not intercept) alternately, so the
# two share the run's placement of the virtual CPUs, which on a virtual machine changes a
# launch's latency by up to 2x. Prints per size the medians over the runs of each column and
# of each run's own ratio (drop-in over MPI), and the ratios' range. Every run checks every
# result; the script fails if one does not.
set -euo pipefail
build=$1 np=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
runs=${RUNS:-5}
prog=$build/perf/osu_allreduce lib=$build/bindings/mpi/libsncl_mpi.so
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
export SNCL_SOCKET_IFNAME=${SNCL_SOCKET_IFNAME:-lo}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((i = 1; i <= runs; ++i)); do
  LD_PRELOAD=$lib timeout 600 "${mpirun[@]}" "$prog" --pmpi "$@" >"$out/run.$i.txt"
done
echo "# $np ranks, $runs runs, the drop-in and MPI alternated within each; medians; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$runs" <<'EOF'
import statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = {}  # bytes -> list of (sncl blocking, sncl nonblocking, MPI blocking, MPI nonblocking) per run
for i in range(1, runs + 1):
    for line in open(f"{out}/run.{i}.txt"):
        f = line.split()
        if f and not f[0].startswith("#"):
            rows.setdefault(int(f[0]), []).append([float(x) for x in f[1:5]])
print("# %10s | %14s %14s | %14s %14s | %9s %9s | %s" % ("bytes", "MPI Allreduce", "MPI Iallr+Wait", "sncl Allreduce",
                                                         "sncl Iallr+Wait", "sncl/MPI", "(Iallr)", "sncl/MPI per run"))
for size in sorted(rows):
    r = rows[size]
    med = [statistics.median(x[k] for x in r) for k in range(4)]
    rb = [x[0] / x[2] for x in r]
    rn = [x[1] / x[3] for x in r]
    print("  %10d | %14.2f %14.2f | %14.2f %14.2f | %9.2f %9.2f | %.2f-%.2f (%.2f-%.2f)" %
          (size, med[2], med[3], med[0], med[1], statistics.median(rb), statistics.median(rn), min(rb), max(rb),
           min(rn), max(rn)))
EOF
