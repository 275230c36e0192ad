// Direct (one-step) collectives whose messages exceed what a transport buffers: a send
// completes only once its receiver posted the receive, so these hung at the deadline
// while every receive but one waited for a later step. Sizes just above the shm FIFO and
// the bus's chunk window, including the reported 8-rank Reduce-Scatter of 16 MiB + 32 B.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sncl/sncl.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

// Reduce-Scatter of recvCount and All-Reduce of count elements (int32 sum), forced direct;
// returns the number of failed calls and wrong elements.
int runDirect(snclComm_t comm, int rank, int nranks, size_t recvCount, size_t count) {
  int bad = 0;
  std::vector<int32_t> in(recvCount * nranks), out(std::max(recvCount, count));
  test::fillInput(snclInt32, snclSum, rank, nranks, in.data(), in.size());
  snclResult_t r = snclReduceScatter(in.data(), out.data(), recvCount, snclInt32, snclSum, comm, nullptr);
  if (r != snclSuccess || test::countWrong(snclInt32, snclSum, nranks, out.data(), recvCount, rank * recvCount)) {
    fprintf(stderr, "rank %d/%d: reduce-scatter of %zu: %s %s\n", rank, nranks, recvCount, snclGetErrorString(r),
            snclGetLastError(comm));
    ++bad;
  }
  in.resize(count);
  test::fillInput(snclInt32, snclSum, rank, nranks, in.data(), count);
  r = snclAllReduce(in.data(), out.data(), count, snclInt32, snclSum, comm, nullptr);
  if (r != snclSuccess || test::countWrong(snclInt32, snclSum, nranks, out.data(), count)) {
    fprintf(stderr, "rank %d/%d: all-reduce of %zu: %s %s\n", rank, nranks, count, snclGetErrorString(r),
            snclGetLastError(comm));
    ++bad;
  }
  // In place too: the sends read the blocks the reduction does not write.
  in.assign(recvCount * nranks, 0);
  test::fillInput(snclInt32, snclSum, rank, nranks, in.data(), in.size());
  int32_t* mine = in.data() + rank * recvCount;
  r = snclReduceScatter(in.data(), mine, recvCount, snclInt32, snclSum, comm, nullptr);
  if (r != snclSuccess || test::countWrong(snclInt32, snclSum, nranks, mine, recvCount, rank * recvCount)) {
    fprintf(stderr, "rank %d/%d: in-place reduce-scatter of %zu: %s\n", rank, nranks, recvCount,
            snclGetErrorString(r));
    ++bad;
  }
  return bad;
}

}  // namespace

TEST_CASE("direct collectives complete when messages exceed the shm FIFO", "[direct][shm]") {
  ScopedEnv algo("SNCL_ALGO", "reducescatter:direct;allreduce:direct");
  ScopedEnv transport("SNCL_TRANSPORT", "shm");
  SECTION("a 64 KiB FIFO, prime counts above it, 2..8 ranks") {
    ScopedEnv fifo("SNCL_SHM_FIFO_BYTES", "64K");
    for (int nranks : {2, 3, 8}) {
      INFO("nranks " << nranks);
      auto exits = test::runRanks(nranks, [](int rank, int nranks, const snclUniqueId& id) {
        snclComm_t comm = nullptr;
        if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) return 2;
        int bad = runDirect(comm, rank, nranks, 16411, 16411) + runDirect(comm, rank, nranks, 16384, 65537);
        snclCommDestroy(comm);
        return bad ? 1 : 0;
      });
      CHECK(test::allSucceeded(exits));
    }
  }
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  SECTION("the reported case: 8 ranks, 16,777,248 bytes, the default FIFO") {
    auto exits = test::runRanks(8, [](int rank, int nranks, const snclUniqueId& id) {
      snclComm_t comm = nullptr;
      if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) return 2;
      int bad = runDirect(comm, rank, nranks, 16777248 / 4 / 8, 750001);
      snclCommDestroy(comm);
      return bad ? 1 : 0;
    });
    CHECK(test::allSucceeded(exits));
  }
#endif
}

TEST_CASE("bus: a direct All-Reduce larger than the chunk window completes", "[direct][bus]") {
  // 16 ranks on supernode-4x4 with 64 KiB and 32 KiB chunks: 1 MiB hung in the inner shm
  // path before every receive was posted with the sends.
  std::string here = __FILE__;
  const std::string dir = here.substr(0, here.rfind("/tests/")) + "/topologies/";
  ScopedEnv algo("SNCL_ALGO", "allreduce:direct;reducescatter:direct");
  ScopedEnv topo("SNCL_TOPO_FILE", dir + "supernode-4x4.json");
  for (const char* chunk : {"65536", "32768"}) {
    INFO("chunk " << chunk);
    ScopedEnv chunkBytes("SNCL_BUS_CHUNK_BYTES", chunk);
    constexpr int kRanks = 16;
    auto comms = test::busComms(kRanks);
    REQUIRE(comms.size() == size_t(kRanks));
    std::vector<int> bad(kRanks, 0);
    test::onEveryRank(kRanks, [&](int r) { bad[r] = runDirect(comms[r], r, kRanks, 16411, 262144); });
    for (int r = 0; r < kRanks; ++r) CHECK(bad[r] == 0);
    test::destroyAll(comms);
  }
}
