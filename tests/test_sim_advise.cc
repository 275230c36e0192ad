// The layout advisor's model (lib/sim/layout_model.*) against hand-computed values for one
// small model, its model-file reader, and the search's ranking and fault handling on a small
// simulated machine (lib/sim/layout_search.*), whose speed-ups must change no figure.
// Virtual time only.
#include <catch2/catch.hpp>

#include "lib/sim/faults.h"
#include "lib/sim/layout_search.h"
#include "lib/topo/generators.h"

using namespace sncl;
using namespace sncl::sim;

namespace {

// 2 layers, hidden 64, 4 heads, seq 128, vocab 1000, 8 sequences per step.
ModelSpec smallModel() {
  ModelSpec m;
  REQUIRE(parseModelJson(R"({"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 1000,
                             "global_batch": 8, "precision": "bf16"})",
                         "small", &m) == snclSuccess);
  return m;
}

// 2 nodes of perNode devices, a fast bus inside a node, a slow network across.
topo::Graph twoNodes(int perNode) {
  topo::Graph g;
  topo::ClosParams node;
  node.nodes = 2;
  node.perNode = perNode;
  node.spines = 1;
  node.link = {200, 0.5, topo::LinkKind::Bus};
  node.uplink = {10, 1.0, topo::LinkKind::Net};
  REQUIRE(topo::generate(g, node) == snclSuccess);
  REQUIRE(g.finalize() == snclSuccess);
  REQUIRE(g.mapRanks(int(g.endpointCount())) == snclSuccess);
  return g;
}

// A two-tier Clos as clos16k.json, smaller: racks of nodesPerRack nodes, 2 planes, 2 spines
// per plane, so a device keeps a route after its plane-0 link goes down.
topo::Graph clos(int nodes, int perNode, int nodesPerRack) {
  topo::Graph g;
  topo::ClosParams p;
  p.nodes = nodes;
  p.perNode = perNode;
  p.nodesPerRack = nodesPerRack;
  p.planes = 2;
  p.spines = 2;
  REQUIRE(topo::generate(g, p) == snclSuccess);
  REQUIRE(g.finalize() == snclSuccess);
  REQUIRE(g.mapRanks(int(g.endpointCount())) == snclSuccess);
  return g;
}

void linkDown(topo::Graph& g, const std::string& spec) {
  std::vector<LinkFault> links;
  REQUIRE(parseFaults(spec, &links) == snclSuccess);
  REQUIRE(applyFaults(g, links) == snclSuccess);
}

std::vector<topo::EndpointId> endpoints(int first, int count, int stride) {
  std::vector<topo::EndpointId> out;
  for (int i = 0; i < count; ++i) out.push_back(topo::EndpointId(first + i * stride));
  return out;
}

// Bit for bit: a shortcut in the search must not move any figure.
void requireSame(const Advice& a, const Advice& b) {
  REQUIRE(a.layouts.size() == b.layouts.size());
  CHECK(a.healthyDevices == b.healthyDevices);
  CHECK(a.simulations == b.simulations);
  for (size_t i = 0; i < a.layouts.size(); ++i) {
    const LayoutResult &x = a.layouts[i], &y = b.layouts[i];
    CHECK(x.layout.tp == y.layout.tp);
    CHECK(x.layout.pp == y.layout.pp);
    CHECK(x.layout.dp == y.layout.dp);
    CHECK(x.layout.ep == y.layout.ep);
    CHECK(x.layout.microBatch == y.layout.microBatch);
    CHECK(x.layout.interleave == y.layout.interleave);
    CHECK(x.layout.recompute == y.layout.recompute);
    CHECK(x.fits == y.fits);
    CHECK(x.stepUs == y.stepUs);
    CHECK(x.computeUs == y.computeUs);
    CHECK(x.tpUs == y.tpUs);
    CHECK(x.epUs == y.epUs);
    CHECK(x.ppUs == y.ppUs);
    CHECK(x.bubbleUs == y.bubbleUs);
    CHECK(x.dpExposedUs == y.dpExposedUs);
    CHECK(x.mfu == y.mfu);
    CHECK(x.memory.total() == y.memory.total());
    CHECK(x.placement == y.placement);
  }
}

// A device of 100 TFLOP/s and 1 GiB: enough for the small model in every layout.
AdviceOptions smallDevice(int gpus) {
  AdviceOptions o;
  o.peakTflops = 100;
  o.memGiB = 1;
  o.gpus = gpus;
  return o;
}

}  // namespace

TEST_CASE("advise: parameters and FLOPs of a small model, by hand", "[sim][advise]") {
  const LayoutModel m(smallModel());
  // 12 h^2 + 13 h per layer (Narayanan et al.'s count), (V + s) h of embeddings.
  CHECK(m.layerDenseParams() == 12.0 * 64 * 64 + 13 * 64);
  CHECK(m.embeddingParams() == (1000.0 + 128) * 64);
  CHECK(m.totalParams() == 2 * 49984.0 + 72192);
  // Their eq. 3 with recomputation, 96 B s l h^2 (1 + s/6h + V/16lh); without, 72 B s l h^2 (1 + s/6h) + 6 B s h V.
  const double bslh2 = 8.0 * 128 * 2 * 64 * 64;
  CHECK(m.stepFlops(true) == Approx(96 * bslh2 * (1 + 128.0 / (6 * 64) + 1000.0 / (16 * 2 * 64))).epsilon(1e-12));
  CHECK(m.stepFlops(false) == Approx(72 * bslh2 * (1 + 128.0 / (6 * 64)) + 6.0 * 8 * 128 * 64 * 1000).epsilon(1e-12));
  // One device of TP 2, PP 2: one layer, half its matrices, the embeddings split too.
  const Layout l{2, 2, 1, 1, 1, 1, false};
  CHECK(m.deviceParams(l) == Approx((49984.0 + 72192) / 2));
  CHECK(m.stageForwardFlops(l, false) == Approx(128 * (2 * 12.0 * 64 * 64 + 4.0 * 128 * 64) / 2));
}

TEST_CASE("advise: memory of a small model, by hand", "[sim][advise]") {
  const LayoutModel m(smallModel());
  Layout l{1, 1, 1, 1, 1, 1, false};
  const MemoryUse u = m.memory(l);
  const double params = 172160;
  CHECK(u.weights == 2 * params);
  CHECK(u.gradients == 4 * params);  // fp32 accumulation
  CHECK(u.optimizer == 12 * params);
  // Per layer s b h (10 + 24) + 5 a s^2 b bytes; two layers, one micro-batch in flight; fp32
  // logits and their gradient, 8 s b V.
  const double layer = 128.0 * 64 * 34 + 5.0 * 4 * 128 * 128;
  CHECK(u.activations == Approx(2 * layer + 8.0 * 128 * 1000));
  l.recompute = true;  // each layer keeps its input (2 s b h), one layer's set while recomputed
  CHECK(m.memory(l).activations == Approx(2 * 2.0 * 128 * 64 + layer + 8.0 * 128 * 1000));
  // 1F1B: the first of 2 stages holds 2 micro-batches of its layer.
  l = Layout{1, 2, 1, 1, 1, 1, false};
  CHECK(m.memory(l).activations == Approx(std::max(2 * layer, layer + 8.0 * 128 * 1000)));
}

TEST_CASE("advise: model files refuse what they do not know", "[sim][advise]") {
  ModelSpec m;
  CHECK(parseModelJson(R"({"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 1000,
                           "global_batch": 8, "precision": "bf16", "hiden": 3})", "t", &m) == snclInvalidArgument);
  CHECK(std::string(lastError()).find("unknown key \"hiden\"") != std::string::npos);
  CHECK(parseModelJson(R"({"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 1000,
                           "global_batch": 8, "precision": "fp4"})", "t", &m) == snclInvalidArgument);
  CHECK(parseModelJson(R"({"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 1000,
                           "precision": "bf16"})", "t", &m) == snclInvalidArgument);
  CHECK(std::string(lastError()).find("global_batch") != std::string::npos);
  CHECK(parseModelJson(R"({"layers": 2, "hidden": 64, "heads": 5, "seq": 128, "vocab": 1000,
                           "global_batch": 8, "precision": "bf16"})", "t", &m) == snclInvalidArgument);
  CHECK(parseModelJson(R"({"layers": 2.5, "hidden": 64, "heads": 4, "seq": 128, "vocab": 1000,
                           "global_batch": 8, "precision": "bf16"})", "t", &m) == snclInvalidArgument);
  CHECK(parseModelJson("{\"layers\": 2,", "t", &m) == snclInvalidArgument);
  CHECK(std::string(lastError()).find("t:1:") == 0);
  CHECK(parseModelJson(R"({"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 1000, "global_batch": 8,
                           "precision": "fp8", "experts": 4, "top_k": 5})", "t", &m) == snclInvalidArgument);
}

TEST_CASE("advise: layouts are ranked, fitting ones first, by step time", "[sim][advise]") {
  topo::Graph g = twoNodes(2);
  const LayoutModel m(smallModel());
  AdviceOptions o = smallDevice(4);
  std::vector<topo::EndpointId> healthy;
  topo::EndpointId focus;
  REQUIRE(healthyEndpoints(g, 4, AdviceFaults{}, &healthy, &focus) == snclSuccess);
  Advice a;
  REQUIRE(adviseLayouts(g, healthy, m, o, &a) == snclSuccess);
  REQUIRE(a.layouts.size() >= 4);
  for (size_t i = 1; i < a.layouts.size(); ++i) {
    CHECK((a.layouts[i - 1].fits || !a.layouts[i].fits));
    if (a.layouts[i].fits) CHECK(a.layouts[i - 1].stepUs <= a.layouts[i].stepUs);
  }
  for (const LayoutResult& r : a.layouts) {
    CHECK(r.layout.gpus() <= 4);
    CHECK(r.stepUs == Approx(r.computeUs + r.tpUs + r.epUs + r.ppUs + r.bubbleUs + r.dpExposedUs));
  }
  // A TP group inside a node runs on its fast bus; one across both nodes pays the network.
  const LayoutResult* tp2 = findLayout(a, Layout{2, 1, 2, 1});
  const LayoutResult* tp4 = findLayout(a, Layout{4, 1, 1, 1});
  REQUIRE(tp2);
  REQUIRE(tp4);
  CHECK(tp2->placement.rfind("TP node n0;", 0) == 0);
  CHECK(tp4->placement == "TP 2 nodes");
  CHECK(tp4->tpUs / tp4->layout.microBatches(m.spec()) > tp2->tpUs / tp2->layout.microBatches(m.spec()));
  // Too little memory: every layout is there, none fits.
  o.memGiB = 1e-4;
  REQUIRE(adviseLayouts(g, healthy, m, o, &a) == snclSuccess);
  for (const LayoutResult& r : a.layouts) CHECK_FALSE(r.fits);
}

TEST_CASE("advise: lost devices and faulted links", "[sim][advise]") {
  topo::Graph g = twoNodes(4);
  AdviceFaults f;
  REQUIRE(parseAdviceFaults("lose=10%; endpoint=n1.e3:down; link=n0.e0-n0.l1p0:degrade=4", &f) == snclSuccess);
  CHECK(f.losePercent == 10);
  CHECK(f.endpoints == std::vector<std::string>{"n1.e3"});
  CHECK(f.links == "link=n0.e0-n0.l1p0:degrade=4");
  std::vector<topo::EndpointId> healthy;
  topo::EndpointId focus;
  REQUIRE(healthyEndpoints(g, 8, f, &healthy, &focus) == snclSuccess);
  CHECK(healthy.size() == 6);  // one of 8 by 10% (rounded up), one named
  CHECK(focus == 0);           // n0.e0's link is degraded
  CHECK(parseAdviceFaults("lose=0%", &f) == snclInvalidArgument);
  CHECK(parseAdviceFaults("endpoint=n0.e1", &f) == snclInvalidArgument);
  CHECK(parseAdviceFaults("rank=3:kill", &f) == snclInvalidArgument);
  REQUIRE(parseAdviceFaults("endpoint=nope:down", &f) == snclSuccess);
  CHECK(healthyEndpoints(g, 8, f, &healthy, &focus) == snclInvalidArgument);
  // With a device of node 1 lost, TP 4 keeps only node 0's group: 4 devices.
  REQUIRE(parseAdviceFaults("endpoint=n1.e3:down", &f) == snclSuccess);
  REQUIRE(healthyEndpoints(g, 8, f, &healthy, &focus) == snclSuccess);
  AdviceOptions o = smallDevice(8);
  Advice a;
  REQUIRE(adviseLayouts(g, healthy, LayoutModel(smallModel()), o, &a) == snclSuccess);
  CHECK(a.healthyDevices == 7);
  const LayoutResult* tp4 = findLayout(a, Layout{4, 1, 1, 1});
  REQUIRE(tp4);
  CHECK(tp4->layout.gpus() == 4);
}

TEST_CASE("advise: re-planning after a fault compares with the healthy best", "[sim][advise]") {
  topo::Graph g = twoNodes(4);
  const LayoutModel m(smallModel());
  AdviceOptions o = smallDevice(8);
  Replan r;
  REQUIRE(replanLayouts(g, m, o, "", &r) == snclSuccess);
  CHECK_FALSE(r.hasFaults);
  CHECK(r.faulted.layouts.empty());
  // A link 16 times slower under device 0: no layout gets faster, the healthy best is still there.
  REQUIRE(replanLayouts(g, m, o, "link=n0.e0-n0.l1p0:degrade=16", &r) == snclSuccess);
  REQUIRE(r.hasFaults);
  REQUIRE(r.sameIndex >= 0);
  CHECK(r.slowdown >= 0);
  CHECK(r.faulted.layouts[size_t(r.sameIndex)].layout.tp == r.healthy.layouts.front().layout.tp);
  CHECK(r.anotherBetter == (r.sameIndex != 0));
  // The fault is on a copy: the healthy graph still has the link at full speed.
  CHECK(g.linkFactor(g.findLink(g.findVertex("n0.e0"), g.findVertex("n0.l1p0"))) == 1.0);
  CHECK(trainSeconds(m, o, r.healthy.layouts.front(), 1e9) > 0);
  CHECK(replanLayouts(g, m, o, "link=n0.e0-nope:down", &r) == snclInvalidArgument);
}

TEST_CASE("advise: a pricer's kept network prices as a fresh one, with a link down", "[sim][advise]") {
  // 36 nodes of 8, racks of 4: 288 devices, so one group runs the aggregated engine. With
  // the link down, bundles overlap and the network refines them (both engines run twice).
  topo::Graph g = clos(36, 8, 4);
  linkDown(g, "link=n0.e0-r0.l1p0:down");
  // Groups of equal size on other devices come one after another: a route or bundle kept
  // from the one before would price the next wrongly.
  const std::vector<std::vector<topo::EndpointId>> groups = {
      endpoints(0, 8, 1), endpoints(8, 8, 1), endpoints(0, 8, 8), endpoints(0, 36, 8),
      endpoints(1, 36, 8), {0, 40}, {8, 40}, endpoints(0, 288, 1)};
  GroupCommPricer kept(&g, 400);
  for (const auto& group : groups)
    for (CollType coll : {CollType::AllReduce, CollType::Broadcast, CollType::AlltoAll})
      for (double bytes : {64.0 * 1024, 24.0 * (1 << 20)}) {
        if (group.size() > 256 && coll != CollType::AllReduce) continue;  // the aggregated engine's share
        double us = 0, freshUs = 0;
        REQUIRE(kept.exactTimeUs(coll, group, bytes, &us) == snclSuccess);
        GroupCommPricer fresh(&g, 400);
        REQUIRE(fresh.exactTimeUs(coll, group, bytes, &freshUs) == snclSuccess);
        CHECK(us > 0);
        CHECK(us == freshUs);
      }
}

TEST_CASE("advise: the faulted search beside the healthy one answers as alone", "[sim][advise]") {
  topo::Graph g = clos(4, 4, 2);
  const LayoutModel m(smallModel());
  const AdviceOptions o = smallDevice(16);
  const std::string spec = "link=n0.e0-r0.l1p0:down";
  Replan r;
  REQUIRE(replanLayouts(g, m, o, spec, &r) == snclSuccess);
  // The two searches one after the other, each on its own graph and pricer.
  std::vector<topo::EndpointId> devices;
  AdviceOptions healthyOptions = o, faultedOptions = o;
  REQUIRE(healthyEndpoints(g, 16, AdviceFaults{}, &devices, &healthyOptions.focus) == snclSuccess);
  Advice healthy, faulted;
  REQUIRE(adviseLayouts(g, devices, m, healthyOptions, &healthy) == snclSuccess);
  topo::Graph broken = g.clone();
  linkDown(broken, spec);
  AdviceFaults f;
  REQUIRE(parseAdviceFaults(spec, &f) == snclSuccess);
  REQUIRE(healthyEndpoints(broken, 16, f, &devices, &faultedOptions.focus) == snclSuccess);
  REQUIRE(adviseLayouts(broken, devices, m, faultedOptions, &faulted) == snclSuccess);
  requireSame(r.healthy, healthy);
  requireSame(r.faulted, faulted);
  // Not vacuous: the link down slows the healthy best down.
  CHECK(r.slowdown > 0);
}
