#!/usr/bin/env bash
# Fails on an include that runs against the layering (lib/README.md): a folder of lib/ may
# include only the folders listed for it, algorithms/ only itself, transports/ only the
# transport interface and what lies below it, and perf/, examples/ and bindings/ only the
# public headers (plus perf/common). Prints each offending line; exit 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

# folder -> the project folders its files may include (besides include/sncl, always allowed)
declare -A allowed=(
  [lib/base]="lib/base"
  [lib/topo]="lib/base lib/topo"
  [lib/net]="lib/base lib/net"
  [lib/transport]="lib/base lib/transport"
  [lib/plan]="lib/base lib/topo lib/transport lib/plan algorithms"
  [lib/exec]="lib/base lib/transport lib/exec algorithms"
  [lib/comm]="lib/base lib/topo lib/net lib/transport lib/plan lib/exec lib/comm algorithms"
  [lib/api]="lib/base lib/topo lib/net lib/transport lib/plan lib/exec lib/comm lib/api algorithms"
  [lib/sim]="lib/base lib/topo lib/plan lib/sim algorithms"
  [algorithms]="algorithms"
  [transports]="lib/base lib/net lib/transport lib/topo transports"
  [perf]="perf/common"
  [examples]=""
  [bindings]="bindings"
)
# perf/kernels measures the library's internal reduction kernels and size parser.
exceptions="perf/kernels/"

bad=0
while IFS= read -r file; do
  case "$file" in $exceptions*) continue ;; esac
  folder=""
  for f in "${!allowed[@]}"; do
    if [[ $file == "$f"/* && ${#f} -gt ${#folder} ]]; then folder=$f; fi
  done
  [[ -n $folder ]] || continue
  while IFS= read -r line; do
    target=$(sed -E 's/^#include "([^"]+)".*/\1/' <<< "${line#*:}")
    [[ $target == sncl/* ]] && continue
    ok=0
    for a in ${allowed[$folder]}; do
      [[ $target == "$a"/* ]] && ok=1
    done
    # A header of the same folder, named without its path (rare), is the folder's own.
    [[ $target != */* ]] && ok=1
    if (( ! ok )); then
      echo "$file:${line%%:*}: $folder may not include \"$target\" (allowed: ${allowed[$folder]:-public headers only})"
      bad=1
    fi
  done < <(grep -n '^#include "' "$file" || true)
done < <(git ls-files -- 'lib/*.h' 'lib/*.cc' 'algorithms/*' 'transports/*' 'perf/*.h' 'perf/*.cc' 'examples/*.c' \
           'examples/*.cc' 'bindings/*.h' 'bindings/*.cc')
if (( bad )); then
  echo "include check: FAILED (see lib/README.md for the layering)"
  exit 1
fi
echo "include check: every include follows the layering"
