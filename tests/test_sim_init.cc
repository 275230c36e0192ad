// The comm init's bootstrap, modeled (lib/sim/bootstrap_model.h) against the real one
// (lib/net/bootstrap_*.cc): messages per rank grow as log2 n, and a real rendezvous and
// all-gathers on real rank processes send and receive exactly the messages the model counts. Also the
// training step model (lib/sim/training.h) on a small supernode.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lib/base/gather_tree.h"
#include "lib/net/bootstrap.h"
#include "lib/sim/bootstrap_model.h"
#include "lib/sim/training.h"
#include "lib/topo/topo_file.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

uint64_t seedFromEnvOrRandom() {
  const char* s = getenv("SNCL_TEST_SEED");
  const uint64_t seed = s ? strtoull(s, nullptr, 10) : std::random_device{}();
  printf("test_sim_init seed %llu (SNCL_TEST_SEED to repeat)\n", static_cast<unsigned long long>(seed));
  return seed;
}

int ceilLog2(int n) {
  int d = 0;
  while ((1L << d) < n) ++d;
  return d;
}

int floorLog2(int n) {
  int d = 0;
  while ((2L << d) <= n) ++d;
  return d;
}

std::string topologyPath(const char* name) {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/topologies/" + name;
}

}  // namespace

TEST_CASE("sim init: the gather tree covers every rank once, with depth floor(log2 n)", "[sim][init]") {
  std::mt19937_64 rng(seedFromEnvOrRandom());
  std::vector<int> sizes{1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 64, 97, 1000, 4099};
  for (int i = 0; i < 6; ++i) sizes.push_back(int(rng() % 20000) + 1);
  for (int n : sizes) {
    INFO("nranks " << n);
    std::vector<int> parentSeen(size_t(n), -1);
    int maxDepth = 0;
    for (int r = 0; r < n; ++r) {
      int covered = 1;
      for (int c : gather_tree::children(r, n)) {
        REQUIRE(c > r);
        REQUIRE(c < n);
        REQUIRE(parentSeen[size_t(c)] == -1);
        parentSeen[size_t(c)] = r;
        REQUIRE(gather_tree::parent(c) == r);
        // Subtrees of the children tile [r + 1, r + subtreeSize(r)).
        REQUIRE(c == r + covered);
        covered += gather_tree::subtreeSize(c, n);
      }
      REQUIRE(covered == gather_tree::subtreeSize(r, n));
      int d = 0;
      for (int x = r; x > 0; x = gather_tree::parent(x)) ++d;
      maxDepth = std::max(maxDepth, d);
    }
    for (int r = 1; r < n; ++r) REQUIRE(parentSeen[size_t(r)] == gather_tree::parent(r));
    CHECK(maxDepth == floorLog2(n));  // the deepest rank has the most one bits
    CHECK(gather_tree::children(0, n).size() == size_t(ceilLog2(n)));
  }
}

TEST_CASE("sim init: messages per rank grow as log2 n up to 16,384 ranks", "[sim][init]") {
  const auto gathers = sim::initGatherBytes();
  const uint64_t perGather = gathers.size();
  for (int n : {2, 16, 256, 4096, 16384}) {
    INFO("nranks " << n);
    sim::BootstrapModel m;
    REQUIRE(sim::modelBootstrap(n, gathers, sim::BootstrapNet{}, &m) == snclSuccess);
    // Rank 0 receives from and sends to each of its ceil(log2 n) children per all-gather;
    // in the rendezvous it sends the hello, receives the table and passes it to each child.
    CHECK(m.maxMessages == (2 * perGather + 1) * uint64_t(ceilLog2(n)) + 2);
    CHECK(double(m.maxMessages) <= 11.0 * std::log2(double(n)) + 2);
    // Every all-gather: 2 (n - 1) messages; rendezvous: n hellos, the root's table to rank 0
    // and n - 1 tables down the tree.
    CHECK(m.totalMessages == perGather * 2 * uint64_t(n - 1) + 2 * uint64_t(n));
    CHECK(m.meanMessages < 2.0 * perGather * 2 + 3 + 1e-9);  // mean children per rank < 1
    // The root sends one table; rank 0 sends the most, one table per child.
    CHECK(m.rootBytes == Approx(28.0 * n));
    CHECK(m.maxRendezvousBytes == Approx(56.0 + 28.0 * n * ceilLog2(n)));
    CHECK(m.depth == floorLog2(n));
    CHECK(m.timeUs > m.rendezvousUs);
    uint64_t levelSum = 0;
    for (uint64_t s : m.sentPerLevel) levelSum += s;
    CHECK(levelSum == m.totalMessages - 1);  // less the root thread's table to rank 0
  }
  // Time grows with n, and is dominated by latency x depth for small tables.
  sim::BootstrapModel small, large;
  REQUIRE(sim::modelBootstrap(16, gathers, sim::BootstrapNet{}, &small) == snclSuccess);
  REQUIRE(sim::modelBootstrap(16384, gathers, sim::BootstrapNet{}, &large) == snclSuccess);
  CHECK(large.timeUs > small.timeUs);
  // The tree rendezvous: depth x (latency + one table) instead of n tables from the root;
  // at 16,384 ranks the old root alone needed 601 ms (n x n x 28 bytes at 12.5 GB/s).
  CHECK(large.rendezvousUs < 50e3);
  sim::BootstrapModel bad;
  CHECK(sim::modelBootstrap(0, gathers, sim::BootstrapNet{}, &bad) == snclInvalidArgument);
  CHECK(sim::modelBootstrap(8, gathers, sim::BootstrapNet{10, 0}, &bad) == snclInvalidArgument);
}

TEST_CASE("sim init: a real rendezvous and all-gathers send exactly the messages the model counts",
          "[sim][init]") {
  std::mt19937_64 rng(seedFromEnvOrRandom());
  std::vector<int> rankCounts{8, 5, 1};
  rankCounts.push_back(int(rng() % 12) + 2);
  for (int nranks : rankCounts) {
    // Odd, prime, zero and larger-than-a-frame-combine slot sizes.
    std::vector<size_t> slots{0, 1, 13, 96, size_t(rng() % 9000) + 1};
    INFO("nranks " << nranks);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      std::unique_ptr<Bootstrap> b;
      if (Bootstrap::connect(id, rank, n, Deadline::afterMs(20000), &b) != snclSuccess) return 2;
      const sim::RankTraffic rv = sim::rendezvousTraffic(rank, n);
      uint64_t sent = rv.sent, received = rv.received, bytes = rv.bytesSent;
      const Bootstrap::Traffic afterConnect = b->traffic();
      if (afterConnect.sent != sent || afterConnect.received != received || afterConnect.bytesSent != bytes) {
        fprintf(stderr, "rank %d/%d rendezvous: real sent %llu received %llu bytes %llu, model %llu %llu %llu\n",
                rank, n, (unsigned long long)afterConnect.sent, (unsigned long long)afterConnect.received,
                (unsigned long long)afterConnect.bytesSent, (unsigned long long)sent,
                (unsigned long long)received, (unsigned long long)bytes);
        return 6;
      }
      for (size_t bytesPerRank : slots) {
        std::vector<uint8_t> data(size_t(n) * bytesPerRank + 1, 0);
        for (size_t i = 0; i < bytesPerRank; ++i) data[size_t(rank) * bytesPerRank + i] = uint8_t(rank * 31 + i);
        if (b->allGather(data.data(), bytesPerRank, Deadline::afterMs(20000)) != snclSuccess) return 3;
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < bytesPerRank; ++i)
            if (data[size_t(r) * bytesPerRank + i] != uint8_t(r * 31 + i)) {
              fprintf(stderr, "rank %d: slot %d byte %zu wrong\n", rank, r, i);
              return 4;
            }
        sim::RankTraffic t = sim::allGatherTraffic(rank, n, bytesPerRank);
        sent += t.sent;
        received += t.received;
        bytes += t.bytesSent;
        const Bootstrap::Traffic real = b->traffic();
        if (real.sent != sent || real.received != received || real.bytesSent != bytes) {
          fprintf(stderr, "rank %d/%d slot %zu: real sent %llu received %llu bytes %llu, model %llu %llu %llu\n",
                  rank, n, bytesPerRank, (unsigned long long)real.sent, (unsigned long long)real.received,
                  (unsigned long long)real.bytesSent, (unsigned long long)sent, (unsigned long long)received,
                  (unsigned long long)bytes);
          return 5;
        }
      }
      return 0;
    });
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("sim train: bucketed timeline hides communication behind the backward pass", "[sim][train]") {
  // No communication: the step is the compute.
  CHECK(sim::bucketedStepUs(300, 10, 0, 0) == Approx(300));
  // One bucket is ready only at the end of backward: all of it is exposed.
  CHECK(sim::bucketedStepUs(300, 1, 50, 50) == Approx(350));
  // Ten small buckets: all but the last hide behind backward (200 us for 10 buckets).
  CHECK(sim::bucketedStepUs(300, 10, 5, 5) == Approx(305));
  // Communication slower than backward: the stream is busy from the first bucket on.
  CHECK(sim::bucketedStepUs(300, 10, 100, 100) == Approx(100 + 20 + 1000));
}

TEST_CASE("sim train: step time and U on a supernode, with and without a failed link", "[sim][train]") {
  topo::Graph g;
  REQUIRE(topo::loadTopologyFile(topologyPath("supernode-4x4.json"), &g) == snclSuccess);
  sim::TrainingSpec spec;
  REQUIRE(sim::parseTrainingSpec("params=1e8,tokens=64K,bucket=4M,algo=ring", &spec) == snclSuccess);
  CHECK(spec.params == 1e8);
  CHECK(spec.tokens == 64e3);
  CHECK(spec.bucketBytes == size_t(4) << 20);
  sim::TrainingResult healthy;
  REQUIRE(sim::modelTrainingStep(g, g.rankCount(), spec, &healthy) == snclSuccess);
  CHECK(healthy.buckets == uint64_t(std::ceil(2e8 / double(4 << 20))));
  CHECK(healthy.computeUs == Approx(6 * 1e8 * 64e3 / (16 * 400e6 * 0.5)));
  CHECK(healthy.stepUs >= healthy.computeUs);
  CHECK(healthy.stepUs >= healthy.commUs);
  CHECK(healthy.utilization <= spec.computeEfficiency + 1e-12);
  CHECK(healthy.utilization == Approx(6 * 1e8 * 64e3 / (16 * 400e6 * healthy.stepUs)));
  // A failed link between two switches (an endpoint's only link would cut it off): never faster.
  topo::LinkId cut = topo::kNone;
  for (topo::LinkId l = 0; l < g.linkCount() && cut == topo::kNone; ++l)
    if (g.endpointOf(g.linkA(l)) == topo::kNone && g.endpointOf(g.linkB(l)) == topo::kNone) cut = l;
  REQUIRE(cut != topo::kNone);
  REQUIRE(g.setLinkState(cut, topo::LinkState::Down) == snclSuccess);
  sim::TrainingResult failed;
  REQUIRE(sim::modelTrainingStep(g, g.rankCount(), spec, &failed) == snclSuccess);
  CHECK(failed.bucketUs >= healthy.bucketUs * (1 - 1e-9));
  CHECK(failed.utilization <= healthy.utilization * (1 + 1e-9));

  sim::TrainingSpec bad;
  CHECK(sim::parseTrainingSpec("params=", &bad) == snclInvalidArgument);
  CHECK(sim::parseTrainingSpec("size=3", &bad) == snclInvalidArgument);
  CHECK(sim::parseTrainingSpec("bucket=1.5", &bad) == snclInvalidArgument);
  bad.computeEfficiency = 2;
  sim::TrainingResult r;
  CHECK(sim::modelTrainingStep(g, g.rankCount(), bad, &r) == snclInvalidArgument);
}
