// Growing a comm back (docs/faults.md, "Grow"): a rank killed at a moment drawn from the seed,
// the survivors shrink, and a spare process takes the lost rank's place with snclCommGrow:
// existing ranks keep their numbers and endpoints, the spare gets the lost rank's endpoint,
// and every call is exact, round after round in one job. Also snclCommRevoke reaching
// every rank, and the arguments both refuse.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "lib/comm/comm.h"
#include "sncl/sncl.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr int kRanks = 8;
constexpr int kTimeoutMs = 6000;

// What a round's ranks tell the spare that joins in it: shared by every process (mapped
// before the fork).
struct RoundSlot {
  std::atomic<int> ready;        // the id is there
  std::atomic<int64_t> endpoint; // the lost rank's endpoint
  std::atomic<int64_t> shrinkUs, growUs;  // the slowest rank's
  snclUniqueId id;
};

enum : int { kOk = 0, kInit = 10, kCall, kNoError, kShrink, kGetId, kGrow, kRank, kEndpoint, kSpareWait };

// An exact All-Reduce of a count drawn from (seed, round, call): odd, prime, zero or large
// (never zero for a call that must meet a loss: a zero-count call needs no peer).
bool exactCall(snclComm_t comm, uint64_t seed, int round, int call, snclResult_t* result, bool mayBeEmpty = true) {
  static constexpr size_t kCounts[] = {0, 1, 7, 61, 1021, 4099, 65537, 262147};
  const size_t first = mayBeEmpty ? 0 : 1;
  const size_t count = kCounts[first + test::mix64(seed ^ uint64_t(round) << 20 ^ uint64_t(call)) % (std::size(kCounts) - first)];
  int rank = -1, n = 0;
  snclCommUserRank(comm, &rank);
  snclCommCount(comm, &n);
  std::vector<int32_t> in(count + 1), out(count + 1);
  test::fillInput(snclInt32, snclSum, rank, n, in.data(), count);
  *result = snclAllReduce(in.data(), out.data(), count, snclInt32, snclSum, comm, nullptr);
  return *result == snclSuccess && test::countWrong(snclInt32, snclSum, n, out.data(), count) == 0;
}

void keepMax(std::atomic<int64_t>* slowest, std::chrono::steady_clock::time_point since) {
  const int64_t us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - since).count();
  for (int64_t seen = slowest->load(); us > seen && !slowest->compare_exchange_weak(seen, us);) {
  }
}

// "p50 a ms, p99 b ms" of the rounds' slowest ranks.
std::string percentiles(std::vector<int64_t> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return double(us[std::min(us.size() - 1, size_t(q * double(us.size())))]) / 1000; };
  return fmt::format("p50 {:.1f} ms, p99 {:.1f} ms", at(0.5), at(0.99));
}

int64_t endpointOf(snclComm_t comm) { return int64_t(comm->topology->graph().rankEndpoint(comm->rank)); }

int roundsFromEnv() {
  const char* s = std::getenv("SNCL_TEST_GROW_ROUNDS");
  return s ? std::max(1, std::atoi(s)) : 4;
}

}  // namespace

// SNCL_TEST_GROW_ROUNDS sets the rounds (default 4; docs/faults.md quotes 20).
TEST_CASE("kill, shrink, grow back with a spare, round after round", "[grow][shrink][process]") {
  const int rounds = roundsFromEnv();
  const uint64_t seed = Catch::rngSeed();
  INFO("seed " << seed << ", " << rounds << " rounds");
  auto* slots = static_cast<RoundSlot*>(
      mmap(nullptr, sizeof(RoundSlot) * size_t(rounds), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(slots != MAP_FAILED);
  for (int i = 0; i < rounds; ++i) new (&slots[i]) RoundSlot{};
  const std::string topo = test::topologyPath("supernode-2plane-2x4.json");
  setenv("SNCL_TOPO_FILE", topo.c_str(), 1);
  setenv("SNCL_TRANSPORT", "bus", 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto exits = test::runRanks(kRanks + rounds, [&](int proc, int, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = kTimeoutMs;
    snclComm_t comm = nullptr;
    int first = 0;  // the round this process is in the comm from
    snclResult_t r = snclSuccess;
    if (proc < kRanks) {
      if (snclCommInitRankConfig(&comm, kRanks, id, proc, &config) != snclSuccess) return int(kInit);
    } else {
      // Spare: joins in round proc - kRanks, once that round's survivors made the id.
      const int round = proc - kRanks;
      for (int waited = 0; !slots[round].ready.load(); ++waited) {
        if (waited > (60 + 15 * rounds) * 1000) return int(kSpareWait);
        usleep(1000);
      }
      if (snclCommGrow(nullptr, kRanks, &slots[round].id, kRanks - 1, &comm, &config) != snclSuccess) return int(kGrow);
      if (endpointOf(comm) != slots[round].endpoint.load()) return int(kEndpoint);
      if (!exactCall(comm, seed, round, 99, &r)) return int(kCall);  // the grown comm's first call
      first = round + 1;
    }
    for (int round = first; round < rounds; ++round) {
      const uint64_t draw = test::mix64(seed * 31 + uint64_t(round));
      const int victim = int(draw % kRanks), before = int(draw / kRanks % 3);
      for (int call = 0; call < before; ++call)
        if (!exactCall(comm, seed, round, call, &r)) return int(kCall);
      if (comm->rank == victim) {
        slots[round].endpoint.store(endpointOf(comm));
        raise(SIGKILL);
      }
      // This call meets the loss.
      if (exactCall(comm, seed, round, before, &r, false) || r != snclRemoteError) {
        fprintf(stderr, "round %d rank %d: the call after rank %d's loss returned %s: %s\n", round, comm->rank, victim,
                snclGetErrorString(r), snclGetLastError(comm));
        return int(kNoError);
      }
      snclComm_t shrunk = nullptr, grown = nullptr;
      auto t = std::chrono::steady_clock::now();
      if (snclCommShrink(comm, nullptr, 0, &shrunk, nullptr, SNCL_SHRINK_DEFAULT) != snclSuccess) return int(kShrink);
      keepMax(&slots[round].shrinkUs, t);
      snclCommDestroy(comm);
      const int kept = shrunk->rank;
      const int64_t endpoint = endpointOf(shrunk);
      snclUniqueId growId;
      const bool root = kept == 0;
      if (root) {
        if (snclCommGetUniqueId(shrunk, &growId) != snclSuccess) return int(kGetId);
        slots[round].id = growId;
        slots[round].ready.store(1);
      }
      t = std::chrono::steady_clock::now();
      if (snclCommGrow(shrunk, kRanks, root ? &growId : nullptr, -1, &grown, nullptr) != snclSuccess) return int(kGrow);
      keepMax(&slots[round].growUs, t);
      snclCommDestroy(shrunk);
      comm = grown;
      if (comm->rank != kept) return int(kRank);
      if (endpointOf(comm) != endpoint) return int(kEndpoint);
      if (!exactCall(comm, seed, round, 99, &r)) return int(kCall);
    }
    if (!exactCall(comm, seed, rounds, 0, &r)) return int(kCall);
    snclCommDestroy(comm);
    return int(kOk);
  }, 60000 + rounds * 15000);
  unsetenv("SNCL_TOPO_FILE");
  unsetenv("SNCL_TRANSPORT");
  WARN(rounds << " rounds of kill, shrink and grow in "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  std::vector<int64_t> shrinkUs, growUs;
  for (int i = 0; i < rounds; ++i) shrinkUs.push_back(slots[i].shrinkUs.load()), growUs.push_back(slots[i].growUs.load());
  WARN("shrink " << percentiles(shrinkUs) << "; grow " << percentiles(growUs) << " (the slowest rank of each round)");
  int killed = 0;
  for (size_t p = 0; p < exits.size(); ++p) {
    INFO("process " << p << " exit code " << exits[p].code << " signal " << exits[p].signal);
    if (exits[p].signal == SIGKILL && !exits[p].killed) ++killed;
    else CHECK(exits[p].code == kOk);
  }
  CHECK(killed == rounds);
  munmap(slots, sizeof(RoundSlot) * size_t(rounds));
}

TEST_CASE("grow: arguments every rank refuses alike", "[grow]") {
  auto exits = test::runRanks(3, [](int rank, int n, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 5000;
    snclComm_t comm = nullptr, grown = reinterpret_cast<snclComm_t>(1);
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
    int bad = 0;
    snclUniqueId growId;
    // No root: nobody passed the id.
    bad += snclCommGrow(comm, n + 1, nullptr, -1, &grown, nullptr) != snclInvalidArgument || grown;
    // An id not made on this comm.
    snclUniqueId stranger;
    if (rank == 0 && snclGetUniqueId(&stranger) != snclSuccess) return 3;
    bad += snclCommGrow(comm, n + 1, rank == 0 ? &stranger : nullptr, -1, &grown, nullptr) != snclInvalidArgument;
    // Sizes that differ across ranks, or do not grow, or an existing rank with a number.
    if (rank == 0 && snclCommGetUniqueId(comm, &growId) != snclSuccess) return 4;
    bad += snclCommGrow(comm, rank == 1 ? n + 2 : n + 1, rank == 0 ? &growId : nullptr, -1, &grown, nullptr) !=
           snclInvalidArgument;
    if (rank == 0 && snclCommGetUniqueId(comm, &growId) != snclSuccess) return 4;
    bad += snclCommGrow(comm, n, rank == 0 ? &growId : nullptr, -1, &grown, nullptr) != snclInvalidArgument;
    bad += snclCommGrow(comm, n + 1, rank == 0 ? &growId : nullptr, rank, &grown, nullptr) != snclInvalidArgument;
    // A new rank without an id or out of range; NULL outputs.
    bad += snclCommGrow(nullptr, n + 1, nullptr, n, &grown, nullptr) != snclInvalidArgument;
    bad += snclCommGrow(nullptr, n + 1, &growId, n + 1, &grown, nullptr) != snclInvalidArgument;
    bad += snclCommGrow(comm, n + 1, nullptr, -1, nullptr, nullptr) != snclInvalidArgument;
    bad += snclCommGetUniqueId(comm, nullptr) != snclInvalidArgument;
    bad += snclCommGetUniqueId(nullptr, &growId) != snclInvalidArgument;
    // The comm still works.
    snclResult_t r;
    bad += !exactCall(comm, 7, 0, 0, &r);
    snclCommDestroy(comm);
    return bad ? 1 : 0;
  });
  CHECK(test::allSucceeded(exits));
}

// A revoke on one rank, at a call drawn from the seed, stops the others' calls in flight
// long before the deadline; the comm then shrinks to the same ranks and works.
TEST_CASE("revoke reaches every rank; the comm shrinks and goes on", "[revoke][process]") {
  const uint64_t seed = Catch::rngSeed();
  for (const char* transport : {"shm", "bus"}) {
    const int revoker = int(test::mix64(seed) % 4), at = int(test::mix64(seed + 1) % 3);
    INFO("transport " << transport << ", rank " << revoker << " revokes at call " << at);
    setenv("SNCL_TRANSPORT", transport, 1);
    auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = 20000;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
      snclResult_t r;
      // The revoker may finish a call before a peer has (its last sends only need to be
      // out): then the revoke interrupts the peer's call in flight, as it should.
      const auto revokedText = "revoked by rank " + std::to_string(revoker);
      bool revokedEarly = false;
      for (int call = 0; call < at && !revokedEarly; ++call) {
        if (exactCall(comm, seed, 0, call, &r)) continue;
        if (rank == revoker || r != snclRemoteError ||
            std::string(snclGetLastError(comm)).find(revokedText) == std::string::npos)
          return 3;
        revokedEarly = true;
      }
      if (snclCommRevoke(comm, 0x4) != snclInvalidArgument) return 4;
      const auto t0 = std::chrono::steady_clock::now();
      if (rank == revoker) {
        if (snclCommRevoke(comm, SNCL_REVOKE_DEFAULT) != snclSuccess) return 5;
      } else if (!revokedEarly) {
        if (exactCall(comm, seed, 0, at, &r, false) || r != snclRemoteError) return 6;
        if (std::string(snclGetLastError(comm)).find(revokedText) == std::string::npos) return 7;
        // Told, not timed out.
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) return 8;
      }
      if (exactCall(comm, seed, 0, at + 1, &r, false) || r == snclSuccess) return 9;  // later calls fail at once
      snclComm_t shrunk = nullptr;
      if (snclCommShrink(comm, nullptr, 0, &shrunk, nullptr, SNCL_SHRINK_DEFAULT) != snclSuccess) return 10;
      int count = 0;
      snclCommCount(shrunk, &count);
      if (count != n || shrunk->rank != rank || !exactCall(shrunk, seed, 1, 0, &r)) return 11;
      snclCommDestroy(shrunk);
      snclCommDestroy(comm);
      return 0;
    });
    unsetenv("SNCL_TRANSPORT");
    CHECK(test::allSucceeded(exits));
  }
}
