// The comm's topology: the embedded default sized to the comm, files with rank maps,
// supernode membership, and health changes bumping the epoch.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "lib/topo/comm_topo.h"

using namespace sncl;

namespace {

std::string exampleDir() {
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/topologies/";
}

}  // namespace

TEST_CASE("default topology: nodes of 4 on a bus Clos, sized to the comm") {
  unsetenv("SNCL_TOPO_FILE");
  for (int n : {1, 3, 4, 5, 8, 16}) {
    std::shared_ptr<CommTopology> t;
    REQUIRE(CommTopology::build(n, &t) == snclSuccess);
    CHECK_FALSE(t->fromFile());
    CHECK(t->nranks() == n);
    CHECK(int(t->graph().endpointCount()) == (n + 3) / 4 * std::min(n, 4));
    for (int r = 0; r < n; ++r) CHECK(t->graph().vertexName(t->rankVertex(r)) == fmt::format("n{}.e{}", r / 4, r % 4));
  }
  std::shared_ptr<CommTopology> t;
  REQUIRE(CommTopology::build(8, &t) == snclSuccess);
  topo::Route inNode, across;
  REQUIRE(t->routeRanks(0, 1, &inNode) == snclSuccess);
  REQUIRE(t->routeRanks(0, 4, &across) == snclSuccess);
  CHECK(inNode.latencyUs == Approx(0.4));
  CHECK(across.latencyUs == Approx(1.0));
  CHECK(across.bandwidthGBps == Approx(50));
}

TEST_CASE("topology file: rank placement, supernodes, health bumps the epoch") {
  setenv("SNCL_TOPO_FILE", (exampleDir() + "cloudmatrix384.json").c_str(), 1);
  std::shared_ptr<CommTopology> t;
  REQUIRE(CommTopology::build(16, &t) == snclSuccess);
  unsetenv("SNCL_TOPO_FILE");
  CHECK(t->fromFile());
  CHECK(t->sameSupernode(0, 15));
  const uint64_t e0 = t->epoch();
  topo::Route r;
  REQUIRE(t->routeRanks(0, 8, &r) == snclSuccess);
  REQUIRE_FALSE(r.shares.empty());
  REQUIRE(t->setLinkState(r.shares.front().link, topo::LinkState::Down) == snclSuccess);
  CHECK(t->epoch() == e0 + 1);

  setenv("SNCL_TOPO_FILE", (exampleDir() + "lab-2x4.json").c_str(), 1);
  std::shared_ptr<CommTopology> lab;
  REQUIRE(CommTopology::build(8, &lab) == snclSuccess);
  CHECK_FALSE(lab->sameSupernode(0, 1));  // no supernode in the file: shm/ofi, not the bus
  CHECK(CommTopology::build(9, &lab) == snclInvalidArgument);
  unsetenv("SNCL_TOPO_FILE");
}
