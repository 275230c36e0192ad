// Routes: hops, bottleneck bandwidth, latency sums, multipath over planes, rerouting around
// down links, degraded links, and the per-source cache.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "lib/topo/generators.h"
#include "lib/topo/route.h"

using namespace sncl::topo;

namespace {

Graph build(const GeneratorParams& p) {
  Graph g;
  REQUIRE(generate(g, p) == snclSuccess);
  REQUIRE(g.finalize() == snclSuccess);
  return g;
}

Route route(const Graph& g, const char* a, const char* b) {
  Route r;
  VertexId va = g.findVertex(a), vb = g.findVertex(b);
  REQUIRE(va != kNone);
  REQUIRE(vb != kNone);
  REQUIRE(g.route(va, vb, &r) == snclSuccess);
  return r;
}

LinkId link(const Graph& g, const char* a, const char* b) {
  LinkId l = g.findLink(g.findVertex(a), g.findVertex(b));
  REQUIRE(l != kNone);
  return l;
}

// The flow leaves src whole, arrives at dst whole, and is conserved in between.
void checkConservation(const Graph& g, const Route& r) {
  std::map<VertexId, double> net;
  for (const LinkShare& s : r.shares) {
    CHECK(g.linkUsable(s.link));
    net[s.from] -= s.fraction;
    net[s.to] += s.fraction;
  }
  for (auto& [v, f] : net) {
    double expect = v == r.src ? -1.0 : v == r.dst ? 1.0 : 0.0;
    CHECK(f == Approx(expect).margin(1e-9));
  }
}

// 4 nodes x 2 endpoints, 3 planes, 2 spines per plane; 10 GB/s and 0.1 us into a leaf,
// 0.2 us leaf to spine, non-blocking uplinks (2 x 10 / 2 = 10 GB/s).
ClosParams smallClos() {
  ClosParams p;
  p.nodes = 4;
  p.perNode = 2;
  p.planes = 3;
  p.spines = 2;
  p.link = {10, 0.1, LinkKind::Bus};
  p.uplink = {0, 0.2, LinkKind::Bus};
  return p;
}

}  // namespace

TEST_CASE("clos routes: two hops inside a node, four across, one path per plane and spine") {
  Graph g = build(smallClos());
  Route in = route(g, "n0.e0", "n0.e1");
  CHECK(in.reachable);
  CHECK(in.hops == 2);
  CHECK(in.latencyUs == Approx(0.2));
  CHECK(in.pathCount == 3);
  CHECK(in.bandwidthGBps == Approx(30));
  checkConservation(g, in);

  Route across = route(g, "n0.e0", "n3.e1");
  CHECK(across.hops == 4);
  CHECK(across.latencyUs == Approx(0.6));
  CHECK(across.pathCount == 6);
  CHECK(across.bandwidthGBps == Approx(30));
  CHECK(across.shares.size() == 3 + 6 + 6 + 3);
  checkConservation(g, across);

  // Explicit paths: the first ones go through different planes.
  auto paths = explicitPaths(g, across, 3);
  REQUIRE(paths.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(paths[i].vertices.size() == 5);
    CHECK(paths[i].latencyUs == Approx(0.6));
    CHECK(paths[i].bottleneckGBps == Approx(10));
    CHECK(g.plane(paths[i].vertices[1]) == int(i));
  }
  CHECK(explicitPaths(g, across, 100).size() == 6);
}

TEST_CASE("a down link is routed around and bumps the epoch; a degraded one carries less") {
  Graph g = build(smallClos());
  LinkId l0 = link(g, "n0.e0", "n0.l1p0");
  REQUIRE(g.setLinkState(l0, LinkState::Down) == snclSuccess);
  Route r = route(g, "n0.e0", "n3.e1");
  CHECK(r.epoch == 1);
  CHECK(r.pathCount == 4);
  CHECK(r.bandwidthGBps == Approx(20));
  for (const LinkShare& s : r.shares) CHECK(s.link != l0);
  checkConservation(g, r);

  // Spread in proportion to what each branch can carry: 10, 5, 10 -> 0.4, 0.2, 0.4.
  REQUIRE(g.setLinkState(l0, LinkState::Up) == snclSuccess);
  LinkId l1 = link(g, "n0.e0", "n0.l1p1");
  REQUIRE(g.setLinkState(l1, LinkState::Degraded, 0.5) == snclSuccess);
  r = route(g, "n0.e0", "n3.e1");
  CHECK(r.pathCount == 6);
  CHECK(r.bandwidthGBps == Approx(25));
  for (const LinkShare& s : r.shares)
    if (s.link == l1) CHECK(s.fraction == Approx(0.2));
  checkConservation(g, r);

  // A spine link down inside one plane: that plane keeps its other spine.
  REQUIRE(g.setLinkState(l1, LinkState::Up) == snclSuccess);
  REQUIRE(g.setLinkState(link(g, "n0.l1p2", "l2p2.s0"), LinkState::Down) == snclSuccess);
  r = route(g, "n0.e0", "n3.e1");
  CHECK(r.pathCount == 5);
  CHECK(r.bandwidthGBps == Approx(30));
}

TEST_CASE("endpoints that share their attachment share a cached tree, with correct answers") {
  Graph g = build(smallClos());
  Graph fresh = build(smallClos());
  Route warm = route(g, "n0.e0", "n2.e0");
  Route twin = route(g, "n0.e1", "n2.e0");  // same leaves as n0.e0: served from its tree
  Route cold = route(fresh, "n0.e1", "n2.e0");
  CHECK(twin.latencyUs == cold.latencyUs);
  CHECK(twin.bandwidthGBps == cold.bandwidthGBps);
  CHECK(twin.pathCount == cold.pathCount);
  REQUIRE(twin.shares.size() == cold.shares.size());
  for (size_t i = 0; i < twin.shares.size(); ++i) {
    CHECK(twin.shares[i].link == cold.shares[i].link);
    CHECK(twin.shares[i].fraction == cold.shares[i].fraction);
  }
  // A twin as the destination: through a leaf, not through the source.
  Route pair = route(g, "n0.e0", "n0.e1");
  CHECK(pair.hops == 2);
  CHECK(warm.src != twin.src);
  // After a failure on n0.e1's own link the two are no longer twins.
  REQUIRE(g.setLinkState(link(g, "n0.e1", "n0.l1p0"), LinkState::Down) == snclSuccess);
  CHECK(route(g, "n0.e1", "n2.e0").pathCount == 4);
  CHECK(route(g, "n0.e0", "n2.e0").pathCount == 6);
}

TEST_CASE("full mesh: direct, then through a third endpoint when the direct link is down") {
  FullMeshParams p;
  p.endpoints = 4;
  p.link = {10, 1.0, LinkKind::Bus};
  Graph g = build(p);
  Route r = route(g, "n0.e0", "n0.e1");
  CHECK(r.hops == 1);
  CHECK(r.bandwidthGBps == Approx(10));
  REQUIRE(g.setLinkState(link(g, "n0.e0", "n0.e1"), LinkState::Down) == snclSuccess);
  r = route(g, "n0.e0", "n0.e1");
  CHECK(r.hops == 2);
  CHECK(r.latencyUs == Approx(2.0));
  CHECK(r.pathCount == 2);
  CHECK(r.bandwidthGBps == Approx(20));
  checkConservation(g, r);
}

TEST_CASE("torus: both ways round a ring are equal-cost") {
  TorusParams p;
  p.dims = {6};
  p.link = {10, 0.5, LinkKind::Bus};
  Graph g = build(p);
  Route r = route(g, "e0", "e3");
  CHECK(r.hops == 3);
  CHECK(r.pathCount == 2);
  CHECK(r.bandwidthGBps == Approx(20));
  CHECK(route(g, "e0", "e1").hops == 1);
  CHECK(route(g, "e0", "e5").hops == 1);

  TorusParams t2;
  t2.dims = {4, 4};
  Graph h = build(t2);
  Route d = route(h, "e0.0", "e1.1");
  CHECK(d.hops == 2);
  CHECK(d.pathCount == 2);
  checkConservation(h, d);
}

TEST_CASE("unreachable, self and rank routes") {
  Graph g = build(uniformHosts(2, 2, 1));
  Route r;
  REQUIRE(g.routeRanks(0, 3, &r) == snclSuccess);
  CHECK(r.reachable);
  CHECK(r.hops == 4);
  CHECK(r.bandwidthGBps == Approx(12.5));
  CHECK(r.latencyUs == Approx(0.5 + 2 + 2 + 0.5));
  REQUIRE(g.setLinkState(link(g, "h0", "switch"), LinkState::Down) == snclSuccess);
  REQUIRE(g.routeRanks(0, 3, &r) == snclSuccess);
  CHECK_FALSE(r.reachable);
  CHECK(r.shares.empty());
  REQUIRE(g.routeRanks(0, 1, &r) == snclSuccess);
  CHECK(r.reachable);
  REQUIRE(g.routeRanks(2, 2, &r) == snclSuccess);
  CHECK(r.hops == 0);
  CHECK(std::isinf(r.bandwidthGBps));
  CHECK(g.routeRanks(0, 4, &r) == snclInvalidArgument);
}

TEST_CASE("a cluster prefers the bus inside a supernode and the network across") {
  ClusterParams p;
  p.supernodes = 2;
  ClosParams sn = smallClos();
  p.supernode = sn;
  p.scaleout.endpointsPerLeaf = 4;
  p.scaleout.spines = 2;
  p.scaleout.nic = {5, 2.0, LinkKind::Net};
  Graph g = build(p);
  Route in = route(g, "sn0/n0.e0", "sn0/n3.e0");
  for (const LinkShare& s : in.shares) CHECK(g.linkKind(s.link) == LinkKind::Bus);
  Route out = route(g, "sn0/n0.e0", "sn1/n0.e0");
  CHECK(out.bandwidthGBps == Approx(5));
  bool usesNet = false;
  for (const LinkShare& s : out.shares) usesNet |= g.linkKind(s.link) == LinkKind::Net;
  CHECK(usesNet);
}

TEST_CASE("pairs attached alike reuse one route, each with its own first and last links") {
  Graph g = build(smallClos());
  Route first = route(g, "n0.e0", "n2.e0");
  Route second = route(g, "n0.e1", "n2.e1");  // same leaves at both ends: from the template
  VertexId src = g.findVertex("n0.e1"), dst = g.findVertex("n2.e1");
  CHECK(second.src == src);
  CHECK(second.dst == dst);
  CHECK(second.bandwidthGBps == first.bandwidthGBps);
  CHECK(second.latencyUs == first.latencyUs);
  CHECK(second.pathCount == first.pathCount);
  REQUIRE(second.shares.size() == first.shares.size());
  for (const LinkShare& s : second.shares) {
    CHECK(s.from != first.src);
    CHECK(s.to != first.dst);
    CHECK(s.link == g.findLink(s.from, s.to));
  }
  checkConservation(g, second);
  // Both ends in one node, in either direction.
  Route there = route(g, "n1.e0", "n1.e1"), back = route(g, "n1.e1", "n1.e0");
  CHECK(back.hops == 2);
  for (const LinkShare& s : back.shares) CHECK(s.link == g.findLink(s.from, s.to));
  checkConservation(g, back);
  CHECK(there.bandwidthGBps == back.bandwidthGBps);
}

TEST_CASE("routes from several threads at once agree with routes from one") {
  ClusterParams p;
  p.supernodes = 2;
  p.supernode = smallClos();
  p.scaleout.endpointsPerLeaf = 4;
  p.scaleout.spines = 2;
  Graph serial = build(p), shared = build(p);
  int n = serial.rankCount();
  std::vector<Route> expect(size_t(n) * n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) REQUIRE(serial.routeRanks(a, b, &expect[size_t(a) * n + b]) == snclSuccess);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < n * n; ++i) {
        int k = (i * 7 + t * 13) % (n * n);  // each thread in its own order
        Route r;
        if (shared.routeRanks(k / n, k % n, &r) != snclSuccess) ++mismatches;
        const Route& e = expect[k];
        if (r.latencyUs != e.latencyUs || r.bandwidthGBps != e.bandwidthGBps || r.shares.size() != e.shares.size())
          ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(mismatches == 0);
}

// Templates (routes kept per pair of attachments) and shared trees must give every pair
// the route a cold cache gives it. Random graphs of switches and endpoints that do not
// forward, some endpoints linked to each other directly, some links down: each pair's
// route from a warm cache (asked in a random order, twice) against a fresh clone's.
TEST_CASE("route caches: warm routes equal cold ones, also between directly linked endpoints") {
  const uint64_t seed = std::random_device{}();
  std::printf("test_topo_route seed %llu\n", static_cast<unsigned long long>(seed));
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    Graph g;
    const int switches = 1 + int(rng() % 3), endpoints = 2 + int(rng() % 7);
    std::vector<VertexId> sw, ep;
    for (int i = 0; i < switches; ++i) {
      VertexId v;
      REQUIRE(g.addVertex(std::string("s").append(std::to_string(i)), VertexAttrs{}, &v) == snclSuccess);
      sw.push_back(v);
    }
    for (int i = 0; i + 1 < switches; ++i)
      REQUIRE(g.addLink(sw[i], sw[i + 1], {40, 0.2, LinkKind::Bus}) == snclSuccess);
    const double lats[] = {0.1, 0.2, 0.3};
    const double bws[] = {10, 20};
    for (int i = 0; i < endpoints; ++i) {
      VertexAttrs a;
      a.kind = VertexKind::Endpoint;
      VertexId v;
      REQUIRE(g.addVertex(std::string("e").append(std::to_string(i)), a, &v) == snclSuccess);
      ep.push_back(v);
      // Attached alike often (same switches, same figures): that is what templates share.
      const int first = int(rng() % switches), count = 1 + int(rng() % 2);
      for (int k = 0; k < count && first + k < switches; ++k)
        REQUIRE(g.addLink(v, sw[first + k], {10, 0.1, LinkKind::Bus}) == snclSuccess);
    }
    for (int i = 0; i < endpoints; ++i)
      for (int j = i + 1; j < endpoints; ++j)
        if (rng() % 3 == 0)
          REQUIRE(g.addLink(ep[i], ep[j], {bws[rng() % 2], lats[rng() % 3], LinkKind::Bus}) == snclSuccess);
    REQUIRE(g.finalize() == snclSuccess);
    if (rng() % 3 == 0 && g.linkCount() > 0)
      REQUIRE(g.setLinkState(LinkId(rng() % g.linkCount()), LinkState::Down) == snclSuccess);
    std::vector<std::pair<VertexId, VertexId>> pairs;
    for (VertexId a : ep)
      for (VertexId b : ep)
        if (a != b) pairs.emplace_back(a, b);
    for (int round = 0; round < 2; ++round) {
      std::shuffle(pairs.begin(), pairs.end(), rng);
      for (auto [a, b] : pairs) {
        Graph cold = g.clone();
        Route warm, fresh;
        REQUIRE(g.route(a, b, &warm) == snclSuccess);
        REQUIRE(cold.route(a, b, &fresh) == snclSuccess);
        INFO("trial " << trial << ": " << g.vertexName(a) << " -> " << g.vertexName(b));
        REQUIRE(warm.reachable == fresh.reachable);
        CHECK(warm.latencyUs == fresh.latencyUs);
        CHECK(warm.bandwidthGBps == fresh.bandwidthGBps);
        CHECK(warm.hops == fresh.hops);
        REQUIRE(warm.shares.size() == fresh.shares.size());
        for (size_t i = 0; i < warm.shares.size(); ++i) {
          CHECK(warm.shares[i].link == fresh.shares[i].link);
          CHECK(warm.shares[i].from == fresh.shares[i].from);
          CHECK(warm.shares[i].to == fresh.shares[i].to);
          CHECK(warm.shares[i].fraction == fresh.shares[i].fraction);
        }
      }
    }
  }
}
