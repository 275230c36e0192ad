// The per-rank bootstrap once the rendezvous has found the peers: out-of-band messages over
// TCP (framed, matched by peer, kind and tag), and the bootstrap's collectives on top of them
// (the all-gather tree, a dissemination barrier). Each rank sends over its own outgoing
// connection to a peer and receives over the peer's incoming one, so two ranks never race to
// create "the" connection between them. Connections open lazily, on the first send.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lib/net/bootstrap.h"
#include "lib/net/bootstrap_wire.h"

namespace sncl {

class SocketBootstrap final : public Bootstrap {
 public:
  // peerAddresses may be empty until the rendezvous has the table (setPeerAddresses).
  SocketBootstrap(int rank, int nranks, const wire::Secret& secret, Socket listener);

  Result allGather(void* data, size_t bytesPerRank, Deadline deadline) override;
  Result barrier(Deadline deadline) override;
  Result send(int peer, uint32_t tag, const void* data, size_t bytes, Deadline deadline) override;
  Result recv(int peer, uint32_t tag, void* data, size_t bytes, Deadline deadline) override;
  Result tryRecv(int peer, uint32_t tag, void* data, size_t bytes, bool* got) override;
  void abort() override;
  Traffic traffic() const override { return {sent_.load(), received_.load(), bytesSent_.load()}; }

  // For the rendezvous (bootstrap_rendezvous.cc), before the object is shared with threads.
  void setPeerAddresses(std::vector<SocketAddress> addresses) { peerAddresses_ = std::move(addresses); }
  const std::vector<SocketAddress>& peerAddresses() const { return peerAddresses_; }
  // The address table as a frame of its own kind, so it never matches a user message.
  Result sendTable(int peer, const void* data, size_t bytes, Deadline deadline) {
    return sendFrame(peer, kRendezvous, 0, data, bytes, deadline);
  }
  // Without waiting; nothing there yet is success with *got false.
  Result tryRecvTable(int peer, void* data, size_t bytes, bool* got);
  // The fd that turns readable when peer's next frame (or its connection) arrives.
  int waitFdFor(int peer) const;
  // Messages that went over the root's connection, which this object does not carry.
  void countRootTraffic(uint64_t sent, uint64_t received, uint64_t bytesSent) {
    sent_ += sent;
    received_ += received;
    bytesSent_ += bytesSent;
  }

 private:
  enum Kind : uint32_t { kUser = 0, kCollective = 1, kRendezvous = 2 };

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
  Result abortedError(const char* op) const;
  Result checkUsable(const char* op) const;
  Result checkPeer(int peer, const char* op, const void* data, size_t bytes) const;
  void registerFd(int fd);
  std::string peerName(int peer) const;

  Result sendFrame(int peer, Kind kind, uint32_t tag, const void* data, size_t bytes, Deadline deadline);
  Result sendOwned(Outgoing& out, int peer, Kind kind, uint32_t tag, const void* data, size_t bytes,
                   Deadline deadline);
  Result connectTo(int peer, Socket* sock, Deadline deadline);
  // once: look at what is there without waiting; a Timeout result then records no error.
  Result recvFrame(int peer, Kind kind, uint32_t tag, void* data, size_t bytes, Deadline deadline,
                   bool once = false);
  Result readPending(int peer, uint64_t want, void* data, size_t bytes, bool* delivered);
  Result acceptPending();
  Result checkSize(int peer, Kind kind, uint32_t tag, size_t got, size_t expected) const;
  Result readFrame(int peer, uint64_t want, void* data, size_t bytes, Deadline deadline, bool* delivered);
  Result acceptOne(Deadline deadline);

  const wire::Secret secret_;
  Socket listener_;
  std::vector<SocketAddress> peerAddresses_;  // set once, before any other thread uses this
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

}  // namespace sncl
