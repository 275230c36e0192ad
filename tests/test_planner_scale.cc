// The cost model's fast path (classes of pairs, bundled parallel links) against its exact
// path (every pair routed, every link direction on its own): the same candidates, estimates
// and choices on generated shapes, symmetric and not (a failed link, a degraded one, ranks
// mapped in a shuffled order or onto a subset), where classes and bundles must split.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "lib/base/error.h"
#include "lib/plan/planner.h"
#include "lib/topo/generators.h"

using namespace sncl;

namespace {

struct Case {
  std::string name;
  std::shared_ptr<topo::Graph> graph;
  std::vector<topo::VertexId> rankVertex;
};

std::shared_ptr<topo::Graph> build(const topo::GeneratorParams& p) {
  auto g = std::make_shared<topo::Graph>();
  REQUIRE(topo::generate(*g, p) == snclSuccess);
  REQUIRE(g->finalize() == snclSuccess);
  REQUIRE(g->mapRanks(g->endpointCount()) == snclSuccess);
  return g;
}

std::vector<topo::VertexId> allRanks(const topo::Graph& g) {
  std::vector<topo::VertexId> rv;
  for (int r = 0; r < g.rankCount(); ++r) rv.push_back(g.rankVertex(r));
  return rv;
}

topo::ClosParams clos() {
  topo::ClosParams p;
  p.nodes = 8;
  p.perNode = 4;
  p.nodesPerRack = 2;
  p.planes = 2;
  p.spines = 2;
  p.link = {50, 0.2, topo::LinkKind::Bus};
  p.uplink = {100, 0.3, topo::LinkKind::Bus};
  return p;
}

// A link of the graph between two vertices whose names start as given.
topo::LinkId linkBetween(const topo::Graph& g, const std::string& a, const std::string& b) {
  for (topo::LinkId l = 0; l < g.linkCount(); ++l) {
    const std::string x = g.vertexName(g.linkA(l)), y = g.vertexName(g.linkB(l));
    if ((x.find(a) != std::string::npos && y.find(b) != std::string::npos) ||
        (x.find(b) != std::string::npos && y.find(a) != std::string::npos))
      return l;
  }
  return topo::kNone;
}

// Every candidate's estimate on both paths, and the choice, for coll at bytes.
void compare(const Case& c, CollType coll, size_t bytes, CostClock clock) {
  auto fast = std::make_shared<CostModel>(c.graph, c.rankVertex, defaultTuning(), clock, CostPath::Bundled);
  auto exact = std::make_shared<CostModel>(c.graph, c.rankVertex, defaultTuning(), clock, CostPath::Exact);
  Planner pf(0, fast, PlannerOptions{}), pe(0, exact, PlannerOptions{});
  INFO(c.name << " " << collName(coll) << " " << bytes << " B, " << clockName(clock) << " clock");
  const std::vector<Plan> cf = pf.candidates(coll, bytes), ce = pe.candidates(coll, bytes);
  REQUIRE(cf.size() == ce.size());
  for (const Plan& e : ce) {
    auto it = std::find_if(cf.begin(), cf.end(), [&](const Plan& f) { return pf.describe(f) == pe.describe(e); });
    REQUIRE(it != cf.end());
    INFO(pe.describe(e) << ": exact " << e.estimateUs << " us, fast " << it->estimateUs << " us");
    CHECK(std::fabs(it->estimateUs - e.estimateUs) <= 1e-6 * e.estimateUs);
  }
  if (coll == CollType::AllReduce && bytes == 8 && clock == CostClock::Wall) {
    const CostModel::Stats st = fast->stats();
    std::printf("%s: %zu pair routes, %zu classes, %zu class routes, %zu bundles, bundling %s\n", c.name.c_str(),
                st.pairRoutes, st.classes, st.classRoutes, st.bundles, st.bundling ? "on" : "off");
  }
  // choose() prunes (a candidate stops costing once it exceeds the best so far): the same
  // choice and estimate, bit for bit, as the full comparison on either path.
  for (Planner* p : {&pf, &pe}) {
    const int bucket = std::bit_width(bytes);
    const size_t low = size_t(1) << (bucket - 1), high = (size_t(1) << bucket) - 1;
    std::vector<Plan> all = p->candidates(coll, low);
    if (high > kDirectMaxBytes)
      std::erase_if(all, [&](const Plan& x) {
        return x.algorithm == Algorithm::Direct || scanByDoubling(coll, x.algorithm) ||
               (x.algorithm == Algorithm::Hierarchical &&
                (x.inner == algo::GroupAlgo::Direct || x.outer == algo::FlatAllReduce::Direct));
      });
    if (all.empty()) continue;  // nothing fits the bucket: choose's fallback, nothing pruned
    const Plan pruned = p->choose(coll, bytes);
    INFO("pruned " << p->describe(pruned) << " " << pruned.estimateUs << " us, unpruned " << p->describe(all.front()) << " "
                   << all.front().estimateUs << " us");
    CHECK(p->describe(pruned) == p->describe(all.front()));
    CHECK(pruned.estimateUs == all.front().estimateUs);
  }
  const Plan f = pf.choose(coll, bytes), e = pe.choose(coll, bytes);
  CHECK(f.algorithm == e.algorithm);
  CHECK(std::fabs(f.estimateUs - e.estimateUs) <= 1e-6 * e.estimateUs);
  if (pf.describe(f) != pe.describe(e)) {
    // Only a tie may pick another variant: the fast choice must cost the same exactly.
    double exactOfFast = -1;
    for (const Plan& x : ce)
      if (pe.describe(x) == pf.describe(f)) exactOfFast = x.estimateUs;
    CHECK(std::fabs(exactOfFast - e.estimateUs) <= 1e-9 * e.estimateUs);
  }
}

// What the fast path's model holds after costing every All-Reduce candidate at 8 B.
CostModel::Stats statsOf(const Case& c) {
  auto m = std::make_shared<CostModel>(c.graph, c.rankVertex, defaultTuning(), CostClock::Wall, CostPath::Bundled);
  Planner p(0, m, PlannerOptions{});
  p.candidates(CollType::AllReduce, 8);
  return m->stats();
}

void compareAll(const Case& c, std::mt19937_64& rng) {
  std::vector<size_t> sizes = {8, 64 << 10, 1 << 20, size_t(1) << 30, 4099 /* prime */};
  sizes.push_back(1 + rng() % (8u << 20));  // odd or not, whatever came
  for (CollType coll : {CollType::AllReduce, CollType::Broadcast, CollType::Reduce, CollType::AllGather,
                        CollType::ReduceScatter, CollType::AlltoAll, CollType::Scan})
    for (size_t bytes : sizes) compare(c, coll, bytes, CostClock::Wall);
  compare(c, CollType::AllReduce, 1 << 20, CostClock::Simulated);
  compare(c, CollType::AllReduce, 1 << 20, CostClock::BusModeled);
}

}  // namespace

TEST_CASE("fast path: symmetric shapes use classes and bundles and agree with the exact path", "[planner][scale]") {
  const uint64_t seed = std::random_device{}();
  std::printf("test_planner_scale seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);

  SECTION("two-plane Clos with racks") {
    auto g = build(clos());
    Case c{"clos", g, allRanks(*g)};
    compareAll(c, rng);
    // The shape is even: the fast path must have used what it is for.
    auto m = std::make_shared<CostModel>(g, c.rankVertex, defaultTuning(), CostClock::Wall, CostPath::Bundled);
    Planner p(0, m, PlannerOptions{});
    p.candidates(CollType::AllReduce, 1 << 20);
    const CostModel::Stats st = m->stats();
    CHECK(st.bundling);
    CHECK(st.classes == 4);  // one per rack: its endpoints hang off the same leaves
    CHECK(st.classRoutes > 0);
    CHECK(st.pairRoutes == 0);  // every pair costed by its classes: nothing kept per pair
    CHECK(st.bundles > 0);
    auto e = std::make_shared<CostModel>(g, c.rankVertex, defaultTuning(), CostClock::Wall, CostPath::Exact);
    Planner pe(0, e, PlannerOptions{});
    pe.candidates(CollType::AllReduce, 1 << 20);
    CHECK(e->stats().classRoutes == 0);
    CHECK(e->stats().bundles == 0);
  }
  SECTION("fat tree k=4") {
    topo::FatTreeParams p;
    p.k = 4;
    auto g = build(p);
    compareAll({"fattree", g, allRanks(*g)}, rng);
  }
  SECTION("torus (endpoints forward: no classes)") {
    topo::TorusParams p;
    p.dims = {4, 3};
    auto g = build(p);
    compareAll({"torus", g, allRanks(*g)}, rng);
  }
  SECTION("hosts on a switch") {
    topo::HostsParams p = topo::uniformHosts(3, 4, 2);
    auto g = build(p);
    compareAll({"hosts", g, allRanks(*g)}, rng);
  }
  SECTION("cluster of Clos supernodes over a scale-out network") {
    topo::ClusterParams p;
    p.supernodes = 2;
    topo::ClosParams sn = clos();
    sn.nodes = 4;
    p.supernode = sn;
    p.scaleout.endpointsPerLeaf = 4;
    p.scaleout.spines = 2;
    auto g = build(p);
    compareAll({"cluster", g, allRanks(*g)}, rng);
  }
}

TEST_CASE("fast path: asymmetry splits classes and bundles correctly", "[planner][scale]") {
  const uint64_t seed = std::random_device{}();
  std::printf("test_planner_scale seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);

  SECTION("a failed leaf-spine link") {
    auto g = build(clos());
    const topo::LinkId l = linkBetween(*g, ".l1p", "l2p");
    REQUIRE(l != topo::kNone);
    REQUIRE(g->setLinkState(l, topo::LinkState::Down) == snclSuccess);
    compareAll({"clos, leaf-spine down", g, allRanks(*g)}, rng);
    // That leaf's routes use part of a bundle other routes use whole: single links.
    CHECK_FALSE(statsOf({"", g, allRanks(*g)}).bundling);
  }
  SECTION("a failed endpoint-leaf link (that endpoint's class splits off)") {
    auto g = build(clos());
    const topo::LinkId l = linkBetween(*g, "n1.e2", ".l1p");
    REQUIRE(l != topo::kNone);
    REQUIRE(g->setLinkState(l, topo::LinkState::Down) == snclSuccess);
    compareAll({"clos, endpoint-leaf down", g, allRanks(*g)}, rng);
    // One class per rack (4), and the endpoint with a link down alone in a fifth.
    CHECK(statsOf({"", g, allRanks(*g)}).classes == 5);
  }
  SECTION("a degraded uplink (a bundle of unequal links)") {
    auto g = build(clos());
    const topo::LinkId l = linkBetween(*g, ".l1p", "l2p");
    REQUIRE(l != topo::kNone);
    REQUIRE(g->setLinkState(l, topo::LinkState::Degraded, 0.25) == snclSuccess);
    compareAll({"clos, uplink degraded", g, allRanks(*g)}, rng);
  }
  SECTION("ranks in a shuffled order, on a subset of the endpoints") {
    auto g = build(clos());
    std::vector<topo::VertexId> rv = allRanks(*g);
    std::shuffle(rv.begin(), rv.end(), rng);
    rv.resize(rv.size() - 1 - rng() % (rv.size() / 2));
    compareAll({"clos, shuffled subset", g, rv}, rng);
  }
  SECTION("endpoints linked directly to each other (they keep their classes)") {
    // Per node: endpoints a0, a1 each linked to b0 and b1 (and all four to the node's
    // switch), so a0 and a1 are attached alike, as are b0 and b1: classes of two whose
    // pairs across are direct links, and pairs inside a class go through the switch.
    auto g = std::make_shared<topo::Graph>();
    topo::VertexId core;
    REQUIRE(g->addVertex("core", topo::VertexAttrs{}, &core) == snclSuccess);
    for (int n = 0; n < 3; ++n) {
      topo::VertexAttrs nodeAttrs;
      nodeAttrs.kind = topo::VertexKind::Node;
      nodeAttrs.forwards = 0;
      topo::VertexId node, sw;
      const std::string prefix = std::string("n").append(std::to_string(n));
      REQUIRE(g->addVertex(prefix, nodeAttrs, &node) == snclSuccess);
      topo::VertexAttrs swAttrs;
      swAttrs.parent = node;
      REQUIRE(g->addVertex(std::string(prefix).append(".sw"), swAttrs, &sw) == snclSuccess);
      REQUIRE(g->addLink(sw, core, {100, 1.0, topo::LinkKind::Net}) == snclSuccess);
      std::vector<topo::VertexId> ep(4);
      for (int e = 0; e < 4; ++e) {
        topo::VertexAttrs a;
        a.kind = topo::VertexKind::Endpoint;
        a.parent = node;
        REQUIRE(g->addVertex(std::string(prefix).append(".e").append(std::to_string(e)), a, &ep[e]) == snclSuccess);
        REQUIRE(g->addLink(ep[e], sw, {20, 0.3, topo::LinkKind::Bus}) == snclSuccess);
      }
      for (int a = 0; a < 2; ++a)
        for (int b = 2; b < 4; ++b) REQUIRE(g->addLink(ep[a], ep[b], {50, 0.2, topo::LinkKind::Bus}) == snclSuccess);
    }
    REQUIRE(g->finalize() == snclSuccess);
    REQUIRE(g->mapRanks(int(g->endpointCount())) == snclSuccess);
    compareAll({"directly linked endpoints", g, allRanks(*g)}, rng);
    CHECK(statsOf({"", g, allRanks(*g)}).classes == 6);  // {a0, a1} and {b0, b1} per node
  }
  SECTION("a link lost after planning: the next epoch is costed anew") {
    auto g = build(clos());
    const std::vector<topo::VertexId> rv = allRanks(*g);
    auto fast = std::make_shared<CostModel>(g, rv, defaultTuning(), CostClock::Wall, CostPath::Bundled);
    Planner pf(0, fast, PlannerOptions{});
    const double before = pf.candidates(CollType::AllReduce, 1 << 20).front().estimateUs;
    const topo::LinkId l = linkBetween(*g, ".l1p", "l2p");
    REQUIRE(g->setLinkState(l, topo::LinkState::Down) == snclSuccess);
    auto exact = std::make_shared<CostModel>(g, rv, defaultTuning(), CostClock::Wall, CostPath::Exact);
    Planner pe(0, exact, PlannerOptions{});
    for (const Plan& e : pe.candidates(CollType::AllReduce, 1 << 20)) {
      INFO(pe.describe(e));
      CHECK(std::fabs(pf.estimateUs(CollType::AllReduce, e, 1 << 20) - e.estimateUs) <= 1e-6 * e.estimateUs);
    }
    CHECK(before > 0);
  }
}
