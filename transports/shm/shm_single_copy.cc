// ShmTransport: the single-copy path (see shm_transport.h). A large message is not
// streamed through the FIFO: the sender publishes a descriptor slot (tag, size, address),
// the receiver reads the sender's buffer directly (process_vm_readv; or where it is mapped
// here: a thread of this process, or a shared allocation the descriptor names, which is
// also reduced from in place) and acknowledges through the FIFO's
// cmaDone counter, and only then does the send complete. The ack is a counter rather than
// a per-message flag because a pair's messages are matched in order: the n-th single-copy
// send is done once cmaDone >= n.
//
// Safety of the sender's buffer: the sender releases it (completes or fails the send) only
// after the ack, or after the pair failed; a pair fails by a release store of its status
// before any request of it fails. The receiver therefore checks the status after each read
// and fails the request if the pair failed meanwhile: a buffer the sender may already have
// given back never completes a receive. A reset builds a fresh transport with fresh segments
// (shm_reset.cc), so no descriptor of a failed attempt can be read by the re-run.
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "lib/base/copy.h"
#include "transports/shm/shm_transport.h"

namespace sncl::shm {

// Reads the peer's probe word (its address and value are in the peer's segment header):
// success means process_vm_readv works on this machine between these processes (no
// seccomp filter, no ptrace restriction, same pid namespace).
bool ShmTransport::probeSingleCopy(Peer& p, std::string* why) {
  if (p.sameProcess) return true;
  const SegmentHeader* h = p.segment.header();
  uint64_t value = 0;
  iovec local{&value, sizeof(value)};
  iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(h->cmaProbeAddr)), sizeof(value)};
  const ssize_t got = process_vm_readv(h->pid, &local, 1, &remote, 1, 0);
  if (got == static_cast<ssize_t>(sizeof(value)) && value == h->cmaProbeValue) return true;
  *why = got < 0 ? fmt::format("process_vm_readv of rank {} (pid {}): {}", p.rank, h->pid, strerror(errno))
                 : fmt::format("process_vm_readv of rank {} (pid {}) read another process's memory (pid namespaces?)",
                               p.rank, h->pid);
  return false;
}

// Publishes r's descriptor; false when the FIFO has no free slot now.
bool ShmTransport::postSingleCopy(Peer& p, Request& r, const SharedRef* ref) {
  if (!p.out.hasFreeSlot()) return false;
  SlotHeader& slot = p.out.nextHeader();
  slot.tag = r.tag;
  slot.totalBytes = r.bytes;
  slot.offset = 0;
  slot.bytes = 0;
  slot.cmaAddr = reinterpret_cast<uintptr_t>(r.sendData);
  slot.sharedFd = ref ? ref->fd : -1;
  if (ref) {
    slot.sharedIno = ref->ino;
    slot.sharedAllocBytes = ref->allocBytes;
    slot.sharedOffset = ref->offset;
  }
  p.out.publish();
  p.bell.ring();
  r.started = true;
  r.cmaOrdinal = ++p.cmaPosted;
  count(counters_.sent, r.bytes);
  return true;
}

bool ShmTransport::mapSharedSend(Peer& p, Request& r, const SlotHeader& slot) {
  SharedRef ref;
  ref.pid = p.pid;
  ref.fd = static_cast<int32_t>(slot.sharedFd);
  ref.ino = slot.sharedIno;
  ref.allocBytes = slot.sharedAllocBytes;
  ref.offset = slot.sharedOffset;
  char* src = nullptr;
  if (sharedMaps_.map(ref, r.bytes, &src) != snclSuccess) {
    PairStatus details{};
    details.reporter = rank_;
    failPair(p, snclRemoteError, fmt::format("shm: rank {}: {}", rank_, lastError()), PairFailure::ReadFailed, details);
    return false;
  }
  r.sharedSrc = src;
  return true;
}

bool ShmTransport::progressAcks(Peer& p) {
  if (p.acks.empty()) return false;
  const uint64_t done = loadAcquire(p.out.cmaDone());
  bool moved = false;
  while (!p.acks.empty() && p.acks.front()->cmaOrdinal <= done) {
    p.acks.pop()->state = Request::State::Done;
    moved = true;
  }
  return moved;
}

int ShmTransport::readPeer(Peer& p, char* to, uint64_t from, size_t bytes) {
  while (bytes > 0) {
    iovec local{to, bytes};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(from)), bytes};
    const ssize_t got = process_vm_readv(p.pid, &local, 1, &remote, 1, 0);
    if (got <= 0) return got < 0 ? errno : EFAULT;
    to += got;
    from += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return 0;
}

// Reads at most a FIFO's worth of r per call (like the FIFO path, so that one long message
// does not keep this rank from its other peers).
int ShmTransport::readSingleCopy(Peer& p, Request& r) {
  size_t budget = p.in.nSlots() * p.in.slotBytes();
  char* dst = static_cast<char*>(r.sink.dst);
  // From a shared allocation (or a thread of this process): read or reduced in place, from
  // this process's mapping of it.
  const bool mapped = r.sharedSrc != nullptr;
  if (!mapped && !dst && staging_.empty()) {  // a descriptor the agreed setup does not allow
    PairStatus details{};
    details.reporter = rank_;
    failPair(p, snclInternalError, fmt::format("shm: rank {}: a single-copy message from rank {} with no way to read it",
                                               rank_, p.rank),
             PairFailure::ReadFailed, details);
    return -1;
  }
  while (r.doneBytes < r.bytes && budget > 0) {
    const size_t piece = std::min({r.bytes - r.doneBytes, budget, dst || mapped ? budget : staging_.size()});
    const char* from = mapped ? r.sharedSrc + r.doneBytes : nullptr;
    char* to = dst ? dst + r.doneBytes : staging_.data();
    // Copied or reduced before the status check below, as a read is: a buffer the sender
    // gave back meanwhile fails the request instead of being delivered.
    // Both ends of a message that fits the cache stay there for whoever reads them next;
    // the working set counts its peer's message the other way too (an exchange).
    if (mapped && dst) (pastTheCache(4 * r.bytes, options_.cacheBytes) ? copyNonTemporal : copyCached)(to, from, piece);
    if (mapped && !dst) r.sink.deliver(r.sink.ctx, r.doneBytes, from, piece);
    if (!mapped) {
      if (const int err = readPeer(p, to, r.cmaAddr + r.doneBytes, piece)) {
        PairStatus details{};
        details.reporter = rank_;
        if (err == ESRCH || !peerAlive(p)) {  // the usual story for a dead peer, as the stall check tells it
          failPair(p, snclRemoteError, fmt::format("shm: peer rank {} (pid {}) died", p.rank, p.pid), PairFailure::Died,
                   details);
          return -1;
        }
        failPair(p, snclRemoteError,
                 fmt::format("shm: rank {}: single-copy read of {} bytes from rank {} (pid {}) failed: {} (the peer "
                             "died or released its buffer)",
                             rank_, piece, p.rank, p.pid, strerror(err)),
                 PairFailure::ReadFailed, details);
        return -1;
      }
    }
    // The sender may have failed the pair (and released its buffer) during the read. The
    // status is loaded after the read (a syscall, or memcpy's loads, which x86 does not
    // reorder with a later load; the signal fence keeps the compiler from doing so).
    std::atomic_signal_fence(std::memory_order_seq_cst);
    PairFailureInfo remote = readPairStatus(p.in.status());
    if (remote.reason == PairFailure::None) remote = readPairStatus(p.out.status());
    if (remote.reason != PairFailure::None) {
      failFromRemote(p, remote);
      return -1;
    }
    if (dst || !mapped) count(counters_.copied, piece);
    count(counters_.received, piece);
    if (!dst && !mapped) r.sink.deliver(r.sink.ctx, r.doneBytes, to, piece);
    r.doneBytes += piece;
    budget -= piece;
  }
  if (r.doneBytes < r.bytes) return 0;
  storeRelease(p.in.cmaDone(), ++p.cmaRead);
  p.bell.ring();
  return 1;
}

void ShmTransport::addCounters(TransportCounters* out) const {
  out->bytesSent += counters_.sent.load(std::memory_order_relaxed);
  out->bytesReceived += counters_.received.load(std::memory_order_relaxed);
  out->bytesCopied += counters_.copied.load(std::memory_order_relaxed);
}

}  // namespace sncl::shm
