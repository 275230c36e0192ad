// Local discovery (hwloc), the fixed-size local view, and the merge of gathered views into
// the same graph on every rank.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "lib/topo/discovery.h"
#include "lib/topo/merge.h"
#include "lib/topo/route.h"
#include "lib/topo/topo_file.h"

using namespace sncl::topo;

namespace {

LocalView view(int rank, uint64_t hostId, int numaNodes = 1, int numa = 0) {
  LocalView v;
  v.hostId = hostId;
  v.rank = rank;
  v.packages = 1;
  v.numaNodes = numaNodes;
  v.cores = 8;
  v.pus = 16;
  v.core = rank % 8;
  v.numa = numa;
  std::snprintf(v.hostname, sizeof(v.hostname), "host%llx", static_cast<unsigned long long>(hostId));
  return v;
}

std::vector<uint8_t> gather(const std::vector<LocalView>& views) {
  std::vector<uint8_t> bytes(views.size() * kLocalViewBytes);
  for (size_t r = 0; r < views.size(); ++r) encodeLocalView(views[r], bytes.data() + r * kLocalViewBytes);
  return bytes;
}

std::string exampleDir() {
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/topologies/";
}

}  // namespace

TEST_CASE("hwloc discovery sees this machine and where the rank runs") {
  MachineInfo m;
  REQUIRE(discoverMachine(&m) == snclSuccess);
  CHECK(m.cores >= 1);
  CHECK(m.pus >= m.cores);
  CHECK(m.numaNodes >= 1);
  CHECK(m.coreNuma.size() == size_t(m.cores));
  LocalView v;
  REQUIRE(discoverLocal(0, 0, 42, "me", &v) == snclSuccess);
  CHECK(v.cores == m.cores);
  CHECK(v.core >= 0);
  CHECK(v.core < v.cores);
  CHECK(v.numa == m.coreNuma[v.core]);
  CHECK(std::string(v.hostname) == "me");
}

TEST_CASE("SNCL_BIND=core pins local rank i to core i mod cores") {
  MachineInfo m;
  REQUIRE(discoverMachine(&m) == snclSuccess);
  LocalView v;
  // A thread of its own, so that the binding does not stay on the test's thread.
  std::thread t([&] {
    setenv("SNCL_BIND", "core", 1);
    REQUIRE(discoverLocal(3, m.cores + 1, 1, "me", &v) == snclSuccess);
    unsetenv("SNCL_BIND");
  });
  t.join();
  if (!v.bound) WARN("binding not permitted here; location unchecked");
  else CHECK(v.core == 1 % m.cores);
}

TEST_CASE("local views round-trip through their fixed-size bytes, bad bytes are rejected") {
  LocalView v = view(5, 0xabcdef, 2, 1);
  v.bound = true;
  uint8_t bytes[kLocalViewBytes];
  encodeLocalView(v, bytes);
  LocalView w;
  REQUIRE(decodeLocalView(bytes, sizeof(bytes), &w) == snclSuccess);
  CHECK(w.hostId == v.hostId);
  CHECK(w.rank == 5);
  CHECK(w.numa == 1);
  CHECK(w.bound);
  CHECK(std::string(w.hostname) == "hostabcdef");
  CHECK(decodeLocalView(bytes, sizeof(bytes) - 1, &w) == snclInvalidArgument);
  uint8_t broken[kLocalViewBytes];
  std::memcpy(broken, bytes, sizeof(bytes));
  broken[0] ^= 0xff;
  CHECK(decodeLocalView(broken, sizeof(broken), &w) == snclInvalidArgument);
  LocalView impossible = view(0, 1, 1, 3);  // NUMA 3 of 1
  encodeLocalView(impossible, broken);
  CHECK(decodeLocalView(broken, sizeof(broken), &w) == snclInvalidArgument);
  CHECK_THAT(sncl::lastError(), Catch::Contains("is impossible"));
}

TEST_CASE("merge: hosts from host ids, ranks on their hosts, same graph from same bytes") {
  // Ranks of two (virtual) hosts interleaved, as SNCL_HOSTID may produce them.
  const uint64_t A = 0x1111, B = 0x2222;
  std::vector<LocalView> views;
  uint64_t ids[] = {A, A, B, B, A, A, B, B};
  for (int r = 0; r < 8; ++r) views.push_back(view(r, ids[r], 2, r % 2));
  std::vector<uint8_t> bytes = gather(views);
  Graph g, h;
  REQUIRE(mergeLocalViews(bytes, 8, "", &g) == snclSuccess);
  REQUIRE(mergeLocalViews(bytes, 8, "", &h) == snclSuccess);
  CHECK(topologyToJson(g) == topologyToJson(h));
  CHECK(g.rankCount() == 8);
  CHECK(g.groupCount(Level::Node) == 2);
  CHECK(g.groupCount(Level::Numa) == 4);
  for (int r = 0; r < 8; ++r) {
    CHECK(g.rankGroupOf(r, Level::Node) == (ids[r] == A ? 0 : 1));
    CHECK(g.vertexName(g.rankVertex(r)) == fmt::format("h{}.rank{}", ids[r] == A ? 0 : 1, r));
  }
  CHECK(g.rankGroupMembers(Level::Node, 1).size() == 4);
  CHECK(g.rankLevels() == std::vector<Level>{Level::Numa, Level::Node, Level::Cluster});
  Route r;
  REQUIRE(g.routeRanks(0, 1, &r) == snclSuccess);
  CHECK(r.hops == 4);  // across NUMA nodes of one host
  REQUIRE(g.routeRanks(0, 4, &r) == snclSuccess);
  CHECK(r.hops == 2);  // same NUMA node
  REQUIRE(g.routeRanks(0, 2, &r) == snclSuccess);
  CHECK(r.hops == 6);  // NUMA, host, switch, host, NUMA
}

TEST_CASE("merge with a topology file maps ranks onto its endpoints") {
  std::vector<LocalView> views;
  for (int r = 0; r < 8; ++r) views.push_back(view(r, 7));
  Graph g;
  REQUIRE(mergeLocalViews(gather(views), 8, exampleDir() + "lab-2x4.json", &g) == snclSuccess);
  CHECK(g.rankCount() == 8);
  CHECK(g.groupCount(Level::Node) == 2);
  CHECK(g.vertexName(g.rankVertex(5)) == "h1.r1");

  views.push_back(view(8, 7));
  CHECK(mergeLocalViews(gather(views), 9, exampleDir() + "lab-2x4.json", &g) == snclInvalidArgument);
  CHECK_THAT(sncl::lastError(), Catch::Contains("9 ranks but only 8 endpoints"));
}

TEST_CASE("merge rejects gathered bytes that do not fit") {
  std::vector<LocalView> views{view(0, 1), view(1, 1)};
  std::vector<uint8_t> bytes = gather(views);
  Graph g;
  CHECK(mergeLocalViews(bytes, 3, "", &g) == snclInvalidArgument);
  views[1].rank = 0;
  CHECK(mergeLocalViews(gather(views), 2, "", &g) == snclInvalidArgument);
  CHECK_THAT(sncl::lastError(), Catch::Contains("slot 1 holds the view of rank 0"));
}
