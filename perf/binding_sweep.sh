#!/usr/bin/env bash
# One benchmark under each way a launcher places ranks, with MPI beside sncl in every run:
# plain mpirun (its default binding: a core per rank at np <= 2), --bind-to core and
# --bind-to none, on heap buffers (-R 0) and snclMemAlloc buffers (-R 1). Prints one table
# per rank count: sncl's time and sncl/MPI (bus bandwidth) per size and setting, and the
# largest max RSS of a rank (the harness's getrusage). Needs python3 for the JSON.
#
#   perf/binding_sweep.sh [build-dir] [benchmark] [ranks...] -- [extra flags...]
#   e.g. perf/binding_sweep.sh build all_reduce_perf 2 4 8 -- -b 8 -e 64M -f 8
# BINDS and BUFFERS narrow the settings (default "default core none" and "0 1").
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build=${1:-$root/build}
bench=${2:-all_reduce_perf}
shift $(( $# >= 2 ? 2 : $# ))
ranks=()
while [[ $# -gt 0 && $1 != -- ]]; do ranks+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
(( ${#ranks[@]} )) || ranks=(2 4 8)
[[ -x $build/perf/$bench ]] || { echo "binding_sweep: build the benchmarks first ($build/perf/$bench)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo
status=0
for n in "${ranks[@]}"; do
  for bind in ${BINDS:-default core none}; do
    for r in ${BUFFERS:-0 1}; do
      flags=()
      # Binding to cores with more ranks than cores needs mpirun's leave to overload them.
      [[ $bind == default ]] || flags=(--bind-to "$bind$([[ $bind == core ]] && echo :overload-allowed)")
      tag="n$n-$bind-R$r"
      if ! timeout 900 mpirun --allow-run-as-root --oversubscribe "${flags[@]}" \
          --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x SNCL_SOCKET_IFNAME -x FI_TCP_IFACE \
          -np "$n" "$build/perf/$bench" --baseline mpi -R "$r" "$@" -J "$out/$tag.json" > "$out/$tag.txt" 2>&1; then
        echo "binding_sweep: $tag failed:" >&2
        tail -5 "$out/$tag.txt" >&2
        status=1
      fi
      grep -m1 "^# buffers" "$out/$tag.txt" | sed "s/^/# $tag: /" >> "$out/headers"
      grep -m1 "^# sncl threading" "$out/$tag.txt" | sed "s/^/# $tag: /" >> "$out/headers"
    done
  done
done
python3 - "$out" "$bench" "${ranks[@]}" <<'PY' || status=1
import glob, json, os, sys
out, bench, ranks = sys.argv[1], sys.argv[2], sys.argv[3:]
print(open(os.path.join(out, "headers")).read(), end="")
wrong = 0
for n in ranks:
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, f"n{n}-*.json"))):
        tag = os.path.basename(path)[:-5].split("-", 1)[1]
        j = json.load(open(path))
        rss = j.get("max_rss_kib", [])
        runs[tag] = (j["rows"], f"{max(rss) / 1024:.0f}" if rss else "?")
    if not runs:
        continue
    tags = list(runs)
    print(f"\n{bench}, {n} ranks: sncl time (us) and sncl/mpi (bus bandwidth); tag = binding-buffers")
    print(f"| bytes | " + " | ".join(tags) + " |")
    print("|---|" + "---|" * len(tags))
    sizes = sorted({r["bytes"] for rows, _ in runs.values() for r in rows})
    for b in sizes:
        cells = []
        for t in tags:
            r = next((r for r in runs[t][0] if r["bytes"] == b), None)
            if not r or "mpi" not in r:
                cells.append("-")
                continue
            wrong += r["sncl"].get("wrong", 0) + r["mpi"].get("wrong", 0)
            s, m = r["sncl"]["busbw_GBs"], r["mpi"]["busbw_GBs"]
            cells.append(f"{r['sncl']['time_us']:.2f} ({s / m if m > 0 else float('nan'):.2f}x)")
        print(f"| {b} | " + " | ".join(cells) + " |")
    print("| largest max RSS of a rank (MiB) | " + " | ".join(runs[t][1] for t in tags) + " |")
print(f"\n# wrong results over all runs: {wrong}")
sys.exit(1 if wrong else 0)
PY
exit $status
