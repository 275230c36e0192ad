// Collectives on shared buffers (snclMemAlloc, lib/transport/shared_mem.*,
// lib/exec/shared_colls.*) on real ranks: the allocation API's bad inputs; random calls
// (tests/util/shared_calls.h) bit for bit against a rank-order reference, checking that the
// shared path really ran (comm->cells.sharedCalls); one rank's heap buffer staging the call
// (or declining it) on every rank; threads; groups and streams; allocations freed and made
// again every call (peers remap) or more than a process keeps mapped; calls that differ
// across ranks; a peer killed mid-loop (snclMemAlloc and heap buffers);
// SNCL_SHM_DIRECT(_MIN_BYTES); a split comm.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
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
#include "lib/transport/shared_mem.h"
#include "sncl/sncl.h"
#include "tests/util/launcher.h"
#include "tests/util/shared_calls.h"

using namespace sncl;
using namespace sncl::test::shared;


TEST_CASE("shared: snclMemAlloc and snclMemFree check their arguments", "[shared][api]") {
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(snclMemAlloc(nullptr, 4096) == snclInvalidArgument);
  CHECK(std::string(snclGetLastError(nullptr)).find("NULL") != std::string::npos);
  CHECK(snclMemAlloc(&p, 0) == snclInvalidArgument);
  CHECK(p == nullptr);
  CHECK(std::string(snclGetLastError(nullptr)).find("size") != std::string::npos);
  CHECK(snclMemAlloc(&p, SIZE_MAX) == snclInvalidArgument);
  CHECK(snclMemFree(nullptr) == snclSuccess);

  void* heap = malloc(4096);
  CHECK(snclMemFree(heap) == snclInvalidArgument);
  CHECK(std::string(snclGetLastError(nullptr)).find("snclMemFree") != std::string::npos);
  free(heap);

  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  std::mt19937_64 g(testSeed());
  const size_t sizes[] = {1, 3, 4095, 4097, 12345, (1u << 20) + 1, 1 + g() % (3u << 20)};
  for (size_t size : sizes) {
    INFO("size " << size);
    void* q = nullptr;
    REQUIRE(snclMemAlloc(&q, size) == snclSuccess);
    REQUIRE(q != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(q) % page == 0);
    // Writable to the last byte, and what was written stays.
    auto* bytes = static_cast<unsigned char*>(q);
    for (size_t b = 0; b < size; ++b) bytes[b] = static_cast<unsigned char>(b * 31 + 7);
    size_t wrong = 0;
    for (size_t b = 0; b < size; ++b) wrong += bytes[b] != static_cast<unsigned char>(b * 31 + 7);
    CHECK(wrong == 0);
    if (size > 1) {
      CHECK(snclMemFree(bytes + 1) == snclInvalidArgument);  // into the middle
      CHECK(snclMemFree(bytes + size / 2 + 1) == snclInvalidArgument);
    }
    CHECK(snclMemFree(q) == snclSuccess);
    CHECK(snclMemFree(q) == snclInvalidArgument);  // twice
    CHECK(std::string(snclGetLastError(nullptr)).size() > 10);
  }
}

TEST_CASE("shared: snclMemAlloc and snclMemFree from several threads at once", "[shared][api][threads]") {
  constexpr int kThreads = 4;
  const uint64_t seed = testSeed();
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 g(seed ^ uint64_t(t + 1));
      std::vector<char*> live;
      for (int i = 0; i < 300; ++i) {
        if (live.size() < 8 && g() % 2 == 0) {
          const size_t size = 1 + g() % 100000;
          void* p = nullptr;
          if (snclMemAlloc(&p, size) != snclSuccess || !p) {
            ++failures[t];
            continue;
          }
          memset(p, t, size);
          live.push_back(static_cast<char*>(p));
        } else if (!live.empty()) {
          const size_t k = g() % live.size();
          failures[t] += live[k][0] != char(t);  // no other thread's allocation overlaps it
          failures[t] += snclMemFree(live[k]) != snclSuccess;
          live.erase(live.begin() + ptrdiff_t(k));
        }
      }
      for (char* p : live) failures[t] += snclMemFree(p) != snclSuccess;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
}

TEST_CASE("shared: random collectives on snclMemAlloc buffers across processes", "[shared][process]") {
  testSeed();  // drawn (and printed) before the fork: every rank uses it
  for (int nranks : {2, 3, 4, 8}) {
    INFO("nranks " << nranks);
    LoopOptions opt;
    opt.calls = nranks <= 4 ? 80 : 40;
    opt.draw.small = true;
    if (nranks == 8) opt.draw.maxRankBytes = opt.draw.maxTotalBytes = 2 << 20;
    const uint64_t seed = testSeed() + uint64_t(nranks);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: one rank's heap buffers: every rank stages the call (or declines it), results still right",
          "[shared][process]") {
  testSeed();
  // Staged (the default): the staging areas' results are rank order too. Without staging
  // areas (SNCL_SHM_STAGE_BYTES=0) every rank declines, and the planner's schedule runs.
  for (bool staged : {true, false}) {
    const int nranks = staged ? 4 : 3;
    INFO("nranks " << nranks << (staged ? ", staged" : ", declined"));
    LoopOptions opt;
    opt.calls = 80;
    opt.staged = staged;
    opt.draw.orderFree = !staged;  // declined calls run the planner's schedule, in its own order
    opt.draw.maxRankBytes = 256 << 10;
    opt.draw.maxTotalBytes = 512 << 10;
    opt.draw.small = true;
    opt.heapRank = int(testSeed() % uint64_t(nranks));
    const uint64_t seed = testSeed() ^ 0x4ea9;
    printf("mixed buffers: %d ranks, rank %d on the heap, %s\n", nranks, opt.heapRank, staged ? "staged" : "declined");
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      if (!staged) setenv("SNCL_SHM_STAGE_BYTES", "0", 1);
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: threads of snclCommInitAll share heap buffers", "[shared][threads]") {
  constexpr int n = 4;
  testSeed();
  std::vector<snclComm_t> comms(n);
  REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
  for (int r = 0; r < n; ++r) CHECK(pathState(comms[r], true) == "");
  // The heap (threads of one process read each other's memory anyway), then snclMemAlloc.
  for (bool sharedMem : {false, true}) {
    INFO((sharedMem ? "snclMemAlloc buffers" : "heap buffers"));
    LoopOptions opt;
    opt.calls = 40;
    opt.sharedMem = sharedMem;
    opt.threads = true;
    opt.draw.small = true;
    opt.draw.maxRankBytes = 1 << 20;
    opt.draw.maxTotalBytes = 2 << 20;
    std::vector<int> failures(n, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        snclResult_t last = snclSuccess;
        failures[r] = callLoop(comms[r], r, n, testSeed() ^ (sharedMem ? 0x7418 : 0x7417), opt, &last);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) CHECK(failures[r] == 0);
  }
  for (int r = 0; r < n; ++r) CHECK(snclCommDestroy(comms[r]) == snclSuccess);
}

TEST_CASE("shared: calls in groups and on a stream", "[shared][process]") {
  testSeed();
  for (bool onStream : {false, true}) {
    INFO((onStream ? "on a stream" : "groups on the NULL stream"));
    LoopOptions opt;
    opt.calls = 36;
    opt.perGroup = 3;
    opt.onStream = onStream;
    opt.draw.small = true;
    opt.draw.maxRankBytes = 512 << 10;
    opt.draw.maxTotalBytes = 1 << 20;
    const uint64_t seed = testSeed() ^ (onStream ? 0x57ea : 0x6409);
    auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: buffers freed and allocated again before every call", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 80;
  opt.churn = true;
  opt.draw.maxRankBytes = 128 << 10;
  opt.draw.maxTotalBytes = 256 << 10;
  const uint64_t seed = testSeed() ^ 0xc4u;
  auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
    return processRank(rank, n, id, seed, opt, true);
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: many live allocations per peer", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 200;
  opt.pool = 20;  // 40 allocations per rank: 120 of the 3 peers mapped at once
  opt.draw.maxRankBytes = 32 << 10;
  opt.draw.maxTotalBytes = 64 << 10;
  const uint64_t seed = testSeed() ^ 0x9001;
  auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
    return processRank(rank, n, id, seed, opt, true);
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: a count that differs on one rank fails every rank, no hang", "[shared][process]") {
  constexpr int kTimeoutMs = 4000;
  testSeed();
  const int odd = int(testSeed() % 4);
  // float32: both counts above the cells; one in the cells against one above them; a
  // Reduce-Scatter whose smaller count runs the planner's schedule (no cells for it), which
  // can only end at the deadline. And a Reduce whose root differs on one rank.
  struct Variant {
    Coll coll;
    size_t count;
    bool rootDiffers;
  };
  for (Variant v : {Variant{Coll::AllReduce, 3001, false}, Variant{Coll::AllReduce, kCellBytes / 4, false},
                    Variant{Coll::ReduceScatter, kCellBytes / 4, false}, Variant{Coll::Reduce, 3001, true}}) {
    INFO(collName(v.coll) << " count " << v.count << ", rank " << odd << " passes "
                          << (v.rootDiffers ? "another root" : "count + 1"));
    printf("differing calls: %s, rank %d passes %s\n", collName(v.coll), odd,
           v.rootDiffers ? "root 1, the others 0" : (std::to_string(v.count + 1) + ", the others " + std::to_string(v.count)).c_str());
    auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = kTimeoutMs;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
      if (!comm->cells.shared) return 3;
      const size_t mine = v.count + (rank == odd && !v.rootDiffers ? 1 : 0);
      const int root = rank == odd && v.rootDiffers ? 1 : 0;
      const size_t bytes = 4 * (v.count + 1) * size_t(n);
      void* in = nullptr;
      void* out = nullptr;
      if (snclMemAlloc(&in, bytes) != snclSuccess || snclMemAlloc(&out, bytes) != snclSuccess) return 4;
      const auto start = std::chrono::steady_clock::now();
      snclResult_t r = snclInternalError;
      switch (v.coll) {
        case Coll::AllReduce: r = snclAllReduce(in, out, mine, snclFloat32, snclSum, comm, nullptr); break;
        case Coll::ReduceScatter: r = snclReduceScatter(in, out, mine, snclFloat32, snclSum, comm, nullptr); break;
        default: r = snclReduce(in, out, mine, snclFloat32, snclSum, root, comm, nullptr); break;
      }
      const auto ms = msSince(start);
      fprintf(stderr, "rank %d: result %d after %lld ms: %s\n", rank, int(r), (long long)ms, snclGetLastError(comm));
      snclCommAbort(comm);
      snclMemFree(in);
      snclMemFree(out);
      if (r == snclSuccess) return 5;
      if (ms > kTimeoutMs + 3000) return 6;
      return 0;
    }, 60000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: a peer killed mid-loop fails the others in bounded time", "[shared][process][fault]") {
  constexpr int kVictim = 2;
  constexpr int kTimeoutMs = 10000;
  testSeed();
  // Killed before call 40; or by a timer at a random moment (mid-call, mid-check or while
  // its peers map its new allocations: the buffers are allocated again every call). On
  // snclMemAlloc buffers, then on the heap (the staging areas).
  for (int variant = 0; variant < 4; ++variant) {
    const bool timer = variant % 2, heap = variant >= 2;
    INFO((timer ? "killed by a timer, buffers allocated every call" : "killed before call 40")
         << (heap ? ", heap buffers" : ", snclMemAlloc buffers"));
    const int afterMs = 50 + int(testSeed() % 300);
    if (timer) printf("peer killed: rank %d after %d ms\n", kVictim, afterMs);
    auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = kTimeoutMs;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
      LoopOptions opt;
      opt.calls = 100000;  // until a call fails
      opt.draw.colls = {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather};
      opt.draw.maxRankBytes = 64 << 10;
      opt.draw.maxTotalBytes = 128 << 10;
      opt.churn = timer;
      opt.sharedMem = !heap;
      if (!timer) opt.killRank = kVictim, opt.killAt = 40;
      if (timer && rank == kVictim)
        std::thread([afterMs] {
          std::this_thread::sleep_for(std::chrono::milliseconds(afterMs));
          raise(SIGKILL);
        }).detach();
      auto start = std::chrono::steady_clock::now();
      opt.callStart = &start;
      snclResult_t last = snclSuccess;
      const int failures = callLoop(comm, rank, n, testSeed() ^ 0xdead, opt, &last);
      const auto ms = msSince(start);
      fprintf(stderr, "rank %d: result %d after %lld ms: %s\n", rank, int(last), (long long)ms, snclGetLastError(comm));
      snclCommAbort(comm);
      if (failures == 0 || last == snclSuccess) return 4;  // the loop ended without noticing the dead peer
      if (ms > kTimeoutMs + 3000) return 5;
      return 0;
    }, 120000);
    REQUIRE(exits.size() == 4);
    CHECK(exits[kVictim].signal == SIGKILL);
    for (int r = 0; r < 4; ++r)
      if (r != kVictim) CHECK(exits[r].code == 0);
  }
}

TEST_CASE("shared: SNCL_SHM_DIRECT=0 turns the path off", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 60;
  opt.expectShared = false;  // not declined either: the path is not asked
  opt.draw.orderFree = true;
  opt.draw.small = true;
  opt.draw.maxRankBytes = 256 << 10;
  opt.draw.maxTotalBytes = 512 << 10;
  const uint64_t seed = testSeed() ^ 0xd1;
  auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
    setenv("SNCL_SHM_DIRECT", "0", 1);
    return processRank(rank, n, id, seed, opt, false);  // and no call ran shared or declined
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: SNCL_SHM_DIRECT_MIN_BYTES raises the threshold", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 80;
  opt.sharedMin = 20000;  // calls of 4097..19999 bytes per rank run the planner's schedule
  opt.draw.orderFree = true;
  opt.draw.small = true;
  opt.draw.maxRankBytes = 64 << 10;
  opt.draw.maxTotalBytes = 128 << 10;
  const uint64_t seed = testSeed() ^ 0x3171;
  auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
    setenv("SNCL_SHM_DIRECT_MIN_BYTES", "20000", 1);
    return processRank(rank, n, id, seed, opt, true);
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: even and odd ranks of a split comm", "[shared][process]") {
  testSeed();
  // snclMemAlloc buffers (in place), then heap buffers (each comm its own staging areas).
  for (bool heap : {false, true}) {
    INFO((heap ? "heap buffers" : "snclMemAlloc buffers"));
    LoopOptions opt;
    opt.calls = heap ? 30 : 40;
    opt.sharedMem = !heap;
    opt.draw.small = true;
    opt.draw.maxTotalBytes = 1 << 20;
    auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
      snclComm_t comm = nullptr;
      if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
      snclComm_t sub = nullptr;
      if (snclCommSplit(comm, rank % 2, rank, &sub, nullptr) != snclSuccess || !sub) {
        fprintf(stderr, "rank %d: split failed: %s\n", rank, snclGetLastError(comm));
        return 3;
      }
      const std::string state = pathState(sub, true);
      if (!state.empty()) {
        fprintf(stderr, "rank %d: split comm: %s\n", rank, state.c_str());
        return 4;
      }
      snclResult_t last = snclSuccess;
      int failures = callLoop(sub, sub->rank, sub->nranks, testSeed() ^ (0x5b1 + uint64_t(rank % 2)), opt, &last);
      // And the parent afterwards, on the same kind of memory.
      failures += callLoop(comm, rank, n, testSeed() ^ 0x9a7e, opt, &last);
      if (snclCommDestroy(sub) != snclSuccess) ++failures;
      if (snclCommDestroy(comm) != snclSuccess) ++failures;
      return failures ? 1 : 0;
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}
