// Groups and point-to-point: any order of matching sends and receives in a group
// completes; self messages; nesting; errors inside a group; groups on streams; one thread
// driving several comms; sends nobody receives fail instead of hanging.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

std::string lastError() { return snclGetLastError(nullptr); }

struct ThreadComms {
  std::vector<snclComm_t> comms;
  explicit ThreadComms(int n) : comms(n) { REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess); }
  ~ThreadComms() {
    for (auto c : comms)
      if (c) snclCommDestroy(c);
  }
};

// Message k from rank `from` to rank `to`: its size and pattern (distinct per k and pair).
size_t messageCount(int from, int to, int k) { return 1 + static_cast<size_t>((from * 7 + to * 3 + k * 11) % 29) * 37; }
int patternOf(int from, int to, int k) { return (from * 64 + to) * 8 + k; }

// Every rank sends `messages` messages to every rank (itself included) and receives as
// many from each, posted in an order that differs per rank, all in one group.
int allPairs(snclComm_t comm, int rank, int nranks, int messages, bool receivesFirst) {
  std::vector<std::vector<int32_t>> out, in;
  for (int peer = 0; peer < nranks; ++peer) {
    for (int k = 0; k < messages; ++k) {
      out.emplace_back(messageCount(rank, peer, k));
      test::fillPattern(4, patternOf(rank, peer, k), out.back().data(), out.back().size());
      in.emplace_back(messageCount(peer, rank, k), -1);
    }
  }
  auto post = [&](bool sends) {
    for (int i = 0; i < nranks; ++i) {
      const int peer = (rank + (sends ? i : nranks - i)) % nranks;  // sends rotate one way, receives the other
      for (int k = 0; k < messages; ++k) {
        const size_t slot = static_cast<size_t>(peer * messages + k);
        if (sends) snclSend(out[slot].data(), out[slot].size(), snclInt32, peer, comm, nullptr);
        else snclRecv(in[slot].data(), in[slot].size(), snclInt32, peer, comm, nullptr);
      }
    }
  };
  snclGroupStart();
  post(!receivesFirst);
  post(receivesFirst);
  snclResult_t r = snclGroupEnd();
  if (r != snclSuccess) {
    fprintf(stderr, "rank %d: group failed: %s\n", rank, snclGetLastError(comm));
    return 1;
  }
  int wrong = 0;
  for (int peer = 0; peer < nranks; ++peer)
    for (int k = 0; k < messages; ++k) {
      const auto& v = in[static_cast<size_t>(peer * messages + k)];
      wrong += test::countWrongPattern(4, patternOf(peer, rank, k), v.data(), v.size()) != 0;
    }
  return wrong;
}

}  // namespace

TEST_CASE("any order of matching sends and receives in a group completes", "[groups][p2p]") {
  for (int nranks : {2, 3, 5}) {
    INFO("nranks " << nranks);
    auto exits = test::runRanks(nranks, [](int rank, int n, const snclUniqueId& id) {
      snclComm_t comm = nullptr;
      if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
      int failures = allPairs(comm, rank, n, 3, rank % 2 == 0) + allPairs(comm, rank, n, 1, rank % 2 == 1);
      // Both ranks of every pair send 8 MiB first: more than any transport buffers.
      const size_t big = 2u << 20;
      std::vector<float> out(big, static_cast<float>(rank)), in(big * n, -1.0f);
      snclGroupStart();
      for (int peer = 0; peer < n; ++peer) snclSend(out.data(), big, snclFloat32, peer, comm, nullptr);
      for (int peer = 0; peer < n; ++peer) snclRecv(in.data() + peer * big, big, snclFloat32, peer, comm, nullptr);
      if (snclGroupEnd() != snclSuccess) ++failures;
      for (int peer = 0; peer < n; ++peer) failures += in[peer * big] != peer || in[peer * big + big - 1] != peer;
      if (snclCommDestroy(comm) != snclSuccess) ++failures;
      return failures ? 1 : 0;
    });
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("sends and receives with oneself pair up in a group", "[groups][p2p]") {
  ThreadComms tc(1);
  snclComm_t comm = tc.comms[0];
  int a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, x[4] = {}, y[4] = {};
  REQUIRE(snclGroupStart() == snclSuccess);
  CHECK(snclRecv(x, 4, snclInt32, 0, comm, nullptr) == snclSuccess);
  CHECK(snclSend(a, 4, snclInt32, 0, comm, nullptr) == snclSuccess);
  CHECK(snclSend(b, 4, snclInt32, 0, comm, nullptr) == snclSuccess);
  CHECK(snclRecv(y, 4, snclInt32, 0, comm, nullptr) == snclSuccess);
  REQUIRE(snclGroupEnd() == snclSuccess);
  CHECK(memcmp(x, a, sizeof(a)) == 0);
  CHECK(memcmp(y, b, sizeof(b)) == 0);

  // Without its partner: refused before anything is posted, the comm stays usable.
  CHECK(snclSend(a, 4, snclInt32, 0, comm, nullptr) == snclInvalidUsage);
  CHECK_THAT(lastError(), Catch::Contains("no receive from itself"));
  snclGroupStart();
  snclSend(a, 4, snclInt32, 0, comm, nullptr);
  snclRecv(x, 3, snclInt32, 0, comm, nullptr);
  CHECK(snclGroupEnd() == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("another size"));
  CHECK(snclAllReduce(a, x, 4, snclInt32, snclSum, comm, nullptr) == snclSuccess);
}

TEST_CASE("groups nest; the outermost end issues them", "[groups]") {
  ThreadComms tc(1);
  snclComm_t comm = tc.comms[0];
  float a[3] = {1, 2, 3}, x[3] = {};
  REQUIRE(snclGroupStart() == snclSuccess);
  REQUIRE(snclGroupStart() == snclSuccess);
  CHECK(snclSend(a, 3, snclFloat32, 0, comm, nullptr) == snclSuccess);
  CHECK(snclRecv(x, 3, snclFloat32, 0, comm, nullptr) == snclSuccess);
  REQUIRE(snclGroupEnd() == snclSuccess);
  CHECK(x[2] == 0);  // still queued
  REQUIRE(snclGroupEnd() == snclSuccess);
  CHECK(x[2] == 3);

  CHECK(snclGroupEnd() == snclInvalidUsage);
  CHECK_THAT(lastError(), Catch::Contains("no group is open"));
}

TEST_CASE("a failed call inside a group fails the group and nothing runs", "[groups][errors]") {
  ThreadComms tc(2);
  float a[3] = {1, 2, 3}, x[3] = {};
  REQUIRE(snclGroupStart() == snclSuccess);
  CHECK(snclSend(a, 3, snclFloat32, 0, tc.comms[0], nullptr) == snclSuccess);
  CHECK(snclRecv(x, 3, snclFloat32, 0, tc.comms[0], nullptr) == snclSuccess);
  CHECK(snclRecv(x, 3, snclFloat32, 7, tc.comms[0], nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("peer 7 out of range [0, 2)"));
  CHECK(snclGroupEnd() == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("nothing in the group ran"));
  CHECK(x[0] == 0);

  // Calls on one comm in a group must share a stream.
  snclStream_t s1, s2;
  REQUIRE(snclStreamCreate(&s1) == snclSuccess);
  REQUIRE(snclStreamCreate(&s2) == snclSuccess);
  snclGroupStart();
  snclSend(a, 3, snclFloat32, 0, tc.comms[0], s1);
  snclRecv(x, 3, snclFloat32, 0, tc.comms[0], s2);
  CHECK(snclGroupEnd() == snclInvalidUsage);
  CHECK_THAT(lastError(), Catch::Contains("different streams"));
  snclStreamDestroy(s1);
  snclStreamDestroy(s2);
}

TEST_CASE("one thread drives every rank's comm through groups, with and without streams", "[groups][threads]") {
  const int nranks = 4;
  ThreadComms tc(nranks);
  const size_t count = 3001;
  auto ring = [&](const std::vector<snclStream_t>& streams) {
    std::vector<std::vector<double>> out(nranks, std::vector<double>(count)), in(nranks, std::vector<double>(count));
    std::vector<std::vector<double>> sums(nranks, std::vector<double>(count));
    REQUIRE(snclGroupStart() == snclSuccess);
    for (int r = 0; r < nranks; ++r) {
      test::fillPattern(8, r, out[r].data(), count);
      test::fillInput(snclFloat64, snclSum, r, nranks, sums[r].data(), count);
      CHECK(snclSend(out[r].data(), count, snclFloat64, (r + 1) % nranks, tc.comms[r], streams[r]) == snclSuccess);
      CHECK(snclRecv(in[r].data(), count, snclFloat64, (r + nranks - 1) % nranks, tc.comms[r], streams[r]) == snclSuccess);
      CHECK(snclAllReduce(sums[r].data(), sums[r].data(), count, snclFloat64, snclSum, tc.comms[r], streams[r]) ==
            snclSuccess);
    }
    REQUIRE(snclGroupEnd() == snclSuccess);
    for (snclStream_t s : streams) CHECK(snclStreamSynchronize(s) == snclSuccess);
    for (int r = 0; r < nranks; ++r) {
      CHECK(test::countWrongPattern(8, (r + nranks - 1) % nranks, in[r].data(), count) == 0);
      CHECK(test::countWrong(snclFloat64, snclSum, nranks, sums[r].data(), count) == 0);
    }
  };
  ring(std::vector<snclStream_t>(nranks, nullptr));
  std::vector<snclStream_t> own(nranks);
  for (auto& s : own) REQUIRE(snclStreamCreate(&s) == snclSuccess);
  ring(own);
  // All comms on one stream: queued as one item, still run concurrently.
  ring(std::vector<snclStream_t>(nranks, own[0]));
  for (auto s : own) CHECK(snclStreamDestroy(s) == snclSuccess);
}

TEST_CASE("sends nobody receives fail instead of hanging", "[groups][errors]") {
  auto start = std::chrono::steady_clock::now();
  auto exits = test::runRanks(2, [](int rank, int n, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 1000;
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 3;
    // More than the transport buffers: the send waits for a receive until the deadline.
    std::vector<char> big(64u << 20, 1);
    int failures = 0;
    if (rank == 0) {
      snclGroupStart();
      snclSend(big.data(), big.size(), snclUint8, 1, comm, nullptr);
      snclResult_t r = snclGroupEnd();
      failures += r != snclInvalidUsage;
      failures += std::string(snclGetLastError(comm)).find("matching snclRecv") == std::string::npos;
    } else {
      usleep(3000 * 1000);  // posts nothing until rank 0 gave up
    }
    snclCommAbort(comm);
    return failures;
  });
  CHECK(test::allSucceeded(exits));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));

  // A small one the transport takes: the receiver fails at the pair's next message (a tag
  // mismatch), and then so does the sender. The All-Reduce is larger than the shm cells
  // (SNCL_SHM_CELL_BYTES), which do not use the pair's messages: a call on them is not
  // that next message.
  exits = test::runRanks(2, [](int rank, int n, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 2000;
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 3;
    constexpr size_t kCount = 64 << 10;  // 256 KiB
    std::vector<float> v(kCount, 1.0f);
    int failures = 0;
    if (rank == 0) failures += snclSend(v.data(), 4, snclFloat32, 1, comm, nullptr) != snclSuccess;
    snclResult_t r = snclAllReduce(v.data(), v.data(), kCount, snclFloat32, snclSum, comm, nullptr);
    if (rank == 1) {
      failures += r != snclInvalidArgument;
      failures += std::string(snclGetLastError(comm)).find("tag") == std::string::npos;
    } else if (r == snclSuccess) {  // its peer's data was already on the way
      r = snclAllReduce(v.data(), v.data(), kCount, snclFloat32, snclSum, comm, nullptr);
      failures += r == snclSuccess;
    }
    snclCommAbort(comm);
    return failures;
  });
  CHECK(test::allSucceeded(exits));
}
