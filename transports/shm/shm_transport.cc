// ShmTransport: options, setup and teardown. Posting and progress: shm_progress.cc.
#include "transports/shm/shm_transport.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/net/bootstrap.h"
#include "lib/topo/discovery.h"

namespace sncl {

constexpr size_t kMaxCellBytes = 1u << 20;

ShmOptions ShmOptions::fromEnv() {
  ShmOptions o;
  o.fifoBytes = env::bytes("SNCL_SHM_FIFO_BYTES", 0);
  // Capped: beyond a few KiB the FIFOs' pipelined copies win anyway (shm.h).
  o.cellBytes = std::min<uint64_t>(env::bytes("SNCL_SHM_CELL_BYTES", o.cellBytes), kMaxCellBytes);
  o.slotBytes = env::bytes("SNCL_SHM_SLOT_BYTES", 0);
  // Unset: on when the host has more ranks than cores (singleCopyAuto).
  const auto cma = env::str("SNCL_SHM_CMA");
  o.singleCopyAuto = !cma || cma->empty();
  o.singleCopy = o.singleCopyAuto || env::integer("SNCL_SHM_CMA", 1) != 0;
  o.singleCopyMinBytes = std::max<uint64_t>(1, env::bytes("SNCL_SHM_CMA_MIN_BYTES", o.singleCopyMinBytes));
  o.singleCopyMovesMinBytes =
      std::max<uint64_t>(1, env::bytes("SNCL_SHM_CMA_MOVES_MIN_BYTES", o.singleCopyMovesMinBytes));
  o.singleCopyMovesMaxBytes = env::bytes("SNCL_SHM_CMA_MOVES_MAX_BYTES", o.singleCopyMovesMaxBytes);
  o.singleCopyExchangeMaxBytes = env::bytes("SNCL_SHM_CMA_EXCHANGE_MAX_BYTES", o.singleCopyExchangeMaxBytes);
  o.sharedBuffers = env::integer("SNCL_SHM_DIRECT", 1) != 0;
  o.sharedMinBytes = std::max<uint64_t>(1, env::bytes("SNCL_SHM_DIRECT_P2P_MIN_BYTES", o.sharedMinBytes));
  o.singleCopyPieceBytes =
      std::max<uint64_t>(shm::kPage, env::bytes("SNCL_SHM_CMA_PIECE_BYTES", o.singleCopyPieceBytes));
  o.cacheBytes = topo::lastLevelCacheBytes();
  return o;
}

std::unique_ptr<Transport> createShmTransport() {
  return createShmTransport(ShmOptions::fromEnv());
}

std::unique_ptr<Transport> createShmTransport(const ShmOptions& options) {
  return std::make_unique<shm::ShmTransport>(options);
}

namespace shm {
namespace {

// FIFO sizing when the options leave it open: a receiver's budget is shared by its peers,
// within a floor (enough slots to overlap copies at 64 ranks) and a ceiling (beyond which
// bandwidth does not grow). Per peer, 2 ranks: 8 x 512 KiB; 8 ranks: 8 x 256 KiB;
// 64 ranks: 8 x 32 KiB (16 MiB per rank, all of it faulted in at setup).
constexpr size_t kReceiverBudget = 16u << 20;
constexpr size_t kMaxFifoBytes = 4u << 20;
constexpr size_t kMinFifoBytes = 256u << 10;
constexpr size_t kSlotsPerFifo = 8;
constexpr size_t kMinSlots = 2;

// What each rank publishes at setup.
struct SegmentRecord {
  int32_t status;  // snclResult_t of creating the segment
  char name[92];
  SharedRef probe;  // a shared allocation of this rank's (fd -1: none) that peers try to open
};

// The probe allocation of setup, freed when setup ends (every peer tried it by then).
struct SharedProbe {
  void* mem = nullptr;
  SharedRef ref;
  explicit SharedProbe(bool wanted) {
    if (wanted && sharedAlloc(1, &mem) == snclSuccess) sharedFind(mem, 1, &ref);
  }
  ~SharedProbe() { sharedFree(mem); }
};

}  // namespace

ShmTransport::~ShmTransport() {
  if (connected_.load()) {
    // A peer still waiting on this rank fails now instead of at its deadline; it first
    // drains whatever this rank had already published.
    PairStatus details{};
    details.reporter = rank_;
    for (Peer& p : peers_) {
      failPairStatus(p.in.status(), PairFailure::Closed, details);
      failPairStatus(p.out.status(), PairFailure::Closed, details);
      p.bell.ring();
    }
  }
  for (Peer& p : peers_)
    if (p.pidfd >= 0) close(p.pidfd);
}

Result ShmTransport::setup(const TransportContext& ctx, const std::vector<int>& peers) {
  if (segment_) return fail(snclInvalidUsage, "shm: setup called twice");
  if (!ctx.bootstrap || !ctx.peers || ctx.peers->size() != static_cast<size_t>(ctx.nranks) || ctx.rank < 0 ||
      ctx.rank >= ctx.nranks)
    return fail(snclInternalError, "shm: setup needs a bootstrap and the info of all {} ranks", ctx.nranks);
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  timeoutMs_ = ctx.timeoutMs > 0 ? ctx.timeoutMs : env::timeoutMs();
  const Deadline deadline = Deadline::afterMs(timeoutMs_);
  removeStaleSegments();

  // A rank that fails locally still takes part in both exchanges, so that nobody waits
  // for it until the deadline; every rank then fails setup alike.
  Result created = createSegment(ctx, peers);
  std::vector<SegmentRecord> records(nranks_);
  records[rank_].status = created;
  // Shared buffers need every rank to open its peers' allocations (/proc/<pid>/fd, which a
  // hardened /proc may refuse): each rank offers a one-page allocation to try.
  SharedProbe probe(options_.sharedBuffers);
  records[rank_].probe = probe.ref;
  if (segment_) snprintf(records[rank_].name, sizeof(records[rank_].name), "%s", segment_->name().c_str());
  Result r = ctx.bootstrap->allGather(records.data(), sizeof(SegmentRecord), deadline);
  if (r != snclSuccess || created != snclSuccess) {
    segment_.reset();  // unlinks it
    return r != snclSuccess ? r : created;
  }
  for (int k = 0; k < nranks_; ++k) {
    if (records[k].status == snclSuccess) continue;
    segment_.reset();
    return fail(snclRemoteError, "shm: rank {} could not create its shared memory segment ({})", k,
                resultName(static_cast<Result>(records[k].status)));
  }

  std::vector<std::string> names(nranks_);
  for (int k = 0; k < nranks_; ++k)
    names[k] = std::string(records[k].name, strnlen(records[k].name, sizeof(records[k].name)));
  Result mapped = connectPeers(names);
  // With the mapping status goes whether this rank can read all its peers' memory: the
  // single-copy path is on for the comm only if every rank can (a sender cannot know
  // whether its receiver could read a descriptor).
  // How waits wait: the comm's threading model, from the CPUs of the host's ranks.
  oversubscribed_ = ctx.oversubscribed;
  wait_ = ctx.wait;
  // For every large message only with more ranks than cores (or forced): there the FIFO's
  // second copy costs a core another rank needs; with a core per rank only in calls whose
  // data goes one way (shm.h).
  std::string noSingleCopy = !options_.singleCopy ? "SNCL_SHM_CMA=0" : "";
  singleCopyAlways_ = !options_.singleCopyAuto || oversubscribed_;
  if (mapped == snclSuccess)
    for (Peer& p : peers_)
      if (noSingleCopy.empty() && !probeSingleCopy(p, &noSingleCopy)) break;
  bool sharedOk = probe.ref.fd >= 0;
  for (Peer& p : peers_)
    if (sharedOk && records[p.rank].probe.pid != records[rank_].probe.pid)
      sharedOk = records[p.rank].probe.fd >= 0 && sharedProbe(records[p.rank].probe);
  struct MapRecord {
    int32_t status;
    int32_t singleCopy;
    uint64_t cellBytes;
    int32_t sharedBuffers;
  };
  std::vector<MapRecord> statuses(nranks_);
  statuses[rank_] = {mapped, noSingleCopy.empty() ? 1 : 0, cellBytesOffered_, sharedOk ? 1 : 0};
  r = ctx.bootstrap->allGather(statuses.data(), sizeof(MapRecord), deadline);
  // Every peer has mapped this rank's segment (or given up): from now on only mappings
  // keep it alive, so nothing is left in /dev/shm however the ranks end.
  segment_->unlink();
  SNCL_CHECK(r);
  SNCL_CHECK(mapped);
  singleCopy_ = true;
  uint64_t cellBytes = cellBytesOffered_;
  bool sharedBuffers = true;
  for (int k = 0; k < nranks_; ++k) {
    cellBytes = std::min(cellBytes, statuses[k].cellBytes);
    sharedBuffers &= statuses[k].sharedBuffers != 0;
    if (statuses[k].status != snclSuccess)
      return fail(snclRemoteError, "shm: rank {} could not map its peers' segments ({})", k,
                  resultName(static_cast<Result>(statuses[k].status)));
    if (!statuses[k].singleCopy) {
      singleCopy_ = false;
      if (noSingleCopy.empty()) noSingleCopy = fmt::format("rank {} cannot use it", k);
    }
  }
  if (singleCopy_) {
    staging_.assign(options_.singleCopyPieceBytes, 0);  // faulted in here, not on the first message
  } else if (!peers_.empty()) {
    log::info(log::Subsys::Transport, "shm: rank {}: single-copy path off ({}): every message goes through the FIFOs",
              rank_, noSingleCopy);
  }

  setupCells(cellBytes);
  sharedBuffers_ = sharedBuffers;
  pool_.init(std::min(RequestPool::kMaxCapacity, 1024 + 16 * peers.size()));
  active_.reserve(peers_.size());
  lastStallCheck_ = Clock::now();
  connected_.store(true);
  if (aborted_.load()) return fail(snclInvalidUsage, "shm: rank {}: aborted during setup", rank_);
  log::info(log::Subsys::Transport,
            "shm: {}rank {}/{}: {} peers, FIFO {} x {} KiB per peer, segment {:.1f} MiB, cells {}, single copy {}, {}",
            ctx.commName.empty() ? "" : ctx.commName + " ", rank_, nranks_, peers_.size(), nSlots_, slotBytes_ >> 10,
            segment_->bytes() / 1048576.0,
            cells_.active() ? fmt::format("up to {} bytes per rank{}", cells_.cellBytes(),
                                          sharedBuffers ? ", shared buffers mapped in place" : "")
                            : std::string("off"),
            !singleCopy_      ? std::string("off")
            : singleCopyAlways_ ? fmt::format("from {} KiB", options_.singleCopyMinBytes >> 10)
                                : fmt::format("from {} to {} KiB in calls that exchange no reductions, to {} KiB in "
                                              "groups that send and receive (a core per rank)",
                                              options_.singleCopyMovesMinBytes >> 10,
                                              options_.singleCopyMovesMaxBytes >> 10,
                                              options_.singleCopyExchangeMaxBytes >> 10),
            wait_.spins() ? fmt::format("spinning {} us before sleeping", wait_.spinMicros)
                          : std::string("oversubscribed: no spinning"));
  return snclSuccess;
}

Result ShmTransport::createSegment(const TransportContext& ctx, const std::vector<int>& peers) {
  const PeerInfo& me = (*ctx.peers)[rank_];
  peers_ = std::vector<Peer>(peers.size());
  peerByRank_.assign(nranks_, nullptr);
  for (size_t i = 0; i < peers.size(); ++i) {
    const int peer = peers[i];
    if (peer < 0 || peer >= nranks_ || peer == rank_ || peerByRank_[peer])
      return fail(snclInternalError, "shm: rank {}: bad or repeated peer {} (of {} ranks)", rank_, peer, nranks_);
    const PeerInfo& info = (*ctx.peers)[peer];
    if (info.bootId != me.bootId)
      return fail(snclInvalidUsage, "shm: rank {} cannot reach rank {}: it runs on another machine ({})", rank_, peer,
                  info.hostname);
    peers_[i].rank = peer;
    peers_[i].pid = info.pid;
    peerByRank_[peer] = &peers_[i];
  }

  const size_t fifoBytes = options_.fifoBytes != 0
                               ? options_.fifoBytes
                               : std::bit_floor(std::clamp(kReceiverBudget / std::max<size_t>(1, peers.size()),
                                                           kMinFifoBytes, kMaxFifoBytes));
  slotBytes_ = options_.slotBytes != 0 ? alignUp(options_.slotBytes, kPage)
                                       : std::max(kPage, std::bit_floor(fifoBytes / kSlotsPerFifo));
  nSlots_ = std::max(kMinSlots, fifoBytes / slotBytes_);
  const size_t stride = fifoStride(nSlots_, slotBytes_);
  const size_t firstFifo = headerBytes(nranks_);
  // Cells only when this transport reaches every other rank: they serve calls of the whole comm.
  cellBytesOffered_ = nranks_ >= 2 && peers.size() == static_cast<size_t>(nranks_ - 1) ? options_.cellBytes : 0;
  const size_t cellsOffset = firstFifo + peers.size() * stride;
  SNCL_CHECK(Segment::create(segmentName(ctx.commId, rank_), cellsOffset + cellsAreaBytes(cellBytesOffered_),
                             &segment_));

  auto* header = reinterpret_cast<SegmentHeader*>(segment_->data());
  header->magic = kSegmentMagic;
  header->rank = rank_;
  header->nranks = nranks_;
  header->slotBytes = slotBytes_;
  header->nSlots = nSlots_;
  header->fifoStride = stride;
  header->cellsOffset = cellsOffset;
  header->cellBytes = cellBytesOffered_;
  // Any value a stray read elsewhere is unlikely to find: the probe compares it.
  cmaProbe_ = (ctx.commId ^ 0x9e37'79b9'7f4a'7c15ull * static_cast<uint64_t>(rank_ + 1)) ^
              reinterpret_cast<uintptr_t>(this) ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  header->pid = getpid();
  header->cmaProbeAddr = reinterpret_cast<uintptr_t>(&cmaProbe_);
  header->cmaProbeValue = cmaProbe_;
  for (size_t i = 0; i < peers.size(); ++i) fifoOffsets(header)[peers[i]] = firstFifo + i * stride;
  bell_ = DoorbellRef(&header->doorbell);
  return snclSuccess;
}

Result ShmTransport::connectPeers(const std::vector<std::string>& names) {
  auto* header = reinterpret_cast<SegmentHeader*>(segment_->data());
  for (Peer& p : peers_) {
    if (names[p.rank].empty())
      return fail(snclInvalidUsage, "shm: rank {} has no shm segment: it did not connect rank {}", p.rank, rank_);
    SNCL_CHECK(PeerSegment::open(names[p.rank], rank_, nranks_, &p.segment));
    const SegmentHeader* peerHeader = p.segment.header();
    p.out = FifoSender(p.segment.fifo(), peerHeader->nSlots, peerHeader->slotBytes);
    p.in = FifoReceiver(segment_->data() + fifoOffsets(header)[p.rank], nSlots_, slotBytes_);
    p.bell = DoorbellRef(&p.segment.header()->doorbell);
    p.sameProcess = p.segment.sameProcess();
    // The peer runs on this kernel (same boot id): a pidfd tells when its process exits,
    // zombie or not. No pidfd (the pid is not visible from this pid namespace, or the
    // process is gone already): the deadline alone catches a dead peer.
    if (p.pid != getpid()) p.pidfd = static_cast<int>(syscall(SYS_pidfd_open, p.pid, 0));
  }
  return snclSuccess;
}


void ShmTransport::setupCells(size_t agreedBytes) {
  if (agreedBytes == 0) return;
  auto* header = reinterpret_cast<SegmentHeader*>(segment_->data());
  std::vector<ShmCells::Rank> ranks(static_cast<size_t>(nranks_));
  ranks[rank_] = {segment_->data() + header->cellsOffset, cellStride(header->cellBytes), bell_};
  for (Peer& p : peers_)
    ranks[p.rank] = {p.segment.cells(), cellStride(p.segment.header()->cellBytes), p.bell};
  cells_.init(this, rank_, agreedBytes, std::move(ranks));
}

void ShmTransport::abort() {
  if (aborted_.exchange(true)) return;
  if (!connected_.load()) return;  // setup sees aborted_ when it ends
  PairStatus details{};
  details.reporter = rank_;
  for (Peer& p : peers_) {
    failPairStatus(p.in.status(), PairFailure::Aborted, details);
    failPairStatus(p.out.status(), PairFailure::Aborted, details);
    p.bell.ring();
  }
  bell_.ring();  // wakes this rank's own thread if it sleeps in wait()
}

}  // namespace shm
}  // namespace sncl
