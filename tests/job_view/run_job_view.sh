#!/usr/bin/env bash
# The job view end to end (docs/observability.md, "The job view"): a 4-rank All-Reduce loop
# on the emulated bus with SNCL_OBSERVE_PORT set; then
#   - sncl-top --once --json sees every rank;
#   - each rank's /metrics passes `promtool check metrics`;
#   - a real Prometheus server, started here on loopback, scrapes all four ranks;
#   - a rank stopped with SIGSTOP (drawn at random) is named by sncl-top within 2 s.
#   run_job_view.sh <all_reduce_perf> <sncl-top> <topology file>
# Everything listens on 127.0.0.1 only. Skipped (77) without promtool/prometheus.
set -euo pipefail
perf=$1 top=$2 topo=$3
for tool in promtool prometheus curl jq mpirun; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
work=$(mktemp -d)
job="" prom="" stopped=""
cleanup() {
  [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null || true
  [ -n "$prom" ] && kill "$prom" 2>/dev/null || true
  [ -n "$job" ] && kill "$job" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# Ports drawn from a range nothing else here uses (below the kernel's ephemeral ports,
# 32768 up, and above test_job_view's, 20000-25999); a taken one fails the run visibly.
base=$((26000 + (RANDOM % 750) * 8))
promPort=$((base + 7))
nranks=4

SNCL_OBSERVE_PORT=$base SNCL_TRANSPORT=bus SNCL_TOPO_FILE=$topo timeout 300 \
  mpirun --allow-run-as-root --oversubscribe -np $nranks --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  -x SNCL_OBSERVE_PORT -x SNCL_TRANSPORT -x SNCL_TOPO_FILE -x SNCL_SOCKET_IFNAME -x SNCL_TIMEOUT_MS \
  "$perf" -b 64K -e 64K -n 1000000 -w 1 -c 0 --baseline none >"$work/job.log" 2>&1 &
job=$!

# Every rank answers and has finished a call (bounded: 60 s).
for i in $(seq 1 120); do
  if "$top" --port $base --ranks $nranks --once --json >"$work/top.json" 2>/dev/null &&
     [ "$(jq '[.ranks[] | select(.answered and .calls_finished > 0)] | length' "$work/top.json")" = $nranks ]; then
    break
  fi
  kill -0 $job 2>/dev/null || { cat "$work/job.log"; echo "FAIL: the job ended early"; exit 1; }
  sleep 0.5
done
[ "$(jq '.answered' "$work/top.json")" = $nranks ] || { cat "$work/top.json"; echo "FAIL: not every rank answered"; exit 1; }
echo "sncl-top: $nranks ranks answer; links: $(jq '.links | length' "$work/top.json")"

# The exposition format, checked by Prometheus' own linter, on a rank with the links and one without.
for r in 0 1; do
  curl -sf "http://127.0.0.1:$((base + r))/metrics" >"$work/metrics.$r.txt"
  promtool check metrics <"$work/metrics.$r.txt" || { echo "FAIL: promtool rejects rank $r's metrics"; exit 1; }
done
grep -q '^sncl_link_fault_alarms_total{' "$work/metrics.0.txt" || { echo "FAIL: rank 0 exports no link metrics"; exit 1; }
echo "promtool check metrics: ranks 0 and 1 pass"

# A Prometheus server scrapes the job.
targets=$(for r in $(seq 0 $((nranks - 1))); do printf "'127.0.0.1:%d'," $((base + r)); done)
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: sncl
    static_configs:
      - targets: [${targets%,}]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:$promPort >"$work/prometheus.log" 2>&1 &
prom=$!
scraped=0
for i in $(seq 1 60); do
  scraped=$(curl -sf "http://127.0.0.1:$promPort/api/v1/query?query=count(sncl_calls_finished_total>0)" |
    jq -r '.data.result[0].value[1] // 0' 2>/dev/null || echo 0)
  [ "$scraped" = $nranks ] && break
  sleep 1
done
[ "$scraped" = $nranks ] || { tail -20 "$work/prometheus.log"; echo "FAIL: Prometheus scraped $scraped of $nranks ranks"; exit 1; }
echo "prometheus: scraped all $nranks ranks"

# A stopped rank is named within 2 s.
victim=$((RANDOM % nranks))
stopped=$(jq ".ranks[$victim].pid" "$work/top.json")
kill -STOP "$stopped"
start=$(date +%s%N)
named=0
while [ $(( ($(date +%s%N) - start) / 1000000 )) -lt 2000 ]; do
  if "$top" --port $base --ranks $nranks --once --json >"$work/stopped.json" 2>/dev/null || true; then
    if jq -e ".suspects[] | select(.rank == $victim and (.why | test(\"does not answer\")))" "$work/stopped.json" >/dev/null; then
      named=1
      break
    fi
  fi
done
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
kill -CONT "$stopped"
stopped=""
if [ $named != 1 ]; then
  cat "$work/stopped.json"
  echo "FAIL: rank $victim (stopped) was not named within 2 s"
  exit 1
fi
echo "sncl-top named stopped rank $victim in $elapsed ms: $(jq -r ".suspects[] | select(.rank == $victim) | .why" "$work/stopped.json")"
