// Every collective x every datatype x every op that applies x in-place and out-of-place x
// counts {0, 1, odd, several pipeline chunks} x rank counts {1, 2, 3, 5, 8}, compared
// exactly against the reference (tests/util/data). One process launch per rank count
// runs the whole matrix, on two comms: one forced to the direct algorithms, one to the
// pipelined ones (ring, chain), with a 256-byte chunk so that small counts span many.
// Ranks as threads (snclCommInitAll) run a smaller matrix, one thread per rank and one
// thread driving every rank through groups. SNCL_TEST_FEW_TYPES=1 runs four types only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lib/exec/reduce.h"
#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Sanitized builds run every collective, type and op, on fewer counts.
const std::vector<size_t> kCounts = {0, 1, 4101};
#else
const std::vector<size_t> kCounts = {0, 1, 37, 4101};  // 4101: over 2 rounds of 8 chunks of int8
#endif
constexpr const char* kChunkBytes = "256";
const snclRedOp_t kOps[] = {snclSum, snclProd, snclMax, snclMin, snclAvg, test::kPreMulSum};

// The types of the smaller runs: a float, an integer and the two narrow encodings.
const snclDataType_t kFewTypes[] = {snclFloat32, snclInt8, snclBfloat16, snclFloat8e5m2};

const char* opName(snclRedOp_t op) {
  return op == test::kPreMulSum ? "premulsum" : redOpName(op);
}

// One rank's view of the matrix on one comm.
struct Matrix {
  snclComm_t comm;
  int rank, nranks;
  const char* label;
  std::vector<char> in, out;
  snclRedOp_t preMul[snclNumTypes];
  unsigned char preMulScalar[snclNumTypes][8];  // snclScalarDevice: read at each call
  int failures = 0;

  Matrix(snclComm_t c, int r, int n, const char* l, size_t maxCount) : comm(c), rank(r), nranks(n), label(l) {
    in.resize(maxCount * 8 * n + 64);
    out.resize(maxCount * 8 * n + 64);
    for (int t = 0; t < snclNumTypes; ++t) {
      const auto type = static_cast<snclDataType_t>(t);
      test::storeElement(type, preMulScalar[t], 0, test::preMulScalar(rank));
      // Both residences: the scalar read now, or read when each call runs.
      snclScalarResidence_t residence = t % 2 ? snclScalarDevice : snclScalarHostImmediate;
      if (snclRedOpCreatePreMulSum(&preMul[t], preMulScalar[t], type, residence, comm) != snclSuccess) {
        fprintf(stderr, "rank %d: snclRedOpCreatePreMulSum(%s): %s\n", rank, dtypeName(type), snclGetLastError(comm));
        ++failures;
      }
    }
  }
  ~Matrix() {
    for (snclRedOp_t op : preMul) snclRedOpDestroy(op, comm);
  }

  snclRedOp_t apiOp(snclDataType_t type, snclRedOp_t op) const { return op == test::kPreMulSum ? preMul[type] : op; }

  bool ok(const char* coll, snclDataType_t type, const char* op, bool inPlace, size_t count, snclResult_t r,
          size_t wrong) {
    if (r == snclSuccess && wrong == 0) return true;
    fprintf(stderr, "[%s] rank %d/%d %s %s %s %s count %zu: result %s, %zu wrong: %s\n", label, rank, nranks, coll,
            dtypeName(type), op, inPlace ? "in-place" : "out-of-place", count, snclGetErrorString(r), wrong,
            r == snclSuccess ? "" : snclGetLastError(comm));
    ++failures;
    return false;
  }

  char* block(std::vector<char>& buf, size_t index, size_t count, size_t elem) { return buf.data() + index * count * elem; }

  void reductions(snclDataType_t type, size_t count, bool inPlace, int root) {
    const size_t n = static_cast<size_t>(nranks);
    for (snclRedOp_t op : kOps) {
      const snclRedOp_t o = apiOp(type, op);
      // All-Reduce.
      test::fillInput(type, op, rank, nranks, in.data(), count);
      void* recv = inPlace ? in.data() : out.data();
      snclResult_t r = snclAllReduce(in.data(), recv, count, type, o, comm, nullptr);
      ok("allreduce", type, opName(op), inPlace, count, r, r ? 0 : test::countWrong(type, op, nranks, recv, count));
      // Reduce: off the root, recvbuff is NULL out of place, and the input stays intact in place.
      test::fillInput(type, op, rank, nranks, in.data(), count);
      recv = inPlace ? in.data() : rank == root ? out.data() : nullptr;
      r = snclReduce(in.data(), recv, count, type, o, root, comm, nullptr);
      size_t wrong = 0;
      if (r == snclSuccess && rank == root) wrong = test::countWrong(type, op, nranks, recv, count);
      if (r == snclSuccess && rank != root) {
        std::vector<char> expect(count * dtypeSize(type) + 1);
        test::fillInput(type, op, rank, nranks, expect.data(), count);
        wrong = count ? memcmp(expect.data(), in.data(), count * dtypeSize(type)) != 0 : 0;
      }
      ok("reduce", type, opName(op), inPlace, count, r, wrong);
      // Reduce-Scatter: in place, recvbuff is this rank's block of sendbuff.
      test::fillInput(type, op, rank, nranks, in.data(), n * count);
      recv = inPlace ? block(in, static_cast<size_t>(rank), count, dtypeSize(type)) : out.data();
      r = snclReduceScatter(in.data(), recv, count, type, o, comm, nullptr);
      ok("reducescatter", type, opName(op), inPlace, count, r,
         r ? 0 : test::countWrong(type, op, nranks, recv, count, static_cast<size_t>(rank) * count));
    }
  }

  void movers(snclDataType_t type, size_t count, bool inPlace, int root) {
    const size_t elem = dtypeSize(type), n = static_cast<size_t>(nranks), me = static_cast<size_t>(rank);
    // Broadcast: off the root, sendbuff is NULL out of place.
    test::fillPattern(elem, root, in.data(), count);
    void* send = rank == root ? in.data() : inPlace ? in.data() : nullptr;
    void* recv = inPlace ? in.data() : out.data();
    snclResult_t r = snclBroadcast(send, recv, count, type, root, comm, nullptr);
    ok("broadcast", type, "-", inPlace, count, r, r ? 0 : test::countWrongPattern(elem, root, recv, count));
    // All-Gather: in place, sendbuff is this rank's block of recvbuff.
    void* own = inPlace ? block(out, me, count, elem) : in.data();
    test::fillPattern(elem, rank, own, count);
    r = snclAllGather(own, out.data(), count, type, comm, nullptr);
    size_t wrong = 0;
    for (size_t p = 0; r == snclSuccess && p < n; ++p)
      wrong += test::countWrongPattern(elem, static_cast<int>(p), block(out, p, count, elem), count);
    ok("allgather", type, "-", inPlace, count, r, wrong);
    // All-to-All: block p of rank q's input is elements p*count.. of q's pattern.
    test::fillPattern(elem, rank, in.data(), n * count);
    recv = inPlace ? in.data() : out.data();
    r = snclAlltoAll(in.data(), recv, count, type, comm, nullptr);
    wrong = 0;
    for (size_t p = 0; r == snclSuccess && p < n; ++p)
      wrong += test::countWrongPattern(elem, static_cast<int>(p), static_cast<char*>(recv) + p * count * elem, count,
                                       me * count);
    ok("alltoall", type, "-", inPlace, count, r, wrong);
    // Gather: in place on root, sendbuff is root's block of recvbuff; off the root,
    // recvbuff is NULL.
    own = inPlace && rank == root ? block(out, me, count, elem) : in.data();
    test::fillPattern(elem, rank, own, count);
    r = snclGather(own, rank == root ? out.data() : nullptr, count, type, root, comm, nullptr);
    wrong = 0;
    for (size_t p = 0; r == snclSuccess && rank == root && p < n; ++p)
      wrong += test::countWrongPattern(elem, static_cast<int>(p), block(out, p, count, elem), count);
    ok("gather", type, "-", inPlace, count, r, wrong);
    // Scatter: in place on root, recvbuff is root's block of sendbuff; off the root,
    // sendbuff is NULL.
    test::fillPattern(elem, root, in.data(), n * count);
    recv = inPlace && rank == root ? block(in, me, count, elem) : out.data();
    r = snclScatter(rank == root ? in.data() : nullptr, recv, count, type, root, comm, nullptr);
    ok("scatter", type, "-", inPlace, count, r, r ? 0 : test::countWrongPattern(elem, root, recv, count, me * count));
  }

  // A ring of sends and receives in one group, the receive posted first (1 rank: to itself).
  void sendRecv(snclDataType_t type, size_t count) {
    const size_t elem = dtypeSize(type);
    const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    test::fillPattern(elem, rank, in.data(), count);
    snclGroupStart();
    snclRecv(out.data(), count, type, prev, comm, nullptr);
    snclSend(in.data(), count, type, next, comm, nullptr);
    snclResult_t r = snclGroupEnd();
    ok("sendrecv", type, "-", false, count, r, r ? 0 : test::countWrongPattern(elem, prev, out.data(), count));
  }

  void run(bool pipelined) {
    // SNCL_TEST_FEW_TYPES=1 (the run over the network plugin, whose job is moving bytes:
    // the types' arithmetic is the executor's, which the full runs cover): four types.
    const char* few = getenv("SNCL_TEST_FEW_TYPES");
    const bool fewTypes = few && strcmp(few, "1") == 0;
    for (size_t ci = 0; ci < kCounts.size(); ++ci) {
      for (int t = 0; t < snclNumTypes; ++t) {
        const auto type = static_cast<snclDataType_t>(t);
        if (fewTypes && std::find(std::begin(kFewTypes), std::end(kFewTypes), type) == std::end(kFewTypes)) continue;
        const int root = static_cast<int>((ci + static_cast<size_t>(t)) % static_cast<size_t>(nranks));
        for (bool inPlace : {false, true}) {
          reductions(type, kCounts[ci], inPlace, root);
          if (pipelined) continue;  // the rest has no pipelined algorithm
          movers(type, kCounts[ci], inPlace, root);
        }
        if (!pipelined) sendRecv(type, kCounts[ci]);
      }
    }
  }
};

}  // namespace

TEST_CASE("every collective, datatype and op is exact across processes", "[collectives][process]") {
  for (int nranks : {1, 2, 3, 5, 8}) {
    INFO("nranks " << nranks);
    auto exits = test::runRanks(nranks, [](int rank, int n, const snclUniqueId& id) {
      setenv("SNCL_CHUNK_SIZE", kChunkBytes, 1);
      snclComm_t direct = nullptr, pipelined = nullptr;
      if (test::initDirectAndPipelined(n, id, rank, &direct, &pipelined)) return 2;
      int failures = 0;
      {
        Matrix d(direct, rank, n, "direct", kCounts.back());
        d.run(false);
        Matrix p(pipelined, rank, n, "ring/chain", kCounts.back());
        p.run(true);
        failures = d.failures + p.failures;
      }
      if (snclCommDestroy(direct) != snclSuccess || snclCommDestroy(pipelined) != snclSuccess) ++failures;
      return failures ? 1 : 0;
    }, 600000);
    CHECK(test::allSucceeded(exits));
  }
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("collectives with ranks as threads, each on its own thread or all driven by one", "[collectives][threads]") {
  for (int nranks : {1, 2, 3, 5, 8}) {
    INFO("nranks " << nranks);
    std::vector<snclComm_t> comms(nranks);
    REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
    std::vector<int> failures(nranks, 0);
    {
      std::vector<std::thread> threads;
      for (int r = 0; r < nranks; ++r) {
        threads.emplace_back([&, r] {
          Matrix m(comms[r], r, nranks, "threads", 37);
          for (size_t count : {size_t(0), size_t(37)}) {
            for (snclDataType_t type : kFewTypes) {
              for (bool inPlace : {false, true}) {
                m.reductions(type, count, inPlace, nranks - 1);
                m.movers(type, count, inPlace, 0);
              }
              m.sendRecv(type, count);
            }
          }
          failures[r] = m.failures;
        });
      }
      for (auto& t : threads) t.join();
    }
    for (int r = 0; r < nranks; ++r) CHECK(failures[r] == 0);

    // One thread: a group holds every rank's call, as a single process drives several
    // ranks (NCCL's one-thread multi-device pattern).
    const size_t count = 1001;
    std::vector<std::vector<float>> bufs(nranks, std::vector<float>(count * nranks));
    std::vector<std::vector<float>> gathered(nranks, std::vector<float>(count * nranks));
    REQUIRE(snclGroupStart() == snclSuccess);
    for (int r = 0; r < nranks; ++r) {
      test::fillInput(snclFloat32, snclSum, r, nranks, bufs[r].data(), count);
      CHECK(snclAllReduce(bufs[r].data(), bufs[r].data(), count, snclFloat32, snclSum, comms[r], nullptr) == snclSuccess);
      CHECK(snclAllGather(bufs[r].data(), gathered[r].data(), count, snclFloat32, comms[r], nullptr) == snclSuccess);
    }
    REQUIRE(snclGroupEnd() == snclSuccess);
    for (int r = 0; r < nranks; ++r) {
      CHECK(test::countWrong(snclFloat32, snclSum, nranks, bufs[r].data(), count) == 0);
      for (int p = 0; p < nranks; ++p)
        CHECK(test::countWrong(snclFloat32, snclSum, nranks, gathered[r].data() + p * count, count) == 0);
    }
    for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
  }
}
