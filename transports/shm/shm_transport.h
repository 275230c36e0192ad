// ShmTransport: how the shared-memory transport works.
//
// Each rank creates one segment holding a FIFO per connected peer for the messages it
// *receives* (layout.h). One segment per rank rather than one per pair: n files instead
// of n^2, the receiver's pages are faulted in (and placed on its NUMA node) by the rank
// that reads them in place, and a sender still maps only the header pages and its own FIFO.
// Segments are unlinked right after every peer mapped them, so nothing stays in /dev/shm
// whatever way the ranks end.
//
// A message travels as fragments of at most one slot: the sender copies a fragment into
// the next free slot and publishes it; the receiver hands the slot to the RecvSink in
// place and frees it. A message longer than the FIFO streams through it. The first slot's
// header carries (tag, total bytes), which the receiver checks against what it posted.
//
// Messages of at least SNCL_SHM_CMA_MIN_BYTES take the single-copy path instead
// (shm_single_copy.cc): the sender publishes one slot holding a descriptor (the buffer's
// address in its address space), and the receiver reads the buffer itself with
// process_vm_readv (memcpy when the peer is a thread of this process): straight into the
// destination of a plain receive (RecvSink::dst), in cache-sized pieces through a staging
// buffer when the sink reduces. The send completes when the receiver bumps the FIFO's
// cmaDone counter, so the sender's buffer is never released while it may be read. Setup
// probes the path once; if any rank cannot use it, the whole comm uses the FIFOs.
//
// Progress happens in test() (all peers, every call); wait() spins briefly and then sleeps
// on this rank's doorbell, which peers ring after they publish or free a slot for it. A
// pair fails as a whole (both directions, both ranks) on a mismatch, an abort, a timeout
// or a dead peer; the reason is written in shared memory so that the other rank fails
// promptly with the same story.
//
// One thread drives a transport (isend, irecv, test, wait); abort() may come from any.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "lib/base/clock.h"
#include "lib/transport/transport.h"
#include "transports/shm/fifo.h"
#include "transports/shm/request.h"
#include "transports/shm/shm_cells.h"
#include "transports/shm/segment.h"
#include "transports/shm/shm.h"

namespace sncl::shm {

class ShmTransport : public Transport {
 public:
  explicit ShmTransport(const ShmOptions& options) : options_(options) {}
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  Result setup(const TransportContext& ctx, const std::vector<int>& peers) override;
  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override;
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override;
  Result test(RequestId req, bool* done) override;
  void wait(int64_t maxMicros) override;
  void abort() override;
  // Which of the call's messages take the single-copy path (singleCopyAlways_).
  void callBegin(const CallHints& hints) override {
    movesOnly_ = !hints.exchangesReductions;
    exchange_ = hints.sendsAndReceives;
  }
  void callEnd() override { movesOnly_ = exchange_ = false; }
  // Peers whose process exited (pidfd), dead or not talking to this rank right now.
  void observedFaults(std::vector<uint32_t>* links, std::vector<int>* deadRanks) const override;
  void addCounters(TransportCounters* out) const override;
  bool singleCopy() const { return singleCopy_; }
  LocalCells* localCells() override { return cells_.active() ? &cells_ : nullptr; }
  size_t memoryBytes() const override { return segment_ ? segment_->bytes() : 0; }
  // LocalCells::peerState of rank (shm_cells.cc): the pair's failure, or its death (pidfd).
  Result cellPeerState(int rank);
  Result mapShared(const SharedRef& ref, size_t bytes, char** out) { return sharedMaps_.map(ref, bytes, out); }
  bool sharedBuffers() const { return sharedBuffers_; }

 private:
  struct Peer {
    int rank = -1;
    int pid = 0;
    int pidfd = -1;       // readable once the peer's process has exited; -1: not watched
    PeerSegment segment;  // the peer's header pages and the FIFO this rank sends on
    FifoSender out;
    FifoReceiver in;
    DoorbellRef bell;  // the peer's
    RequestQueue sends;
    RequestQueue recvs;
    RequestQueue acks;        // single-copy sends published, waiting for the receiver's cmaDone
    uint64_t cmaPosted = 0;   // single-copy sends published on out
    uint64_t cmaRead = 0;     // single-copy messages read from in (what this rank wrote to cmaDone)
    bool sameProcess = false; // a thread of this process: memcpy instead of process_vm_readv
    bool active = false;      // in active_: has queued requests
    bool progressed = false;  // moved a slot (or became active) since the last stall check
    Clock::time_point lastProgress;
    Result error = snclSuccess;  // set once the pair failed; every later request fails with it
    std::string errorMessage;
  };

  // setup steps
  Result createSegment(const TransportContext& ctx, const std::vector<int>& peers);
  Result connectPeers(const std::vector<std::string>& names);
  bool probeSingleCopy(Peer& p, std::string* why);

  // posting and progress
  Result peerForPost(int peerRank, Peer** out);
  void activate(Peer& p);
  bool progress();
  bool progressPeer(Peer& p);
  bool progressSends(Peer& p);
  bool progressRecvs(Peer& p);
  // single copy (shm_single_copy.cc)
  // ref: the message lies in a shared allocation the receiver maps (nullptr: it reads cmaAddr).
  bool postSingleCopy(Peer& p, Request& r, const SharedRef* ref);
  bool mapSharedSend(Peer& p, Request& r, const SlotHeader& slot);  // false: the pair failed
  bool progressAcks(Peer& p);
  int readSingleCopy(Peer& p, Request& r);  // 1: finished, 0: more to read, -1: the pair failed
  int readPeer(Peer& p, char* to, uint64_t from, size_t bytes);  // process_vm_readv: 0 or an errno
  bool mayProgress();
  void checkStalledPeers();
  bool peerAlive(const Peer& p) const;

  // failures
  void failPair(Peer& p, Result code, std::string message, PairFailure reason, PairStatus details);
  void failMismatch(Peer& p, const Request& r, const SlotHeader& slot);
  void failFromRemote(Peer& p, const PairFailureInfo& info);
  void failAllAfterAbort();

  ShmOptions options_;
  int rank_ = -1;
  int nranks_ = 0;
  int64_t timeoutMs_ = 60000;
  size_t nSlots_ = 0;
  size_t slotBytes_ = 0;
  std::shared_ptr<Segment> segment_;
  DoorbellRef bell_;               // this rank's: peers ring it
  std::vector<Peer> peers_;        // sized once in setup; Peer addresses are stable
  std::vector<Peer*> peerByRank_;  // nullptr for ranks not connected
  std::vector<Peer*> active_;      // peers with queued requests
  RequestPool pool_;
  WaitPolicy wait_;  // the comm's (lib/comm/threading.h)
  bool oversubscribed_ = false;
  Clock::time_point lastStallCheck_;
  std::atomic<bool> connected_{false};  // setup finished: abort() may touch the pairs
  std::atomic<bool> aborted_{false};
  bool abortHandled_ = false;

  // Single-copy path: on for the comm when every rank enabled it and could read its peers.
  // Taken by every large message when singleCopyAlways_ (SNCL_SHM_CMA=1, or more ranks
  // than cores), else only by those of calls that do not exchange reductions (movesOnly_):
  // with a core per rank the FIFO's two copies overlap the reduction of the other
  // direction's data, while a message that only travels one way is copied fastest once
  // (ShmOptions::singleCopyAuto).
  bool singleCopy_ = false;
  bool singleCopyAlways_ = false;
  bool movesOnly_ = false;     // the current call exchanges no reductions (callBegin's hint)
  bool exchange_ = false;      // it is a group in which this rank sends and receives (callBegin's hint)
  uint64_t cmaProbe_ = 0;     // the word peers read at setup (its address is in the header)
  std::vector<char> staging_; // one piece for reduced single-copy receives, faulted in at setup

  // Shared buffers: on when every rank can map its peers' allocations (agreed at setup).
  // Collectives use them through the cells; single-copy messages from such an allocation
  // are copied out of the receiver's mapping of it.
  bool sharedBuffers_ = false;
  SharedMaps sharedMaps_;

  // Cells: offered when this rank reaches every other rank here; used at the comm's smallest offer.
  size_t cellBytesOffered_ = 0;
  ShmCells cells_;
  void setupCells(size_t agreedBytes);

  // Written only by the driving thread, read by any (addCounters): relaxed, no RMW.
  struct Counters {
    std::atomic<uint64_t> sent{0}, received{0}, copied{0};
  } counters_;
  static void count(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

}  // namespace sncl::shm
