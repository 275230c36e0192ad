// Groups of sends and receives through a lost link (docs/faults.md, "Groups of sends and
// receives"): 8 ranks on the two-plane bus pass messages down a chain (rank r receives from
// r-1 and sends to r+1, some also to r+3), with an All-Reduce every few rounds, while one
// rank takes an endpoint's link into one plane down between its own calls, later up, then
// the other plane's. Ranks meet each fault wherever they are: in groups of different
// rounds, or in the All-Reduce while others still pass messages. Sizes are drawn from a
// seed that changes per run (printed on failure). Every message and every result is
// checked exactly, no call fails, and the faults were met and rerouted.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"

namespace {

constexpr int kRanks = 8;
constexpr int kRounds = 64;
constexpr size_t kMaxCount = 300000;  // floats: up to 1.2 MB per message

std::string topologyFile(const char* name) {
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/topologies/" + name;
}

// The value rank `from` sends at element i of round `round`'s message `m`: exact in float.
float valueOf(int from, int round, int m, size_t i) {
  return float(sncl::test::mix64(uint64_t(from) << 48 ^ uint64_t(round) << 20 ^ uint64_t(m) << 16 ^ i) % 4096);
}

struct Round {
  size_t count[2];    // message 0 to r+1, message 1 to r+3 (every other round)
  size_t reduce = 0;  // All-Reduce after the group (0: none)
  bool order;         // this round's posting order: receives first or sends first
};

// What the injector (rank 5) does before its call of a round: endpoint n0.e1's link into
// plane 0 down, up, then plane 1's (never both down: a route always exists). Links back up
// reach the graph at the next collective that no rank had planned, so a few All-Reduces
// pass between an "up" and the next "down".
const char* faultBefore(int round, int start) {
  if (round == start) return "link=n0.e1-n0.l1p0:down";
  if (round == start + 8) return "link=n0.e1-n0.l1p0:up";
  if (round == start + 28) return "link=n0.e1-n0.l1p1:down";
  if (round == start + 36) return "link=n0.e1-n0.l1p1:up";
  return nullptr;
}

}  // namespace

TEST_CASE("fault: groups of sends and receives finish through a lost link, exact, wherever each rank is",
          "[fault][p2p]") {
  setenv("SNCL_TOPO_FILE", topologyFile("supernode-2plane-2x4.json").c_str(), 1);
  setenv("SNCL_BUS_DETECT_US", "50", 1);
  const uint64_t seed = std::random_device{}();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<Round> rounds(kRounds);
  for (int i = 0; i < kRounds; ++i) {
    Round& r = rounds[i];
    for (size_t& c : r.count) c = size_t(std::exp(std::uniform_real_distribution<double>(0, std::log(double(kMaxCount)))(rng)));
    if (i % 2) r.count[1] = 0;  // (no second message)
    if (rng() % 11 == 0) r.count[0] = 0;
    r.reduce = i % 4 == 3 ? 1 + rng() % 200000 : 0;
    r.order = rng() % 2;
  }
  const int start = 3 + int(rng() % 10);
  auto comms = sncl::test::busComms(kRanks);
  REQUIRE(comms.size() == size_t(kRanks));
  std::vector<std::string> errors(kRanks);
  std::vector<size_t> wrong(kRanks, 0);
  sncl::test::onEveryRank(kRanks, [&](int rank) {
    snclComm_t comm = comms[rank];
    std::vector<float> send(kMaxCount), recv[2] = {std::vector<float>(kMaxCount), std::vector<float>(kMaxCount)};
    std::vector<float> reduceIn(200000), reduceOut(200000);
    for (int i = 0; i < kRounds && errors[rank].empty(); ++i) {
      const Round& r = rounds[i];
      if (rank == 5)
        if (const char* spec = faultBefore(i, start); spec && snclBusInjectFault(comm, spec) != snclSuccess) {
          errors[rank] = std::string("inject: ") + snclGetLastError(comm);
          break;
        }
      const int to[2] = {rank + 1, rank + 3}, from[2] = {rank - 1, rank - 3};
      for (size_t k = 0; k < std::max(r.count[0], r.count[1]); ++k) send[k] = valueOf(rank, i, 0, k);
      snclResult_t res = snclGroupStart();
      for (int pass = 0; pass < 2; ++pass) {
        const bool sends = (pass == 0) == r.order;
        for (int m = 0; m < 2 && res == snclSuccess; ++m) {
          if (m == 1 && r.count[1] == 0) continue;
          if (sends && to[m] < kRanks) res = snclSend(send.data(), r.count[m], snclFloat32, to[m], comm, nullptr);
          if (!sends && from[m] >= 0)
            res = snclRecv(recv[m].data(), r.count[m], snclFloat32, from[m], comm, nullptr);
        }
      }
      const snclResult_t end = snclGroupEnd();
      if (res == snclSuccess) res = end;
      if (res != snclSuccess) {
        errors[rank] = "round " + std::to_string(i) + " group: " + snclGetLastError(comm);
        break;
      }
      for (int m = 0; m < 2; ++m)
        if (from[m] >= 0 && (m == 0 || r.count[1]))
          for (size_t k = 0; k < r.count[m]; ++k) wrong[rank] += recv[m][k] != valueOf(from[m], i, 0, k);
      if (r.reduce) {
        for (size_t k = 0; k < r.reduce; ++k) reduceIn[k] = valueOf(rank, i, 1, k);
        if (snclAllReduce(reduceIn.data(), reduceOut.data(), r.reduce, snclFloat32, snclSum, comm, nullptr) !=
            snclSuccess) {
          errors[rank] = "round " + std::to_string(i) + " all-reduce: " + snclGetLastError(comm);
          break;
        }
        for (size_t k = 0; k < r.reduce; ++k) {
          float sum = 0;
          for (int q = 0; q < kRanks; ++q) sum += valueOf(q, i, 1, k);
          wrong[rank] += reduceOut[k] != sum;
        }
      }
    }
  });
  uint64_t reroutes = 0, linkFailures = 0;
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
    CHECK(wrong[r] == 0);
    snclFaultStats_t s{};
    REQUIRE(snclCommGetFaultStats(comms[r], &s) == snclSuccess);
    reroutes += s.reroutes;
    linkFailures = std::max<uint64_t>(linkFailures, s.linkFailures);
  }
  // A link was crossed while down (every message of rank 1 leaves through one of the two).
  CHECK(linkFailures >= 1);
  CHECK(reroutes > 0);
  sncl::test::destroyAll(comms);
  unsetenv("SNCL_TOPO_FILE");
  unsetenv("SNCL_BUS_DETECT_US");
}
