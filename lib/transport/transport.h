// The transport interface: the narrow table of operations every transport implements
// (shm, and later ofi and the emulated bus). A transport moves bytes between ranks and
// reports per-peer errors; it knows nothing about collectives. The core never reaches
// into a transport beyond this interface.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/error.h"
#include "lib/base/wait_policy.h"
#include "lib/transport/shared_mem.h"

namespace sncl {

class Bootstrap;
class CommTopology;

// What every rank publishes about itself at init (gathered over the bootstrap).
struct PeerInfo {
  int32_t rank;
  int32_t pid;
  uint64_t hostId;     // equal for ranks on one (virtual) host: hash of hostname or SNCL_HOSTID
  uint64_t bootId;     // hash of /proc/sys/kernel/random/boot_id: same machine, same kernel
  char hostname[64];
};

struct TransportContext {
  int rank = 0;
  int nranks = 0;
  uint64_t commId = 0;              // unique per communicator, equal on all its ranks
  std::string commName;             // for log lines
  const std::vector<PeerInfo>* peers = nullptr;  // indexed by rank
  Bootstrap* bootstrap = nullptr;   // for address exchange during setup
  int64_t timeoutMs = 60000;        // deadline for setup and for a stalled peer
  const CommTopology* topology = nullptr;  // the comm's graph and rank placement (lib/topo/comm_topo.h)
  WaitPolicy wait;                  // how waits wait (the comm's threading model)
  bool oversubscribed = false;      // more ranks of this machine than the CPUs they share
};

// Receives deliver data through a sink so that the executor can reduce straight out of a
// transport's staging memory instead of copying it first. Fragments arrive in order;
// offsets and lengths are multiples of 64 bytes except at the message's end; data is
// valid only during the call.
// dst: optional; when set, the message is a plain copy into dst[0, bytes) (a Recv into
// contiguous memory), and a transport that can read the sender's buffer directly (shm's
// single-copy path) may write it there without calling deliver. Transports that cannot
// ignore it and call deliver as usual.
struct RecvSink {
  void (*deliver)(void* ctx, size_t offset, const void* data, size_t bytes) = nullptr;
  void* ctx = nullptr;
  void* dst = nullptr;
};

// What the comm tells its transports of a call, for choosing their own data paths.
struct CallHints {
  // Every rank reduces what it receives while its own data is still going out (All-Reduce,
  // Reduce-Scatter and its v-form, the scans). Not Reduce, whose data flows toward the
  // root, nor the calls that only move data (the other collectives, sends and receives).
  bool exchangesReductions = false;
  // A group of sends and receives (snclSend/snclRecv) in which this rank does both, as in a
  // Send/Recv exchange or a ring's shift: a send that leaves its copy to the receiver leaves
  // no core idle, since this rank has receives of its own to copy.
  bool sendsAndReceives = false;
};

// Bytes a transport moved for this rank since setup (summed over resets): what it sent and
// received, and the bytes it copied through memory itself (shm: into FIFO slots and
// single-copy reads; deliveries to a sink are the sink's to count).
struct TransportCounters {
  uint64_t bytesSent = 0;
  uint64_t bytesReceived = 0;
  uint64_t bytesCopied = 0;
};

using RequestId = uint32_t;

// Optional (Transport::localCells): cells in memory that every rank of the comm maps, for
// small collectives without messages (lib/exec/cells.*). Each rank has two cells, one per
// call parity; a rank writes its own and publishes it with the call number, peers read it
// once they see that number. Only the thread that runs the comm's calls uses it.
// The layout is fixed here, so that what a small call reads and writes (a call number, a
// cell) takes plain loads rather than calls into the transport: per rank, two cells of a
// stride at an area, each a Header and then the payload. The transport maps the areas
// (setLayout) and does what needs it: publishing, sleeping, a peer's state.
class LocalCells {
 public:
  struct Header {
    uint64_t call;  // the last call this cell holds (0: none yet)
    uint64_t desc;  // what its writer ran (collective, op, dtype, bytes)
  };
  static constexpr size_t kCellsPerRank = 2;  // call parity: a rank can be one call ahead, never two
  struct Area {
    char* base = nullptr;  // the rank's cells in this process's mapping
    size_t stride = 0;     // bytes from one cell to the next (Header and payload, rounded up)
  };

  virtual ~LocalCells() = default;
  // Payload bytes of one cell, equal on every rank (agreed at setup).
  size_t cellBytes() const { return cellBytes_; }
  // The number of the call about to run: 1 after setup or a reset, then one more per call.
  // Every rank of the comm must run the same calls on the cells, so their numbers agree.
  uint64_t beginCall() { return ++calls_; }
  // rank's cell payload for call (this rank's own to fill before publish, a peer's to read
  // once published); desc: what the cell says its writer ran.
  char* cell(int rank, uint64_t call) { return reinterpret_cast<char*>(&header(rank, call)) + sizeof(Header); }
  uint64_t cellDesc(int rank, uint64_t call) {
    return std::atomic_ref<uint64_t>(header(rank, call).desc).load(std::memory_order_relaxed);
  }
  // Whether rank published call, or a later one (acquire).
  bool published(int rank, uint64_t call) {
    return std::atomic_ref<uint64_t>(header(rank, call).call).load(std::memory_order_acquire) >= call;
  }
  // Publishes this rank's cell for call with desc (release) and wakes peers that sleep.
  virtual void publish(uint64_t call, uint64_t desc) = 0;
  // Sleeps until rank may have published call, at most maxMicros (no spinning).
  virtual void wait(int rank, uint64_t call, int64_t maxMicros) = 0;
  // snclSuccess while rank may still publish; else an error naming it (died, closed,
  // aborted, failed a pair), with its message recorded. Makes a system call: not per spin.
  virtual Result peerState(int rank) = 0;
  // Shared buffers (lib/transport/shared_mem.h): whether the comm's ranks can map each
  // other's allocations (agreed at setup), and where a peer process's buffer lies in this
  // one (mapped on first use and kept; only the comm's calling thread asks).
  virtual bool sharedBuffers() const { return false; }
  virtual Result mapShared(const SharedRef& ref, size_t bytes, char** out) {
    return fail(snclInternalError, "this transport maps no shared buffers");
  }

 protected:
  // At setup: every rank's area, this one's included (indexed by rank), and the agreed
  // payload size; calls count from 1 again.
  void setLayout(size_t cellBytes, std::vector<Area> areas) {
    cellBytes_ = cellBytes;
    areas_ = std::move(areas);
    calls_ = 0;
  }
  Header& header(int rank, uint64_t call) {
    const Area& a = areas_[static_cast<size_t>(rank)];
    return *reinterpret_cast<Header*>(a.base + (call % kCellsPerRank) * a.stride);
  }

 private:
  size_t cellBytes_ = 0;
  uint64_t calls_ = 0;
  std::vector<Area> areas_;
};

// A link of the comm's topology as the job view shows it (lib/comm/job_view.h): the bus's
// links, shared by every rank of the comm, with what happened to them so far.
struct LinkView {
  enum class State : uint8_t { Up, Degraded, Down };
  std::string name;         // "a-b", both directions together
  State state = State::Up;
  double slowdown = 1;      // degraded: transfers take this many times longer
  uint64_t bytes = 0, transfers = 0, errors = 0;
  uint64_t jittered = 0;    // transfers that jitter delayed
  double transferNs = 0;    // mean wall time a transfer held the link
  double jitterNs = 0;      // the delay jitter adds to a delayed transfer
  uint64_t downs = 0;       // times it went down
  uint64_t faultAlarms = 0; // times it became a fault (docs/observability.md, "Links")
  int64_t downAgesMs[3] = {-1, -1, -1};  // how long ago its last three downs were (-1: none)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;

  // Collective over all ranks of the comm (each transport in the registry order):
  // creates local resources, exchanges addresses over ctx.bootstrap, connects to
  // `peers` (the ranks this transport will serve for this rank; may be empty).
  virtual Result setup(const TransportContext& ctx, const std::vector<int>& peers) = 0;

  // Asynchronous tagged messages. Messages between a pair are matched in posting order;
  // a tag or size that differs from what the peer posted is an InvalidArgument error
  // (counts that differ across ranks). Buffers stay owned by the caller until done.
  // Posting never blocks and never allocates after setup.
  virtual Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) = 0;
  virtual Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) = 0;

  // Advances outstanding work and reports whether req finished. A finished or failed
  // request's id is released. Errors name the peer (RemoteError, Timeout, InvalidArgument).
  virtual Result test(RequestId req, bool* done) = 0;

  // Sleeps until a peer may have made progress for this rank, or maxMicros passed.
  virtual void wait(int64_t maxMicros) = 0;

  // Fails every outstanding request and wakes waiters; later calls fail. Never blocks.
  virtual void abort() = 0;

  // Bracket one call of the comm (a collective, or a group's sends and receives), on the
  // thread that runs it. A transport that models time (bus) measures calls by them and
  // counts them for fault triggers; shm picks its data path for the call's messages from
  // the hints; ofi probes its lost rails.
  virtual void callBegin(const CallHints& hints) { (void)hints; }
  virtual void callEnd() {}
  // Before the planner chooses for the comm's collective number seq (0 = first). A
  // transport that changes the comm's topology (bus: a link back up or degraded) applies
  // here what takes effect from seq on, so that every rank plans it on the same graph.
  virtual void beforePlan(uint64_t seq) { (void)seq; }

  // Fault handling (docs/faults.md). faultPending: this transport saw a link go down or a
  // rank die since its last reset; cheap, asked after every successful call, so that a
  // rank that finished before its peers noticed still joins the recovery.
  virtual bool faultPending() { return false; }
  // What it saw: topology links down, ranks dead (appended; off the hot path).
  virtual void observedFaults(std::vector<uint32_t>* links, std::vector<int>* deadRanks) const {
    (void)links, (void)deadRanks;
  }
  // A link the comm agreed lost that this rank's topology took back (up or degraded, from
  // beforePlan) after it failed at downNs: the agreement leaves it as it is here, since
  // ranks that had not reached that change yet take it when they do, and all end alike.
  virtual bool linkBackUp(uint32_t link, uint64_t downNs) const {
    (void)link, (void)downNs;
    return false;
  }
  // When the link last failed by this transport's clock (0: never, or not a link of its).
  virtual uint64_t linkDownAtNs(uint32_t link) const {
    (void)link;
    return 0;
  }
  // The comm agreed that the link failed at downNs (the coordinator's reading, the same on
  // every rank): link changes logged before then are older than the failure.
  virtual void linkAgreedDown(uint32_t link, uint64_t downNs) { (void)link, (void)downNs; }
  // After the comm agreed on a fault: abandon every request and every byte in flight, and
  // take routes from the topology's current health, so that a re-run starts clean and can
  // never match a message of the failed attempt. Collective over all ranks of the comm
  // (after every rank stopped posting); may use the bootstrap.
  virtual Result reset(uint32_t attempt, Deadline deadline) {
    (void)attempt, (void)deadline;
    return fail(snclInvalidUsage, "the {} transport cannot be reset for a retry", name());
  }
  // Link changes other than failures (a link back up, degraded, or no longer): the number
  // logged so far, and taking the first `changes` of them into the comm's topology at once
  // (the comm agreed on a fault; lib/comm/fault.cc), ahead of the collective they were due.
  virtual uint64_t linkChangesLogged() const { return 0; }
  virtual void takeLinkChanges(uint64_t changes) { (void)changes; }
  // Rails: paths of its own that a transport routes around by a reset, apart from the
  // topology's links (ofi: an endpoint per network interface). Bit i is rail i, numbered
  // alike on every rank. railsUsable: those it had after setup or its last reset (0: it
  // has no rails); railsLost: those it lost since (their requests failed). The agreement
  // decides a rail lost while another remains like a link lost with another route (Retry),
  // none remaining like a link without one (LinkLost); more than one rail turns SNCL_RETRY
  // on by default. railsBack: rails lost earlier that answer again here; a transport that
  // would have them back says faultPending(), and the reset of the round it starts takes
  // back those that answer on every rank.
  virtual uint32_t railsUsable() const { return 0; }
  virtual uint32_t railsLost() const { return 0; }
  virtual uint32_t railsBack() const { return 0; }
  // Adds this transport's counters to *out; any thread may ask (relaxed reads). Transports
  // that do not count leave it as it is.
  virtual void addCounters(TransportCounters* out) const { (void)out; }
  // Bytes it allocated for this rank: segments (FIFOs, cells), pools of registered slots.
  // A segment the ranks share counts whole on each. Asked between the comm's calls.
  virtual size_t memoryBytes() const { return 0; }
  // The topology links this transport models and their health (bus); any thread may ask
  // (relaxed reads of shared counters). Appended; transports without links add nothing.
  virtual void linkViews(std::vector<LinkView>* out) const { (void)out; }
  // Cells shared by every rank of the comm (LocalCells), when this transport serves all the
  // comm's other ranks and has them; nullptr otherwise. A reset replaces them: ask again
  // after one, never keep the pointer across calls.
  virtual LocalCells* localCells() { return nullptr; }
};

using TransportFactory = std::unique_ptr<Transport> (*)();

// Built-in transports by name ("shm", later "ofi", "bus"); see transports/builtin.cc.
std::unique_ptr<Transport> createTransport(const std::string& name);
std::vector<std::string> transportNames();

}  // namespace sncl
