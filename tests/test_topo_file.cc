// Topology files: the shipped examples, rank maps, and every kind of bad input with the
// place and the reason in its message.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "lib/topo/route.h"
#include "lib/topo/topo_file.h"

using namespace sncl::topo;

namespace {

std::string exampleDir() {
  std::string here = __FILE__;  // .../tests/test_topo_file.cc
  return here.substr(0, here.rfind("/tests/")) + "/topologies/";
}

// Parses text that must fail; returns the message.
std::string bad(const std::string& text, sncl::Result expect = snclInvalidArgument) {
  Graph g;
  sncl::Result r = parseTopology(text, "t.json", &g);
  CHECK(r == expect);
  return sncl::lastError();
}

Graph good(const std::string& text) {
  Graph g;
  sncl::Result r = parseTopology(text, "t.json", &g);
  INFO(sncl::lastError());
  REQUIRE(r == snclSuccess);
  return g;
}

const char* kTwoSwitches = R"({"vertices": [
  {"name": "a", "kind": "endpoint"}, {"name": "b", "kind": "switch"}, {"name": "c", "kind": "endpoint"}],
)";

}  // namespace

TEST_CASE("the example topologies load with their published sizes") {
  struct Example {
    const char* file;
    size_t endpoints;
    double injection;
  } examples[] = {{"lab-2x4.json", 8, 20},
                  {"cloudmatrix384.json", 384, 392 + 50},
                  {"atlas950.json", 8192, 2048},
                  {"atlas960.json", 15488, 2200}};
  for (const auto& e : examples) {
    INFO(e.file);
    Graph g;
    REQUIRE(loadTopologyFile(exampleDir() + e.file, &g) == snclSuccess);
    CHECK(g.endpointCount() == e.endpoints);
    CHECK(g.rankCount() == int(e.endpoints));
    double inj = 0;
    for (LinkId l : g.linksOf(g.endpointVertex(0))) inj += g.linkBandwidthGBps(l);
    CHECK(inj == Approx(e.injection));
  }
  Graph cm;
  REQUIRE(loadTopologyFile(exampleDir() + "cloudmatrix384.json", &cm) == snclSuccess);
  CHECK(cm.groupCount(Level::Node) == 48);
  Route r;
  REQUIRE(cm.routeRanks(0, 383, &r) == snclSuccess);
  CHECK(r.bandwidthGBps == Approx(392));
  CHECK(r.pathCount == 7 * 16);
  CHECK(r.latencyUs < 1.0);  // "under 1 us between nodes"
  Graph atlas;
  REQUIRE(loadTopologyFile(exampleDir() + "atlas950.json", &atlas) == snclSuccess);
  REQUIRE(atlas.routeRanks(0, 8191, &r) == snclSuccess);
  CHECK(r.latencyUs == Approx(2.1));
  CHECK(atlas.groupCount(Level::Rack) == 128);
}

TEST_CASE("explicit vertices, links and a rank map") {
  Graph g = good(std::string(kTwoSwitches) + R"(
    "links": [{"a": "a", "b": "b", "bw": 10, "lat": 1, "kind": "net"},
              {"a": "c", "b": "b", "bw": 5, "lat": 1, "state": "degraded", "factor": 0.5}],
    "rank_map": ["c", 0]})");
  CHECK(g.rankCount() == 2);
  CHECK(g.vertexName(g.rankVertex(0)) == "c");
  CHECK(g.vertexName(g.rankVertex(1)) == "a");
  CHECK(g.linkBandwidthGBps(1) == Approx(2.5));
  CHECK(g.epoch() == 1);
  CHECK(g.mapRanks(3) == snclInvalidArgument);
  CHECK_THAT(sncl::lastError(), Catch::Contains("3 ranks but only 2 endpoints in its rank_map"));
}

TEST_CASE("generators compose with explicit links between them") {
  Graph g = good(R"({
    "generators": [{"type": "full_mesh", "name": "m1", "prefix": "a.", "endpoints": 2},
                   {"type": "full_mesh", "name": "m2", "prefix": "b.", "endpoints": 2}],
    "links": [{"a": "a.n0.e0", "b": "b.n0.e0", "bw": 1, "lat": 5}]})");
  CHECK(g.endpointCount() == 4);
  Route r;
  REQUIRE(g.route(g.findVertex("a.n0.e1"), g.findVertex("b.n0.e1"), &r) == snclSuccess);
  CHECK(r.hops == 3);
}

TEST_CASE("syntax errors carry line and column") {
  std::string msg = bad("{\n  \"name\": \"x\",\n  oops\n}");
  CHECK_THAT(msg, Catch::StartsWith("t.json:3:3: JSON syntax error"));
  CHECK_THAT(bad(R"({"generators": [})"), Catch::StartsWith("t.json:1:17: JSON syntax error"));
  CHECK_THAT(bad(""), Catch::StartsWith("t.json:1:1: JSON syntax error"));
  CHECK_THAT(bad(std::string(200, '[')), Catch::Contains("nesting deeper than 64"));
}

TEST_CASE("structure errors name the JSON pointer") {
  CHECK_THAT(bad("[]"), Catch::Contains("t.json: /: a topology file must be an object, not array"));
  CHECK_THAT(bad("{}"), Catch::Contains("has no endpoint"));
  CHECK_THAT(bad(R"({"gens": []})"), Catch::Contains("/gens: unknown parameter \"gens\""));
  CHECK_THAT(bad(R"({"format": "other/2"})"), Catch::Contains("/format: \"other/2\" is not a format"));
  CHECK_THAT(bad(R"({"generators": {}})"), Catch::Contains("/generators: must be an array"));
  CHECK_THAT(bad(R"({"generators": [3]})"), Catch::Contains("/generators/0: a generator must be an object"));
}

TEST_CASE("generator errors: unknown type, unknown or bad parameter, impossible shape") {
  CHECK_THAT(bad(R"({"generators": [{"type": "hypercube"}]})"),
             Catch::Contains("/generators/0/type: unknown generator \"hypercube\" (known: full_mesh, clos"));
  CHECK_THAT(bad(R"({"generators": [{"nodes": 2}]})"), Catch::Contains("/generators/0: a generator needs \"type\""));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 2, "per_node": 2, "spinez": 2}]})"),
             Catch::Contains("/generators/0/spinez: unknown parameter \"spinez\" for generator \"clos\" (known:"));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": "2", "per_node": 2}]})"),
             Catch::Contains("/generators/0/nodes: must be an integer, not string"));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 2.5, "per_node": 2}]})"),
             Catch::Contains("/generators/0/nodes: must be an integer, not 2.5"));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 2}]})"),
             Catch::Contains("/generators/0: generator \"clos\" needs \"per_node\""));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 0, "per_node": 2}]})"),
             Catch::Contains("/generators/0/nodes: 0 is not in [1,"));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 2, "per_node": 2, "bw": 0}]})"),
             Catch::Contains("/generators/0/bw: 0 GB/s is not in [1e-06, 1000000000]"));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 2, "per_node": 2, "uplink_lat": -1}]})"),
             Catch::Contains("/generators/0/uplink_lat: -1 us is not in [0.001,"));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 2, "per_node": 2, "kind": "nvlink"}]})"),
             Catch::Contains("/generators/0/kind: unknown link kind \"nvlink\""));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 2, "per_node": 2, "spines": 0}]})"),
             Catch::Contains("/generators/0: spines is 0 but there are 2 leaf groups"));
  CHECK_THAT(bad(R"({"generators": [{"type": "cluster", "supernodes": 2,
                    "supernode": {"type": "full_mesh", "endpoints": 2, "prefix": "x"}}]})"),
             Catch::Contains("/generators/0/supernode/prefix: unknown parameter \"prefix\""));
  CHECK_THAT(bad(R"({"generators": [{"type": "hosts", "hosts": 16777216, "per_host": 16777216}]})"),
             Catch::Contains("/generators/0: would make"));
  CHECK_THAT(bad(R"({"generators": [{"type": "fat_tree", "k": 5}]})"),
             Catch::Contains("/generators/0: k must be even"));
  CHECK_THAT(bad(R"({"generators": [{"type": "torus", "dims": [4, 0]}]})"),
             Catch::Contains("/generators/0/dims/1: must be an integer in [1,"));
  CHECK_THAT(bad(R"({"generators": [{"type": "torus", "dims": [2, 2, 2, 2]}]})"),
             Catch::Contains("/generators/0/dims: must be an array of 1 to 3 sizes"));
  CHECK_THAT(bad(R"({"generators": [{"type": "cluster", "supernodes": 2, "supernode": {"type": "hosts"}}]})"),
             Catch::Contains("/generators/0/supernode/type: unknown generator \"hosts\""));
  CHECK_THAT(bad(R"({"generators": [{"type": "cluster", "supernodes": 2,
                    "supernode": {"type": "full_mesh", "endpoints": 2}, "scaleout": {"bw": -5}}]})"),
             Catch::Contains("/generators/0/scaleout/bw: -5 GB/s is not in [1e-06,"));
  CHECK_THAT(bad(R"({"generators": [{"type": "clos", "nodes": 16777216, "per_node": 1024}]})"),
             Catch::Contains("/generators/0: would make"));
  CHECK_THAT(bad(R"({"generators": [{"type": "full_mesh", "endpoints": 2}, {"type": "full_mesh", "endpoints": 2}]})"),
             Catch::Contains("/generators/1: topology: duplicate vertex name 'mesh'"));
}

TEST_CASE("vertex and link errors: dangling, duplicate, non-positive bandwidth") {
  std::string v = kTwoSwitches;
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "nope", "bw": 1, "lat": 1}]})"),
             Catch::Contains("/links/0/b: no vertex named \"nope\""));
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "b", "bw": 1, "lat": 1}, {"a": "b", "b": "a", "bw": 2, "lat": 1}]})"),
             Catch::Contains("/links/1: duplicate link b-a (first made by /links/0)"));
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "b", "bw": 0, "lat": 1}]})"),
             Catch::Contains("/links/0/bw: 0 GB/s is not in [1e-06,"));
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "b", "bw": -3, "lat": 1}]})"),
             Catch::Contains("/links/0/bw: -3 GB/s is not in [1e-06,"));
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "b", "lat": 1}]})"),
             Catch::Contains("/links/0: a link needs \"bw\""));
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "a", "bw": 1, "lat": 1}]})"),
             Catch::Contains("/links/0: links \"a\" to itself"));
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "b", "bw": 1, "lat": 1, "state": "flaky"}]})"),
             Catch::Contains("/links/0/state: unknown state \"flaky\""));
  CHECK_THAT(bad(v + R"("links": [{"a": "a", "b": "b", "bw": 1, "lat": 1, "state": "degraded"}]})"),
             Catch::Contains("/links/0: a degraded link needs \"factor\""));
  CHECK_THAT(bad(R"({"generators": [{"type": "full_mesh", "endpoints": 2}],
                     "links": [{"a": "n0.e1", "b": "n0.e0", "bw": 1, "lat": 1}]})"),
             Catch::Contains("/links/0: duplicate link n0.e1-n0.e0 (first made by /generators/0)"));
  CHECK_THAT(bad(R"({"vertices": [{"name": "a", "kind": "endpoint"}, {"name": "a", "kind": "switch"}]})"),
             Catch::Contains("/vertices/1/name: duplicate vertex name \"a\" (first made by /vertices/0)"));
  CHECK_THAT(bad(R"({"vertices": [{"name": "a-b", "kind": "endpoint"}]})"),
             Catch::Contains("/vertices/0/name: \"a-b\" is not a vertex name"));
  CHECK_THAT(bad(R"({"vertices": [{"name": "a", "kind": "gpu"}]})"),
             Catch::Contains("/vertices/0/kind: unknown vertex kind \"gpu\""));
  CHECK_THAT(bad(R"({"vertices": [{"name": "a", "kind": "endpoint", "parent": "x"}]})"),
             Catch::Contains("/vertices/0/parent: no vertex named \"x\""));
  CHECK_THAT(bad(R"({"vertices": [{"name": "a", "kind": "endpoint", "tier": 300}]})"),
             Catch::Contains("/vertices/0/tier: 300 is not in [0, 255]"));
}

TEST_CASE("rank map errors") {
  std::string v = std::string(kTwoSwitches) + R"("links": [], "rank_map": )";
  CHECK_THAT(bad(v + R"(["a", "zz"]})"), Catch::Contains("/rank_map/1: no vertex named \"zz\""));
  CHECK_THAT(bad(v + R"(["a", "a"]})"), Catch::Contains("/rank_map/1: endpoint \"a\" is already rank 0"));
  CHECK_THAT(bad(v + R"(["b"]})"), Catch::Contains("/rank_map/0: \"b\" is a switch, not an endpoint"));
  CHECK_THAT(bad(v + R"([7]})"), Catch::Contains("/rank_map/0: endpoint index 7 is not in [0, 2)"));
  CHECK_THAT(bad(v + R"([-1]})"), Catch::Contains("/rank_map/0: endpoint index -1 is not in [0, 2)"));
  CHECK_THAT(bad(v + R"([true]})"), Catch::Contains("/rank_map/0: must be an endpoint name or index"));
}

TEST_CASE("a missing file names itself") {
  Graph g;
  CHECK(loadTopologyFile("/nonexistent/topo.json", &g) == snclInvalidArgument);
  CHECK_THAT(sncl::lastError(), Catch::StartsWith("/nonexistent/topo.json: cannot open"));
}
