// Collectives across virtual hosts: SNCL_HOSTID splits the ranks into two "hosts", so one
// communicator mixes shm (within a host) and ofi (between hosts); and SNCL_TRANSPORT=ofi
// puts every pair on ofi. Results are compared exactly, as in test_allreduce.cc.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lib/comm/comm.h"
#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

const snclDataType_t kTypes[] = {snclFloat32, snclFloat64, snclInt32, snclInt64};
const snclRedOp_t kOps[] = {snclSum, snclProd, snclMax, snclMin, snclAvg};

int allReduceMatrix(snclComm_t comm, int rank, int nranks, size_t count, bool fullMatrix) {
  int failures = 0;
  std::vector<char> in(count * 8 + 8), out(count * 8 + 8);
  for (snclDataType_t type : kTypes) {
    for (snclRedOp_t op : kOps) {
      if (!fullMatrix && !(op == snclSum || (type == snclFloat64 && op == snclMax))) continue;
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

// Which transports the comm set up, e.g. "shm,ofi".
std::string transportsOf(snclComm_t comm) {
  std::string names;
  for (const auto& t : comm->transports) names += std::string(names.empty() ? "" : ",") + t->name();
  return names;
}

// Rank body: ranks [0, perHost) are host A, the rest host B (perHost 0: no SNCL_HOSTID);
// forceOfi sets SNCL_TRANSPORT=ofi. Checks the transports the comm picked.
int rankBody(int rank, int nranks, const snclUniqueId& id, int perHost, bool forceOfi, const std::vector<size_t>& counts) {
  if (perHost) setenv("SNCL_HOSTID", rank < perHost ? "virtual-host-A" : "virtual-host-B", 1);
  if (forceOfi) setenv("SNCL_TRANSPORT", "ofi", 1);
  snclComm_t comm = nullptr;
  if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
    return 2;
  }
  int failures = 0;
  const std::string expected = forceOfi ? "ofi" : (perHost > 1 && nranks - perHost > 1) ? "shm,ofi" : "ofi";
  if (transportsOf(comm) != expected) {
    fprintf(stderr, "rank %d: transports %s, expected %s\n", rank, transportsOf(comm).c_str(), expected.c_str());
    ++failures;
  }
  for (size_t count : counts) failures += allReduceMatrix(comm, rank, nranks, count, count <= 4096);
  if (snclCommDestroy(comm) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

const std::vector<size_t> kCounts = {0, 1, 7, 4096 + 5, (1u << 20) + 3};

}  // namespace

TEST_CASE("all-reduce across 2 virtual hosts mixes shm and ofi", "[ofi][collectives][process]") {
  for (int perHost : {1, 2, 4}) {
    const int nranks = 2 * perHost;
    INFO("2 hosts x " << perHost << " ranks");
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return rankBody(rank, n, id, perHost, false, kCounts);
    });
    CHECK(test::allSucceeded(exits));
  }
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("all-reduce with SNCL_TRANSPORT=ofi for every pair", "[ofi][collectives][process]") {
  for (int nranks : {2, 3, 4}) {
    INFO("nranks " << nranks);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return rankBody(rank, n, id, 0, true, kCounts);
    });
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("all-reduce of 16 Mi floats across 2 virtual hosts x 2", "[ofi][collectives][process][large]") {
  auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
    return rankBody(rank, n, id, 2, false, {size_t(16) << 20});
  });
  CHECK(test::allSucceeded(exits));
}
