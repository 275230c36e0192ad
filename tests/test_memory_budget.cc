// What fault retry keeps, on the emulated bus with ranks as threads (lib/comm/history.h):
// one input at a time whatever the sizes, in place or not; every part counted by
// snclCommGetMemoryUsage; and a budget smaller than the calls in flight, with a link lost
// in a call: out of place it is still re-run bit-exact, in place it fails naming the
// budget. With the progress board off (ranks on several hosts), inputs go when a call
// whose result needs every rank completes, and a budget lets the oldest go.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/bus_ranks.h"

using namespace sncl;

namespace {

constexpr int kRanks = 8;



snclMemoryUsage_t usage(snclComm_t c) {
  snclMemoryUsage_t u{};
  u.size = sizeof(u);
  REQUIRE(snclCommGetMemoryUsage(c, &u) == snclSuccess);
  return u;
}

}  // namespace

TEST_CASE("memory: retry holds one input at a time, whatever the sizes, and every part is counted", "[memory]") {
  test::ScopedEnv env{{"SNCL_BUS_TIMESCALE", "1"}};
  auto comms = test::busComms(kRanks);
  REQUIRE(comms.size() == size_t(kRanks));
  // Sizes nobody chose: odd, prime, zero, a few MiB; in place and out of place at random.
  std::mt19937_64 rng(Catch::rngSeed() + 5);
  size_t largest = 0;
  for (int call = 0; call < 24; ++call) {
    const size_t count = call == 3 ? 0 : call % 5 == 0 ? 1 + rng() % (1 << 20) : 1 + rng() % 70001;
    const bool inPlace = rng() % 2;
    INFO("call " << call << ": " << count << " floats, in place " << inPlace);
    for (auto& o : test::allReduceFloats(comms, count, inPlace, call)) REQUIRE(o.result == snclSuccess);
    largest = std::max(largest, count * sizeof(float));
  }
  for (int r = 0; r < kRanks; ++r) {
    const snclMemoryUsage_t u = usage(comms[r]);
    INFO("rank " << r << ": peak " << u.retryPeak << " resident " << u.retryResident << " largest " << largest);
    CHECK(u.budget == (uint64_t(1) << 30));
    CHECK(u.retryPeak <= largest + (64 << 10));  // small in-place calls may sit beside one more
    CHECK(u.retryResident <= 2 * largest);
    CHECK(u.retryKept + u.retrySkipped > 0);
    CHECK(u.retryNotKept == 0);
    CHECK(u.retryDropped == 0);
    CHECK(u.transportBytes > 0);
    CHECK(u.boardBytes > 0);
    CHECK(u.scratchBytes > 0);
    CHECK(u.totalBytes >= u.retryResident + u.transportBytes + u.scratchBytes);
  }
  snclMemoryUsage_t bad{};
  CHECK(snclCommGetMemoryUsage(comms[0], &bad) == snclInvalidArgument);  // size unset
  CHECK(std::string(snclGetLastError(comms[0])).find("sizeof(snclMemoryUsage_t)") != std::string::npos);
  CHECK(snclCommGetMemoryUsage(comms[0], nullptr) == snclInvalidArgument);
  test::destroyAll(comms);
}

TEST_CASE("memory: a budget smaller than the call: out of place still re-run bit-exact after a lost link", "[memory]") {
  test::ScopedEnv env{{"SNCL_TOPO_FILE", test::topologyPath("supernode-2plane-2x4.json")},
                      {"SNCL_BUS_DETECT_US", "50"},
                      {"SNCL_MEM_BUDGET", "256K"}};
  constexpr size_t kCount = 1u << 20;  // 4 MiB of floats: 16 times the budget
  auto comms = test::busComms(kRanks, "link=n0.e1-n0.l1p0:down@op=2");
  REQUIRE(comms.size() == size_t(kRanks));
  auto healthy = test::allReduceFloats(comms, kCount, false, 1);
  for (auto& o : healthy) REQUIRE(o.result == snclSuccess);
  auto faulted = test::allReduceFloats(comms, kCount, false, 1);  // the link goes down as it starts
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << ": " << faulted[r].message);
    REQUIRE(faulted[r].result == snclSuccess);
    CHECK(memcmp(faulted[r].out.data(), healthy[r].out.data(), kCount * sizeof(float)) == 0);
    snclFaultStats_t s{};
    REQUIRE(snclCommGetFaultStats(comms[r], &s) == snclSuccess);
    CHECK(s.reroutes == 1);
    const snclMemoryUsage_t u = usage(comms[r]);
    CHECK(u.budget == 256u << 10);
    CHECK(u.retryHeld == 0);
    CHECK(u.retryResident == 0);  // nothing of 4 MiB fits: the calls waited at their end instead
    CHECK(u.retryKept == 0);
  }
  test::destroyAll(comms);
}

TEST_CASE("memory: an in-place call larger than the budget fails a fault in it, naming the budget", "[memory]") {
  test::ScopedEnv env{{"SNCL_TOPO_FILE", test::topologyPath("supernode-2plane-2x4.json")},
                      {"SNCL_BUS_DETECT_US", "50"},
                      {"SNCL_MEM_BUDGET", "256K"}};
  constexpr size_t kCount = 1u << 18;  // 1 MiB of floats
  auto comms = test::busComms(kRanks, "link=n0.e1-n0.l1p0:down@op=2");
  REQUIRE(comms.size() == size_t(kRanks));
  for (auto& o : test::allReduceFloats(comms, kCount, true, 1)) REQUIRE(o.result == snclSuccess);
  auto faulted = test::allReduceFloats(comms, kCount, true, 2);
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << ": " << faulted[r].message);
    CHECK(faulted[r].result == snclRemoteError);
    CHECK(faulted[r].message.find("SNCL_MEM_BUDGET") != std::string::npos);
    CHECK(usage(comms[r]).retryNotKept >= 1);
  }
  test::destroyAll(comms);
}

TEST_CASE("memory: without the progress board, a call from every rank releases, and a budget lets the oldest go",
          "[memory]") {
  test::ScopedEnv env{{"SNCL_PROGRESS_BOARD", "0"}, {"SNCL_BUS_TIMESCALE", "1"}, {"SNCL_MEM_BUDGET", "1M"}};
  auto comms = test::busComms(kRanks);
  REQUIRE(comms.size() == size_t(kRanks));
  // All-Reduces: each releases what came before it.
  for (int call = 0; call < 6; ++call)
    for (auto& o : test::allReduceFloats(comms, 50000 + 13 * call, call % 2, call)) REQUIRE(o.result == snclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    const snclMemoryUsage_t u = usage(comms[r]);
    CHECK(u.boardBytes == 0);
    CHECK(u.retryHeld <= 50000 * 4 + 13 * 5 * 4);
    CHECK(u.retryPeak <= 2 * (50000 + 13 * 5) * 4);  // an in-place call beside the one before it
    CHECK(u.retryDropped == 0);
  }
  // Broadcasts tell a rank nothing about the others: kept until the budget lets the oldest go.
  test::onEveryRank(kRanks, [&](int r) {
    std::vector<float> buf(100000, float(r));
    for (int call = 0; call < 8; ++call)
      CHECK(snclBroadcast(buf.data(), buf.data(), buf.size(), snclFloat32, 0, comms[r], nullptr) == snclSuccess);
    CHECK(buf[99999] == 0.0f);
  });
  for (int r = 0; r < kRanks; ++r) {
    const snclMemoryUsage_t u = usage(comms[r]);
    CHECK(u.retryHeld <= u.budget);
    CHECK(u.retryDropped > 0);
  }
  test::destroyAll(comms);
}
