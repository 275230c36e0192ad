// Shared-memory transport failures: mismatched messages, a peer killed or stalled, abort,
// waiting, misuse, leftovers of a dead creator. Every one is reported promptly, names the
// peer, and leaves no segment behind. Ranks as in test_shm_transport.cc.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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

namespace {
constexpr size_t kPageBytes = 4096;
}  // namespace

TEST_CASE("shm: a size or tag mismatch fails both sides promptly", "[shm]") {
  for (Mode mode : {Mode::Threads, Mode::Processes}) {
    const uint64_t commId = freshCommId();
    SECTION(std::string("size mismatch, message longer than the FIFO, ") + modeName(mode)) {
      runRanks(mode, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
        auto shm = setupShm(rank, nranks, bs, commId, smallFifo());
        if (!shm.transport) return shm.error;
        Transport& t = *shm.transport;
        const auto start = Clock::now();
        auto message = makeMessage(65536, 1);
        BufferSink sink(32768);
        RequestId req;
        if (rank == 0)
          BODY_OK(t.isend(1, 7, message.data(), message.size(), &req));
        else
          BODY_OK(t.irecv(0, 7, sink.data.size(), sink.sink(), &req));
        BODY_CHECK(complete(t, req) == snclInvalidArgument, "{}", lastError());
        const std::string error = lastError();
        BODY_CHECK(error.find("rank 0 -> rank 1: message of 65536 bytes (tag 0x7) but 32768 expected: counts "
                              "differ across ranks?") != std::string::npos,
                   "{}", error);
        BODY_CHECK(Clock::now() - start < std::chrono::seconds(3), "took {} ms",
                   std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
        // The pair stays failed: later messages fail at once.
        BODY_CHECK(t.isend(1 - rank, 8, nullptr, 0, &req) == snclInvalidArgument, "{}", lastError());
        return "";
      });
    }
    SECTION(std::string("tag mismatch, message the FIFO holds, ") + modeName(mode)) {
      runRanks(mode, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
        auto shm = setupShm(rank, nranks, bs, commId);
        if (!shm.transport) return shm.error;
        Transport& t = *shm.transport;
        const auto start = Clock::now();
        BufferSink sink(100);
        RequestId req;
        if (rank == 0) {
          // The send completes (buffered); the sender learns of the mismatch on its next
          // message with the peer.
          auto message = makeMessage(100, 1);
          BODY_OK(t.isend(1, 5, message.data(), message.size(), &req));
          BODY_OK(complete(t, req));
          BODY_OK(t.irecv(1, 9, sink.data.size(), sink.sink(), &req));
        } else {
          BODY_OK(t.irecv(0, 6, sink.data.size(), sink.sink(), &req));
        }
        BODY_CHECK(complete(t, req) == snclInvalidArgument, "{}", lastError());
        const std::string error = lastError();
        BODY_CHECK(error.find("rank 0 -> rank 1: message with tag 0x5 but tag 0x6 expected") != std::string::npos, "{}",
                   error);
        BODY_CHECK(Clock::now() - start < std::chrono::seconds(3), "took {} ms",
                   std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
        return "";
      });
    }
    CHECK(segmentsOf(commId) == 0);
  }
}

namespace {
// Records when this process dies (for the survivor to measure), then dies.
void dieNow(void* when) {
  static_cast<std::atomic<int64_t>*>(when)->store(Clock::now().time_since_epoch().count());
  kill(getpid(), SIGKILL);
}
}  // namespace

TEST_CASE("shm: a peer killed mid-transfer is reported within a second and leaves no segment", "[shm]") {
  constexpr size_t kBytes = 64 << 20;
  // When the victim died (steady clock, which all processes share), for the survivor.
  void* shared = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* deathTime = static_cast<std::atomic<int64_t>*>(shared);
  for (int victim : {0, 1}) {
    const uint64_t commId = freshCommId();
    deathTime->store(0);
    INFO("the " << (victim == 0 ? "sender" : "receiver") << " is killed");
    auto exits = runInProcesses(2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
      // A deadline far beyond what the test allows: the liveness check must find the death.
      auto shm = setupShm(rank, nranks, bs, commId, {}, 15000);
      if (!shm.transport) return shm.error;
      Transport& t = *shm.transport;
      RequestId req;
      std::vector<char> message;
      if (rank == 0) {
        message = makeMessage(kBytes, 3);
        BODY_OK(t.isend(1, 1, message.data(), kBytes, &req));
      } else if (rank != victim) {
        // A slow receiver (1 ms per fragment), so that the sender is still sending when it dies.
        RecvSink slow{[](void*, size_t, const void*, size_t) { usleep(1000); }, nullptr};
        BODY_OK(t.irecv(0, 1, kBytes, slow, &req));
      } else {
        // Dies in the middle of the message, after its first MiB.
        RecvSink dieAfter1MiB{[](void* when, size_t offset, const void*, size_t) {
                                if (offset >= (1 << 20)) dieNow(when);
                              },
                              deathTime};
        BODY_OK(t.irecv(0, 1, kBytes, dieAfter1MiB, &req));
      }
      if (rank == victim) {
        // The sender dies after a few passes, each of which fills at most the 4 MiB FIFO;
        // the receiver dies in its sink.
        const Deadline deadline = Deadline::afterMs(kTimeoutMs);
        for (int pass = 0; rank == 1 || pass < 3; ++pass) {
          bool done = false;
          BODY_OK(t.test(req, &done));
          BODY_CHECK(!done, "the whole message went through");
          BODY_CHECK(!deadline.expired(), "no data came");
          t.wait(1000);
        }
        dieNow(deathTime);
      }
      BODY_CHECK(complete(t, req) == snclRemoteError, "{}", lastError());
      const std::string error = lastError();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          Clock::now() - Clock::time_point(Clock::duration(deathTime->load())))
                          .count();
      BODY_CHECK(error.find(fmt::format("peer rank {} (pid", victim)) != std::string::npos &&
                     error.find("died") != std::string::npos,
                 "{}", error);
      BODY_CHECK(ms < 1000, "the death was reported {} ms after it happened", ms);
      return "";
    });
    REQUIRE(exits.size() == 2);
    CHECK(exits[victim].signal == SIGKILL);
    CHECK(exits[1 - victim].code == 0);
    CHECK(segmentsOf(commId) == 0);
  }
  munmap(shared, kPageBytes);
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("shm: a stalled peer times out at the deadline, and learns why", "[shm]") {
  const uint64_t commId = freshCommId();
  runRanks(Mode::Threads, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
    auto shm = setupShm(rank, nranks, bs, commId, {}, 300);
    if (!shm.transport) return shm.error;
    Transport& t = *shm.transport;
    BufferSink sink(10);
    RequestId req;
    if (rank == 0) {
      const auto start = Clock::now();
      BODY_OK(t.irecv(1, 1, 10, sink.sink(), &req));
      BODY_CHECK(complete(t, req) == snclTimeout, "{}", lastError());
      const std::string error = lastError();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      BODY_CHECK(error.find("rank 0 <-> rank 1") != std::string::npos && error.find("no progress") != std::string::npos,
                 "{}", error);
      BODY_CHECK(ms >= 300 && ms < 2000, "timed out after {} ms", ms);
    }
    BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));  // rank 1 stalls here
    if (rank == 1) {
      BODY_OK(t.irecv(0, 1, 10, sink.sink(), &req));
      BODY_CHECK(complete(t, req) == snclRemoteError, "{}", lastError());
      const std::string error = lastError();
      BODY_CHECK(error.find("rank 0 timed out waiting for rank 1") != std::string::npos, "{}", error);
    }
    return "";
  });
  CHECK(segmentsOf(commId) == 0);
}

TEST_CASE("shm: abort unblocks a waiting request and fails the peer's", "[shm]") {
  const uint64_t commId = freshCommId();
  runRanks(Mode::Threads, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
    auto shm = setupShm(rank, nranks, bs, commId);
    if (!shm.transport) return shm.error;
    Transport& t = *shm.transport;
    BufferSink sink(10);
    RequestId req;
    BODY_OK(t.irecv(1 - rank, 1, 10, sink.sink(), &req));  // nobody sends
    const auto start = Clock::now();
    std::thread aborter;
    if (rank == 0)
      aborter = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        t.abort();
      });
    const Result r = complete(t, req);
    const std::string error = lastError();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (aborter.joinable()) aborter.join();
    if (rank == 0) {
      BODY_CHECK(r == snclInvalidUsage && error.find("aborted") != std::string::npos, "{}: {}", resultName(r), error);
      BODY_CHECK(t.isend(1, 2, nullptr, 0, &req) == snclInvalidUsage, "{}", lastError());
    } else {
      BODY_CHECK(r == snclRemoteError && error.find("rank 0 aborted") != std::string::npos, "{}: {}", resultName(r),
                 error);
    }
    BODY_CHECK(ms < 2000, "took {} ms", ms);
    return bs.barrier(Deadline::afterMs(kTimeoutMs)) == snclSuccess ? "" : lastError();
  });
}

TEST_CASE("shm: wait() sleeps until a peer rings or the transport is aborted", "[shm]") {
  const uint64_t commId = freshCommId();
  using std::chrono::milliseconds;
  runRanks(Mode::Threads, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
    auto shm = setupShm(rank, nranks, bs, commId);
    if (!shm.transport) return shm.error;
    Transport& t = *shm.transport;
    RequestId req;
    BufferSink sink(100);
    if (rank == 1) BODY_OK(t.irecv(0, 1, sink.data.size(), sink.sink(), &req));
    BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));
    if (rank == 0) {
      std::this_thread::sleep_for(milliseconds(50));
      auto message = makeMessage(100, 1);
      BODY_OK(t.isend(1, 1, message.data(), message.size(), &req));
      BODY_OK(complete(t, req));
      BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));  // quiet (no ring) while rank 1 waits
      return "";
    }
    // Woken by the sender's ring, long before the 10 s asked for (or wait()'s 500 ms cap).
    auto start = Clock::now();
    t.wait(10000000);
    BODY_CHECK(Clock::now() - start < milliseconds(350), "woke after {} ms",
               std::chrono::duration_cast<milliseconds>(Clock::now() - start).count());
    BODY_OK(complete(t, req));
    // Woken by abort() from another thread.
    BODY_OK(t.irecv(0, 2, sink.data.size(), sink.sink(), &req));
    std::thread aborter([&] {
      std::this_thread::sleep_for(milliseconds(50));
      t.abort();
    });
    start = Clock::now();
    t.wait(10000000);
    const auto waited = Clock::now() - start;
    aborter.join();
    BODY_CHECK(waited < milliseconds(350), "woke after {} ms", std::chrono::duration_cast<milliseconds>(waited).count());
    BODY_OK(bs.barrier(Deadline::afterMs(kTimeoutMs)));
    return "";
  });
}

TEST_CASE("shm: misuse is reported, not crashed on", "[shm]") {
  const uint64_t commId = freshCommId();
  runRanks(Mode::Threads, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
    auto shm = setupShm(rank, nranks, bs, commId);
    if (!shm.transport) return shm.error;
    Transport& t = *shm.transport;
    RequestId req;
    bool done = false;
    BODY_CHECK(t.isend(rank, 1, nullptr, 0, &req) == snclInvalidArgument, "send to self");
    BODY_CHECK(t.isend(7, 1, nullptr, 0, &req) == snclInvalidArgument, "send to a rank out of range");
    BODY_CHECK(t.isend(1 - rank, 1, nullptr, 8, &req) == snclInvalidArgument, "send from a null buffer");
    BODY_CHECK(t.irecv(1 - rank, 1, 8, RecvSink{}, &req) == snclInvalidArgument, "receive without a sink");
    BODY_CHECK(t.test(0xdead, &done) == snclInvalidUsage, "unknown request");
    BODY_OK(t.isend(1 - rank, 1, nullptr, 0, &req));
    BODY_OK(complete(t, req));
    BODY_CHECK(t.test(req, &done) == snclInvalidUsage, "request tested after it was released");
    BufferSink sink(0);
    BODY_OK(t.irecv(1 - rank, 1, 0, sink.sink(), &req));
    BODY_OK(complete(t, req));
    return "";
  });
  CHECK(segmentsOf(commId) == 0);
}

TEST_CASE("shm: setup removes segments whose creator died", "[shm]") {
  char link[64] = {0};
  REQUIRE(readlink("/proc/self/ns/pid", link, sizeof(link) - 1) > 0);
  unsigned long long pidNamespace = 0;
  REQUIRE(sscanf(link, "pid:[%llu]", &pidNamespace) == 1);
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  REQUIRE(waitpid(gone, nullptr, 0) == gone);
  const uint64_t staleComm = freshCommId(), liveComm = freshCommId();
  const std::string stale = fmt::format("/sncl-{:016x}-0-{}-{}", staleComm, gone, pidNamespace);
  const std::string live = fmt::format("/sncl-{:016x}-0-{}-{}", liveComm, getpid(), pidNamespace);
  for (const auto& name : {stale, live}) {
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    close(fd);
  }
  const uint64_t commId = freshCommId();
  runRanks(Mode::Threads, 2, [&](int rank, int nranks, Bootstrap& bs) -> std::string {
    return setupShm(rank, nranks, bs, commId).error;
  });
  CHECK(segmentsOf(staleComm) == 0);
  CHECK(segmentsOf(liveComm) == 1);
  shm_unlink(live.c_str());
}
