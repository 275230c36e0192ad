// Direct (mesh) collectives across 2 virtual hosts x 4 ranks: every rank posts all its
// sends before its receives, so a transport that gives a message a buffer only once the
// receiver's irecv comes would wait in a cycle (rendezvous protocols above the provider's
// eager limit). Results are compared exactly; a hang shows as the executor's deadline.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lib/comm/comm.h"
#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr int kPerHost = 4;
constexpr int kRanks = 2 * kPerHost;
// 4 B (eager), 64 KiB (rendezvous, one chunk), 4 MiB (several chunks; the direct limit),
// in this order: the last one forces the plan.
const size_t kBytes[] = {4, 64u << 10, kDirectMaxBytes};

// Makes coll at bytes run as direct. Below kDirectMaxBytes SNCL_ALGO does that, which is
// checked; the planner's bucket of 4 MiB reaches above the limit, so there the plan is forced.
bool runsDirect(snclComm_t comm, CollType coll, size_t bytes) {
  if (bytes >= kDirectMaxBytes) comm->planner->force(Plan{.coll = coll, .algorithm = Algorithm::Direct});
  return comm->planner->choose(coll, bytes).algorithm == Algorithm::Direct;
}

int allReduceDirect(snclComm_t comm, int rank) {
  int failures = 0;
  for (size_t bytes : kBytes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> in(count), out(count);
    test::fillInput(snclFloat32, snclSum, rank, kRanks, in.data(), count);
    if (!runsDirect(comm, CollType::AllReduce, bytes)) {
      fprintf(stderr, "rank %d: all-reduce of %zu bytes is not planned as direct\n", rank, bytes);
      ++failures;
    }
    snclResult_t r = snclAllReduce(in.data(), out.data(), count, snclFloat32, snclSum, comm, nullptr);
    const size_t wrong = r == snclSuccess ? test::countWrong(snclFloat32, snclSum, kRanks, out.data(), count) : count;
    if (r != snclSuccess || wrong) {
      fprintf(stderr, "rank %d: all-reduce of %zu bytes: result %d, %zu wrong: %s\n", rank, bytes, r, wrong,
              snclGetLastError(comm));
      ++failures;
    }
  }
  return failures;
}

// bytes is what each rank contributes.
int allGatherDirect(snclComm_t comm, int rank) {
  int failures = 0;
  for (size_t bytes : kBytes) {
    std::vector<char> in(bytes), out(bytes * kRanks);
    test::fillPattern(1, rank, in.data(), bytes);
    if (!runsDirect(comm, CollType::AllGather, bytes)) {
      fprintf(stderr, "rank %d: all-gather of %zu bytes per rank is not planned as direct\n", rank, bytes);
      ++failures;
    }
    snclResult_t r = snclAllGather(in.data(), out.data(), bytes, snclInt8, comm, nullptr);
    size_t wrong = 0;
    for (int k = 0; k < kRanks && r == snclSuccess; ++k)
      wrong += test::countWrongPattern(1, k, out.data() + k * bytes, bytes);
    if (r != snclSuccess || wrong) {
      fprintf(stderr, "rank %d: all-gather of %zu bytes per rank: result %d, %zu wrong: %s\n", rank, bytes, r, wrong,
              snclGetLastError(comm));
      ++failures;
    }
  }
  return failures;
}

int rankBody(int rank, const snclUniqueId& id, const char* algo, int (*run)(snclComm_t, int)) {
  setenv("SNCL_HOSTID", rank < kPerHost ? "virtual-host-A" : "virtual-host-B", 1);
  setenv("SNCL_ALGO", algo, 1);
  snclComm_t comm = nullptr;
  if (snclCommInitRank(&comm, kRanks, id, rank) != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
    return 2;
  }
  int failures = run(comm, rank);
  if (snclCommDestroy(comm) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

}  // namespace

TEST_CASE("direct all-reduce across 2 virtual hosts x 4", "[ofi][collectives][process]") {
  auto exits = test::runRanks(kRanks, [](int rank, int, const snclUniqueId& id) {
    return rankBody(rank, id, "allreduce:direct", allReduceDirect);
  });
  CHECK(test::allSucceeded(exits));
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("direct all-gather across 2 virtual hosts x 4", "[ofi][collectives][process]") {
  auto exits = test::runRanks(kRanks, [](int rank, int, const snclUniqueId& id) {
    return rankBody(rank, id, "allgather:direct", allGatherDirect);
  });
  CHECK(test::allSucceeded(exits));
  CHECK(test::countShmSegments() == 0);
}
