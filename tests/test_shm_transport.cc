// Shared-memory transport tests. Ranks run as real processes (fork, real bootstrap) or as
// threads of this process (an in-process bootstrap below); most bodies run both ways.
// Bodies never use Catch2 macros (not thread-safe, and useless in a child): they return ""
// on success or what went wrong.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/net/bootstrap.h"
#include "lib/transport/transport.h"
#include "tests/util/launcher.h"
#include "transports/shm/shm.h"

using namespace sncl;

namespace {

constexpr int64_t kTimeoutMs = 20000;  // transport deadline unless a test needs a short one
constexpr int kRunTimeoutMs = 120000;  // whole run of a multi-process test
constexpr size_t kPageBytes = 4096;

// ---------------------------------------------------------------------------------------
// An in-process bootstrap for ranks that are threads: all-gather and barrier only.

struct ThreadGroup {
  explicit ThreadGroup(int n) : nranks(n) {}
  const int nranks;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<char> buffer;
  int arrived = 0;
  int leaving = 0;  // ranks still copying out of the last round
  uint64_t round = 0;
  bool aborted = false;
};

class ThreadBootstrap : public Bootstrap {
 public:
  ThreadBootstrap(int rank, ThreadGroup* group) : Bootstrap(rank, group->nranks), group_(group) {}

  Result allGather(void* data, size_t bytesPerRank, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(group_->mutex);
    auto ready = [&] { return group_->aborted || group_->leaving == 0; };
    if (!group_->cv.wait_until(lock, deadline.at(), ready) || group_->aborted)
      return fail(snclTimeout, "test bootstrap: all-gather did not start");
    if (group_->arrived == 0) group_->buffer.assign(bytesPerRank * nranks_, 0);
    auto* mine = static_cast<char*>(data) + bytesPerRank * rank_;
    std::memcpy(group_->buffer.data() + bytesPerRank * rank_, mine, bytesPerRank);
    const uint64_t round = group_->round;
    if (++group_->arrived == nranks_) {
      group_->arrived = 0;
      group_->leaving = nranks_;
      ++group_->round;
      group_->cv.notify_all();
    } else if (!group_->cv.wait_until(lock, deadline.at(), [&] { return group_->aborted || group_->round != round; }) ||
               group_->aborted) {
      return fail(snclTimeout, "test bootstrap: all-gather timed out");
    }
    std::memcpy(data, group_->buffer.data(), bytesPerRank * nranks_);
    if (--group_->leaving == 0) group_->cv.notify_all();
    return snclSuccess;
  }
  Result barrier(Deadline deadline) override {
    std::vector<char> bytes(nranks_);
    return allGather(bytes.data(), 1, deadline);
  }
  Result send(int, uint32_t, const void*, size_t, Deadline) override {
    return fail(snclInternalError, "test bootstrap: send is not used by shm");
  }
  Result recv(int, uint32_t, void*, size_t, Deadline) override {
    return fail(snclInternalError, "test bootstrap: recv is not used by shm");
  }
  Result tryRecv(int, uint32_t, void*, size_t, bool* got) override {
    *got = false;  // nothing travels point to point here
    return snclSuccess;
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    group_->aborted = true;
    group_->cv.notify_all();
  }

 private:
  ThreadGroup* group_;
};

// ---------------------------------------------------------------------------------------
// Running one body on every rank, as threads or as processes.

using RankBody = std::function<std::string(int rank, int nranks, Bootstrap& bootstrap)>;

enum class Mode { Threads, Processes };
const char* modeName(Mode m) {
  return m == Mode::Threads ? "threads" : "processes";
}

std::vector<std::string> runInThreads(int nranks, const RankBody& body) {
  ThreadGroup group(nranks);
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      ThreadBootstrap bootstrap(r, &group);
      errors[r] = body(r, nranks, bootstrap);
    });
  for (auto& t : threads) t.join();
  return errors;
}

int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// The bootstrap root runs in rank 0's process rather than in this one: a thread that runs
// here while fork() copies the process may hold a lock (ASan's allocator, stdio) that the
// child would then wait for forever.
std::vector<test::RankExit> runInProcesses(int nranks, const RankBody& body, int timeoutMs = kRunTimeoutMs) {
  setenv("SNCL_COMM_ID", fmt::format("127.0.0.1:{}", freeLoopbackPort()).c_str(), 1);
  setenv("SNCL_RANK", "1", 1);  // the launcher's snclGetUniqueId derives the id, starts no root
  auto exits = test::runRanks(
      nranks,
      [&](int rank, int n, const snclUniqueId& id) {
        snclUniqueId same;
        std::unique_ptr<Bootstrap> bootstrap;
        if ((rank == 0 && bootstrapIdFromEnv(&same, /*isRoot=*/true) != snclSuccess) ||
            Bootstrap::connect(id, rank, n, Deadline::afterMs(kTimeoutMs), &bootstrap) != snclSuccess) {
          fprintf(stderr, "rank %d: bootstrap: %s\n", rank, lastError());
          return 1;
        }
        std::string error = body(rank, n, *bootstrap);
        if (error.empty()) return 0;
        fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
        return 1;
      },
      timeoutMs);
  unsetenv("SNCL_COMM_ID");
  unsetenv("SNCL_RANK");
  return exits;
}

// Runs body on nranks ranks in mode and checks that every rank succeeded.
void runRanks(Mode mode, int nranks, const RankBody& body) {
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

// ---------------------------------------------------------------------------------------
// Setting up a transport and driving requests.

uint64_t freshCommId() {
  static std::mt19937_64 gen(std::random_device{}());
  return gen();
}

// Segments in /dev/shm that belong to the communicator commId.
int segmentsOf(uint64_t commId) {
  const std::string prefix = fmt::format("sncl-{:016x}-", commId);
  int n = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) n += strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    closedir(dir);
  }
  return n;
}

struct ShmRank {
  std::unique_ptr<Transport> transport;
  std::string error;  // why setup failed
};

// Sets up shm on every rank (collective), connecting all ranks unless peers is given.
ShmRank setupShm(int rank, int nranks, Bootstrap& bootstrap, uint64_t commId, const ShmOptions& options = {},
                 int64_t timeoutMs = kTimeoutMs, std::optional<std::vector<int>> peers = std::nullopt) {
  std::vector<PeerInfo> infos(nranks);
  infos[rank] = PeerInfo{rank, static_cast<int32_t>(getpid()), 1, 1, "localhost"};
  ShmRank out;
  if (bootstrap.allGather(infos.data(), sizeof(PeerInfo), Deadline::afterMs(timeoutMs)) != snclSuccess) {
    out.error = fmt::format("all-gather of peer info: {}", lastError());
    return out;
  }
  if (!peers) {
    peers.emplace();
    for (int p = 0; p < nranks; ++p)
      if (p != rank) peers->push_back(p);
  }
  TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.commId = commId;
  ctx.commName = "test";
  ctx.peers = &infos;
  ctx.bootstrap = &bootstrap;
  ctx.timeoutMs = timeoutMs;
  out.transport = createShmTransport(options);
  if (out.transport->setup(ctx, *peers) != snclSuccess) {
    out.error = fmt::format("setup: {}", lastError());
    out.transport.reset();
  }
  return out;
}

// Drives reqs to completion the way the executor does: test all, wait when idle.
// Returns the first error (its message in lastError()).
Result completeAll(Transport& t, std::vector<RequestId> reqs, int64_t timeoutMs = kTimeoutMs) {
  const Deadline deadline = Deadline::afterMs(timeoutMs);
  int idle = 0;
  while (!reqs.empty()) {
    bool progressed = false;
    for (size_t i = 0; i < reqs.size();) {
      bool done = false;
      Result r = t.test(reqs[i], &done);
      if (r != snclSuccess) return r;
      if (done) {
        reqs[i] = reqs.back();
        reqs.pop_back();
        progressed = true;
      } else {
        ++i;
      }
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    if (deadline.expired()) return fail(snclTimeout, "test: requests did not complete in {} ms", timeoutMs);
    if (++idle > 16) t.wait(200);
  }
  return snclSuccess;
}
Result complete(Transport& t, RequestId req, int64_t timeoutMs = kTimeoutMs) {
  return completeAll(t, {req}, timeoutMs);
}

uint8_t pattern(size_t i, uint64_t seed) {
  return static_cast<uint8_t>(i * 131 + seed * 71 + (i >> 9));
}

std::vector<char> makeMessage(size_t bytes, uint64_t seed) {
  std::vector<char> m(bytes);
  for (size_t i = 0; i < bytes; ++i) m[i] = static_cast<char>(pattern(i, seed));
  return m;
}

// Receives into a buffer and checks the RecvSink contract on the way.
struct BufferSink {
  explicit BufferSink(size_t bytes) : data(bytes) {}
  std::vector<char> data;
  size_t next = 0;
  std::string violation;

  static void deliver(void* ctx, size_t offset, const void* src, size_t bytes) {
    auto* s = static_cast<BufferSink*>(ctx);
    const bool last = offset + bytes == s->data.size();
    if (offset != s->next || offset % 64 != 0 || (!last && bytes % 64 != 0) || offset + bytes > s->data.size())
      s->violation = fmt::format("fragment at {} of {} bytes (expected offset {}, message {} bytes)", offset, bytes,
                                 s->next, s->data.size());
    else
      std::memcpy(s->data.data() + offset, src, bytes);
    s->next = offset + bytes;
  }
  RecvSink sink() { return RecvSink{deliver, this}; }

  std::string check(uint64_t seed) const {
    if (!violation.empty()) return violation;
    if (next != data.size()) return fmt::format("received {} of {} bytes", next, data.size());
    for (size_t i = 0; i < data.size(); ++i)
      if (static_cast<uint8_t>(data[i]) != pattern(i, seed))
        return fmt::format("byte {} of {} is {} instead of {}", i, data.size(), static_cast<uint8_t>(data[i]),
                           pattern(i, seed));
    return "";
  }
};

#define BODY_CHECK(expr, ...)                                                                     \
  do {                                                                                            \
    if (!(expr)) return fmt::format("line {}: {}: ", __LINE__, #expr) + fmt::format(__VA_ARGS__); \
  } while (0)
#define BODY_OK(expr) BODY_CHECK((expr) == snclSuccess, "{}", lastError())

ShmOptions smallFifo() {
  ShmOptions o;
  o.fifoBytes = 16 << 10;
  o.slotBytes = 4 << 10;
  return o;
}

// Sends a message of each size from rank 0 to rank 1 and a different one back.
std::string pingPong(int rank, Transport& t, const std::vector<size_t>& sizes) {
  const int peer = 1 - rank;
  for (size_t n = 0; n < sizes.size(); ++n) {
    const size_t bytes = sizes[n];
    for (int leg = 0; leg < 2; ++leg) {
      const uint64_t tag = n * 2 + leg, seed = n * 10 + leg;
      if (rank == leg) {
        auto message = makeMessage(bytes, seed);
        RequestId req;
        BODY_OK(t.isend(peer, tag, message.data(), bytes, &req));
        BODY_OK(complete(t, req));
      } else {
        BufferSink sink(bytes);
        RequestId req;
        BODY_OK(t.irecv(peer, tag, bytes, sink.sink(), &req));
        BODY_OK(complete(t, req));
        auto error = sink.check(seed);
        BODY_CHECK(error.empty(), "message {} ({} bytes): {}", n, bytes, error);
      }
    }
  }
  return "";
}

// One message each way between this rank and peer.
struct Exchange {
  int peer;
  uint64_t tag;
  size_t sendBytes, recvBytes;
  uint64_t sendSeed, recvSeed;
};

// Posts every send and receive of plan up front, completes them all (testing the newest
// first: completion must not depend on the order of tests) and checks what arrived.
std::string exchangeAll(Transport& t, const std::vector<Exchange>& plan) {
  std::vector<std::vector<char>> out;
  std::vector<BufferSink> in;
  in.reserve(plan.size());
  std::vector<RequestId> reqs;
  for (const Exchange& e : plan) {
    out.push_back(makeMessage(e.sendBytes, e.sendSeed));
    in.emplace_back(e.recvBytes);
    RequestId send, recv;
    BODY_OK(t.isend(e.peer, e.tag, out.back().data(), e.sendBytes, &send));
    BODY_OK(t.irecv(e.peer, e.tag, e.recvBytes, in.back().sink(), &recv));
    reqs.push_back(send);
    reqs.push_back(recv);
  }
  std::reverse(reqs.begin(), reqs.end());
  BODY_OK(completeAll(t, reqs));
  for (size_t i = 0; i < plan.size(); ++i) {
    auto error = in[i].check(plan[i].recvSeed);
    BODY_CHECK(error.empty(), "message {} from rank {}: {}", plan[i].tag, plan[i].peer, error);
  }
  return "";
}

}  // namespace

// ---------------------------------------------------------------------------------------

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
