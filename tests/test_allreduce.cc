// All-Reduce on real ranks: processes (fork) and threads (snclCommInitAll), compared
// exactly against the reference, in-place and out-of-place.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

const snclDataType_t kTypes[] = {snclFloat32, snclFloat64, snclInt32, snclInt64};
const snclRedOp_t kOps[] = {snclSum, snclProd, snclMax, snclMin, snclAvg};

// Runs the matrix of (type, op, in-place) at count on comm; returns the number of failures.
// fullMatrix: every type x op; otherwise float sum only (large counts).
int allReduceMatrix(snclComm_t comm, int rank, int nranks, size_t count, bool fullMatrix) {
  int failures = 0;
  std::vector<char> in(count * 8 + 8), out(count * 8 + 8);
  for (snclDataType_t type : kTypes) {
    for (snclRedOp_t op : kOps) {
      if (!fullMatrix && !(op == snclSum && type == snclFloat32)) continue;
      for (bool inPlace : {false, true}) {
        test::fillInput(type, op, rank, nranks, in.data(), count);
        void* recv = inPlace ? in.data() : out.data();
        snclResult_t r = snclAllReduce(in.data(), recv, count, type, op, comm, nullptr);
        size_t wrong = r == snclSuccess ? test::countWrong(type, op, nranks, recv, count) : count;
        if (r != snclSuccess || wrong) {
          fprintf(stderr, "rank %d/%d count %zu type %d op %d inPlace %d: result %d, %zu wrong: %s\n", rank, nranks,
                  count, type, op, inPlace, r, wrong, snclGetLastError(comm));
          ++failures;
        }
      }
    }
  }
  return failures;
}

// Under sanitizers the host's reference checks of every type and op dominate the run: the
// full matrix goes up to 64 Ki elements there (past the pipeline chunk and the cells),
// float sum above, and the large case is 4 Mi elements (16 pipeline chunks).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kFullMatrixMax = size_t(1) << 16;
constexpr size_t kLargeCount = size_t(4) << 20;
#else
constexpr size_t kFullMatrixMax = size_t(1) << 21;
constexpr size_t kLargeCount = size_t(16) << 20;
#endif

int rankBody(int rank, int nranks, const snclUniqueId& id, const std::vector<size_t>& counts) {
  snclComm_t comm = nullptr;
  if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
    return 2;
  }
  int failures = 0;
  for (size_t count : counts) failures += allReduceMatrix(comm, rank, nranks, count, count <= kFullMatrixMax);
  if (snclCommDestroy(comm) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

}  // namespace

TEST_CASE("all-reduce across processes is exact", "[allreduce][process]") {
  const std::vector<size_t> counts = {0, 1, 7, 65521, (1u << 20) + 3};
  for (int nranks : {1, 2, 3, 4, 5, 8}) {
    INFO("nranks " << nranks);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return rankBody(rank, n, id, counts);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("all-reduce of 16 Mi elements across processes (4 Mi sanitized)", "[allreduce][process][large]") {
  for (int nranks : {2, 8}) {
    INFO("nranks " << nranks);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return rankBody(rank, n, id, {kLargeCount});
    }, 400000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("all-reduce with ranks as threads (snclCommInitAll)", "[allreduce][threads]") {
  for (int nranks : {1, 2, 3, 5, 8}) {
    INFO("nranks " << nranks);
    std::vector<snclComm_t> comms(nranks);
    REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
    std::vector<int> failures(nranks, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) {
      threads.emplace_back([&, r] {
        for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1u << 20) + 3})
          failures[r] += allReduceMatrix(comms[r], r, nranks, count, count < 100);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < nranks; ++r) CHECK(failures[r] == 0);
    for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
  }
}

TEST_CASE("all-reduce on streams overlaps with the caller", "[allreduce][stream]") {
  const int nranks = 4;
  std::vector<snclComm_t> comms(nranks);
  REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
  std::vector<int> failures(nranks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      snclStream_t stream;
      if (snclStreamCreate(&stream) != snclSuccess) {
        ++failures[r];
        return;
      }
      const size_t count = 100003;
      const int calls = 8;
      std::vector<std::vector<float>> bufs(calls, std::vector<float>(count));
      for (int k = 0; k < calls; ++k) {
        test::fillInput(snclFloat32, snclSum, r, nranks, bufs[k].data(), count);
        if (snclAllReduce(bufs[k].data(), bufs[k].data(), count, snclFloat32, snclSum, comms[r], stream) != snclSuccess)
          ++failures[r];
      }
      if (snclStreamSynchronize(stream) != snclSuccess) ++failures[r];
      if (snclStreamQuery(stream) != snclSuccess) ++failures[r];
      for (int k = 0; k < calls; ++k) failures[r] += test::countWrong(snclFloat32, snclSum, nranks, bufs[k].data(), count) != 0;
      if (snclStreamDestroy(stream) != snclSuccess) ++failures[r];
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) CHECK(failures[r] == 0);
  for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
}
