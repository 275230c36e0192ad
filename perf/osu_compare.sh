#!/usr/bin/env bash
# osu_allreduce with plain MPI and under the sncl drop-in, side by side (microseconds).
#   [RUNS=5] perf/osu_compare.sh <build> [np] [osu_allreduce arguments...]
# The two run alternately, RUNS times each: on a virtual machine one launch's latency can
# differ from the next by 2x on its own (where the host places the virtual CPUs), so each
# column is the median over the runs, and the last columns are the drop-in's time over
# MPI's per size (of the medians). Every run must check every result; the script fails if
# one does not.
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
  timeout 600 "${mpirun[@]}" "$prog" "$@" >"$out/mpi.$i.txt"
  LD_PRELOAD=$lib timeout 600 "${mpirun[@]}" "$prog" "$@" >"$out/sncl.$i.txt"
done
echo "# $np ranks, $runs runs each, alternated; medians; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$runs" <<'EOF'
import statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def table(side):  # bytes -> ([blocking us], [nonblocking us]) over the runs
    t = {}
    for i in range(1, runs + 1):
        for line in open(f"{out}/{side}.{i}.txt"):
            f = line.split()
            if f and not f[0].startswith("#"):
                b, n = t.setdefault(int(f[0]), ([], []))
                b.append(float(f[1]))
                n.append(float(f[2]))
    return t
mpi, sncl = table("mpi"), table("sncl")
print("# %10s | %14s %14s | %14s %14s | %9s %9s" % ("bytes", "MPI Allreduce", "MPI Iallr+Wait", "sncl Allreduce",
                                                    "sncl Iallr+Wait", "sncl/MPI", "(Iallr)"))
for size in sorted(mpi):
    m = [statistics.median(v) for v in mpi[size]]
    s = [statistics.median(v) for v in sncl[size]]
    print("  %10d | %14.2f %14.2f | %14.2f %14.2f | %9.2f %9.2f" % (size, *m, *s, s[0] / m[0], s[1] / m[1]))
EOF
