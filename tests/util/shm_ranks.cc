// Ranks of the shm transport tests: see shm_ranks.h.
#include "tests/util/shm_ranks.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

namespace sncl::shmtest {
namespace {

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

}  // namespace

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

// The bootstrap root runs in rank 0's process rather than in this one: a thread that runs
// here while fork() copies the process may hold a lock (ASan's allocator, stdio) that the
// child would then wait for forever.
std::vector<test::RankExit> runInProcesses(int nranks, const RankBody& body, int timeoutMs) {
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

uint64_t freshCommId() {
  static std::mt19937_64 gen(std::random_device{}());
  return gen();
}

int segmentsOf(uint64_t commId) {
  const std::string prefix = fmt::format("sncl-{:016x}-", commId);
  int n = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) n += strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    closedir(dir);
  }
  return n;
}

ShmRank setupShm(int rank, int nranks, Bootstrap& bootstrap, uint64_t commId, const ShmOptions& options,
                 int64_t timeoutMs, std::optional<std::vector<int>> peers) {
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

uint8_t pattern(size_t i, uint64_t seed) {
  return static_cast<uint8_t>(i * 131 + seed * 71 + (i >> 9));
}

std::vector<char> makeMessage(size_t bytes, uint64_t seed) {
  std::vector<char> m(bytes);
  for (size_t i = 0; i < bytes; ++i) m[i] = static_cast<char>(pattern(i, seed));
  return m;
}

void BufferSink::deliver(void* ctx, size_t offset, const void* src, size_t bytes) {
  auto* s = static_cast<BufferSink*>(ctx);
  const bool last = offset + bytes == s->data.size();
  if (offset != s->next || offset % 64 != 0 || (!last && bytes % 64 != 0) || offset + bytes > s->data.size())
    s->violation = fmt::format("fragment at {} of {} bytes (expected offset {}, message {} bytes)", offset, bytes,
                               s->next, s->data.size());
  else
    std::memcpy(s->data.data() + offset, src, bytes);
  s->next = offset + bytes;
}

std::string BufferSink::check(uint64_t seed) const {
  if (!violation.empty()) return violation;
  if (next != data.size()) return fmt::format("received {} of {} bytes", next, data.size());
  for (size_t i = 0; i < data.size(); ++i)
    if (static_cast<uint8_t>(data[i]) != pattern(i, seed))
      return fmt::format("byte {} of {} is {} instead of {}", i, data.size(), static_cast<uint8_t>(data[i]),
                         pattern(i, seed));
  return "";
}

ShmOptions smallFifo() {
  ShmOptions o;
  o.fifoBytes = 16 << 10;
  o.slotBytes = 4 << 10;
  return o;
}

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

}  // namespace sncl::shmtest
