// The layout advisor against published results: Narayanan et al., "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM" (SC'21, arXiv 2104.04473), Table 1,
// weak scaling of GPT models from 1.7B to 1T parameters on DGX A100 nodes (312 TFLOP/s fp16
// peak, 80 GB); every figure checked against the paper (docs/advise_validation.md). For every
// row, on topologies/dgx-a100-superpod.json with the row's GPUs and models/gpt-*.json: the
// published layout's predicted TFLOP/s per GPU is within 10% of the published figure (the
// goal is 25%; every row is within 9%), and the published (TP, PP) is among the advisor's top
// 3 layouts, except in the three rows that miss it: there the advisor prefers less tensor
// parallelism, and the published layout keeps the rank it has (4th or 5th) and is at most 14%
// slower than the advisor's best. Those rows do not meet the goal; the bounds catch a
// regression.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "lib/sim/layout_search.h"
#include "lib/topo/topo_file.h"

using namespace sncl;
using namespace sncl::sim;

namespace {

struct Published {
  const char* model;
  int gpus, tp, pp;
  double tflopsPerGpu;
  int maxRank = 3;  // above 3: the published layout misses the advisor's top 3 (the TP All-Reduce decides)
};

constexpr Published kTable1[] = {
    {"gpt-1.7b", 32, 1, 1, 137},        {"gpt-3.6b", 64, 2, 1, 138},        {"gpt-7.5b", 128, 4, 1, 142, 4},
    {"gpt-18.4b", 256, 8, 1, 135, 5},   {"gpt-39.1b", 512, 8, 2, 138, 4},   {"gpt-76.1b", 1024, 8, 4, 140},
    {"gpt-145.6b", 1536, 8, 8, 148},    {"gpt-310.1b", 1920, 8, 16, 155},   {"gpt-529.6b", 2520, 8, 35, 163},
    {"gpt-1008b", 3072, 8, 64, 163},
};

}  // namespace

TEST_CASE("advise: Megatron-LM's weak-scaling layouts and throughput (SC'21 Table 1)", "[sim][advise]") {
  topo::Graph g;
  REQUIRE(topo::loadTopologyFile(SNCL_SOURCE_DIR "/topologies/dgx-a100-superpod.json", &g) == snclSuccess);
  for (const Published& row : kTable1) {
    ModelSpec spec;
    REQUIRE(loadModelFile(fmt::format("{}/models/{}.json", SNCL_SOURCE_DIR, row.model), &spec) == snclSuccess);
    AdviceOptions o;
    o.peakTflops = 312;
    o.memGiB = 80;
    o.hbmGBs = 2039;  // A100 80GB
    o.gpus = row.gpus;
    o.recompute = AdviceOptions::Recompute::Always;  // as the paper's runs (its FLOP count assumes it)
    std::vector<topo::EndpointId> healthy;
    topo::EndpointId focus;
    REQUIRE(healthyEndpoints(g, row.gpus, AdviceFaults{}, &healthy, &focus) == snclSuccess);
    Advice a;
    REQUIRE(adviseLayouts(g, healthy, LayoutModel(spec), o, &a) == snclSuccess);
    int place = 0;
    for (size_t i = 0; i < a.layouts.size() && place == 0; ++i)
      if (a.layouts[i].fits && a.layouts[i].layout.tp == row.tp && a.layouts[i].layout.pp == row.pp) place = int(i) + 1;
    const LayoutResult* published = findLayout(a, Layout{row.tp, row.pp, 1, 1});
    REQUIRE(published);
    const double error = published->tflopsPerGpu / row.tflopsPerGpu - 1;
    INFO(fmt::format("{}: published TP {} PP {} ranked {}, {:.1f} TFLOP/s predicted vs {} published ({:+.1f}%); best "
                     "TP {} PP {} at {:.1f}",
                     row.model, row.tp, row.pp, place, published->tflopsPerGpu, row.tflopsPerGpu, 100 * error,
                     a.layouts[0].layout.tp, a.layouts[0].layout.pp, a.layouts[0].tflopsPerGpu));
    CHECK(place >= 1);
    CHECK(place <= row.maxRank);
    if (row.maxRank > 3) CHECK(published->stepUs <= 1.14 * a.layouts[0].stepUs);
    CHECK(std::abs(error) <= 0.10);
  }
}
