// Shared-memory transport tests: data delivered exactly and in order, segments' life, peers
// connected. Ranks run as real processes or as threads (tests/util/shm_ranks.h); failures
// are in test_shm_failures.cc.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/transport/transport.h"
#include "tests/util/shm_ranks.h"
#include "transports/shm/shm.h"

using namespace sncl;
using namespace sncl::shmtest;

TEST_CASE("shm: the registry knows shm", "[shm]") {
  auto names = transportNames();
  CHECK(std::find(names.begin(), names.end(), "shm") != names.end());
  auto t = createTransport("shm");
  REQUIRE(t);
  CHECK(std::string(t->name()) == "shm");
  CHECK_FALSE(createTransport("no-such-transport"));
}

TEST_CASE("shm: ping-pong delivers exact data at every size", "[shm]") {
  for (Mode mode : {Mode::Threads, Mode::Processes}) {
    const uint64_t commId = freshCommId();
    SECTION(std::string("multi-fragment through a 4 x 4 KiB FIFO, ") + modeName(mode)) {
      runRanks(mode, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
        auto shm = setupShm(rank, nranks, bs, commId, smallFifo());
        if (!shm.transport) return shm.error;
        return pingPong(rank, *shm.transport, {0, 1, 63, 64, 65, 4096, 4097, 16384, 3 * 16384 + 5, 1 << 20});
      });
    }
    SECTION(std::string("default FIFO, larger than it, ") + modeName(mode)) {
      runRanks(mode, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
        auto shm = setupShm(rank, nranks, bs, commId);
        if (!shm.transport) return shm.error;
        return pingPong(rank, *shm.transport, {0, 1, 63, 64, 65, 4097, (9 << 20) + 3});
      });
    }
    CHECK(segmentsOf(commId) == 0);
  }
}

TEST_CASE("shm: many messages queued per peer complete in posting order", "[shm]") {
  for (Mode mode : {Mode::Threads, Mode::Processes}) {
    const uint64_t commId = freshCommId();
    runRanks(mode, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
      auto shm = setupShm(rank, nranks, bs, commId, smallFifo());
      if (!shm.transport) return shm.error;
      // Far more than the FIFO holds, both directions at once.
      const int peer = 1 - rank;
      auto sizeOf = [](int i) { return static_cast<size_t>((i * 7919) % 20000) * (i % 5 != 0); };
      std::vector<Exchange> plan;
      for (int i = 0; i < 300; ++i)
        plan.push_back({peer, static_cast<uint64_t>(i), sizeOf(i), sizeOf(i), rank * 1000u + i, peer * 1000u + i});
      return exchangeAll(*shm.transport, plan);
    });
    CHECK(segmentsOf(commId) == 0);
  }
}

TEST_CASE("shm: all-to-all among 8 ranks", "[shm]") {
  for (Mode mode : {Mode::Threads, Mode::Processes}) {
    const uint64_t commId = freshCommId();
    runRanks(mode, 8, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
      auto shm = setupShm(rank, nranks, bs, commId);
      if (!shm.transport) return shm.error;
      auto sizeOf = [](int from, int to, int k) { return static_cast<size_t>(k * 300000 + from * 1000 + to * 7); };
      auto seedOf = [](int from, int to, int k) { return static_cast<uint64_t>(from * 100 + to * 10 + k); };
      std::vector<Exchange> plan;
      for (int k = 0; k < 3; ++k)
        for (int peer = 0; peer < nranks; ++peer)
          if (peer != rank)
            plan.push_back({peer, static_cast<uint64_t>(k), sizeOf(rank, peer, k), sizeOf(peer, rank, k),
                            seedOf(rank, peer, k), seedOf(peer, rank, k)});
      return exchangeAll(*shm.transport, plan);
    });
    CHECK(segmentsOf(commId) == 0);
  }
}

TEST_CASE("shm: segments leave /dev/shm as soon as every peer mapped them", "[shm]") {
  for (Mode mode : {Mode::Threads, Mode::Processes}) {
    const uint64_t commId = freshCommId();
    runRanks(mode, 3, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
      auto shm = setupShm(rank, nranks, bs, commId);
      if (!shm.transport) return shm.error;
      BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));  // every rank's setup has returned
      BODY_CHECK(segmentsOf(commId) == 0, "{} segments of the comm in /dev/shm after setup", segmentsOf(commId));
      auto error = rank == 2 ? "" : pingPong(rank, *shm.transport, {100});  // rank 2 is connected but idle
      BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));
      return error;
    });
    CHECK(segmentsOf(commId) == 0);
  }
}

TEST_CASE("shm: only the given peers are connected", "[shm]") {
  const uint64_t commId = freshCommId();
  SECTION("a subset") {
    runRanks(Mode::Threads, 3, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
      auto shm = setupShm(rank, nranks, bs, commId, {}, kTimeoutMs,
                          rank == 2 ? std::vector<int>{} : std::vector<int>{1 - rank});
      if (!shm.transport) return shm.error;
      if (rank == 2) {
        RequestId req;
        BODY_CHECK(shm.transport->isend(0, 1, nullptr, 0, &req) == snclInvalidArgument, "{}", lastError());
        return "";
      }
      return pingPong(rank, *shm.transport, {1000});
    });
  }
  SECTION("peer lists that disagree fail setup on every rank, without waiting for the deadline") {
    auto start = Clock::now();
    auto errors = runInThreads(3, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
      // rank 0 lists rank 2, which does not list rank 0
      std::vector<int> peers = rank == 0   ? std::vector<int>{1, 2}
                               : rank == 1 ? std::vector<int>{0}
                                           : std::vector<int>{};
      auto shm = setupShm(rank, nranks, bs, commId, {}, kTimeoutMs, peers);
      return shm.transport ? "" : shm.error;
    });
    CHECK_THAT(errors[0], Catch::Contains("did not connect rank 0"));
    CHECK_THAT(errors[1], Catch::Contains("rank 0 could not map"));
    CHECK_THAT(errors[2], Catch::Contains("rank 0 could not map"));
    CHECK(Clock::now() - start < std::chrono::seconds(5));
  }
  CHECK(segmentsOf(commId) == 0);
}

TEST_CASE("shm: options from the environment", "[shm]") {
  setenv("SNCL_SHM_FIFO_BYTES", "64K", 1);
  setenv("SNCL_SHM_SLOT_BYTES", "8192", 1);
  ShmOptions o = ShmOptions::fromEnv();
  unsetenv("SNCL_SHM_FIFO_BYTES");
  unsetenv("SNCL_SHM_SLOT_BYTES");
  CHECK(o.fifoBytes == 65536);
  CHECK(o.slotBytes == 8192);
}

// Point-to-point bandwidth between 2 processes (hidden: run with "[.bench]"). FIFO sizes
// from SNCL_SHM_FIFO_BYTES / SNCL_SHM_SLOT_BYTES when set. The machine is shared: each
// figure is the best of several trials.
TEST_CASE("shm: point-to-point bandwidth", "[.bench]") {
  const uint64_t commId = freshCommId();
  runRanks(Mode::Processes, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
    auto shm = setupShm(rank, nranks, bs, commId, ShmOptions::fromEnv());
    if (!shm.transport) return shm.error;
    Transport& t = *shm.transport;
    const int peer = 1 - rank;
    constexpr size_t kMaxBytes = 64 << 20;
    constexpr int kTrials = 5;
    std::vector<char> out(kMaxBytes, 1), in(kMaxBytes, 0);
    RecvSink copyOut{[](void* dst, size_t offset, const void* src, size_t bytes) {
                       std::memcpy(static_cast<char*>(dst) + offset, src, bytes);
                     },
                     in.data()};
    // Seconds for iters messages of bytes from rank 0 to rank 1 (and back at once when
    // bothWays), ended by an empty message from rank 1.
    auto measure = [&](size_t bytes, int iters, bool bothWays, double* seconds) -> std::string {
      BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));
      const auto start = Clock::now();
      for (int i = 0; i < iters; ++i) {
        std::vector<RequestId> reqs;
        RequestId req;
        if (rank == 0 || bothWays) {
          BODY_OK(t.isend(peer, i, out.data(), bytes, &req));
          reqs.push_back(req);
        }
        if (rank == 1 || bothWays) {
          BODY_OK(t.irecv(peer, i, bytes, copyOut, &req));
          reqs.push_back(req);
        }
        BODY_OK(completeAll(t, reqs));
      }
      RequestId ack;
      if (rank == 1)
        BODY_OK(t.isend(0, 99, nullptr, 0, &ack));
      else
        BODY_OK(t.irecv(1, 99, 0, RecvSink{}, &ack));
      BODY_OK(complete(t, ack));
      *seconds = std::chrono::duration<double>(Clock::now() - start).count();
      return "";
    };
    if (rank == 0) {
      double best = 1e9;
      for (int trial = 0; trial < kTrials; ++trial) {
        const auto start = Clock::now();
        std::memcpy(in.data(), out.data(), kMaxBytes);
        best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
      }
      printf("memcpy of 64 MiB, one thread: %.2f GB/s\n", kMaxBytes / best / 1e9);
      printf("%10s %14s %14s\n", "bytes", "one-way GB/s", "both ways GB/s (each direction)");
    }
    // Half a round trip of 8 bytes: rank 0 sends, rank 1 sends back.
    {
      constexpr int kRoundTrips = 20000;
      double best = 1e9;
      for (int trial = 0; trial < kTrials; ++trial) {
        BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));
        const auto start = Clock::now();
        for (int i = 0; i < kRoundTrips; ++i) {
          RequestId req;
          for (int leg = 0; leg < 2; ++leg) {
            if (rank == leg) BODY_OK(t.isend(peer, i, out.data(), 8, &req));
            else BODY_OK(t.irecv(peer, i, 8, copyOut, &req));
            BODY_OK(complete(t, req));
          }
        }
        best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
      }
      if (rank == 0) printf("8 bytes, half round trip: %.2f us\n", best / kRoundTrips / 2 * 1e6);
    }
    for (size_t bytes : {size_t(1) << 20, size_t(4) << 20, size_t(16) << 20, size_t(64) << 20}) {
      const int iters = static_cast<int>(std::max<size_t>(4, (256u << 20) / bytes));
      double best[2] = {1e9, 1e9};
      for (int trial = 0; trial < kTrials; ++trial) {
        for (int bothWays = 0; bothWays < 2; ++bothWays) {
          double seconds = 0;
          auto error = measure(bytes, iters, bothWays, &seconds);
          if (!error.empty()) return error;
          best[bothWays] = std::min(best[bothWays], seconds);
        }
      }
      if (rank == 0)
        printf("%10zu %14.2f %14.2f\n", bytes, iters * double(bytes) / best[0] / 1e9,
               iters * double(bytes) / best[1] / 1e9);
    }
    fflush(stdout);
    return "";
  });
}
