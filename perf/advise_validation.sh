#!/bin/sh
# The layout advisor's validation table (docs/advise_validation.md): Narayanan et al. SC'21 Table 1
# (GPT 1.7B to 1T on DGX A100) against `sncl-sim --advise` on dgx-a100-superpod.json: the
# published layout's rank and predicted TFLOP/s per GPU, and the advisor's best.
#   perf/advise_validation.sh [build dir]
set -eu
build=${1:-build}
here=$(dirname "$0")/..
echo "| model | GPUs | batch | published TP x PP | TFLOP/s published | its rank | its TFLOP/s predicted | error | advisor's best (TP x PP x DP, mb, v) | its TFLOP/s | published step / best step |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
# model, GPUs, global batch, published TP, PP and TFLOP/s per GPU
while read -r model gpus batch tp pp tflops; do
  "$build/tools/sncl-sim" --topo "$here/topologies/dgx-a100-superpod.json" --advise "$here/models/gpt-$model.json" \
    --gpus "$gpus" --device peak=312,mem=80,hbm=2039 --recompute always --json |
    jq -r --arg m "$model" --argjson g "$gpus" --argjson batch "$batch" --argjson tp "$tp" --argjson pp "$pp" --argjson tf "$tflops" '
      [.layouts[] | select(.fits)] as $l | ($l | map(.tp == $tp and .pp == $pp) | index(true)) as $i |
      $l[$i] as $p | $l[0] as $b |
      "| \($m | ascii_upcase) | \($g) | \($batch) | \($tp) x \($pp) | \($tf) | \($i + 1) | \($p.tflops_per_gpu * 10 | round / 10) | \(($p.tflops_per_gpu / $tf - 1) * 1000 | round / 10)% | \($b.tp) x \($b.pp) x \($b.dp), \($b.micro_batch), \($b.interleave) | \($b.tflops_per_gpu * 10 | round / 10) | \($p.step_s / $b.step_s * 1000 | round / 1000) |"'
done <<ROWS
1.7b 32 512 1 1 137
3.6b 64 512 2 1 138
7.5b 128 512 4 1 142
18.4b 256 1024 8 1 135
39.1b 512 1536 8 2 138
76.1b 1024 1792 8 4 140
145.6b 1536 2304 8 8 148
310.1b 1920 2160 8 16 155
529.6b 2520 2520 8 35 163
1008b 3072 3072 8 64 163
ROWS
