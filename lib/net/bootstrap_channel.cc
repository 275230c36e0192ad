#include "lib/net/bootstrap_channel.h"

#include <poll.h>

#include <algorithm>
#include <cstring>

#include "lib/base/log.h"
#include "lib/net/bootstrap_tree.h"

namespace sncl {

using wire::FrameHeader;
using wire::kHelloMagic;
using wire::kHelloTimeoutMs;
using wire::kMaxFrameBytes;
using wire::PeerHello;

namespace {
// Longest single condition-variable wait: how quickly a waiter notices abort().
constexpr auto kWaitSlice = std::chrono::milliseconds(50);
// Frames up to this size go out in one write: one segment with TCP_NODELAY.
constexpr size_t kCombineBytes = 4096;
}  // namespace

SocketBootstrap::SocketBootstrap(int rank, int nranks, const wire::Secret& secret, Socket listener)
    : Bootstrap(rank, nranks),
      secret_(secret),
      listener_(std::move(listener)),
      outgoing_(static_cast<size_t>(nranks)),
      incoming_(static_cast<size_t>(nranks)) {
  if (listener_.valid()) liveFds_.push_back(listener_.fd());
}

Result SocketBootstrap::tryRecvTable(int peer, void* data, size_t bytes, bool* got) {
  const Result r = recvFrame(peer, kRendezvous, 0, data, bytes, Deadline::afterMs(0), /*once=*/true);
  *got = r == snclSuccess;
  return r == snclTimeout ? snclSuccess : r;
}

int SocketBootstrap::waitFdFor(int peer) const {
  const Socket& sock = incoming_[static_cast<size_t>(peer)].sock;
  return sock.valid() ? sock.fd() : listener_.fd();
}

Result SocketBootstrap::allGather(void* data, size_t bytesPerRank, Deadline deadline) {
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

// Dissemination barrier: log2(nranks) rounds of empty messages.
Result SocketBootstrap::barrier(Deadline deadline) {
  SNCL_CHECK(checkUsable("barrier"));
  const uint32_t tag = nextCollectiveTag();
  for (int distance = 1; distance < nranks_; distance *= 2) {
    SNCL_CHECK(sendFrame((rank_ + distance) % nranks_, kCollective, tag, nullptr, 0, deadline));
    SNCL_CHECK(recvFrame((rank_ - distance % nranks_ + nranks_) % nranks_, kCollective, tag, nullptr,
                         0, deadline));
  }
  return snclSuccess;
}

Result SocketBootstrap::send(int peer, uint32_t tag, const void* data, size_t bytes, Deadline deadline) {
  SNCL_CHECK(checkUsable("send"));
  SNCL_CHECK(checkPeer(peer, "send", data, bytes));
  return sendFrame(peer, kUser, tag, data, bytes, deadline);
}

Result SocketBootstrap::recv(int peer, uint32_t tag, void* data, size_t bytes, Deadline deadline) {
  SNCL_CHECK(checkUsable("recv"));
  SNCL_CHECK(checkPeer(peer, "recv", data, bytes));
  return recvFrame(peer, kUser, tag, data, bytes, deadline);
}

Result SocketBootstrap::tryRecv(int peer, uint32_t tag, void* data, size_t bytes, bool* got) {
  *got = false;
  SNCL_CHECK(checkUsable("recv"));
  SNCL_CHECK(checkPeer(peer, "recv", data, bytes));
  const Result r = recvFrame(peer, kUser, tag, data, bytes, Deadline::afterMs(0), /*once=*/true);
  *got = r == snclSuccess;
  return r == snclTimeout ? snclSuccess : r;
}

void SocketBootstrap::abort() {
  aborted_.store(true, std::memory_order_release);
  {
    // Sockets are only closed by the destructor, so these fds are still ours.
    std::lock_guard lock(liveFdsMutex_);
    for (int fd : liveFds_) ::shutdown(fd, SHUT_RDWR);
  }
  std::lock_guard lock(mutex_);
  cv_.notify_all();
}

Result SocketBootstrap::abortedError(const char* op) const {
  return fail(snclInvalidUsage, "bootstrap {} on rank {}: the bootstrap was aborted", op, rank_);
}

Result SocketBootstrap::checkUsable(const char* op) const {
  return aborted_.load(std::memory_order_acquire) ? abortedError(op) : snclSuccess;
}

Result SocketBootstrap::checkPeer(int peer, const char* op, const void* data, size_t bytes) const {
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

void SocketBootstrap::registerFd(int fd) {
  std::lock_guard lock(liveFdsMutex_);
  liveFds_.push_back(fd);
  if (aborted_.load()) ::shutdown(fd, SHUT_RDWR);
}

std::string SocketBootstrap::peerName(int peer) const {
  if (peerAddresses_.empty()) return fmt::format("rank {}", peer);  // still in the rendezvous
  return fmt::format("rank {} ({})", peer, toString(peerAddresses_[static_cast<size_t>(peer)]));
}

Result SocketBootstrap::sendFrame(int peer, Kind kind, uint32_t tag, const void* data, size_t bytes, Deadline deadline) {
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
Result SocketBootstrap::sendOwned(Outgoing& out, int peer, Kind kind, uint32_t tag, const void* data, size_t bytes,
                   Deadline deadline) {
  if (aborted_.load()) return abortedError("send");
  if (!out.error.empty()) {
    return fail(snclRemoteError, "bootstrap send to rank {}: connection failed earlier: {}", peer, out.error);
  }
  if (!out.sock.valid()) SNCL_CHECK(connectTo(peer, &out.sock, deadline));
  FrameHeader header{kind, tag, bytes};
  // Small frames go out in one write: one segment with TCP_NODELAY.
  std::vector<char> small;
  const bool combine = bytes <= kCombineBytes;
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

Result SocketBootstrap::connectTo(int peer, Socket* sock, Deadline deadline) {
  if (peerAddresses_.empty()) {
    return fail(snclInternalError, "bootstrap: rank {} has no address for rank {} yet (rendezvous unfinished)",
                rank_, peer);
  }
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

Result SocketBootstrap::recvFrame(int peer, Kind kind, uint32_t tag, void* data, size_t bytes, Deadline deadline,
                   bool once) {
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
Result SocketBootstrap::readPending(int peer, uint64_t want, void* data, size_t bytes, bool* delivered) {
  pollfd p{incoming_[static_cast<size_t>(peer)].sock.fd(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return snclTimeout;
  return readFrame(peer, want, data, bytes, Deadline::afterMs(kHelloTimeoutMs), delivered);
}

Result SocketBootstrap::acceptPending() {
  pollfd p{listener_.fd(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return snclTimeout;
  return acceptOne(Deadline::afterMs(kHelloTimeoutMs));
}

Result SocketBootstrap::checkSize(int peer, Kind kind, uint32_t tag, size_t got, size_t expected) const {
  if (got == expected) return snclSuccess;
  return fail(snclInvalidArgument, "bootstrap {} from rank {} (tag {}) has {} bytes, expected {}",
              kind == kUser ? "message" : "collective", peer, tag, got, expected);
}

// Reads one frame from peer (this thread owns in.reading). A frame for the caller goes
// straight into data; any other is queued. *delivered tells which happened.
Result SocketBootstrap::readFrame(int peer, uint64_t want, void* data, size_t bytes, Deadline deadline, bool* delivered) {
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
Result SocketBootstrap::acceptOne(Deadline deadline) {
  Socket sock;
  SNCL_CHECK(listener_.accept(deadline, &sock, &aborted_));
  PeerHello hello;
  Deadline helloDeadline = Deadline::afterMs(std::min(deadline.remainingMs(), kHelloTimeoutMs));
  if (sock.recvAll(&hello, sizeof(hello), helloDeadline, &aborted_) != snclSuccess) {
    return aborted_.load() ? abortedError("recv") : snclSuccess;
  }
  if (hello.magic != kHelloMagic || !wire::sameSecret(hello.secret, secret_) || hello.rank < 0 ||
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
}  // namespace sncl
