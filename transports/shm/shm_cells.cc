// ShmCells: the cells of small collectives (shm_cells.h); failures are the pair's, as the
// FIFOs report them (shm_progress.cc).
#include "transports/shm/shm_cells.h"

#include <atomic>

#include "transports/shm/shm_transport.h"

namespace sncl::shm {

void ShmCells::init(ShmTransport* transport, int rank, size_t cellBytes, std::vector<Rank> ranks) {
  transport_ = transport;
  rank_ = rank;
  std::vector<Area> areas;
  bells_.clear();
  for (const Rank& r : ranks) {
    areas.push_back({r.area, r.stride});
    bells_.push_back(r.bell);
  }
  setLayout(cellBytes, std::move(areas));
}

void ShmCells::publish(uint64_t call, uint64_t desc) {
  Header& h = header(rank_, call);
  std::atomic_ref<uint64_t>(h.desc).store(desc, std::memory_order_relaxed);
  // seq_cst, as the sleeper's arm() and its last look (wait): of this store and a peer's
  // announcement that it sleeps (waiters), whichever comes second sees the other, so
  // either it sees the call or this rank sees it asleep (DoorbellRef::ringIfWaiting).
  // (Not a fence: ThreadSanitizer does not model fences.)
  std::atomic_ref<uint64_t>(h.call).store(call, std::memory_order_seq_cst);
  for (size_t r = 0; r < bells_.size(); ++r)
    if (static_cast<int>(r) != rank_) bells_[r].ringIfWaiting();
}

void ShmCells::wait(int rank, uint64_t call, int64_t maxMicros) {
  DoorbellRef& own = bells_[static_cast<size_t>(rank_)];
  const uint32_t seq = own.arm();
  const uint64_t seen = std::atomic_ref<uint64_t>(header(rank, call).call).load(std::memory_order_seq_cst);
  if (seen < call) own.sleep(seq, maxMicros);
  own.disarm();
}

bool ShmCells::sharedBuffers() const {
  return active() && transport_->sharedBuffers();
}

Result ShmCells::mapShared(const SharedRef& ref, size_t bytes, char** out) {
  return transport_->mapShared(ref, bytes, out);
}

Result ShmCells::peerState(int rank) {
  return transport_->cellPeerState(rank);
}

Result ShmTransport::cellPeerState(int rank) {
  if (aborted_.load(std::memory_order_acquire)) return fail(snclInvalidUsage, "shm: rank {}: the transport was aborted", rank_);
  Peer* p = rank >= 0 && rank < nranks_ ? peerByRank_[static_cast<size_t>(rank)] : nullptr;
  if (!p) return fail(snclInternalError, "shm: rank {} has no cells of rank {}", rank_, rank);
  if (p->error == snclSuccess) {
    PairFailureInfo remote = readPairStatus(p->in.status());
    if (remote.reason == PairFailure::None) remote = readPairStatus(p->out.status());
    if (remote.reason != PairFailure::None) {
      failFromRemote(*p, remote);
    } else if (!peerAlive(*p)) {
      PairStatus details{};
      details.reporter = rank_;
      failPair(*p, snclRemoteError, fmt::format("shm: peer rank {} (pid {}) died", p->rank, p->pid),
               PairFailure::Died, details);
    }
  }
  if (p->error != snclSuccess) return fail(p->error, "{}", p->errorMessage);
  return snclSuccess;
}

}  // namespace sncl::shm
