// Bootstrap over TCP. Wire protocol (all structs in host byte order: one job, one ABI):
//   rank -> root  RootHello {magic, secret, rank, nranks, rank's listen address}
//   root -> rank  RootReply {result, bytes} + nranks listen addresses, or an error text
//   rank -> peer  PeerHello {magic, secret, rank} once per connection (lazily, on first send)
//   rank -> peer  Frame {kind, tag, bytes} + payload, for every message
// Each rank sends over its own outgoing connection to a peer and receives over the peer's
// incoming one, so two ranks never race to create "the" connection between them.
// Longer than most files here on purpose: the wire protocol (ids, root, peer connections,
// frames) is read and checked in one place, and no piece of it is used without the others.
#include "lib/net/bootstrap.h"

#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/base/env.h"
#include "lib/base/hash.h"
#include "lib/base/log.h"
#include "lib/net/bootstrap_tree.h"
#include "lib/net/socket.h"

namespace sncl {
namespace {

constexpr uint32_t kIdMagic = 0x4c434e53;  // "SNCL"
constexpr uint32_t kIdVersion = 1;
constexpr uint32_t kHelloMagic = 0x6f6c6548;  // "Helo"
constexpr int32_t kMaxRanks = 1 << 20;
constexpr size_t kMaxErrorText = 1024;
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 30;
// How long the root or a rank waits for the hello of a connection that was accepted: a real
// rank sends it right after connecting, so only a stray or broken client takes longer.
constexpr int kHelloTimeoutMs = 5000;
constexpr size_t kMaxPendingConnections = 1024;
// Longest single condition-variable wait: how quickly a waiter notices abort().
constexpr auto kWaitSlice = std::chrono::milliseconds(50);

using Secret = std::array<uint8_t, 16>;

struct IdLayout {
  uint32_t magic;
  uint32_t version;
  Secret secret;
  SocketAddress root;
  uint8_t reserved[SNCL_UNIQUE_ID_BYTES - 4 - 4 - 16 - sizeof(SocketAddress) - 8];
  uint64_t checksum;  // FNV-1a over every byte before it
};
static_assert(sizeof(IdLayout) == SNCL_UNIQUE_ID_BYTES);

struct RootHello {
  uint32_t magic;
  Secret secret;
  int32_t rank;
  int32_t nranks;
  SocketAddress listenAddress;
};

struct RootReply {
  int32_t result;  // snclSuccess: nranks addresses follow; otherwise `bytes` of error text
  uint32_t bytes;
};

struct PeerHello {
  uint32_t magic;
  Secret secret;
  int32_t rank;
};

struct FrameHeader {
  uint32_t kind;
  uint32_t tag;
  uint64_t bytes;
};

// Constant time, so a stray client cannot learn the secret byte by byte from timing.
bool sameSecret(const Secret& a, const Secret& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

Result randomSecret(Secret* secret) {
  size_t done = 0;
  while (done < secret->size()) {
    ssize_t n = getrandom(secret->data() + done, secret->size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(snclSystemError, "getrandom failed: {}", strerror(errno));
    done += static_cast<size_t>(n);
  }
  return snclSuccess;
}

void encodeId(const SocketAddress& root, const Secret& secret, snclUniqueId* id) {
  IdLayout layout{};
  layout.magic = kIdMagic;
  layout.version = kIdVersion;
  layout.secret = secret;
  layout.root = root;
  layout.checksum = fnv1a(&layout, offsetof(IdLayout, checksum));
  memcpy(id->internal, &layout, sizeof(layout));
}

IdLayout decodeId(const snclUniqueId& id) {
  IdLayout layout;
  memcpy(&layout, id.internal, sizeof(layout));
  return layout;
}

// ---- Root: serves one rendezvous on its own thread, then exits. ----

struct Arrival {
  Socket sock;
  RootHello hello;
};

class Root {
 public:
  Root(Socket listener, const Secret& secret, Deadline deadline)
      : listener_(std::move(listener)), secret_(secret), deadline_(deadline) {}

  void run() {
    const auto start = Clock::now();
    std::vector<Pending> pending;
    while (!finished() && !deadline_.expired()) {
      std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}};
      for (const Pending& p : pending) fds.push_back({p.sock.fd(), POLLIN, 0});
      int rc = ::poll(fds.data(), fds.size(), std::min(deadline_.remainingMs(), 100));
      if (rc < 0 && errno != EINTR) {
        log::warn("bootstrap root {}: poll failed: {}", listener_.name(), strerror(errno));
        return;
      }
      // Pending connections first: their indices in fds are p + 1.
      for (size_t i = pending.size(); i-- > 0;) {
        if (fds[i + 1].revents) {
          serveHello(std::move(pending[i].sock));
          pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
        } else if (pending[i].expires.expired()) {
          log::warn("bootstrap root {}: {} sent no hello within {} ms, closing it", listener_.name(),
                    pending[i].sock.name(), kHelloTimeoutMs);
          pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
        }
      }
      if (fds[0].revents) {
        Socket sock;
        if (listener_.accept(Deadline::afterMs(0), &sock) != snclSuccess) continue;
        // Bounded memory: a flood of silent connections displaces the oldest of them.
        if (pending.size() >= kMaxPendingConnections) pending.erase(pending.begin());
        pending.push_back({std::move(sock), Deadline::afterMs(kHelloTimeoutMs)});
      }
    }
    if (!finished()) {
      log::warn("bootstrap root {}: gave up after {} ms with {} of {} ranks arrived", listener_.name(),
                env::timeoutMs(), arrived_, expected_);
    } else if (error_.empty()) {
      log::info(log::Subsys::Bootstrap, "bootstrap root {}: rendezvous of {} ranks done in {:.1f} ms", listener_.name(),
                expected_, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  }

 private:
  struct Pending {
    Socket sock;
    Deadline expires;
  };

  // Done after the table went out, or, after an error, once every rank that any hello
  // announced has been told.
  bool finished() const { return expected_ > 0 && arrived_ >= expected_ && arrivals_.empty(); }

  void serveHello(Socket sock) {
    RootHello hello;
    // The peer polled readable; its hello is one small write, so a short wait suffices.
    if (sock.recvAll(&hello, sizeof(hello), Deadline::afterMs(200)) != snclSuccess) {
      log::warn("bootstrap root {}: dropped {}: no complete hello ({})", listener_.name(), sock.name(), lastError());
      return;
    }
    if (hello.magic != kHelloMagic || !sameSecret(hello.secret, secret_)) {
      log::warn("bootstrap root {}: refused {}: wrong magic or secret", listener_.name(), sock.name());
      return;
    }
    log::trace("bootstrap root: rank {} of {} arrived from {} (listens on {})", hello.rank,
               hello.nranks, sock.name(), toString(hello.listenAddress));
    ++arrived_;
    if (hello.nranks >= 1 && hello.nranks <= kMaxRanks) expected_ = std::max(expected_, hello.nranks);
    if (!error_.empty()) {
      replyError(sock);
      return;
    }
    arrivals_.push_back({std::move(sock), hello});
    error_ = checkArrivals();
    if (!error_.empty()) {
      log::warn("bootstrap root {}: {}", listener_.name(), error_);
      answerRootsProcessLast();
      for (Arrival& a : arrivals_) replyError(a.sock);
      arrivals_.clear();
      // With no valid nranks at all there is nobody left to wait for.
      if (expected_ == 0) expected_ = arrived_;
    } else if (static_cast<int32_t>(arrivals_.size()) == arrivals_[0].hello.nranks) {
      replyTable();
    }
  }

  // Checks the newest arrival against the others: the first error is reported to all.
  std::string checkArrivals() const {
    const RootHello& first = arrivals_.front().hello;
    const RootHello& last = arrivals_.back().hello;
    if (last.nranks < 1 || last.nranks > kMaxRanks) {
      return fmt::format("rank {} reported an invalid nranks {} (must be in 1..{})", last.rank,
                         last.nranks, kMaxRanks);
    }
    if (last.nranks != first.nranks) {
      return fmt::format("ranks disagree on nranks: rank {} says {}, rank {} says {}", first.rank,
                         first.nranks, last.rank, last.nranks);
    }
    if (last.rank < 0 || last.rank >= last.nranks) {
      return fmt::format("rank {} is out of range for nranks {}", last.rank, last.nranks);
    }
    if (!isValidAddress(last.listenAddress) && last.nranks > 1) {
      return fmt::format("rank {} reported an invalid listen address", last.rank);
    }
    for (size_t i = 0; i + 1 < arrivals_.size(); ++i) {
      if (arrivals_[i].hello.rank == last.rank) {
        return fmt::format("rank {} was claimed twice (by {} and {})", last.rank,
                           arrivals_[i].sock.name(), arrivals_.back().sock.name());
      }
    }
    return {};
  }

  void replyError(Socket& sock) {
    std::string text = error_.substr(0, kMaxErrorText);
    RootReply reply{snclInvalidArgument, static_cast<uint32_t>(text.size())};
    std::vector<char> message(sizeof(reply) + text.size());
    memcpy(message.data(), &reply, sizeof(reply));
    memcpy(message.data() + sizeof(reply), text.data(), text.size());
    if (sock.sendAll(message.data(), message.size(), Deadline::afterMs(1000)) != snclSuccess) {
      log::warn("bootstrap root: could not tell {} about the error", sock.name());
    }
  }

  // The root usually runs in rank 0's process (its snclGetUniqueId), and dies with it: a
  // rank 0 told of an error can return and exit before the others were told, who would
  // then see only a closed connection. So rank 0 hears last.
  void answerRootsProcessLast() {
    std::stable_partition(arrivals_.begin(), arrivals_.end(), [](const Arrival& a) { return a.hello.rank != 0; });
  }

  void replyTable() {
    std::vector<SocketAddress> table(arrivals_.size());
    for (const Arrival& a : arrivals_) table[static_cast<size_t>(a.hello.rank)] = a.hello.listenAddress;
    RootReply reply{snclSuccess, static_cast<uint32_t>(table.size() * sizeof(SocketAddress))};
    std::vector<char> message(sizeof(reply) + reply.bytes);
    memcpy(message.data(), &reply, sizeof(reply));
    memcpy(message.data() + sizeof(reply), table.data(), reply.bytes);
    answerRootsProcessLast();
    for (Arrival& a : arrivals_) {
      Result r = a.sock.sendAll(message.data(), message.size(), deadline_);
      if (r != snclSuccess) log::warn("bootstrap root: could not send the table to rank {}", a.hello.rank);
    }
    arrivals_.clear();
  }

  Socket listener_;
  const Secret secret_;
  const Deadline deadline_;
  std::vector<Arrival> arrivals_;  // valid so far; cleared once answered
  std::string error_;
  int32_t arrived_ = 0;
  int32_t expected_ = 0;
};

Result startRoot(const SocketAddress& address, bool reuseAddr, const Secret& secret, snclUniqueId* id) {
  Socket listener;
  SNCL_CHECK(Socket::listen(address, reuseAddr, &listener));
  encodeId(listener.address(), secret, id);
  log::trace("bootstrap root: listening on {}", listener.name());
  Deadline deadline = Deadline::afterMs(env::timeoutMs());
  try {
    std::thread([root = std::make_shared<Root>(std::move(listener), secret, deadline)] {
      try {
        root->run();
      } catch (const std::exception& e) {
        log::warn("bootstrap root: stopped: {}", e.what());
      }
    }).detach();
  } catch (const std::exception& e) {
    return fail(snclSystemError, "cannot start the bootstrap root thread: {}", e.what());
  }
  return snclSuccess;
}

// ---- The per-rank bootstrap. ----

class SocketBootstrap final : public Bootstrap {
 public:
  SocketBootstrap(int rank, int nranks, const Secret& secret, Socket listener,
                  std::vector<SocketAddress> peerAddresses)
      : Bootstrap(rank, nranks),
        secret_(secret),
        listener_(std::move(listener)),
        peerAddresses_(std::move(peerAddresses)),
        outgoing_(static_cast<size_t>(nranks)),
        incoming_(static_cast<size_t>(nranks)) {
    if (listener_.valid()) liveFds_.push_back(listener_.fd());
  }

  Result allGather(void* data, size_t bytesPerRank, Deadline deadline) override {
    SNCL_CHECK(checkUsable("allGather"));
    const uint32_t tag = nextCollectiveTag();
    if (bytesPerRank > kMaxFrameBytes / static_cast<uint64_t>(nranks_)) {
      return fail(snclInvalidArgument, "bootstrap allGather: {} ranks x {} bytes exceed the frame limit of {}",
                  nranks_, bytesPerRank, kMaxFrameBytes);
    }
    return treeAllGather(
        rank_, nranks_, data, bytesPerRank,
        [&](int peer, const void* p, size_t n) { return sendFrame(peer, kCollective, tag, p, n, deadline); },
        [&](int peer, void* p, size_t n) { return recvFrame(peer, kCollective, tag, p, n, deadline); });
  }

  Traffic traffic() const override {
    return {sent_.load(), received_.load(), bytesSent_.load()};
  }

  // Dissemination barrier: log2(nranks) rounds of empty messages.
  Result barrier(Deadline deadline) override {
    SNCL_CHECK(checkUsable("barrier"));
    const uint32_t tag = nextCollectiveTag();
    for (int distance = 1; distance < nranks_; distance *= 2) {
      SNCL_CHECK(sendFrame((rank_ + distance) % nranks_, kCollective, tag, nullptr, 0, deadline));
      SNCL_CHECK(recvFrame((rank_ - distance % nranks_ + nranks_) % nranks_, kCollective, tag, nullptr,
                           0, deadline));
    }
    return snclSuccess;
  }

  Result send(int peer, uint32_t tag, const void* data, size_t bytes, Deadline deadline) override {
    SNCL_CHECK(checkUsable("send"));
    SNCL_CHECK(checkPeer(peer, "send", data, bytes));
    return sendFrame(peer, kUser, tag, data, bytes, deadline);
  }

  Result recv(int peer, uint32_t tag, void* data, size_t bytes, Deadline deadline) override {
    SNCL_CHECK(checkUsable("recv"));
    SNCL_CHECK(checkPeer(peer, "recv", data, bytes));
    return recvFrame(peer, kUser, tag, data, bytes, deadline);
  }

  Result tryRecv(int peer, uint32_t tag, void* data, size_t bytes, bool* got) override {
    *got = false;
    SNCL_CHECK(checkUsable("recv"));
    SNCL_CHECK(checkPeer(peer, "recv", data, bytes));
    const Result r = recvFrame(peer, kUser, tag, data, bytes, Deadline::afterMs(0), /*once=*/true);
    *got = r == snclSuccess;
    return r == snclTimeout ? snclSuccess : r;
  }

  void abort() override {
    aborted_.store(true, std::memory_order_release);
    {
      // Sockets are only closed by the destructor, so these fds are still ours.
      std::lock_guard lock(liveFdsMutex_);
      for (int fd : liveFds_) ::shutdown(fd, SHUT_RDWR);
    }
    std::lock_guard lock(mutex_);
    cv_.notify_all();
  }

 private:
  enum Kind : uint32_t { kUser = 0, kCollective = 1 };

  // `sending` (guarded by mutex_) gives one thread at a time the connection for a whole
  // frame; sock and error belong to that thread. (Not a std::timed_mutex: TSan does not
  // understand its pthread_mutex_clocklock.)
  struct Outgoing {
    bool sending = false;
    Socket sock;
    std::string error;  // set when a frame was cut: the stream cannot be used again
  };

  // Guarded by mutex_, except that sock is read by the thread that owns `reading`.
  struct Incoming {
    Socket sock;
    bool reading = false;  // one thread reads frames and queues those meant for others
    Result error = snclSuccess;
    std::string errorText;
    std::map<uint64_t, std::deque<std::vector<char>>> queued;  // by (kind, tag), FIFO
  };

  static uint64_t key(Kind kind, uint32_t tag) { return (uint64_t{kind} << 32) | tag; }

  uint32_t nextCollectiveTag() { return collectiveSeq_++; }

  Result abortedError(const char* op) const {
    return fail(snclInvalidUsage, "bootstrap {} on rank {}: the bootstrap was aborted", op, rank_);
  }

  Result checkUsable(const char* op) const {
    return aborted_.load(std::memory_order_acquire) ? abortedError(op) : snclSuccess;
  }

  Result checkPeer(int peer, const char* op, const void* data, size_t bytes) const {
    if (peer < 0 || peer >= nranks_) {
      return fail(snclInvalidArgument, "bootstrap {}: peer {} is out of range for nranks {}", op, peer, nranks_);
    }
    if (peer == rank_) {
      return fail(snclInvalidArgument, "bootstrap {}: peer {} is this rank (no messages to self)", op, peer);
    }
    if (bytes > 0 && !data) return fail(snclInvalidArgument, "bootstrap {}: data is NULL for {} bytes", op, bytes);
    if (bytes > kMaxFrameBytes) {
      return fail(snclInvalidArgument, "bootstrap {}: {} bytes exceed the limit of {}", op, bytes, kMaxFrameBytes);
    }
    return snclSuccess;
  }

  void registerFd(int fd) {
    std::lock_guard lock(liveFdsMutex_);
    liveFds_.push_back(fd);
    if (aborted_.load()) ::shutdown(fd, SHUT_RDWR);
  }

  std::string peerName(int peer) const {
    return fmt::format("rank {} ({})", peer, toString(peerAddresses_[static_cast<size_t>(peer)]));
  }

  Result sendFrame(int peer, Kind kind, uint32_t tag, const void* data, size_t bytes, Deadline deadline) {
    Outgoing& out = outgoing_[static_cast<size_t>(peer)];
    {
      std::unique_lock lock(mutex_);
      while (out.sending) {
        if (aborted_.load()) return abortedError("send");
        if (deadline.expired()) {
          return fail(snclTimeout, "bootstrap send to rank {}: another thread kept the connection busy", peer);
        }
        cv_.wait_for(lock, kWaitSlice);
      }
      out.sending = true;
    }
    Result r = sendOwned(out, peer, kind, tag, data, bytes, deadline);
    std::lock_guard lock(mutex_);
    out.sending = false;
    cv_.notify_all();
    return r;
  }

  // Sends one frame on a connection this thread owns (out.sending).
  Result sendOwned(Outgoing& out, int peer, Kind kind, uint32_t tag, const void* data, size_t bytes,
                   Deadline deadline) {
    if (aborted_.load()) return abortedError("send");
    if (!out.error.empty()) {
      return fail(snclRemoteError, "bootstrap send to rank {}: connection failed earlier: {}", peer, out.error);
    }
    if (!out.sock.valid()) SNCL_CHECK(connectTo(peer, &out.sock, deadline));
    FrameHeader header{kind, tag, bytes};
    // Small frames go out in one write: one segment with TCP_NODELAY.
    std::vector<char> small;
    const bool combine = bytes <= 4096;
    if (combine) {
      small.resize(sizeof(header) + bytes);
      memcpy(small.data(), &header, sizeof(header));
      if (bytes) memcpy(small.data() + sizeof(header), data, bytes);
    }
    Result r = combine ? out.sock.sendAll(small.data(), small.size(), deadline, &aborted_)
                       : out.sock.sendAll(&header, sizeof(header), deadline, &aborted_);
    if (r == snclSuccess && !combine) r = out.sock.sendAll(data, bytes, deadline, &aborted_);
    if (r != snclSuccess) {
      out.error = lastError();
      return aborted_.load() ? abortedError("send") : r;
    }
    sent_.fetch_add(1);
    bytesSent_.fetch_add(bytes);
    return snclSuccess;
  }

  Result connectTo(int peer, Socket* sock, Deadline deadline) {
    Socket fresh;
    SNCL_CHECK(Socket::connect(peerAddresses_[static_cast<size_t>(peer)], deadline, &fresh, &aborted_));
    fresh.setName(peerName(peer));
    PeerHello hello{kHelloMagic, secret_, rank_};
    SNCL_CHECK(fresh.sendAll(&hello, sizeof(hello), deadline, &aborted_));
    log::trace("bootstrap: rank {} connected to {}", rank_, fresh.name());
    registerFd(fresh.fd());
    *sock = std::move(fresh);
    return snclSuccess;
  }

  // once: look at what is there without waiting (deadline already passed); a Timeout
  // result then records no error.
  Result recvFrame(int peer, Kind kind, uint32_t tag, void* data, size_t bytes, Deadline deadline,
                   bool once = false) {
    const uint64_t want = key(kind, tag);
    Incoming& in = incoming_[static_cast<size_t>(peer)];
    std::unique_lock lock(mutex_);
    for (int pass = 0;; ++pass) {
      if (aborted_.load()) return abortedError("recv");
      auto queue = in.queued.find(want);
      if (queue != in.queued.end() && !queue->second.empty()) {
        std::vector<char> message = std::move(queue->second.front());
        queue->second.pop_front();
        if (queue->second.empty()) in.queued.erase(queue);
        lock.unlock();
        SNCL_CHECK(checkSize(peer, kind, tag, message.size(), bytes));
        if (bytes) memcpy(data, message.data(), bytes);
        received_.fetch_add(1);
        return snclSuccess;
      }
      if (in.error != snclSuccess) {
        return fail(in.error, "bootstrap recv from rank {}: {}", peer, in.errorText);
      }
      if (once && pass > 0) return snclTimeout;
      if (!once && deadline.expired()) {
        if (!in.sock.valid()) {
          return fail(snclTimeout, "bootstrap recv from rank {} (tag {}) timed out: rank {} never connected",
                      peer, tag, peer);
        }
        return fail(snclTimeout, "bootstrap recv from rank {} (tag {}) timed out", peer, tag);
      }
      if (!in.sock.valid() && !accepting_) {
        accepting_ = true;
        lock.unlock();
        Result r = once ? acceptPending() : acceptOne(deadline);
        lock.lock();
        accepting_ = false;
        cv_.notify_all();
        if (r != snclSuccess && r != snclTimeout) return r;
      } else if (in.sock.valid() && !in.reading) {
        in.reading = true;
        lock.unlock();
        bool delivered = false;
        Result r = once ? readPending(peer, want, data, bytes, &delivered)
                        : readFrame(peer, want, data, bytes, deadline, &delivered);
        lock.lock();
        in.reading = false;
        cv_.notify_all();
        if (delivered) received_.fetch_add(1);
        if (delivered || r == snclTimeout) return r;
        if (r != snclSuccess) return r;
      } else if (!once) {
        cv_.wait_for(lock, kWaitSlice);
      }
    }
  }

  // One frame if its first byte is already there (then the rest follows promptly).
  Result readPending(int peer, uint64_t want, void* data, size_t bytes, bool* delivered) {
    pollfd p{incoming_[static_cast<size_t>(peer)].sock.fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return snclTimeout;
    return readFrame(peer, want, data, bytes, Deadline::afterMs(kHelloTimeoutMs), delivered);
  }

  // A connection already waiting on the listener, if there is one.
  Result acceptPending() {
    pollfd p{listener_.fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return snclTimeout;
    return acceptOne(Deadline::afterMs(kHelloTimeoutMs));
  }

  Result checkSize(int peer, Kind kind, uint32_t tag, size_t got, size_t expected) const {
    if (got == expected) return snclSuccess;
    return fail(snclInvalidArgument, "bootstrap {} from rank {} (tag {}) has {} bytes, expected {}",
                kind == kUser ? "message" : "collective", peer, tag, got, expected);
  }

  // Reads one frame from peer (this thread owns in.reading). A frame for the caller goes
  // straight into data; any other is queued. *delivered tells which happened.
  Result readFrame(int peer, uint64_t want, void* data, size_t bytes, Deadline deadline, bool* delivered) {
    Incoming& in = incoming_[static_cast<size_t>(peer)];
    // Wait without consuming anything, so that a timeout leaves the stream intact.
    PollStatus st = pollFd(in.sock.fd(), POLLIN, deadline, &aborted_);
    if (st == PollStatus::Aborted) return abortedError("recv");
    if (st == PollStatus::Timeout) {
      return fail(snclTimeout, "bootstrap recv from {} timed out (tag {})", in.sock.name(),
                  static_cast<uint32_t>(want));
    }
    FrameHeader header;
    Result r = in.sock.recvAll(&header, sizeof(header), deadline, &aborted_);
    if (r == snclSuccess && header.bytes > kMaxFrameBytes) {
      r = fail(snclRemoteError, "{} sent a frame of {} bytes (limit {})", in.sock.name(), header.bytes,
               kMaxFrameBytes);
    }
    const uint64_t got = key(static_cast<Kind>(header.kind), header.tag);
    if (r == snclSuccess && got == want && header.bytes == bytes) {
      r = in.sock.recvAll(data, bytes, deadline, &aborted_);
      *delivered = r == snclSuccess;
    } else if (r == snclSuccess) {
      std::vector<char> message(header.bytes);
      r = in.sock.recvAll(message.data(), message.size(), deadline, &aborted_);
      if (r == snclSuccess) {
        std::lock_guard lock(mutex_);
        in.queued[got].push_back(std::move(message));
      }
    }
    if (r == snclSuccess) return r;
    if (aborted_.load()) return abortedError("recv");
    // A cut frame leaves the stream unusable: every later recv from this peer fails.
    std::lock_guard lock(mutex_);
    in.error = r == snclTimeout ? snclRemoteError : r;
    in.errorText = lastError();
    return r;
  }

  // Accepts connections until one arrives or the deadline passes; files each under the
  // rank its hello names. Strays with a wrong secret are closed.
  Result acceptOne(Deadline deadline) {
    Socket sock;
    SNCL_CHECK(listener_.accept(deadline, &sock, &aborted_));
    PeerHello hello;
    Deadline helloDeadline = Deadline::afterMs(std::min(deadline.remainingMs(), kHelloTimeoutMs));
    if (sock.recvAll(&hello, sizeof(hello), helloDeadline, &aborted_) != snclSuccess) {
      return aborted_.load() ? abortedError("recv") : snclSuccess;
    }
    if (hello.magic != kHelloMagic || !sameSecret(hello.secret, secret_) || hello.rank < 0 ||
        hello.rank >= nranks_) {
      log::warn("bootstrap: rank {} refused a connection from {}: wrong magic, secret or rank", rank_,
                sock.name());
      return snclSuccess;
    }
    std::lock_guard lock(mutex_);
    Incoming& in = incoming_[static_cast<size_t>(hello.rank)];
    if (in.sock.valid()) {
      log::warn("bootstrap: rank {} refused a second connection claiming rank {} from {}", rank_,
                hello.rank, sock.name());
      return snclSuccess;
    }
    sock.setName(peerName(hello.rank));
    registerFd(sock.fd());
    in.sock = std::move(sock);
    log::trace("bootstrap: rank {} accepted {}", rank_, in.sock.name());
    return snclSuccess;
  }

  const Secret secret_;
  Socket listener_;
  const std::vector<SocketAddress> peerAddresses_;
  std::mutex mutex_;  // guards the roles (sending, reading, accepting_) and queues; never held across I/O
  std::vector<Outgoing> outgoing_;
  std::condition_variable cv_;
  std::vector<Incoming> incoming_;
  bool accepting_ = false;
  std::atomic<bool> aborted_{false};
  std::mutex liveFdsMutex_;
  std::vector<int> liveFds_;  // what abort() shuts down
  std::atomic<uint64_t> sent_{0}, received_{0}, bytesSent_{0};  // traffic()
  uint32_t collectiveSeq_ = 0;  // collectives are called in one order on every rank
};

// Reaches the root, presents the secret and this rank, and receives the address table.
Result rendezvous(const IdLayout& id, int rank, int nranks, const SocketAddress& listenAddress,
                  Deadline deadline, std::vector<SocketAddress>* table) {
  const std::string rootName = toString(id.root);
  Socket root;
  Result r = Socket::connect(id.root, deadline, &root);
  if (r != snclSuccess) {
    return fail(r, "bootstrap: rank {} cannot reach the root at {}: {}", rank, rootName, lastError());
  }
  root.setName(fmt::format("the bootstrap root ({})", rootName));
  RootHello hello{kHelloMagic, id.secret, rank, nranks, listenAddress};
  SNCL_CHECK(root.sendAll(&hello, sizeof(hello), deadline));
  RootReply reply;
  r = root.recvAll(&reply, sizeof(reply), deadline);
  if (r == snclRemoteError) {
    return fail(r, "bootstrap: rank {}: the root at {} closed the connection (wrong secret, or it "
                "gave up waiting)", rank, rootName);
  }
  SNCL_CHECK(r);
  if (reply.result != snclSuccess) {
    if (reply.bytes > kMaxErrorText || reply.result < 0 || reply.result >= snclNumResults) {
      return fail(snclRemoteError, "bootstrap: rank {}: malformed error reply from the root", rank);
    }
    std::string text(reply.bytes, '\0');
    SNCL_CHECK(root.recvAll(text.data(), text.size(), deadline));
    return fail(static_cast<Result>(reply.result), "bootstrap: {}", text);
  }
  if (reply.bytes != static_cast<uint64_t>(nranks) * sizeof(SocketAddress)) {
    return fail(snclRemoteError, "bootstrap: rank {}: the root sent {} bytes of addresses for {} ranks",
                rank, reply.bytes, nranks);
  }
  table->resize(static_cast<size_t>(nranks));
  return root.recvAll(table->data(), reply.bytes, deadline);
}

}  // namespace

Result bootstrapCheckId(const snclUniqueId& id) {
  IdLayout layout = decodeId(id);
  if (layout.magic != kIdMagic) {
    return fail(snclInvalidArgument, "unique id is not an sncl id (magic {:#x}, expected {:#x})",
                layout.magic, kIdMagic);
  }
  if (layout.checksum != fnv1a(&layout, offsetof(IdLayout, checksum))) {
    return fail(snclInvalidArgument, "unique id is corrupt (checksum mismatch)");
  }
  if (layout.version != kIdVersion) {
    return fail(snclInvalidArgument, "unique id has version {}, this library speaks {}", layout.version,
                kIdVersion);
  }
  if (!isValidAddress(layout.root)) {
    return fail(snclInvalidArgument, "unique id names no valid root address");
  }
  return snclSuccess;
}

Result bootstrapCreateRoot(snclUniqueId* id) {
  if (!id) return fail(snclInvalidArgument, "bootstrapCreateRoot: id is NULL");
  SocketAddress address;
  SNCL_CHECK(findInterfaceAddress(&address));
  Secret secret;
  SNCL_CHECK(randomSecret(&secret));
  return startRoot(address, /*reuseAddr=*/false, secret, id);
}

Result bootstrapIdFromEnv(snclUniqueId* id, bool isRoot) {
  if (!id) return fail(snclInvalidArgument, "bootstrapIdFromEnv: id is NULL");
  auto commId = env::str("SNCL_COMM_ID");
  if (!commId) return fail(snclInvalidArgument, "SNCL_COMM_ID is not set (expected host:port)");
  SocketAddress address;
  SNCL_CHECK(parseHostPort(*commId, &address));
  // Nothing random can be shared here, so the secret is derived: from SNCL_COMM_SECRET when
  // set, else from the SNCL_COMM_ID string itself. The latter only keeps stray or mismatched
  // jobs apart; anyone who knows the address can rendezvous.
  const std::string seed = env::str("SNCL_COMM_SECRET").value_or(*commId);
  Secret secret;
  uint64_t halves[2] = {fnv1a(seed.data(), seed.size()),
                        fnv1a(seed.data(), seed.size(), 0x84222325cbf29ce4ull)};
  memcpy(secret.data(), halves, sizeof(halves));
  if (isRoot) return startRoot(address, /*reuseAddr=*/true, secret, id);
  encodeId(address, secret, id);
  return snclSuccess;
}

Result Bootstrap::connect(const snclUniqueId& id, int rank, int nranks, Deadline deadline,
                          std::unique_ptr<Bootstrap>* out) {
  if (!out) return fail(snclInvalidArgument, "Bootstrap::connect: out is NULL");
  if (nranks < 1 || nranks > kMaxRanks) {
    return fail(snclInvalidArgument, "nranks {} is not in 1..{}", nranks, kMaxRanks);
  }
  if (rank < 0 || rank >= nranks) {
    return fail(snclInvalidArgument, "rank {} is out of range for nranks {}", rank, nranks);
  }
  SNCL_CHECK(bootstrapCheckId(id));
  const IdLayout layout = decodeId(id);
  const auto start = Clock::now();
  // A single rank needs no listener: it only tells the root that it arrived.
  Socket listener;
  SocketAddress listenAddress{};
  if (nranks > 1) {
    SocketAddress address;
    SNCL_CHECK(findInterfaceAddress(&address));
    SNCL_CHECK(Socket::listen(address, /*reuseAddr=*/false, &listener));
    listenAddress = listener.address();
  }
  std::vector<SocketAddress> table;
  SNCL_CHECK(rendezvous(layout, rank, nranks, listenAddress, deadline, &table));
  for (int peer = 0; peer < nranks && nranks > 1; ++peer) {
    if (!isValidAddress(table[static_cast<size_t>(peer)])) {
      return fail(snclRemoteError, "bootstrap: the root sent no valid address for rank {}", peer);
    }
  }
  log::trace("bootstrap: rank {} of {} joined via {} in {:.1f} ms", rank, nranks, toString(layout.root),
             std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  try {
    *out = std::make_unique<SocketBootstrap>(rank, nranks, layout.secret, std::move(listener),
                                             std::move(table));
  } catch (const std::bad_alloc&) {
    return fail(snclSystemError, "bootstrap: out of memory for {} ranks", nranks);
  }
  return snclSuccess;
}

}  // namespace sncl
