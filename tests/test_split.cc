// snclCommSplit: colors, keys, SNCL_SPLIT_NOCOLOR, config inheritance, bad arguments.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include "lib/comm/comm.h"
#include "sncl/sncl.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

// Sums rank+1 over comm with an all-reduce.
float sumOfRanks(snclComm_t comm) {
  int rank = -1;
  snclCommUserRank(comm, &rank);
  float v = static_cast<float>(rank + 1);
  if (snclAllReduce(&v, &v, 1, snclFloat32, snclSum, comm, nullptr) != snclSuccess) return -1;
  return v;
}

}  // namespace

TEST_CASE("split by color orders ranks by key, then by old rank", "[split][process]") {
  auto exits = test::runRanks(5, [](int rank, int n, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 15000;
    config.commName = "parent";
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
    int failures = 0;
    // Colors: {0, 2, 4} and {1, 3}; rank 4 opts out. Keys reverse the order in color 0
    // except for a tie between ranks 0 and 2 (old rank breaks it).
    const int color = rank == 4 ? SNCL_SPLIT_NOCOLOR : rank % 2;
    const int key = rank % 2 == 0 ? 0 : -rank;
    snclComm_t sub = reinterpret_cast<snclComm_t>(1);
    if (snclCommSplit(comm, color, key, &sub, nullptr) != snclSuccess) return 3;
    if (rank == 4) {
      failures += sub != nullptr;
    } else {
      int subRank = -1, subCount = -1;
      snclCommUserRank(sub, &subRank);
      snclCommCount(sub, &subCount);
      const int expectRank[] = {0, 1, 1, 0};  // color 0: ranks 0, 2; color 1: ranks 3, 1
      failures += subCount != 2 || subRank != expectRank[rank];
      failures += sumOfRanks(sub) != 3.0f;
      // Inherited: the parent's deadline and name.
      failures += sub->timeoutMs != 15000 || sub->name != "parent";
      // A split of the split, with a config of its own.
      snclConfig_t own = SNCL_CONFIG_INITIALIZER;
      own.timeoutMs = 19000;
      snclComm_t single = nullptr;
      if (snclCommSplit(sub, subRank, 0, &single, &own) != snclSuccess) return 4;
      failures += sumOfRanks(single) != 1.0f || single->timeoutMs != 19000;
      snclCommDestroy(single);
      snclCommDestroy(sub);
    }
    // The parent still works.
    failures += sumOfRanks(comm) != 15.0f;
    snclCommDestroy(comm);
    return failures ? 1 : 0;
  });
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("split of ranks as threads, non-blocking", "[split][threads]") {
  const int nranks = 4;
  std::vector<snclComm_t> comms(nranks);
  REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
  std::vector<int> failures(nranks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      snclComm_t sub = nullptr;
      snclResult_t res = snclCommSplit(comms[r], r / 2, r, &sub, &config);
      if (res != snclSuccess && res != snclInProgress) ++failures[r];
      snclResult_t async = snclInProgress;
      while (sub && async == snclInProgress) snclCommGetAsyncError(sub, &async);
      if (async != snclSuccess) ++failures[r];
      // ranks {0, 1} and {2, 3}: sums of (sub rank + 1) are 3.
      if (sumOfRanks(sub) != 3.0f) ++failures[r];
      snclCommDestroy(sub);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) CHECK(failures[r] == 0);
  for (auto c : comms) snclCommDestroy(c);
}

TEST_CASE("a bad split argument on one rank fails every rank at once", "[split][errors]") {
  const int nranks = 3;
  std::vector<snclComm_t> comms(nranks);
  REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
  std::vector<snclResult_t> results(nranks);
  std::vector<std::string> messages(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      snclComm_t sub = nullptr;
      results[r] = snclCommSplit(comms[r], r == 1 ? -5 : 0, 0, &sub, nullptr);
      messages[r] = snclGetLastError(nullptr);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) CHECK(results[r] == snclInvalidArgument);
  CHECK_THAT(messages[1], Catch::Contains("color -5 is negative"));
  CHECK_THAT(messages[0], Catch::Contains("rank 1 passed bad arguments"));
  snclComm_t sub = nullptr;
  CHECK(snclCommSplit(comms[0], 0, 0, nullptr, nullptr) == snclInvalidArgument);
  snclGroupStart();
  CHECK(snclCommSplit(comms[0], 0, 0, &sub, nullptr) == snclInvalidUsage);
  CHECK_THAT(std::string(snclGetLastError(nullptr)), Catch::Contains("inside a group"));
  snclGroupEnd();
  for (auto c : comms) snclCommDestroy(c);
}

// A comm made from another keeps each process on its topology endpoint: after a split or a
// shrink its place does not move with its new rank number (a link of that endpoint stays
// its link), and the new comm's collectives are exact.
TEST_CASE("split and shrink keep each process on its topology endpoint", "[split][shrink][topology]") {
  const std::string topo = test::topologyPath("supernode-2plane-2x4.json");
  const unsigned seed = Catch::rngSeed();
  const int excluded = int(seed % 8), colors = 2 + int(seed / 8 % 3);
  INFO("shrink without rank " << excluded << ", split into " << colors << " colors");
  auto exits = test::runRanks(8, [&](int rank, int n, const snclUniqueId& id) {
    setenv("SNCL_TOPO_FILE", topo.c_str(), 1);
    setenv("SNCL_TRANSPORT", "bus", 1);
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 15000;
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
    const auto endpoint = [](snclComm_t c) { return c->topology->graph().rankEndpoint(c->rank); };
    const topo::EndpointId mine = endpoint(comm);
    int failures = 0;
    snclComm_t sub = nullptr;
    if (snclCommSplit(comm, rank % colors, -rank, &sub, nullptr) != snclSuccess || !sub) return 3;
    failures += endpoint(sub) != mine;
    int subRanks = 0;
    snclCommCount(sub, &subRanks);
    int members = 0;
    for (int r = 0; r < n; ++r) members += r % colors == rank % colors;
    failures += sumOfRanks(sub) != float(members * (members + 1) / 2) || subRanks != members;
    snclCommDestroy(sub);
    snclComm_t shrunk = nullptr;
    int exclude[1] = {excluded};
    if (rank == excluded) {  // stays out: the others shrink without it
      snclCommDestroy(comm);
      return 0;
    }
    if (snclCommShrink(comm, exclude, 1, &shrunk, nullptr, SNCL_SHRINK_DEFAULT) != snclSuccess || !shrunk) return 4;
    failures += endpoint(shrunk) != mine;
    failures += sumOfRanks(shrunk) != float(7 * 8 / 2);
    snclCommDestroy(shrunk);
    snclCommDestroy(comm);
    return failures ? 1 : 0;
  });
  CHECK(test::allSucceeded(exits));
}
