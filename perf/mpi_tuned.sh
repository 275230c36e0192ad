#!/usr/bin/env bash
# sncl's All-Reduce against Open MPI's default and against its best coll_tuned algorithm:
# one run of all_reduce_perf per algorithm (0 = Open MPI's own decision, 1 basic linear,
# 2 nonoverlapping, 3 recursive doubling, 4 ring, 5 segmented ring, 6 Rabenseifner), each
# with sncl beside MPI in the same run, then per size the algorithm that won and sncl's
# ratio to it (sncl's figure from that same run). Needs python3 for the JSON.
#
#   perf/mpi_tuned.sh [build-dir] [ranks] [extra all_reduce_perf flags...]
#   e.g. perf/mpi_tuned.sh build 4 -b 256K -e 64M -f 4 --ceiling
# BIND=core|none|... passes --bind-to to mpirun; unset, mpirun binds as it does by default
# (a core per rank at np <= 2), which is how users run it.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build=${1:-$root/build}
n=${2:-2}
shift $(( $# >= 2 ? 2 : $# ))
[[ -x $build/perf/all_reduce_perf ]] || { echo "mpi_tuned: build the benchmarks first ($build/perf)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo
status=0
for alg in 0 1 2 3 4 5 6; do
  if ! timeout 900 mpirun --allow-run-as-root --oversubscribe ${BIND:+--bind-to "$BIND"} \
      --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x SNCL_SOCKET_IFNAME -x FI_TCP_IFACE \
      --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "$alg" \
      -np "$n" "$build/perf/all_reduce_perf" --baseline mpi "$@" -J "$out/alg$alg.json" > "$out/alg$alg.txt" 2>&1; then
    echo "mpi_tuned: the run with algorithm $alg failed:" >&2
    tail -5 "$out/alg$alg.txt" >&2
    status=1
  fi
done
python3 - "$out" "$n" <<'PY' || status=1
import json, os, sys
out, n = sys.argv[1], sys.argv[2]
runs = {}
for alg in range(7):
    p = os.path.join(out, f"alg{alg}.json")
    if os.path.exists(p):
        runs[alg] = {(r["bytes"], r["type"], r["op"]): r for r in json.load(open(p))["rows"]}
names = ["default", "linear", "nonoverlap", "recdbl", "ring", "segring", "rabenseifner"]
print(f"# binding: {os.environ.get('BIND') and '--bind-to ' + os.environ['BIND'] or 'mpirun default'}")
print(f"# All-Reduce, {n} ranks: busbw GB/s; sncl beside MPI in each run; best = MPI's fastest coll_tuned algorithm")
print(f"# {'bytes':>10} {'sncl':>7} {'mpi':>7} {'sncl/mpi':>8} {'best':>13} {'mpi best':>8} {'sncl':>7} {'sncl/best':>9}")
wrong = 0
for key in sorted(runs.get(0, {})):
    d = runs[0][key]
    best = max((a for a in runs if key in runs[a] and "mpi" in runs[a][key]),
               key=lambda a: runs[a][key]["mpi"]["busbw_GBs"])
    b = runs[best][key]
    for a in runs:
        r = runs[a].get(key, {})
        wrong += sum(r.get(k, {}).get("wrong", 0) for k in ("sncl", "mpi"))
    ratio = lambda s, m: s / m if m > 0 else float("nan")
    print(f"  {key[0]:>10} {d['sncl']['busbw_GBs']:7.2f} {d['mpi']['busbw_GBs']:7.2f} "
          f"{ratio(d['sncl']['busbw_GBs'], d['mpi']['busbw_GBs']):8.2f} {names[best]:>13} "
          f"{b['mpi']['busbw_GBs']:8.2f} {b['sncl']['busbw_GBs']:7.2f} {ratio(b['sncl']['busbw_GBs'], b['mpi']['busbw_GBs']):9.2f}")
print(f"# wrong results over all runs: {wrong}")
sys.exit(1 if wrong else 0)
PY
exit $status
