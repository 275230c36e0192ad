// The shm transport's single-copy path (transports/shm/shm_single_copy.cc) and the
// bytes-moved counters (snclCommGetCounters): random messages between 2-8 ranks as
// processes and as threads, with and without the path (SNCL_SHM_CMA=0), reductions through
// it (All-Reduce, Reduce-Scatter), a peer killed while its buffer is being read, and the
// exact bytes a known call moves. Bodies return "" or what went wrong (no Catch2 macros in
// rank threads or children).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/error.h"
#include "lib/net/bootstrap.h"
#include "lib/transport/transport.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"
#include "tests/util/shm_ranks.h"
#include "transports/shm/shm.h"

using namespace sncl;

namespace {

constexpr int64_t kTimeoutMs = 20000;
constexpr size_t kThreshold = 256u << 10;  // the default SNCL_SHM_CMA_MIN_BYTES

#define BODY_CHECK(expr, ...)                                                                     \
  do {                                                                                            \
    if (!(expr)) return fmt::format("line {}: {}: ", __LINE__, #expr) + fmt::format(__VA_ARGS__); \
  } while (0)
#define SNCL_OK(comm, expr) BODY_CHECK((expr) == snclSuccess, "{}", snclGetLastError(comm))

uint64_t testSeed() {
  static const uint64_t seed = [] {
    const char* s = getenv("SNCL_TEST_SEED");
    const uint64_t v = s ? strtoull(s, nullptr, 0) : std::random_device{}();
    printf("test_shm_single_copy: seed %llu (SNCL_TEST_SEED to repeat)\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return seed;
}

// Sets SNCL_SHM_CMA for comms made from now on (threads: before snclCommInitAll; processes:
// inherited by the fork). Off also turns off shared buffers (SNCL_SHM_DIRECT=0), which
// would otherwise send large messages between threads as single copies too.
struct SingleCopyEnv {
  explicit SingleCopyEnv(bool on) {
    setenv("SNCL_SHM_CMA", on ? "1" : "0", 1);
    if (!on) setenv("SNCL_SHM_DIRECT", "0", 1);
  }
  ~SingleCopyEnv() {
    unsetenv("SNCL_SHM_CMA");
    unsetenv("SNCL_SHM_DIRECT");
  }
};

using CommBody = std::function<std::string(snclComm_t comm, int rank, int nranks)>;

// Runs body on nranks ranks: processes (snclCommInitRank) or threads (snclCommInitAll).
void runComms(bool threads, int nranks, const CommBody& body) {
  INFO((threads ? "threads" : "processes") << ", " << nranks << " ranks");
  if (threads) {
    std::vector<snclComm_t> comms(nranks);
    REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
    std::vector<std::string> errors(nranks);
    std::vector<std::thread> ts;
    for (int r = 0; r < nranks; ++r) ts.emplace_back([&, r] { errors[r] = body(comms[r], r, nranks); });
    for (auto& t : ts) t.join();
    for (int r = 0; r < nranks; ++r) {
      INFO("rank " << r);
      CHECK(errors[r] == "");
    }
    for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
    return;
  }
  auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
    snclComm_t comm;
    if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) {
      fprintf(stderr, "rank %d: init: %s\n", rank, snclGetLastError(nullptr));
      return 1;
    }
    const std::string error = body(comm, rank, n);
    if (!error.empty()) fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    const bool destroyed = snclCommDestroy(comm) == snclSuccess;
    return error.empty() && destroyed ? 0 : 1;
  });
  CHECK(test::allSucceeded(exits));
}

// Whether 2 ranks have a core each here (the default single-copy limits assume it).
bool twoCpus() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= 2) return true;
  WARN("skipped: 2 ranks need 2 CPUs here to have a core each");
  return false;
}

snclCounters_t counters(snclComm_t comm) {
  snclCounters_t c{};
  c.size = sizeof(c);
  if (snclCommGetCounters(comm, &c) != snclSuccess) c.size = 0;
  return c;
}

// Message sizes that matter: empty, tiny, odd, prime, around the threshold, several MiB.
size_t randomSize(std::mt19937_64& gen) {
  static const size_t kSizes[] = {0,           1,          7,          4099,       65521,      kThreshold - 1,
                                  kThreshold,  kThreshold + 1, 262147,  1048573,    3u << 20,   (5u << 20) + 13};
  std::uniform_int_distribution<size_t> pick(0, std::size(kSizes) - 1);
  return kSizes[pick(gen)];
}

uint8_t patternByte(uint64_t message, size_t i) {
  return static_cast<uint8_t>(test::mix64(message * 0x10001 + i / 8) >> (8 * (i % 8)));
}

// Rounds of sncl groups: in each, every directed pair exchanges a message with some
// probability, of a random size; each rank posts its sends and receives in its own random
// order. Every rank derives the same plan from the seed.
std::string randomPointToPoint(snclComm_t comm, int rank, int nranks, uint64_t seed) {
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    std::mt19937_64 plan(seed + static_cast<uint64_t>(round) * 7919 + static_cast<uint64_t>(nranks));
    std::vector<size_t> bytes(static_cast<size_t>(nranks * nranks), SIZE_MAX);  // [src * n + dst]
    for (int s = 0; s < nranks; ++s)
      for (int d = 0; d < nranks; ++d) {
        const bool talk = s != d && plan() % 3 != 0;
        const size_t b = randomSize(plan);
        if (talk) bytes[static_cast<size_t>(s * nranks + d)] = b;
      }
    struct Post {
      bool send;
      int peer;
    };
    std::vector<Post> posts;
    for (int p = 0; p < nranks; ++p) {
      if (bytes[static_cast<size_t>(rank * nranks + p)] != SIZE_MAX) posts.push_back({true, p});
      if (bytes[static_cast<size_t>(p * nranks + rank)] != SIZE_MAX) posts.push_back({false, p});
    }
    std::mt19937_64 mine(seed ^ (static_cast<uint64_t>(rank + 1) << 40) ^ static_cast<uint64_t>(round));
    std::shuffle(posts.begin(), posts.end(), mine);
    std::vector<std::vector<char>> sendBufs(static_cast<size_t>(nranks)), recvBufs(static_cast<size_t>(nranks));
    auto messageId = [&](int s, int d) { return (static_cast<uint64_t>(round) << 32) | static_cast<uint64_t>(s * nranks + d); };
    for (const Post& p : posts) {
      const int s = p.send ? rank : p.peer, d = p.send ? p.peer : rank;
      const size_t b = bytes[static_cast<size_t>(s * nranks + d)];
      auto& buf = (p.send ? sendBufs : recvBufs)[static_cast<size_t>(p.peer)];
      buf.assign(b + 1, 0x5a);  // one guard byte past the message
      if (p.send)
        for (size_t i = 0; i < b; ++i) buf[i] = static_cast<char>(patternByte(messageId(s, d), i));
    }
    SNCL_OK(comm, snclGroupStart());
    for (const Post& p : posts) {
      auto& buf = (p.send ? sendBufs : recvBufs)[static_cast<size_t>(p.peer)];
      const size_t b = buf.size() - 1;
      if (p.send) SNCL_OK(comm, snclSend(buf.data(), b, snclUint8, p.peer, comm, nullptr));
      else SNCL_OK(comm, snclRecv(buf.data(), b, snclUint8, p.peer, comm, nullptr));
    }
    SNCL_OK(comm, snclGroupEnd());
    for (int p = 0; p < nranks; ++p) {
      const auto& buf = recvBufs[static_cast<size_t>(p)];
      if (buf.empty()) continue;
      const size_t b = buf.size() - 1;
      for (size_t i = 0; i < b; ++i)
        BODY_CHECK(static_cast<uint8_t>(buf[i]) == patternByte(messageId(p, rank), i),
                   "round {}: byte {} of {} from rank {} is wrong", round, i, b, p);
      BODY_CHECK(static_cast<uint8_t>(buf[b]) == 0x5a, "round {}: the message from rank {} overran its buffer", round,
                 p);
    }
  }
  return "";
}

// All-Reduce and Reduce-Scatter of random counts (RecvReduce through the path) against the
// exact expected values.
std::string randomReductions(snclComm_t comm, int rank, int nranks, uint64_t seed) {
  std::mt19937_64 gen(seed + 17 * static_cast<uint64_t>(nranks));  // the same on every rank
  for (int call = 0; call < 4; ++call) {
    for (snclDataType_t type : {snclFloat32, snclInt32, snclBfloat16}) {
      const size_t elem = type == snclBfloat16 ? 2 : 4;
      const size_t count = randomSize(gen) / elem + (gen() % 3);
      std::vector<char> in(count * elem + 1), out(count * elem + 1);
      test::fillInput(type, snclSum, rank, nranks, in.data(), count);
      SNCL_OK(comm, snclAllReduce(in.data(), out.data(), count, type, snclSum, comm, nullptr));
      const size_t wrong = test::countWrong(type, snclSum, nranks, out.data(), count);
      BODY_CHECK(wrong == 0, "all-reduce of {} x {}: {} elements wrong", count, static_cast<int>(type), wrong);

      const size_t block = count / static_cast<size_t>(nranks) + 1;
      std::vector<char> rsIn(block * elem * static_cast<size_t>(nranks)), rsOut(block * elem);
      test::fillInput(type, snclSum, rank, nranks, rsIn.data(), block * static_cast<size_t>(nranks));
      SNCL_OK(comm, snclReduceScatter(rsIn.data(), rsOut.data(), block, type, snclSum, comm, nullptr));
      const size_t rsWrong =
          test::countWrong(type, snclSum, nranks, rsOut.data(), block, block * static_cast<size_t>(rank));
      BODY_CHECK(rsWrong == 0, "reduce-scatter of {} per rank: {} elements wrong", block, rsWrong);
    }
  }
  return "";
}

}  // namespace

TEST_CASE("shm single copy: random point-to-point between 2-8 ranks, with and without the path", "[shm][cma]") {
  const uint64_t seed = testSeed();
  for (bool on : {true, false}) {
    INFO("SNCL_SHM_CMA=" << on);
    SingleCopyEnv env(on);
    for (int nranks : {2, 3, 8}) runComms(false, nranks, [&](snclComm_t c, int r, int n) { return randomPointToPoint(c, r, n, seed); });
    for (int nranks : {2, 5}) runComms(true, nranks, [&](snclComm_t c, int r, int n) { return randomPointToPoint(c, r, n, seed); });
  }
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("shm single copy: All-Reduce and Reduce-Scatter of random counts, with and without the path", "[shm][cma]") {
  const uint64_t seed = testSeed();
  for (bool on : {true, false}) {
    INFO("SNCL_SHM_CMA=" << on);
    SingleCopyEnv env(on);
    for (int nranks : {2, 4}) runComms(false, nranks, [&](snclComm_t c, int r, int n) { return randomReductions(c, r, n, seed); });
    runComms(true, 3, [&](snclComm_t c, int r, int n) { return randomReductions(c, r, n, seed); });
  }
}

TEST_CASE("shm single copy: counters of a known send: once through the path, twice through the FIFO", "[shm][cma]") {
  constexpr size_t kBytes = (1u << 20) + 12;  // above the threshold, not a page multiple
  for (bool threads : {false, true}) {
    for (bool on : {true, false}) {
      INFO("SNCL_SHM_CMA=" << on);
      SingleCopyEnv env(on);
      runComms(threads, 2, [&](snclComm_t comm, int rank, int) -> std::string {
        std::vector<char> buf(kBytes, static_cast<char>(rank + 1));
        // A first call so that whatever init moved is behind us.
        int8_t one = 1;
        SNCL_OK(comm, snclAllReduce(&one, &one, 1, snclInt8, snclSum, comm, nullptr));
        const snclCounters_t before = counters(comm);
        BODY_CHECK(before.size == sizeof(snclCounters_t), "{}", snclGetLastError(comm));
        if (rank == 0) SNCL_OK(comm, snclSend(buf.data(), kBytes, snclUint8, 1, comm, nullptr));
        else SNCL_OK(comm, snclRecv(buf.data(), kBytes, snclUint8, 0, comm, nullptr));
        const snclCounters_t after = counters(comm);
        BODY_CHECK(after.calls == before.calls + 1, "calls {} -> {}", before.calls, after.calls);
        const uint64_t copied = after.bytesCopied - before.bytesCopied;
        const uint64_t sent = after.bytesSent - before.bytesSent, received = after.bytesReceived - before.bytesReceived;
        BODY_CHECK(after.bytesReduced == before.bytesReduced, "a send reduced {} bytes",
                   after.bytesReduced - before.bytesReduced);
        if (rank == 0) {
          BODY_CHECK(sent == kBytes && received == 0, "sent {} received {}", sent, received);
          BODY_CHECK(copied == (on ? 0 : kBytes), "the sender copied {} bytes", copied);
        } else {
          BODY_CHECK(received == kBytes && sent == 0, "sent {} received {}", sent, received);
          BODY_CHECK(copied == kBytes, "the receiver copied {} bytes", copied);
          for (size_t i = 0; i < kBytes; ++i) BODY_CHECK(buf[i] == 1, "byte {} is {}", i, static_cast<int>(buf[i]));
        }
        return "";
      });
    }
  }
}

TEST_CASE("shm single copy: by default, with a core per rank, calls that exchange no reductions take the path",
          "[shm][cma]") {
  if (!twoCpus()) return;
  std::mt19937_64 gen(testSeed());
  // Random sizes within the default limits (32 KiB to 4 MiB), none a page multiple.
  const ShmOptions defaults;
  std::uniform_int_distribution<size_t> pick(defaults.singleCopyMovesMinBytes + 1, defaults.singleCopyMovesMaxBytes - 1);
  const size_t smallBytes = std::uniform_int_distribution<size_t>(1, defaults.singleCopyMovesMinBytes - 1)(gen);
  const size_t bcastBytes = pick(gen) | 1, p2pBytes = pick(gen) | 1, gatherBytes = pick(gen) | 1;
  const size_t reduceCount = (pick(gen) / 4) | 1;
  INFO("Broadcast of " << bcastBytes << " bytes, a send of " << p2pBytes << ", All-Gather of " << gatherBytes
                       << " per rank, Reduce of " << reduceCount << " int32, a send of " << smallBytes);
  unsetenv("SNCL_SHM_CMA");  // the default: the path for calls that exchange no reductions
  runComms(false, 2, [&](snclComm_t comm, int rank, int) -> std::string {
    int8_t one = 1;
    SNCL_OK(comm, snclAllReduce(&one, &one, 1, snclInt8, snclSum, comm, nullptr));
    const int root = static_cast<int>(bcastBytes % 2);
    std::vector<unsigned char> buf(bcastBytes, rank == root ? 0 : 0xee);
    if (rank == root)
      for (size_t i = 0; i < bcastBytes; ++i) buf[i] = static_cast<unsigned char>(i * 131 + 7);
    snclCounters_t before = counters(comm);
    SNCL_OK(comm, snclBroadcast(buf.data(), buf.data(), bcastBytes, snclUint8, root, comm, nullptr));
    snclCounters_t after = counters(comm);
    for (size_t i = 0; i < bcastBytes; ++i)
      BODY_CHECK(buf[i] == static_cast<unsigned char>(i * 131 + 7), "Broadcast: byte {} is {}", i, buf[i]);
    // The root's transport copies nothing: the receiver reads the root's buffer.
    if (rank == root)
      BODY_CHECK(after.bytesCopied == before.bytesCopied, "the Broadcast's root copied {} bytes",
                 after.bytesCopied - before.bytesCopied);
    std::vector<unsigned char> msg(p2pBytes, static_cast<unsigned char>(rank + 1));
    before = counters(comm);
    if (rank == 0) SNCL_OK(comm, snclSend(msg.data(), p2pBytes, snclUint8, 1, comm, nullptr));
    else SNCL_OK(comm, snclRecv(msg.data(), p2pBytes, snclUint8, 0, comm, nullptr));
    after = counters(comm);
    BODY_CHECK(after.bytesCopied - before.bytesCopied == (rank == 0 ? 0 : p2pBytes), "rank {} copied {} bytes", rank,
               after.bytesCopied - before.bytesCopied);
    if (rank == 1)
      for (size_t i = 0; i < p2pBytes; ++i) BODY_CHECK(msg[i] == 1, "Send/Recv: byte {} is {}", i, msg[i]);
    // Both ranks read each other's part at once: each copies its own part into place and
    // reads its peer's, twice its part in all (through the FIFOs: three times).
    std::vector<unsigned char> part(gatherBytes), all(2 * gatherBytes, 0xee);
    for (size_t i = 0; i < gatherBytes; ++i) part[i] = static_cast<unsigned char>(rank * 97 + i * 13);
    before = counters(comm);
    SNCL_OK(comm, snclAllGather(part.data(), all.data(), gatherBytes, snclUint8, comm, nullptr));
    after = counters(comm);
    BODY_CHECK(after.bytesCopied - before.bytesCopied == 2 * gatherBytes, "All-Gather: rank {} copied {} bytes", rank,
               after.bytesCopied - before.bytesCopied);
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < gatherBytes; ++i)
        BODY_CHECK(all[r * gatherBytes + i] == static_cast<unsigned char>(r * 97 + i * 13),
                   "All-Gather: byte {} of rank {}'s part is {}", i, r, all[r * gatherBytes + i]);
    // Reduce: its data flows toward the root, which reads the other rank's input itself.
    const int reduceRoot = static_cast<int>(reduceCount % 2);
    std::vector<int32_t> in(reduceCount), sum(reduceCount, -1);
    for (size_t i = 0; i < reduceCount; ++i) in[i] = static_cast<int32_t>(i * (rank + 3));
    before = counters(comm);
    SNCL_OK(comm, snclReduce(in.data(), sum.data(), reduceCount, snclInt32, snclSum, reduceRoot, comm, nullptr));
    after = counters(comm);
    if (rank != reduceRoot)
      BODY_CHECK(after.bytesCopied == before.bytesCopied, "Reduce: rank {} (not the root) copied {} bytes", rank,
                 after.bytesCopied - before.bytesCopied);
    else
      for (size_t i = 0; i < reduceCount; ++i)
        BODY_CHECK(sum[i] == static_cast<int32_t>(i * 7), "Reduce: element {} is {}", i, sum[i]);
    // Below the threshold a message goes through the FIFO: its sender copies it in.
    std::vector<unsigned char> small(smallBytes, static_cast<unsigned char>(rank + 5));
    before = counters(comm);
    if (rank == 1) SNCL_OK(comm, snclSend(small.data(), smallBytes, snclUint8, 0, comm, nullptr));
    else SNCL_OK(comm, snclRecv(small.data(), smallBytes, snclUint8, 1, comm, nullptr));
    after = counters(comm);
    if (rank == 1)
      BODY_CHECK(after.bytesCopied - before.bytesCopied == smallBytes, "a send of {} bytes: its sender copied {}",
                 smallBytes, after.bytesCopied - before.bytesCopied);
    else
      for (size_t i = 0; i < smallBytes; ++i) BODY_CHECK(small[i] == 6, "small Send/Recv: byte {} is {}", i, small[i]);
    return "";
  });
}

TEST_CASE("shm single copy: with a core per rank, an exchange past 4 MiB takes the path, a one-way send does not",
          "[shm][cma]") {
  if (!twoCpus()) return;
  std::mt19937_64 gen(testSeed());
  // Random sizes between the collectives' limit and the exchanges' (4 to 16 MiB), odd.
  const ShmOptions defaults;
  std::uniform_int_distribution<size_t> pick(defaults.singleCopyMovesMaxBytes + 1,
                                             defaults.singleCopyExchangeMaxBytes - 1);
  // Each direction its own size: rank r sends exchangeBytes[r].
  const size_t exchangeBytes[2] = {pick(gen) | 1, pick(gen) | 1}, oneWayBytes = pick(gen) | 1;
  INFO("an exchange of " << exchangeBytes[0] << " and " << exchangeBytes[1] << " bytes, a one-way send of "
                         << oneWayBytes);
  unsetenv("SNCL_SHM_CMA");
  runComms(false, 2, [&](snclComm_t comm, int rank, int) -> std::string {
    const int peer = 1 - rank;
    const size_t sends = exchangeBytes[rank], receives = exchangeBytes[peer];
    std::vector<unsigned char> out(sends), in(receives, 0xee);
    for (size_t i = 0; i < sends; ++i) out[i] = static_cast<unsigned char>(rank * 59 + i * 7);
    snclCounters_t before = counters(comm);
    // Receive first in one rank's group, send first in the other's: the order does not decide.
    SNCL_OK(comm, snclGroupStart());
    if (rank == 0) SNCL_OK(comm, snclRecv(in.data(), receives, snclUint8, peer, comm, nullptr));
    SNCL_OK(comm, snclSend(out.data(), sends, snclUint8, peer, comm, nullptr));
    if (rank == 1) SNCL_OK(comm, snclRecv(in.data(), receives, snclUint8, peer, comm, nullptr));
    SNCL_OK(comm, snclGroupEnd());
    snclCounters_t after = counters(comm);
    // Each rank copies what it receives, once; through the FIFOs it would also copy what it sends.
    BODY_CHECK(after.bytesCopied - before.bytesCopied == receives, "exchange: rank {} copied {} bytes", rank,
               after.bytesCopied - before.bytesCopied);
    for (size_t i = 0; i < receives; ++i)
      BODY_CHECK(in[i] == static_cast<unsigned char>(peer * 59 + i * 7), "exchange: byte {} is {}", i, in[i]);
    std::vector<unsigned char> msg(oneWayBytes, static_cast<unsigned char>(rank + 1));
    before = counters(comm);
    if (rank == 0) SNCL_OK(comm, snclSend(msg.data(), oneWayBytes, snclUint8, 1, comm, nullptr));
    else SNCL_OK(comm, snclRecv(msg.data(), oneWayBytes, snclUint8, 0, comm, nullptr));
    after = counters(comm);
    // Through the FIFO: the sender copies it in, the receiver out.
    BODY_CHECK(after.bytesCopied - before.bytesCopied == oneWayBytes, "one-way: rank {} copied {} bytes", rank,
               after.bytesCopied - before.bytesCopied);
    if (rank == 1)
      for (size_t i = 0; i < oneWayBytes; ++i) BODY_CHECK(msg[i] == 1, "one-way: byte {} is {}", i, msg[i]);
    return "";
  });
}

TEST_CASE("shm single copy: snclCommGetCounters checks its arguments", "[shm][cma]") {
  std::vector<snclComm_t> comms(1);
  REQUIRE(snclCommInitAll(comms.data(), 1, nullptr) == snclSuccess);
  CHECK(snclCommGetCounters(comms[0], nullptr) == snclInvalidArgument);
  snclCounters_t c{};
  c.size = 0;
  CHECK(snclCommGetCounters(comms[0], &c) == snclInvalidArgument);
  // An older, shorter struct: only its fields are written.
  struct {
    snclCounters_t head;
    uint64_t canary;
  } shorter{};
  shorter.head.size = offsetof(snclCounters_t, bytesCopied);
  shorter.head.bytesCopied = 77;
  CHECK(snclCommGetCounters(comms[0], &shorter.head) == snclSuccess);
  CHECK(shorter.head.bytesCopied == 77);
  CHECK(shorter.head.size == offsetof(snclCounters_t, bytesCopied));
  CHECK(snclCommDestroy(comms[0]) == snclSuccess);
}

// ---------------------------------------------------------------------------------------
// The transport itself, ranks as processes over a real bootstrap: a peer that dies while
// its buffer is read, a mismatch through the path, the transport's own counts.

namespace {

struct TransportRank {
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Transport> transport;
  std::string error;
};

TransportRank setupTransport(int rank, int nranks, const snclUniqueId& id, uint64_t commId, const ShmOptions& options) {
  TransportRank out;
  snclUniqueId same;
  if ((rank == 0 && bootstrapIdFromEnv(&same, /*isRoot=*/true) != snclSuccess) ||
      Bootstrap::connect(id, rank, nranks, Deadline::afterMs(kTimeoutMs), &out.bootstrap) != snclSuccess) {
    out.error = fmt::format("bootstrap: {}", lastError());
    return out;
  }
  std::vector<PeerInfo> infos(static_cast<size_t>(nranks));
  infos[static_cast<size_t>(rank)] = PeerInfo{rank, static_cast<int32_t>(getpid()), 1, 1, "localhost"};
  if (out.bootstrap->allGather(infos.data(), sizeof(PeerInfo), Deadline::afterMs(kTimeoutMs)) != snclSuccess) {
    out.error = fmt::format("all-gather: {}", lastError());
    return out;
  }
  std::vector<int> peers;
  for (int p = 0; p < nranks; ++p)
    if (p != rank) peers.push_back(p);
  TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.commId = commId;
  ctx.commName = "test";
  ctx.peers = &infos;
  ctx.bootstrap = out.bootstrap.get();
  ctx.timeoutMs = kTimeoutMs;
  out.transport = createShmTransport(options);
  if (out.transport->setup(ctx, peers) != snclSuccess) {
    out.error = fmt::format("setup: {}", lastError());
    out.transport.reset();
  }
  return out;
}

using shmtest::complete;
using shmtest::freeLoopbackPort;

using TransportBody = std::function<std::string(Transport& t, int rank)>;

std::vector<test::RankExit> runTransport(int nranks, const ShmOptions& options, const TransportBody& body) {
  // The bootstrap root runs in rank 0's process, on a free loopback port.
  setenv("SNCL_COMM_ID", fmt::format("127.0.0.1:{}", freeLoopbackPort()).c_str(), 1);
  setenv("SNCL_RANK", "1", 1);  // the launcher's snclGetUniqueId derives the id, starts no root
  const uint64_t commId = std::mt19937_64(std::random_device{}())();
  auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
    TransportRank tr = setupTransport(rank, n, id, commId, options);
    std::string error = tr.transport ? body(*tr.transport, rank) : tr.error;
    if (error.empty()) return 0;
    fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    return 1;
  });
  unsetenv("SNCL_COMM_ID");
  unsetenv("SNCL_RANK");
  return exits;
}

struct CopySink {
  std::vector<char> data;
  RecvSink sink() {
    return RecvSink{[](void* ctx, size_t offset, const void* d, size_t n) {
                      memcpy(static_cast<CopySink*>(ctx)->data.data() + offset, d, n);
                    },
                    this, nullptr};
  }
};

}  // namespace

TEST_CASE("shm single copy: the transport counts one copy through the path, and a mismatch still fails", "[shm][cma]") {
  constexpr size_t kBytes = (3u << 20) + 5;
  for (bool on : {true, false}) {
    INFO("single copy " << on);
    ShmOptions options;
    options.singleCopy = on;
    auto exits = runTransport(2, options, [&](Transport& t, int rank) -> std::string {
      RequestId req;
      std::vector<char> data(kBytes);
      for (size_t i = 0; i < kBytes; ++i) data[i] = static_cast<char>(patternByte(9, i));
      CopySink sink;
      // Straight into the destination (dst), then through the sink (in pieces).
      for (bool direct : {true, false}) {
        sink.data.assign(kBytes, 0);
        if (rank == 0) {
          BODY_CHECK(t.isend(1, 3, data.data(), kBytes, &req) == snclSuccess, "{}", lastError());
        } else {
          RecvSink s = sink.sink();
          if (direct) s.dst = sink.data.data();
          BODY_CHECK(t.irecv(0, 3, kBytes, s, &req) == snclSuccess, "{}", lastError());
        }
        BODY_CHECK(complete(t, req) == snclSuccess, "{}", lastError());
        if (rank == 1) BODY_CHECK(memcmp(sink.data.data(), data.data(), kBytes) == 0, "direct {}: wrong data", direct);
      }
      TransportCounters c;
      t.addCounters(&c);
      if (rank == 0) {
        BODY_CHECK(c.bytesSent == 2 * kBytes && c.bytesCopied == (on ? 0 : 2 * kBytes), "sent {} copied {}",
                   c.bytesSent, c.bytesCopied);
      } else {
        // Through the FIFO the copy out is the sink's, not the transport's.
        BODY_CHECK(c.bytesReceived == 2 * kBytes && c.bytesCopied == (on ? 2 * kBytes : 0), "received {} copied {}",
                   c.bytesReceived, c.bytesCopied);
      }
      // Then a message whose size the receiver does not expect.
      if (rank == 0) {
        BODY_CHECK(t.isend(1, 4, data.data(), kBytes, &req) == snclSuccess, "{}", lastError());
      } else {
        BODY_CHECK(t.irecv(0, 4, kBytes - 1, sink.sink(), &req) == snclSuccess, "{}", lastError());
      }
      const Result r = complete(t, req);
      // Through the FIFO a sender may finish before the receiver looked (the message fit in
      // the FIFO); a single-copy send waits for the receiver, so it learns of the mismatch.
      if (rank == 0 && !on && r == snclSuccess) return "";
      BODY_CHECK(r == snclInvalidArgument, "{}: {}", resultName(r), lastError());
      BODY_CHECK(std::string(lastError()).find("counts differ") != std::string::npos, "{}", lastError());
      return "";
    });
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shm single copy: a peer killed while its buffer is read fails the other within a second", "[shm][cma]") {
  constexpr size_t kBytes = 64u << 20;
  constexpr size_t kPage = 4096;
  void* shared = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* reading = static_cast<std::atomic<int>*>(shared);      // the receiver read a piece
  auto* deathNs = static_cast<std::atomic<int64_t>*>(shared) + 1;  // when the victim died
  for (int victim : {0, 1}) {
    INFO("the " << (victim == 0 ? "sender" : "receiver") << " is killed");
    reading->store(0);
    deathNs->store(0);
    ShmOptions options;  // single copy on: the probe must succeed on this machine
    auto exits = runTransport(2, options, [&](Transport& t, int rank) -> std::string {
      RequestId req;
      std::vector<char> data(kBytes, 1);
      // The receiver reduces (a sink without dst): pieces, each slowed down, so that the
      // sender dies while its buffer is still being read.
      struct Slow {
        std::atomic<int>* reading;
        std::atomic<int64_t>* deathNs;
        bool die;
      } slow{reading, deathNs, rank == victim};
      RecvSink s{[](void* ctx, size_t offset, const void*, size_t) {
                   auto* w = static_cast<Slow*>(ctx);
                   w->reading->store(1);
                   if (w->die && offset >= (1u << 20)) {
                     w->deathNs->store(Clock::now().time_since_epoch().count());
                     kill(getpid(), SIGKILL);
                   }
                   usleep(2000);
                 },
                 &slow, nullptr};
      if (rank == 0) BODY_CHECK(t.isend(1, 1, data.data(), kBytes, &req) == snclSuccess, "{}", lastError());
      else BODY_CHECK(t.irecv(0, 1, kBytes, s, &req) == snclSuccess, "{}", lastError());
      if (rank == 0 && victim == 0) {
        const Deadline deadline = Deadline::afterMs(kTimeoutMs);
        while (reading->load() == 0 && !deadline.expired()) {
          bool done = false;
          BODY_CHECK(t.test(req, &done) == snclSuccess && !done, "the send finished: {}", lastError());
          t.wait(1000);
        }
        TransportCounters c;
        t.addCounters(&c);
        BODY_CHECK(c.bytesCopied == 0, "the sender copied {} bytes: the message went through the FIFO", c.bytesCopied);
        deathNs->store(Clock::now().time_since_epoch().count());
        kill(getpid(), SIGKILL);
      }
      const Result r = complete(t, req);
      BODY_CHECK(r == snclRemoteError, "{}: {}", resultName(r), lastError());
      const std::string error = lastError();
      BODY_CHECK(error.find(fmt::format("rank {}", victim)) != std::string::npos && error.find("died") != std::string::npos,
                 "{}", error);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          Clock::now() - Clock::time_point(Clock::duration(deathNs->load())))
                          .count();
      BODY_CHECK(ms < 1000, "the death was reported {} ms after it happened", ms);
      return "";
    });
    REQUIRE(exits.size() == 2);
    CHECK(exits[victim].signal == SIGKILL);
    CHECK(exits[1 - victim].code == 0);
  }
  munmap(shared, kPage);
  CHECK(test::countShmSegments() == 0);
}
