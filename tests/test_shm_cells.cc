// The cells path of small collectives (lib/exec/cells.*, transports/shm/shm_cells.cc) on
// real ranks: processes and threads, a split comm, random sizes, dtypes, ops and
// collectives with a printed seed against a rank-order reference, ranks drifting apart by
// random delays, large calls on the normal path in between, a peer killed mid-loop, and
// SNCL_SHM_CELL_BYTES=0.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/exec/reduce.h"
#include "sncl/sncl.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr size_t kCellBytes = 4096;  // shm.h's default, which these tests run with
constexpr size_t kLargeCount = 40000;  // float32: 160 KB, above any cell

uint64_t testSeed() {
  static const uint64_t seed = [] {
    const char* s = getenv("SNCL_TEST_SEED");
    const uint64_t v = s ? strtoull(s, nullptr, 0) : std::random_device{}();
    printf("test_shm_cells seed %llu (SNCL_TEST_SEED=%llu repeats it)\n", (unsigned long long)v, (unsigned long long)v);
    return v;
  }();
  return seed;
}

enum class Kind { AllReduce, AllGather, Broadcast, Reduce, LargeAllReduce };

// One call of the loop, the same on every rank (from the shared seed).
struct Call {
  Kind kind;
  snclDataType_t type;
  snclRedOp_t op;  // snclNumOps: a pre-multiplied sum
  size_t count;
  int root;
  bool inPlace;
};

// orderFree: only ops whose result does not depend on the order of the ranks (integer
// ops, float max/min), for runs on the planner's schedules, which reduce in their own
// order (a chain toward the root, a ring), not rank order as the cells do.
Call drawCall(std::mt19937_64& g, int nranks, bool orderFree) {
  Call c{};
  const int k = int(g() % 20);
  c.kind = k < 10 ? Kind::AllReduce : k < 13 ? Kind::AllGather : k < 16 ? Kind::Broadcast : k < 19 ? Kind::Reduce
                                                                                                      : Kind::LargeAllReduce;
  c.root = int(g() % uint64_t(nranks));
  c.inPlace = g() % 2;
  if (c.kind == Kind::LargeAllReduce) {
    c.type = snclFloat32;
    c.op = snclSum;
    c.count = kLargeCount + g() % 1000;
    return c;
  }
  for (;;) {
    c.type = snclDataType_t(g() % snclNumTypes);
    c.op = snclRedOp_t(g() % (snclNumOps + 1));
    const bool exactAnyOrder = dtypeInteger(c.type) || c.op == snclMax || c.op == snclMin;
    if (orderFree && !exactAnyOrder) continue;
    if (c.op == snclNumOps) {
      if (c.type == snclFloat32 || c.type == snclInt32) break;
      continue;
    }
    if (reduceKernel(c.type, c.op == snclAvg ? snclSum : c.op)) break;
  }
  const size_t elem = dtypeSize(c.type);
  const size_t maxCount = kCellBytes / elem;
  // Zero, one, primes, the limit itself, or anything up to it.
  const size_t picks[] = {0, 1, 2, 3, 7, 13, 61, 127, 509, maxCount, maxCount - 1};
  c.count = g() % 3 == 0 ? picks[g() % (sizeof(picks) / sizeof(picks[0]))] : g() % (maxCount + 1);
  return c;
}

// Rank r's input of call i: random bytes (bitwise comparison below), small for a
// pre-multiplied sum so that products stay ordinary.
void fillInput(uint64_t seed, size_t i, int r, const Call& c, std::vector<char>* out) {
  const size_t bytes = c.count * dtypeSize(c.type);
  out->assign(bytes + 8, 0);
  std::mt19937_64 g(seed ^ (i * 0x9e3779b97f4a7c15ull) ^ (uint64_t(r + 1) << 48));
  for (size_t b = 0; b < bytes; ++b) (*out)[b] = char(g());
  if (c.kind == Kind::LargeAllReduce || c.op == snclNumOps) {
    for (size_t e = 0; e < c.count; ++e) {
      if (c.type == snclFloat32) {
        const float v = float(int(g() % 64) - 32);
        memcpy(out->data() + e * 4, &v, 4);
      } else {
        const int32_t v = int32_t(g() % 64) - 32;
        memcpy(out->data() + e * 4, &v, 4);
      }
    }
  }
}

// The rank-order reference: ((in0 op in1) op in2) ..., avg scaled after, a pre-multiplied
// sum's inputs scaled by their rank's scalar (rank + 2) first.
void reference(uint64_t seed, size_t i, int nranks, const Call& c, std::vector<char>* out) {
  const size_t bytes = c.count * dtypeSize(c.type);
  const bool preMul = c.op == snclNumOps;
  ReduceFn fn = reduceKernel(c.type, preMul || c.op == snclAvg ? snclSum : c.op);
  std::vector<char> in;
  out->assign(bytes + 8, 0);
  for (int r = 0; r < nranks; ++r) {
    fillInput(seed, i, r, c, &in);
    if (preMul) scaleKernel(c.type)(in.data(), in.data(), c.count, double(r + 2), 0);
    if (r == 0)
      memcpy(out->data(), in.data(), bytes);
    else if (c.count)
      fn(out->data(), out->data(), in.data(), c.count);
  }
  if (c.op == snclAvg && c.count) scaleKernel(c.type)(out->data(), out->data(), c.count, 1.0 / nranks, nranks);
}

// Runs `calls` random calls on comm; returns failures. delayUs: a random sleep of up to
// that many microseconds before some calls, different per rank. Counts the calls that
// should take the cells path into *eligible.
int callLoop(snclComm_t comm, int rank, int nranks, uint64_t seed, int calls, int delayUs, uint64_t* eligible,
             bool orderFree, int killRank = -1, int killAt = -1,
             std::chrono::steady_clock::time_point* callStart = nullptr) {
  std::mt19937_64 shared(seed);
  std::mt19937_64 local(seed ^ (uint64_t(rank + 7) << 32));
  std::vector<char> in, expect, got, big;
  int failures = 0;
  for (int i = 0; i < calls; ++i) {
    const Call c = drawCall(shared, nranks, orderFree);
    if (rank == killRank && i == killAt) raise(SIGKILL);
    if (callStart) *callStart = std::chrono::steady_clock::now();
    if (delayUs > 0 && local() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(local() % delayUs));
    const size_t elem = dtypeSize(c.type);
    const size_t bytes = c.count * elem;
    fillInput(seed, i, rank, c, &in);
    snclRedOp_t op = c.op;
    if (c.op == snclNumOps) {
      char scalar[8];
      if (c.type == snclFloat32) {
        const float s = float(rank + 2);
        memcpy(scalar, &s, 4);
      } else {
        const int32_t s = rank + 2;
        memcpy(scalar, &s, 4);
      }
      if (snclRedOpCreatePreMulSum(&op, scalar, c.type, snclScalarHostImmediate, comm) != snclSuccess) return 100;
    }
    snclResult_t r = snclSuccess;
    switch (c.kind) {
      case Kind::AllReduce:
      case Kind::LargeAllReduce: {
        got.assign(bytes + 8, 0);
        void* recv = c.inPlace ? in.data() : got.data();
        r = snclAllReduce(in.data(), recv, c.count, c.type, op, comm, nullptr);
        if (c.inPlace) got = in;
        reference(seed, i, nranks, c, &expect);
        if (c.kind == Kind::AllReduce) ++*eligible;
        break;
      }
      case Kind::Reduce: {
        got.assign(bytes + 8, 0);
        void* recv = c.inPlace ? in.data() : got.data();
        r = snclReduce(in.data(), recv, c.count, c.type, op, c.root, comm, nullptr);
        if (c.inPlace) got = in;
        if (rank == c.root) reference(seed, i, nranks, c, &expect);
        else expect = got;  // off the root the output is not the call's
        ++*eligible;
        break;
      }
      case Kind::Broadcast: {
        got.assign(bytes + 8, 0);
        if (c.inPlace) got = in;
        r = snclBroadcast(c.inPlace ? got.data() : in.data(), got.data(), c.count, c.type, c.root, comm, nullptr);
        fillInput(seed, i, c.root, c, &expect);
        ++*eligible;
        break;
      }
      case Kind::AllGather: {
        got.assign(bytes * size_t(nranks) + 8, 0);
        if (c.inPlace) memcpy(got.data() + size_t(rank) * bytes, in.data(), bytes);
        const void* send = c.inPlace ? got.data() + size_t(rank) * bytes : in.data();
        r = snclAllGather(send, got.data(), c.count, c.type, comm, nullptr);
        expect.assign(got.size(), 0);
        std::vector<char> theirs;
        for (int k = 0; k < nranks; ++k) {
          fillInput(seed, i, k, c, &theirs);
          memcpy(expect.data() + size_t(k) * bytes, theirs.data(), bytes);
        }
        ++*eligible;
        break;
      }
    }
    // Not after a failed call: destroying the op on a comm with an asynchronous error fails
    // too and would replace the call's error, which the caller reads (the comm frees it).
    if (c.op == snclNumOps && r == snclSuccess) snclRedOpDestroy(op, comm);
    const size_t outBytes = c.kind == Kind::AllGather ? bytes * size_t(nranks) : bytes;
    if (r != snclSuccess || memcmp(got.data(), expect.data(), outBytes) != 0) {
      fprintf(stderr, "rank %d/%d call %d kind %d type %d op %d count %zu root %d inPlace %d: result %d %s\n", rank,
              nranks, i, int(c.kind), int(c.type), int(c.op), c.count, c.root, int(c.inPlace), int(r),
              r != snclSuccess ? snclGetLastError(comm) : "wrong bytes");
      if (++failures > 5 || r != snclSuccess) return failures;
    }
  }
  return failures;
}

// A comm's loop, checking that the cells path ran exactly the calls it should.
int checkedLoop(snclComm_t comm, int rank, int nranks, uint64_t seed, int calls, int delayUs, bool cellsOn) {
  uint64_t eligible = 0;
  const uint64_t before = comm->cells.calls;
  int failures = callLoop(comm, rank, nranks, seed, calls, delayUs, &eligible, !cellsOn);
  const uint64_t ran = comm->cells.calls - before;
  if (ran != (cellsOn ? eligible : 0)) {
    fprintf(stderr, "rank %d/%d: %llu calls on the cells, %llu expected\n", rank, nranks, (unsigned long long)ran,
            (unsigned long long)(cellsOn ? eligible : 0));
    ++failures;
  }
  return failures;
}

int processBody(int rank, int nranks, const snclUniqueId& id, int calls, int delayUs, bool cellsOn) {
  if (!cellsOn) setenv("SNCL_SHM_CELL_BYTES", "0", 1);
  snclComm_t comm = nullptr;
  if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
    return 2;
  }
  if ((comm->cells.transport != nullptr) != cellsOn) {
    fprintf(stderr, "rank %d: cells path %s, expected %s\n", rank, comm->cells.transport ? "on" : "off",
            cellsOn ? "on" : "off");
    return 3;
  }
  int failures = checkedLoop(comm, rank, nranks, testSeed() + uint64_t(nranks), calls, delayUs, cellsOn);
  if (snclCommDestroy(comm) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

}  // namespace

TEST_CASE("cells: random small collectives across processes match the rank-order reference", "[cells][process]") {
  testSeed();  // drawn (and printed) before the fork: every rank uses it
  for (int nranks : {2, 3, 4, 8}) {
    const int calls = nranks <= 4 ? 1500 : 500;
    INFO("nranks " << nranks);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return processBody(rank, n, id, calls, 200, true);
    });
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("cells: back-to-back calls without delays, 3 ranks", "[cells][process]") {
  testSeed();
  auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
    return processBody(rank, n, id, 4000, 0, true);
  });
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("cells: SNCL_SHM_CELL_BYTES=0 turns the path off", "[cells][process]") {
  testSeed();
  auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
    return processBody(rank, n, id, 300, 100, false);
  });
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("cells: threads of snclCommInitAll, and a split comm", "[cells][threads]") {
  constexpr int n = 4;
  testSeed();
  std::vector<snclComm_t> comms(n);
  REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
  std::vector<int> failures(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      failures[r] = checkedLoop(comms[r], r, n, testSeed() ^ 0x7777, 800, 100, true);
      // A reset, as after an agreed fault (collective): fresh segments bring fresh cells,
      // numbered from 1 again, and the calls after it still agree.
      Transport* t = comms[r]->cells.transport;
      const LocalCells* before = t ? t->localCells() : nullptr;
      if (!t || t->reset(1, Deadline::afterMs(20000)) != snclSuccess || !t->localCells() ||
          t->localCells() == before) {
        fprintf(stderr, "rank %d: reset did not bring fresh cells: %s\n", r, snclGetLastError(comms[r]));
        ++failures[r];
        return;
      }
      failures[r] += checkedLoop(comms[r], r, n, testSeed() ^ 0x8888, 400, 100, true);
      // Even and odd ranks: two comms of two ranks each, on the cells as well.
      snclComm_t sub = nullptr;
      if (snclCommSplit(comms[r], r % 2, r, &sub, nullptr) != snclSuccess || !sub) {
        fprintf(stderr, "rank %d: split failed: %s\n", r, snclGetLastError(comms[r]));
        ++failures[r];
        return;
      }
      if (!sub->cells.transport) {
        fprintf(stderr, "rank %d: the split comm has no cells path\n", r);
        ++failures[r];
      }
      failures[r] += checkedLoop(sub, sub->rank, sub->nranks, testSeed() ^ 0x5151 ^ uint64_t(r % 2), 600, 100, true);
      if (snclCommDestroy(sub) != snclSuccess) ++failures[r];
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    CHECK(failures[r] == 0);
    CHECK(snclCommDestroy(comms[r]) == snclSuccess);
  }
}

TEST_CASE("cells: a peer killed mid-loop fails the others with RemoteError naming it", "[cells][process][fault]") {
  constexpr int kVictim = 2;
  constexpr int kTimeoutMs = 15000;
  testSeed();
  auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = kTimeoutMs;
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
    uint64_t eligible = 0;
    auto start = std::chrono::steady_clock::now();  // of the call that fails
    // Every rank but the victim runs until a call fails.
    const int failures =
        callLoop(comm, rank, n, testSeed() ^ 0xdead, 100000, 50, &eligible, false, kVictim, 700, &start);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    const std::string error = snclGetLastError(comm);
    snclResult_t async = snclSuccess;
    snclCommGetAsyncError(comm, &async);
    fprintf(stderr, "rank %d: after %lld ms: %s (async %d)\n", rank, (long long)ms, error.c_str(), int(async));
    snclCommAbort(comm);
    if (failures == 0) return 4;  // the loop ended without noticing the dead peer
    if (ms > kTimeoutMs) return 5;
    if (async != snclRemoteError) return 6;
    if (error.find("rank 2") == std::string::npos) return 7;
    return 0;
  });
  REQUIRE(exits.size() == 4);
  CHECK(exits[kVictim].signal == SIGKILL);
  for (int r = 0; r < 4; ++r)
    if (r != kVictim) CHECK(exits[r].code == 0);
}
