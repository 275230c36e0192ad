// Lost ranks with ranks as processes: a rank killed with SIGKILL in the middle of the job
// fails the survivors' calls with snclRemoteError within the deadline, snclCommShrink gives
// them a working comm, and destroying or aborting a comm with a dead peer never hangs.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr int kRanks = 8;
constexpr int kVictim = 5;
constexpr int kTimeoutMs = 8000;
constexpr size_t kCount = 1u << 18;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Exit codes tell the parent what went wrong on a rank.
enum : int { kOk = 0, kInitFailed = 10, kFirstCall, kNoError, kLate, kShrink, kWrongCount, kWrongSum, kSlowDestroy };

snclResult_t allReduceInt(snclComm_t comm, int rank, int nranks, bool* correct) {
  std::vector<int32_t> in(kCount), out(kCount);
  test::fillInput(snclInt32, snclSum, rank, nranks, in.data(), kCount);
  const snclResult_t r = snclAllReduce(in.data(), out.data(), kCount, snclInt32, snclSum, comm, nullptr);
  *correct = r == snclSuccess && test::countWrong(snclInt32, snclSum, nranks, out.data(), kCount) == 0;
  return r;
}

}  // namespace

TEST_CASE("fault: SIGKILL of a rank; survivors error within the deadline and shrink", "[fault][process]") {
  for (const char* transport : {"bus", "shm"}) {
    INFO("transport " << transport);
    setenv("SNCL_TRANSPORT", transport, 1);
    auto exits = test::runRanks(kRanks, [](int rank, int nranks, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = kTimeoutMs;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, nranks, id, rank, &config) != snclSuccess) return int(kInitFailed);
      bool correct = false;
      if (allReduceInt(comm, rank, nranks, &correct) != snclSuccess || !correct) return int(kFirstCall);
      if (rank == kVictim) raise(SIGKILL);
      const auto t0 = std::chrono::steady_clock::now();
      const snclResult_t r = allReduceInt(comm, rank, nranks, &correct);
      if (r != snclRemoteError) return int(kNoError);
      // Within the deadline: the victim's peers see it exit, the others are pulled in.
      if (since(t0) > 2.0 * kTimeoutMs / 1000) return int(kLate);
      snclResult_t async = snclSuccess;
      if (snclCommGetAsyncError(comm, &async) != snclSuccess || async != snclRemoteError) return int(kNoError);
      snclComm_t shrunk = nullptr;
      if (snclCommShrink(comm, nullptr, 0, &shrunk, nullptr, SNCL_SHRINK_DEFAULT) != snclSuccess) return int(kShrink);
      int count = 0, newRank = -1;
      snclCommCount(shrunk, &count);
      snclCommUserRank(shrunk, &newRank);
      if (count != nranks - 1 || newRank != (rank < kVictim ? rank : rank - 1)) return int(kWrongCount);
      if (allReduceInt(shrunk, newRank, count, &correct) != snclSuccess || !correct) return int(kWrongSum);
      snclCommDestroy(shrunk);
      const auto t1 = std::chrono::steady_clock::now();
      snclCommDestroy(comm);  // a dead peer: must not hang
      if (since(t1) > 2.0 * kTimeoutMs / 1000) return int(kSlowDestroy);
      return int(kOk);
    }, 120000);
    unsetenv("SNCL_TRANSPORT");
    for (int r = 0; r < kRanks; ++r) {
      INFO("rank " << r << " exit code " << exits[r].code << " signal " << exits[r].signal);
      if (r == kVictim) CHECK(exits[r].signal == SIGKILL);
      else CHECK(exits[r].code == kOk);
    }
  }
}

TEST_CASE("fault: abort and destroy with a dead peer return promptly", "[fault][process]") {
  for (bool abortIt : {false, true}) {
    INFO((abortIt ? "abort" : "destroy"));
    auto exits = test::runRanks(4, [abortIt](int rank, int nranks, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = kTimeoutMs;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, nranks, id, rank, &config) != snclSuccess) return int(kInitFailed);
      bool correct = false;
      if (allReduceInt(comm, rank, nranks, &correct) != snclSuccess || !correct) return int(kFirstCall);
      if (rank == 1) raise(SIGKILL);
      usleep(200000);  // the peer is gone by now
      const auto t0 = std::chrono::steady_clock::now();
      if (abortIt) snclCommAbort(comm);
      else snclCommDestroy(comm);
      return since(t0) > 2.0 * kTimeoutMs / 1000 ? int(kSlowDestroy) : int(kOk);
    }, 60000);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << " exit code " << exits[r].code);
      if (r == 1) CHECK(exits[r].signal == SIGKILL);
      else CHECK(exits[r].code == kOk);
    }
  }
}
