// ShmTransport: posting, progress, waiting and failures. Nothing here allocates unless a
// pair fails (the error message).
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "lib/base/copy.h"
#include "transports/shm/shm_transport.h"

namespace sncl::shm {
namespace {

// How often stalled peers are checked for liveness and deadlines (in test()).
constexpr auto kStallCheckInterval = std::chrono::milliseconds(20);
// The longest wait() sleeps, so that a caller that waits long still gets to test() (and
// check its peers) a few times a second.
constexpr int64_t kMaxSleepMicros = 500000;

std::string describeMismatch(const PairStatus& d) {
  if (d.sentBytes != d.expectedBytes)
    return fmt::format(
        "rank {} -> rank {}: message of {} bytes (tag {:#x}) but {} expected: counts differ across ranks?", d.fromRank,
        d.toRank, d.sentBytes, d.sentTag, d.expectedBytes);
  return fmt::format(
      "rank {} -> rank {}: message with tag {:#x} but tag {:#x} expected ({} bytes): ranks posted operations in "
      "different orders?",
      d.fromRank, d.toRank, d.sentTag, d.expectedTag, d.sentBytes);
}

}  // namespace

Result ShmTransport::peerForPost(int peerRank, Peer** out) {
  if (aborted_.load(std::memory_order_relaxed))
    return fail(snclInvalidUsage, "shm: rank {}: the transport was aborted", rank_);
  if (!connected_.load(std::memory_order_relaxed))
    return fail(snclInvalidUsage, "shm: isend/irecv before setup finished");
  if (peerRank < 0 || peerRank >= nranks_ || !peerByRank_[peerRank])
    return fail(snclInvalidArgument, "shm: rank {} is not connected to rank {}", rank_, peerRank);
  Peer& p = *peerByRank_[peerRank];
  if (p.error != snclSuccess) return fail(p.error, "{}", p.errorMessage);
  *out = &p;
  return snclSuccess;
}

void ShmTransport::activate(Peer& p) {
  if (p.active) return;
  p.active = true;
  p.progressed = true;  // the stall clock starts at the next check
  active_.push_back(&p);
}

Result ShmTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) {
  Peer* p = nullptr;
  SNCL_CHECK(peerForPost(peer, &p));
  if (bytes != 0 && data == nullptr)
    return fail(snclInvalidArgument, "shm: rank {}: send of {} bytes to rank {} from a null buffer", rank_, bytes,
                peer);
  Request* r = pool_.acquire(req);
  if (!r) return fail(snclInvalidUsage, "shm: rank {}: more than {} requests outstanding", rank_, pool_.capacity());
  r->state = Request::State::Queued;
  r->isSend = true;
  r->peer = static_cast<int32_t>(p - peers_.data());
  r->tag = tag;
  r->bytes = bytes;
  r->sendData = static_cast<const char*>(data);
  r->singleCopy = singleCopy_ && (singleCopyAlways_ ? bytes >= options_.singleCopyMinBytes
                                                  : movesOnly_ && bytes >= options_.singleCopyMovesMinBytes &&
                                                        bytes <= (exchange_ ? options_.singleCopyExchangeMaxBytes
                                                                                : options_.singleCopyMovesMaxBytes));
  p->sends.push(r);
  activate(*p);
  return snclSuccess;
}

Result ShmTransport::irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) {
  Peer* p = nullptr;
  SNCL_CHECK(peerForPost(peer, &p));
  if (bytes != 0 && sink.deliver == nullptr)
    return fail(snclInvalidArgument, "shm: rank {}: receive of {} bytes from rank {} without a sink", rank_, bytes,
                peer);
  Request* r = pool_.acquire(req);
  if (!r) return fail(snclInvalidUsage, "shm: rank {}: more than {} requests outstanding", rank_, pool_.capacity());
  r->state = Request::State::Queued;
  r->peer = static_cast<int32_t>(p - peers_.data());
  r->tag = tag;
  r->bytes = bytes;
  r->sink = sink;
  p->recvs.push(r);
  activate(*p);
  return snclSuccess;
}

Result ShmTransport::test(RequestId id, bool* done) {
  *done = false;
  Request* r = pool_.find(id);
  if (!r) return fail(snclInvalidUsage, "shm: rank {}: unknown request id {:#x}", rank_, id);
  if (!abortHandled_ && aborted_.load(std::memory_order_acquire)) failAllAfterAbort();
  progress();
  checkStalledPeers();
  if (r->state == Request::State::Queued) return snclSuccess;
  *done = true;
  const Result error = r->error;
  const Peer& p = peers_[r->peer];
  pool_.release(r);
  if (error == snclSuccess) return snclSuccess;
  return fail(error, "{}", p.errorMessage);
}

bool ShmTransport::progress() {
  bool moved = false;
  for (size_t i = 0; i < active_.size();) {
    Peer& p = *active_[i];
    moved |= progressPeer(p);
    if (p.sends.empty() && p.recvs.empty() && p.acks.empty()) {
      p.active = false;
      active_[i] = active_.back();
      active_.pop_back();
    } else {
      ++i;
    }
  }
  return moved;
}

bool ShmTransport::progressPeer(Peer& p) {
  // Single-copy sends the receiver acknowledged are done even if the pair failed since.
  bool moved = progressAcks(p);
  // The peer failed the pair (or left): sends cannot complete any more (nor single-copy
  // sends be read), receives can still take what the peer published before.
  PairFailureInfo remote = readPairStatus(p.in.status());
  if (remote.reason == PairFailure::None) remote = readPairStatus(p.out.status());
  if (remote.reason != PairFailure::None && (!p.sends.empty() || !p.acks.empty())) {
    failFromRemote(p, remote);
    return true;
  }
  // Sends first: a single-copy descriptor costs nothing to publish, and a receive may read
  // a whole message first. Published after that read, the peer's copy of this rank's
  // message waited for it: an exchange's two reads ran one after the other.
  moved |= progressSends(p);
  if (p.error == snclSuccess) moved |= progressRecvs(p);
  if (p.error == snclSuccess && remote.reason != PairFailure::None && !p.recvs.empty()) {
    failFromRemote(p, remote);
    return true;
  }
  if (moved) p.progressed = true;
  return moved;
}

// Each call moves at most one FIFO's worth of slots, so that a long message does not keep
// this rank from its other peers, nor from the other direction.
bool ShmTransport::progressSends(Peer& p) {
  bool moved = false;
  size_t budget = p.out.nSlots();
  while (Request* r = p.sends.front()) {
    SharedRef ref;
    const bool viaShared = sharedBuffers_ && r->bytes >= options_.sharedMinBytes &&
                           (p.sameProcess || sharedFind(r->sendData, r->bytes, &ref));
    if (viaShared || r->singleCopy) {
      if (budget-- == 0 || !postSingleCopy(p, *r, viaShared && !p.sameProcess ? &ref : nullptr)) return moved;
      p.acks.push(p.sends.pop());  // done when the receiver acknowledges it
      moved = true;
      continue;
    }
    while (!r->started || r->doneBytes < r->bytes) {
      if (budget-- == 0 || !p.out.hasFreeSlot()) return moved;
      const size_t bytes = std::min(p.out.slotBytes(), r->bytes - r->doneBytes);
      SlotHeader& slot = p.out.nextHeader();
      slot.tag = r->tag;
      slot.totalBytes = r->bytes;
      slot.offset = r->doneBytes;
      slot.bytes = bytes;
      slot.cmaAddr = 0;
      slot.sharedFd = -1;
      if (bytes != 0) copyCached(p.out.nextPayload(), r->sendData + r->doneBytes, bytes);
      p.out.publish();
      count(counters_.copied, bytes);
      count(counters_.sent, bytes);
      p.bell.ring();  // per slot: the receiver starts on it while the next one is copied
      r->doneBytes += bytes;
      r->started = true;
      moved = true;
    }
    p.sends.pop()->state = Request::State::Done;
  }
  return moved;
}

bool ShmTransport::progressRecvs(Peer& p) {
  bool moved = false;
  size_t budget = p.in.nSlots();
  while (Request* r = p.recvs.front()) {
    if (r->cmaAddr != 0) {  // a single-copy message under way: read (more of) it
      const int state = readSingleCopy(p, *r);
      moved = true;
      if (state <= 0) return moved;
      p.recvs.pop()->state = Request::State::Done;
      continue;
    }
    while (!r->started || r->doneBytes < r->bytes) {
      if (budget-- == 0 || !p.in.hasSlot()) return moved;
      const SlotHeader slot = p.in.slotHeader();
      if (!r->started && (slot.tag != r->tag || slot.totalBytes != r->bytes || slot.offset != 0)) {
        failMismatch(p, *r, slot);
        return true;
      }
      r->started = true;
      if (slot.cmaAddr != 0) {  // a descriptor: the data stays in the sender's buffer
        r->cmaAddr = slot.cmaAddr;
        if (slot.sharedFd >= 0 && !mapSharedSend(p, *r, slot)) return true;
        // A thread of this process: its buffer is read (or reduced from) where it is.
        if (slot.sharedFd < 0 && p.sameProcess) r->sharedSrc = reinterpret_cast<const char*>(slot.cmaAddr);
        p.in.release();
        p.bell.ring();
        moved = true;
        break;
      }
      count(counters_.received, slot.bytes);
      if (slot.bytes != 0) r->sink.deliver(r->sink.ctx, slot.offset, p.in.slotPayload(), slot.bytes);
      r->doneBytes += slot.bytes;
      p.in.release();
      p.bell.ring();
      moved = true;
    }
    if (r->cmaAddr != 0) continue;
    p.recvs.pop()->state = Request::State::Done;
  }
  return moved;
}

void ShmTransport::wait(int64_t maxMicros) {
  if (!connected_.load(std::memory_order_relaxed) || maxMicros <= 0) return;
  const auto start = Clock::now();
  const int64_t sleepMicros = std::min(maxMicros, kMaxSleepMicros);
  const auto spinUntil = start + std::chrono::microseconds(std::min(wait_.spinHere(), sleepMicros));
  do {
    if (mayProgress()) return;
    cpuRelax();
  } while (Clock::now() < spinUntil);
  for (int i = 0; i < wait_.yields; ++i) {
    sched_yield();  // the peer this rank waits for may be waiting for this core
    if (mayProgress()) return;
  }
  const uint32_t seq = bell_.arm();
  if (!mayProgress()) {
    const auto spent = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
    bell_.sleep(seq, sleepMicros - spent);
  }
  bell_.disarm();
}

bool ShmTransport::mayProgress() {
  if (aborted_.load(std::memory_order_relaxed)) return true;
  for (Peer* p : active_) {
    if (!p->recvs.empty() && p->in.hasSlot()) return true;
    if (!p->sends.empty() && p->out.hasFreeSlot()) return true;
    if (!p->recvs.empty() && p->recvs.front()->cmaAddr != 0) return true;
    if (!p->acks.empty() && loadAcquire(p->out.cmaDone()) >= p->acks.front()->cmaOrdinal) return true;
    if (pairFailed(p->in.status()) || pairFailed(p->out.status())) return true;
  }
  return false;
}

void ShmTransport::checkStalledPeers() {
  if (active_.empty()) return;
  const auto now = Clock::now();
  if (now - lastStallCheck_ < kStallCheckInterval) return;
  lastStallCheck_ = now;
  for (Peer* p : active_) {
    if (p->progressed) {
      p->progressed = false;
      p->lastProgress = now;
      continue;
    }
    PairStatus details{};
    details.reporter = rank_;
    if (!peerAlive(*p)) {
      failPair(*p, snclRemoteError, fmt::format("shm: peer rank {} (pid {}) died", p->rank, p->pid), PairFailure::Died,
               details);
      continue;
    }
    const auto stalledMs = std::chrono::duration_cast<std::chrono::milliseconds>(now - p->lastProgress).count();
    if (stalledMs >= timeoutMs_)
      failPair(*p, snclTimeout,
               fmt::format("shm: rank {} <-> rank {} (pid {}): no progress for {} ms (timeout {} ms)", rank_, p->rank,
                           p->pid, stalledMs, timeoutMs_),
               PairFailure::Timeout, details);
  }
}

bool ShmTransport::peerAlive(const Peer& p) const {
  if (p.pidfd < 0) return true;
  pollfd fd{p.pidfd, POLLIN, 0};
  return poll(&fd, 1, 0) == 0;  // readable once the process has exited
}

void ShmTransport::observedFaults(std::vector<uint32_t>*, std::vector<int>* deadRanks) const {
  for (const Peer& p : peers_)
    if (!peerAlive(p)) deadRanks->push_back(p.rank);
}

void ShmTransport::failPair(Peer& p, Result code, std::string message, PairFailure reason, PairStatus details) {
  if (p.error != snclSuccess) return;
  p.error = code;
  p.errorMessage = std::move(message);
  failPairStatus(p.in.status(), reason, details);
  failPairStatus(p.out.status(), reason, details);
  p.bell.ring();  // the peer may sleep waiting for this rank
  for (RequestQueue* queue : {&p.sends, &p.recvs, &p.acks}) {
    while (!queue->empty()) {
      Request* r = queue->pop();
      r->state = Request::State::Failed;
      r->error = code;
    }
  }
}

void ShmTransport::failMismatch(Peer& p, const Request& r, const SlotHeader& slot) {
  PairStatus details{};
  details.reporter = rank_;
  details.fromRank = p.rank;
  details.toRank = rank_;
  details.sentTag = slot.tag;
  details.sentBytes = slot.totalBytes;
  details.expectedTag = r.tag;
  details.expectedBytes = r.bytes;
  failPair(p, snclInvalidArgument, "shm: " + describeMismatch(details), PairFailure::Mismatch, details);
}

void ShmTransport::failFromRemote(Peer& p, const PairFailureInfo& info) {
  const PairStatus& d = info.details;
  switch (info.reason) {
    case PairFailure::Mismatch:
      failPair(p, snclInvalidArgument, "shm: " + describeMismatch(d), info.reason, d);
      return;
    case PairFailure::Aborted:
      failPair(p, snclRemoteError,
               fmt::format("shm: rank {} aborted; rank {} cannot complete its messages with it", p.rank, rank_),
               info.reason, d);
      return;
    case PairFailure::Closed:
      failPair(p, snclRemoteError,
               fmt::format("shm: rank {} closed its connection while rank {} still had messages for it", p.rank, rank_),
               info.reason, d);
      return;
    case PairFailure::ReadFailed:
      failPair(p, snclRemoteError,
               fmt::format("shm: rank {} could not read a single-copy message of rank {} (the sender's buffer)",
                           p.rank, rank_),
               info.reason, d);
      return;
    case PairFailure::Timeout:
      failPair(p, snclRemoteError, fmt::format("shm: rank {} timed out waiting for rank {}", p.rank, rank_),
               info.reason, d);
      return;
    default:
      failPair(p, snclRemoteError, fmt::format("shm: rank {} reported rank {} dead", p.rank, rank_), info.reason, d);
      return;
  }
}

void ShmTransport::failAllAfterAbort() {
  abortHandled_ = true;
  PairStatus details{};
  details.reporter = rank_;
  for (Peer& p : peers_)
    failPair(p, snclInvalidUsage, fmt::format("shm: rank {}: the transport was aborted", rank_), PairFailure::Aborted,
             details);
}

}  // namespace sncl::shm
