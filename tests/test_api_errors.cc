// Bad input gets a clear result code and a message, never a crash or a hang.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lib/net/bootstrap.h"
#include "sncl/sncl.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

std::string apiError() { return snclGetLastError(nullptr); }

struct ThreadComms {
  std::vector<snclComm_t> comms;
  explicit ThreadComms(int n) : comms(n) { REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess); }
  ~ThreadComms() {
    for (auto c : comms)
      if (c) snclCommDestroy(c);
  }
};

}  // namespace

TEST_CASE("API calls reject bad arguments with a message", "[errors]") {
  ThreadComms tc(1);
  snclComm_t comm = tc.comms[0];
  float buf[8] = {0};

  CHECK(snclAllReduce(nullptr, buf, 8, snclFloat32, snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("sendbuff is NULL"));
  CHECK(snclAllReduce(buf, nullptr, 8, snclFloat32, snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("recvbuff is NULL"));
  CHECK(snclAllReduce(nullptr, nullptr, 0, snclFloat32, snclSum, comm, nullptr) == snclSuccess);
  CHECK(snclAllReduce(buf, buf, 8, static_cast<snclDataType_t>(42), snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("unknown datatype 42"));
  CHECK(snclAllReduce(buf, buf, 8, snclFloat32, static_cast<snclRedOp_t>(17), comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("unknown reduction op 17"));
  CHECK(snclAllReduce(buf, buf + 1, 4, snclFloat32, snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("overlap"));
  CHECK(snclAllReduce(buf, buf, SIZE_MAX / 2, snclFloat32, snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("overflows"));
  CHECK(snclAllReduce(buf, buf, 8, snclFloat32, snclSum, nullptr, nullptr) == snclInvalidArgument);
  CHECK(snclAllReduce(buf, buf, 8, snclFloat32, snclSum, comm, reinterpret_cast<snclStream_t>(buf)) ==
        snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("not a live stream"));
  int n = 0;
  CHECK(snclCommCount(comm, nullptr) == snclInvalidArgument);
  CHECK(snclCommCount(comm, &n) == snclSuccess);
  CHECK(n == 1);
  CHECK(std::string(snclGetErrorString(snclTimeout)).find("deadline") != std::string::npos);
}

TEST_CASE("init rejects bad ranks, configs and unique ids", "[errors][init]") {
  // A well-formed id whose root is not this process's (nothing listens on port 1): every
  // call below fails before asking the root. snclGetUniqueId's root would outlive the case
  // by the bootstrap deadline, and the cases that fork would start their ranks' threads in
  // a child of a multi-threaded process, which TSan refuses.
  snclUniqueId id;
  {
    test::ScopedEnv env{{"SNCL_COMM_ID", "127.0.0.1:1"}};
    REQUIRE(bootstrapIdFromEnv(&id, /*isRoot=*/false) == snclSuccess);
  }
  snclComm_t comm = nullptr;
  CHECK(snclCommInitRank(&comm, 4, id, 4) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("out of range"));
  CHECK(snclCommInitRank(&comm, 4, id, -1) == snclInvalidArgument);
  CHECK(snclCommInitRank(&comm, 0, id, 0) == snclInvalidArgument);
  CHECK(snclCommInitRank(nullptr, 1, id, 0) == snclInvalidArgument);
  snclConfig_t bad;
  memset(&bad, 0, sizeof(bad));
  CHECK(snclCommInitRankConfig(&comm, 1, id, 0, &bad) == snclInvalidArgument);
  CHECK_THAT(apiError(), Catch::Contains("SNCL_CONFIG_INITIALIZER"));

  snclUniqueId garbage;
  for (size_t i = 0; i < sizeof(garbage.internal); ++i) garbage.internal[i] = static_cast<char>(i * 37 + 11);
  auto start = std::chrono::steady_clock::now();
  CHECK(snclCommInitRank(&comm, 2, garbage, 0) == snclInvalidArgument);
  CHECK(comm == nullptr);
  snclUniqueId flipped = id;
  flipped.internal[20] ^= 0x40;
  CHECK(snclCommInitRank(&comm, 2, flipped, 0) == snclInvalidArgument);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

TEST_CASE("an unreachable root times out with a message", "[errors][init]") {
  setenv("SNCL_COMM_ID", "127.0.0.1:1", 1);
  snclUniqueId id;
  Result r = bootstrapIdFromEnv(&id, /*isRoot=*/false);
  unsetenv("SNCL_COMM_ID");
  REQUIRE(r == snclSuccess);
  snclConfig_t config = SNCL_CONFIG_INITIALIZER;
  config.timeoutMs = 600;
  snclComm_t comm = nullptr;
  auto start = std::chrono::steady_clock::now();
  CHECK(snclCommInitRankConfig(&comm, 2, id, 1, &config) == snclTimeout);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THAT(apiError(), Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("ranks that disagree on nranks fail at init", "[errors][init]") {
  auto exits = test::runRanks(2, [](int rank, int, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 5000;
    snclComm_t comm = nullptr;
    snclResult_t r = snclCommInitRankConfig(&comm, rank == 0 ? 2 : 3, id, rank, &config);
    if (r != snclInvalidArgument) return 1;
    return std::string(snclGetLastError(nullptr)).find("nranks") != std::string::npos ? 0 : 2;
  });
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("every call after snclCommAbort is refused", "[errors][abort]") {
  snclComm_t comm = nullptr;
  {
    std::vector<snclComm_t> comms(1);
    REQUIRE(snclCommInitAll(comms.data(), 1, nullptr) == snclSuccess);
    comm = comms[0];
  }
  REQUIRE(snclCommAbort(comm) == snclSuccess);
  float buf[4] = {0};
  CHECK(snclAllReduce(buf, buf, 4, snclFloat32, snclSum, comm, nullptr) == snclInvalidUsage);
  CHECK_THAT(apiError(), Catch::Contains("not a live communicator"));
  int n;
  CHECK(snclCommCount(comm, &n) == snclInvalidUsage);
  CHECK(snclCommDestroy(comm) == snclInvalidUsage);
  CHECK(snclCommAbort(comm) == snclInvalidUsage);
}

TEST_CASE("counts that differ across ranks are detected, not hung on", "[errors][mismatch]") {
  auto exits = test::runRanks(2, [](int rank, int nranks, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 5000;
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, nranks, id, rank, &config) != snclSuccess) return 3;
    std::vector<float> buf(1000, 1.0f);
    snclResult_t r = snclAllReduce(buf.data(), buf.data(), rank == 0 ? 1000 : 600, snclFloat32, snclSum, comm, nullptr);
    snclCommAbort(comm);
    return r == snclInvalidArgument || r == snclRemoteError ? 0 : 1;
  });
  CHECK(test::allSucceeded(exits));
}

// One rank makes another call than the others (another collective, op, type or root at the
// same size in elements): on every transport every rank fails, within the deadline, and
// none returns a result. The schedule paths fold the call's signature into their tags.
namespace {

// A rank's comm on one transport with a deadline; nullptr (said on stderr) if init failed.
// ofi's setup (tcp;ofi_rxm connections among 4 ranks on 2 cores) may take seconds: its
// callers give it a longer deadline.
snclComm_t initOn(const char* transport, int timeoutMs, int rank, int nranks, const snclUniqueId& id) {
  setenv("SNCL_TRANSPORT", transport, 1);
  snclConfig_t config = SNCL_CONFIG_INITIALIZER;
  config.timeoutMs = timeoutMs;
  snclComm_t comm = nullptr;
  if (snclCommInitRankConfig(&comm, nranks, id, rank, &config) == snclSuccess) return comm;
  fprintf(stderr, "rank %d: init on %s: %s\n", rank, transport, snclGetLastError(nullptr));
  return nullptr;
}

}  // namespace

TEST_CASE("calls that differ across ranks fail on every transport, never with a wrong result", "[errors][mismatch]") {
  enum Odd { kAllGather, kOp, kType, kRoot };
  // What the error of every rank says the odd rank called (docs/observability.md).
  const char* const oddCall[] = {"called allgather of 4096 B", "called allreduce of 4096 B (float32 max)",
                                 "called allreduce of 4096 B (int32 sum)", "called broadcast of 4096 B root "};
  for (const char* transport : {"shm", "bus", "ofi"})
    for (Odd odd : {kAllGather, kOp, kType, kRoot}) {
      // ofi (seconds per comm to set up): one kind of mismatch per run, drawn from the seed.
      if (std::string(transport) == "ofi" && odd != Odd(Catch::rngSeed() % 4)) continue;
      const int oddRank = int(Catch::rngSeed() + unsigned(odd)) % 4;
      INFO(transport << ", mismatch " << int(odd) << " on rank " << oddRank);
      // A Broadcast's root only sends: it cannot see the mismatch. The odd rank receives.
      const int root = (oddRank + 1 + int(Catch::rngSeed() % 3)) % 4;
      const std::string named = "rank(s) " + std::to_string(oddRank) + " " + oddCall[odd] +
                                (odd == kRoot ? std::to_string(root) : "");
      auto exits = test::runRanks(4, [&](int rank, int nranks, const snclUniqueId& id) {
        setenv("SNCL_SHM_CELL_BYTES", "0", 1);  // the schedule path, not the cells (they check on their own)
        snclComm_t comm = initOn(transport, std::string(transport) == "ofi" ? 10000 : 3000, rank, nranks, id);
        if (!comm) return 3;
        constexpr size_t kCount = 1024;
        std::vector<float> in(kCount, 1.0f), out(4 * kCount, 0.0f);
        snclResult_t r;
        if (rank != oddRank) r = snclAllReduce(in.data(), out.data(), kCount, snclFloat32, snclSum, comm, nullptr);
        else if (odd == kAllGather) r = snclAllGather(in.data(), out.data(), kCount, snclFloat32, comm, nullptr);
        else if (odd == kOp) r = snclAllReduce(in.data(), out.data(), kCount, snclFloat32, snclMax, comm, nullptr);
        else if (odd == kType) r = snclAllReduce(in.data(), out.data(), kCount, snclInt32, snclSum, comm, nullptr);
        else r = snclBroadcast(in.data(), out.data(), kCount, snclFloat32, root, comm, nullptr);
        const std::string why = r == snclSuccess ? "" : snclGetLastError(comm);
        snclCommAbort(comm);
        if (r == snclSuccess) return 1;
        // Every rank's error names the odd rank's call and the others' call.
        if (why.find(named) == std::string::npos || why.find("called allreduce of 4096 B (float32 sum)") == std::string::npos) {
          fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
          return 2;
        }
        return 0;
      });
      for (int r = 0; r < 4; ++r) {
        INFO("rank " << r << " exit " << exits[r].code);
        CHECK(exits[r].code == 0);
      }
    }
}

// A rank that stays away past the deadline between two calls (a straggler, a debugger):
// the ranks that waited for it name it, and the call it never reached, on every transport.
TEST_CASE("a stall names the rank that never reached the call", "[errors][late]") {
  // "ofi-2hosts": ranks 0-1 and 2-3 on two virtual hosts, so no progress board: the
  // agreement names the rank that never reported, and where the others were.
  for (std::string transport : {"shm", "bus", "ofi", "ofi-2hosts"}) {
    const bool twoHosts = transport == "ofi-2hosts";
    const int late = int(Catch::rngSeed() % 3) + 1;
    INFO(transport << ", late rank " << late);
    auto exits = test::runRanks(4, [&](int rank, int nranks, const snclUniqueId& id) {
      if (twoHosts) setenv("SNCL_HOSTID", rank < 2 ? "virtual-host-A" : "virtual-host-B", 1), transport = "ofi";
      const int timeoutMs = transport == "ofi" ? 4000 : 1500;
      snclComm_t comm = initOn(transport.c_str(), timeoutMs, rank, nranks, id);
      if (!comm) return 3;
      std::vector<float> buf(4096, 1.0f);
      for (int call = 0; call < 3; ++call) {
        if (rank == late && call == 2) usleep(useconds_t(timeoutMs) * 2500);
        if (snclAllReduce(buf.data(), buf.data(), buf.size(), snclFloat32, snclSum, comm, nullptr) == snclSuccess) continue;
        const std::string why = snclGetLastError(comm);
        snclCommAbort(comm);
        if (rank == late) return 0;  // it comes too late: how it fails is not the point
        const std::string named = "rank(s) " + std::to_string(late);
        const std::string where = twoHosts ? "no report within the deadline" : "had not reached call #3";
        if (call == 2 && why.find(named) != std::string::npos && why.find(where) != std::string::npos) return 0;
        fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
        return 10 + call;
      }
      snclCommAbort(comm);
      // The late rank may still complete its last call, exactly, when every peer's bytes
      // for it arrived before they gave up (ofi's eager sends land in its posted slots).
      if (rank == late) return std::all_of(buf.begin(), buf.end(), [](float v) { return v == 64.0f; }) ? 0 : 2;
      return 1;
    });
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << " (late: " << late << ") exit " << exits[r].code);
      CHECK(exits[r].code == 0);
    }
  }
}

TEST_CASE("a rank killed mid-run: the others fail within their deadline", "[errors][kill]") {
  const int nranks = 4;
  auto start = std::chrono::steady_clock::now();
  auto exits = test::runRanks(nranks, [](int rank, int n, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 4000;
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 3;
    std::vector<float> buf(1 << 20, 1.0f);
    for (int iter = 0; iter < 100000; ++iter) {
      if (rank == 2 && iter == 20) kill(getpid(), SIGKILL);
      snclResult_t r = snclAllReduce(buf.data(), buf.data(), buf.size(), snclFloat32, snclSum, comm, nullptr);
      if (r != snclSuccess) {
        snclResult_t async = snclSuccess;
        snclCommGetAsyncError(comm, &async);
        snclCommAbort(comm);
        return async != snclSuccess ? 0 : 4;
      }
    }
    return 5;  // never noticed the dead peer
  });
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  for (int r = 0; r < nranks; ++r) {
    if (r == 2) CHECK(exits[r].signal == SIGKILL);
    else CHECK(exits[r].code == 0);
  }
  CHECK(test::countShmSegments() == 0);
}
