// Ranks of the shm transport tests (tests/test_shm_*.cc): one body run on every rank, as
// threads of this process (an in-process bootstrap) or as real processes (fork, real
// bootstrap); a transport set up on each; requests driven as the executor drives them.
// Bodies never use Catch2 macros (not thread-safe, and useless in a child): they return ""
// on success or what went wrong, which BODY_CHECK/BODY_OK build.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lib/base/clock.h"
#include "lib/base/error.h"
#include "lib/net/bootstrap.h"
#include "lib/transport/transport.h"
#include "tests/util/launcher.h"
#include "tests/util/requests.h"
#include "transports/shm/shm.h"

namespace sncl::shmtest {

constexpr int64_t kTimeoutMs = 20000;  // transport deadline unless a test needs a short one
constexpr int kRunTimeoutMs = 120000;  // whole run of a multi-process test

using RankBody = std::function<std::string(int rank, int nranks, Bootstrap& bootstrap)>;

enum class Mode { Threads, Processes };
inline const char* modeName(Mode m) {
  return m == Mode::Threads ? "threads" : "processes";
}

// A TCP port on 127.0.0.1 that nothing listens on now (for a bootstrap root).
int freeLoopbackPort();

std::vector<std::string> runInThreads(int nranks, const RankBody& body);
std::vector<test::RankExit> runInProcesses(int nranks, const RankBody& body, int timeoutMs = kRunTimeoutMs);

// Runs body on nranks ranks in mode and checks that every rank succeeded.
inline void runRanks(Mode mode, int nranks, const RankBody& body) {
  INFO("ranks as " << modeName(mode));
  if (mode == Mode::Threads) {
    auto errors = runInThreads(nranks, body);
    for (int r = 0; r < nranks; ++r) {
      INFO("rank " << r);
      CHECK(errors[r] == "");
    }
  } else {
    CHECK(test::allSucceeded(runInProcesses(nranks, body)));
  }
}

uint64_t freshCommId();
// Segments in /dev/shm that belong to the communicator commId.
int segmentsOf(uint64_t commId);

struct ShmRank {
  std::unique_ptr<Transport> transport;
  std::string error;  // why setup failed
};

// Sets up shm on every rank (collective), connecting all ranks unless peers is given.
ShmRank setupShm(int rank, int nranks, Bootstrap& bootstrap, uint64_t commId, const ShmOptions& options = {},
                 int64_t timeoutMs = kTimeoutMs, std::optional<std::vector<int>> peers = std::nullopt);

using test::complete;  // tests/util/requests.h
using test::completeAll;

uint8_t pattern(size_t i, uint64_t seed);
std::vector<char> makeMessage(size_t bytes, uint64_t seed);

// Receives into a buffer and checks the RecvSink contract on the way.
struct BufferSink {
  explicit BufferSink(size_t bytes) : data(bytes) {}
  std::vector<char> data;
  size_t next = 0;
  std::string violation;

  static void deliver(void* ctx, size_t offset, const void* src, size_t bytes);
  RecvSink sink() { return RecvSink{deliver, this}; }
  std::string check(uint64_t seed) const;
};

#define BODY_CHECK(expr, ...)                                                                     \
  do {                                                                                            \
    if (!(expr)) return fmt::format("line {}: {}: ", __LINE__, #expr) + fmt::format(__VA_ARGS__); \
  } while (0)
#define BODY_OK(expr) BODY_CHECK((expr) == snclSuccess, "{}", lastError())

ShmOptions smallFifo();

// Sends a message of each size from rank 0 to rank 1 and a different one back.
std::string pingPong(int rank, Transport& t, const std::vector<size_t>& sizes);

// One message each way between this rank and peer.
struct Exchange {
  int peer;
  uint64_t tag;
  size_t sendBytes, recvBytes;
  uint64_t sendSeed, recvSeed;
};

// Posts every send and receive of plan up front, completes them all (testing the newest
// first: completion must not depend on the order of tests) and checks what arrived.
std::string exchangeAll(Transport& t, const std::vector<Exchange>& plan);

}  // namespace sncl::shmtest
