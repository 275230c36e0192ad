// Topology graph: generator counts and degrees, levels, rank mapping, epochs, bisection.
#include <catch2/catch.hpp>

#include "lib/topo/generators.h"
#include "lib/topo/graph.h"
#include "lib/topo/summary.h"
#include "lib/topo/topo_file.h"

using namespace sncl::topo;

namespace {

Graph build(const GeneratorParams& p) {
  Graph g;
  REQUIRE(generate(g, p) == snclSuccess);
  REQUIRE(g.finalize() == snclSuccess);
  return g;
}

size_t degree(const Graph& g, const char* name) {
  VertexId v = g.findVertex(name);
  REQUIRE(v != kNone);
  return g.linksOf(v).size();
}

size_t countKind(const Graph& g, VertexKind k) {
  size_t n = 0;
  for (VertexId v = 0; v < g.vertexCount(); ++v) n += g.vertexKind(v) == k;
  return n;
}

}  // namespace

TEST_CASE("full mesh: every endpoint linked to every other") {
  FullMeshParams p;
  p.endpoints = 5;
  Graph g = build(p);
  CHECK(g.endpointCount() == 5);
  CHECK(g.vertexCount() == 1 + 1 + 5);  // container, one node, endpoints
  CHECK(g.linkCount() == 10);
  for (int i = 0; i < 5; ++i) CHECK(degree(g, fmt::format("n0.e{}", i).c_str()) == 4);
  CHECK(g.groupCount(Level::Node) == 1);
}

TEST_CASE("clos: endpoints into every plane's leaf, leaves into every spine of their plane") {
  ClosParams p;
  p.nodes = 4;
  p.perNode = 2;
  p.planes = 3;
  p.spines = 2;
  Graph g = build(p);
  CHECK(g.endpointCount() == 8);
  CHECK(g.vertexCount() == 1 + 4 + 8 + 4 * 3 + 3 * 2);
  CHECK(g.linkCount() == 8 * 3 + 12 * 2);
  CHECK(degree(g, "n0.e0") == 3);
  CHECK(degree(g, "n2.l1p1") == 2 + 2);
  CHECK(degree(g, "l2p2.s1") == 4);
  CHECK(countKind(g, VertexKind::Switch) == 18);
  // Non-blocking uplinks by default: 2 endpoints x 50 GB/s over 2 spines.
  CHECK(g.linkNominalGBps(g.findLink(g.findVertex("n0.l1p0"), g.findVertex("l2p0.s0"))) == 50);
  CHECK(g.plane(g.findVertex("l2p2.s1")) == 2);
  CHECK(g.tier(g.findVertex("n0.l1p0")) == 1);
}

TEST_CASE("clos with racks: leaves per rack, Rack level defined") {
  ClosParams p;
  p.nodes = 4;
  p.perNode = 2;
  p.nodesPerRack = 2;
  p.planes = 2;
  p.spines = 3;
  Graph g = build(p);
  CHECK(g.vertexCount() == 1 + 4 + 2 + 8 + 2 * 2 + 2 * 3);
  CHECK(g.linkCount() == 8 * 2 + 4 * 3);
  CHECK(degree(g, "r1.l1p0") == 4 + 3);
  CHECK(degree(g, "l2p1.s2") == 2);
  CHECK(g.levelDefined(Level::Rack));
  CHECK(g.groupCount(Level::Node) == 4);
  CHECK(g.groupCount(Level::Rack) == 2);
  CHECK(g.groupMembers(Level::Rack, 1).size() == 4);
  CHECK(g.vertexName(g.groupVertex(Level::Rack, 1)) == "r1");
}

TEST_CASE("torus: neighbours in every dimension, wrap, rings of two not doubled") {
  TorusParams p;
  p.dims = {4, 3, 2};
  Graph g = build(p);
  CHECK(g.endpointCount() == 24);
  CHECK(g.linkCount() == 4 * 6 + 3 * 8 + 1 * 12);
  for (VertexId v = 0; v < g.vertexCount(); ++v)
    if (g.vertexKind(v) == VertexKind::Endpoint) CHECK(g.linksOf(v).size() == 5);
  CHECK(g.findLink(g.findVertex("e3.0.0"), g.findVertex("e0.0.0")) != kNone);  // wrap
  CHECK(g.forwards(g.findVertex("e1.1.1")));

  TorusParams open;
  open.dims = {4, 4};
  open.wrap = false;
  Graph m = build(open);
  CHECK(m.linkCount() == 2 * 4 * 3);
  CHECK(degree(m, "e0.0") == 2);
  CHECK(degree(m, "e1.1") == 4);
}

TEST_CASE("fat tree: k-ary counts and degrees") {
  FatTreeParams p;
  p.k = 4;
  Graph g = build(p);
  CHECK(g.endpointCount() == 16);
  CHECK(countKind(g, VertexKind::Switch) == 20);
  CHECK(g.linkCount() == 48);
  CHECK(degree(g, "core0") == 4);
  CHECK(degree(g, "pod2.agg1") == 4);
  CHECK(degree(g, "pod3.edge0") == 4);
  CHECK(g.groupCount(Level::Rack) == 4);  // pods
}

TEST_CASE("hosts: ranks on NUMA nodes, hosts on one switch") {
  HostsParams p = uniformHosts(2, 4, 2);
  Graph g = build(p);
  CHECK(g.endpointCount() == 8);
  CHECK(g.vertexCount() == 1 + 1 + 2 + 4 + 8);  // cluster, switch, hosts, NUMA nodes, ranks
  CHECK(g.linkCount() == 8 + 4 + 2);
  CHECK(g.groupCount(Level::Numa) == 4);
  CHECK(g.groupCount(Level::Node) == 2);
  CHECK(g.vertexName(g.parent(g.findVertex("h1.r3"))) == "h1.numa1");
}

TEST_CASE("cluster: supernodes joined by a rail-optimized scale-out network") {
  ClusterParams p;
  p.supernodes = 2;
  ClosParams sn;
  sn.nodes = 2;
  sn.perNode = 2;
  sn.spines = 1;
  p.supernode = sn;
  p.scaleout.endpointsPerLeaf = 2;
  p.scaleout.spines = 2;
  Graph g = build(p);
  CHECK(g.endpointCount() == 8);
  CHECK(g.vertexCount() == 1 + 2 * 10 + 4 + 2);
  CHECK(g.linkCount() == 2 * 6 + 8 + 4 * 2);
  // Rail 0 of supernode 0 shares a leaf; rail 1 is on another.
  auto leafOf = [&](const char* ep) {
    VertexId v = g.findVertex(ep);
    for (LinkId l : g.linksOf(v))
      if (g.linkKind(l) == LinkKind::Net) return g.linkPeer(l, v);
    return kNone;
  };
  CHECK(leafOf("sn0/n0.e0") == leafOf("sn0/n1.e0"));
  CHECK(leafOf("sn0/n0.e0") != leafOf("sn0/n0.e1"));
  CHECK(g.groupCount(Level::Supernode) == 2);
  CHECK(g.groupCount(Level::Cluster) == 1);
  REQUIRE(g.rankLevels() == std::vector<Level>{Level::Node, Level::Supernode, Level::Cluster});
  CHECK(g.rankGroupOf(5, Level::Supernode) == 1);
  CHECK(g.rankGroupMembers(Level::Supernode, 1).size() == 4);
}

TEST_CASE("ranks map in endpoint order or by rank order; too many ranks is an error") {
  ClosParams p;
  p.nodes = 2;
  p.perNode = 4;
  Graph g = build(p);
  CHECK(g.rankCount() == 8);
  CHECK(g.mapRanks(3) == snclSuccess);
  CHECK(g.rankCount() == 3);
  CHECK(g.endpointRank(5) == -1);
  CHECK(g.mapRanks(9) == snclInvalidArgument);
  CHECK_THAT(sncl::lastError(), Catch::Contains("9 ranks but only 8 endpoints"));

  Graph h;
  REQUIRE(generate(h, p) == snclSuccess);
  REQUIRE(h.setRankOrder({h.findVertex("n1.e0"), h.findVertex("n0.e0")}) == snclSuccess);
  REQUIRE(h.finalize() == snclSuccess);
  CHECK(h.rankCount() == 2);
  CHECK(h.vertexName(h.rankVertex(0)) == "n1.e0");
  CHECK(h.rankGroupOf(0, Level::Node) == 0);  // groups numbered by lowest rank
  CHECK(h.rankGroupOf(1, Level::Node) == 1);
  CHECK(h.mapRanks(3) == snclInvalidArgument);
}

TEST_CASE("link state changes bump the epoch once per change") {
  FullMeshParams p;
  p.endpoints = 3;
  Graph g = build(p);
  LinkId l = g.findLink(g.findVertex("n0.e0"), g.findVertex("n0.e1"));
  CHECK(g.epoch() == 0);
  REQUIRE(g.setLinkState(l, LinkState::Down) == snclSuccess);
  CHECK(g.epoch() == 1);
  CHECK(g.linkBandwidthGBps(l) == 0);
  REQUIRE(g.setLinkState(l, LinkState::Down) == snclSuccess);
  CHECK(g.epoch() == 1);
  REQUIRE(g.setLinkState(l, LinkState::Degraded, 0.25) == snclSuccess);
  CHECK(g.epoch() == 2);
  CHECK(g.linkBandwidthGBps(l) == Approx(25));
  CHECK(g.setLinkState(l, LinkState::Degraded, 1.5) == snclInvalidArgument);
  REQUIRE(g.setLinkState(l, LinkState::Up) == snclSuccess);
  CHECK(g.epoch() == 3);
  CHECK(g.linkBandwidthGBps(l) == 100);
}

TEST_CASE("graph rejects bad vertices and links") {
  Graph g;
  VertexId a, b;
  REQUIRE(g.addVertex("a", {VertexKind::Endpoint}, &a) == snclSuccess);
  REQUIRE(g.addVertex("b", {VertexKind::Switch}, &b) == snclSuccess);
  CHECK(g.addVertex("a", {VertexKind::Switch}) == snclInvalidArgument);
  CHECK(g.addVertex("x-y", {VertexKind::Switch}) == snclInvalidArgument);
  CHECK(g.addLink(a, a, {1, 1}) == snclInvalidArgument);
  CHECK(g.addLink(a, b, {0, 1}) == snclInvalidArgument);
  CHECK(g.addLink(a, b, {1, 0}) == snclInvalidArgument);
  REQUIRE(g.addLink(a, b, {1, 1}) == snclSuccess);
  CHECK(g.addLink(b, a, {1, 1}) == snclInvalidArgument);
  CHECK_THAT(sncl::lastError(), Catch::Contains("duplicate link"));
}

TEST_CASE("bisection bandwidth of the generated shapes") {
  FullMeshParams mesh;
  mesh.endpoints = 4;
  mesh.link.bwGBps = 10;
  CHECK(bisectionBandwidth(build(mesh)) == Approx(40));  // 2 x 2 links cross

  TorusParams ring;
  ring.dims = {8};
  ring.link.bwGBps = 10;
  CHECK(bisectionBandwidth(build(ring)) == Approx(20));  // a ring is cut twice

  TorusParams torus;
  torus.dims = {4, 4};
  torus.link.bwGBps = 1;
  CHECK(bisectionBandwidth(build(torus)) == Approx(8));  // 2 x 4 wrap-around links

  FatTreeParams ft;
  ft.k = 4;
  ft.link.bwGBps = ft.uplink.bwGBps = 1;
  CHECK(bisectionBandwidth(build(ft)) == Approx(8));  // full bisection: k^3/8

  ClosParams clos;
  clos.nodes = 4;
  clos.perNode = 2;
  clos.planes = 2;
  clos.link.bwGBps = 10;
  Graph c = build(clos);
  Summary s = summarize(c);
  CHECK(s.bisectionGBps == Approx(s.halfInjectionGBps));  // non-blocking
  CHECK(s.injectionTotalMin == Approx(20));

  Graph lab = build(uniformHosts(2, 4, 1));
  CHECK(bisectionBandwidth(lab) == Approx(12.5));  // one NIC
}

TEST_CASE("explicit JSON round-trips the graph") {
  ClusterParams p;
  p.supernodes = 2;
  FullMeshParams sn;
  sn.endpoints = 4;
  sn.perNode = 2;
  p.supernode = sn;
  Graph g = build(p);
  g.setName("roundtrip");
  REQUIRE(g.setLinkState(3, LinkState::Degraded, 0.5) == snclSuccess);
  REQUIRE(g.setLinkState(5, LinkState::Down) == snclSuccess);
  std::string text = topologyToJson(g);
  Graph h;
  REQUIRE(parseTopology(text, "roundtrip", &h) == snclSuccess);
  CHECK(h.vertexCount() == g.vertexCount());
  CHECK(h.linkCount() == g.linkCount());
  CHECK(h.linkState(3) == LinkState::Degraded);
  CHECK(h.linkState(5) == LinkState::Down);
  CHECK(h.groupCount(Level::Supernode) == 2);
  CHECK(topologyToJson(h) == text);
}
