// BusTransport: the emulated supernode bus. Bytes move through an owned shm transport;
// time follows the comm's topology (docs/bus.md).
//
// A message is cut into chunks. Before a chunk's bytes go to shm, the sender reserves it
// on every link direction of its route: per link direction a "busy until" clock in the
// shared segment (bus_state.h), advanced by CAS, so flows that share a link share its
// bandwidth. The chunk starts on a link when both the message is ready and the link is
// free, holds it for share x bytes / bandwidth x timescale, and arrives after the last
// link frees plus the route's latency x timescale. The sender publishes that arrival in
// the pair's ring; the receiver's request completes when every chunk's bytes came and the
// wall clock passed the last arrival; the sender's when its chunks left the links.
//
// Modeled time: each rank keeps a cursor, the modeled time its next transfer is ready
// (the start of the call, then the latest completion it observed), so CPU time between
// steps does not enter the model. The call's modeled duration is the cursor at its end
// minus its start, divided by the timescale.
//
// Faults (faults.h) live in the shared segment: a link going down fails, after the
// detection time, the requests of this rank's pairs whose route crosses it (naming it); the
// comm then agrees on it, marks it down in the topology and reset() re-routes for a re-run.
// A rank dying fails every rank's bus requests. Degraded links slow transfers; jitter
// delays a fraction of chunks.
//
// One thread drives a transport (isend, irecv, test, wait, call*); abort() may come from any.
#pragma once

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lib/topo/comm_topo.h"
#include "lib/transport/bus_control.h"
#include "lib/transport/transport.h"
#include "transports/bus/bus_state.h"
#include "transports/bus/faults.h"

namespace sncl::bus {

struct BusOptions {
  double timescale = 100;       // every link slowed by this factor (SNCL_BUS_TIMESCALE)
  size_t chunkBytes = 256 << 10;  // reservation unit (SNCL_BUS_CHUNK_BYTES, multiple of 64)
  double detectUs = 100;        // modeled time to detect a lost link or rank (SNCL_BUS_DETECT_US)
  std::string faults;           // SNCL_FAULTS
  static BusOptions fromEnv();
};

class BusTransport : public Transport, public BusControl {
 public:
  explicit BusTransport(BusOptions options) : options_(std::move(options)) {}
  ~BusTransport() override;

  const char* name() const override { return "bus"; }
  Result setup(const TransportContext& ctx, const std::vector<int>& peers) override;
  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override;
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override;
  Result test(RequestId req, bool* done) override;
  void wait(int64_t maxMicros) override;
  void abort() override;
  void callBegin(const CallHints& hints) override;
  void callEnd() override;
  void beforePlan(uint64_t seq) override;
  bool faultPending() override;
  void observedFaults(std::vector<uint32_t>* links, std::vector<int>* deadRanks) const override;
  bool linkBackUp(uint32_t link, uint64_t downNs) const override;
  uint64_t linkDownAtNs(uint32_t link) const override;
  void linkAgreedDown(uint32_t link, uint64_t downNs) override;
  Result reset(uint32_t attempt, Deadline deadline) override;
  size_t memoryBytes() const override;
  void linkViews(std::vector<LinkView>* out) const override;
  uint64_t linkChangesLogged() const override;
  void takeLinkChanges(uint64_t changes) override;

  Result injectFaults(std::string_view spec) override;
  Result linkCounters(std::string_view link, snclBusCounters_t* out) const override;
  void modeledTimeUs(double* lastCallUs, double* totalUs) const override;
  void lastCallSpanUs(double* startUs, double* endUs) const override;

 private:
  struct Request {
    enum class State : uint8_t { Free, Queued, Landing };  // Landing: bytes handed over
    State state = State::Free;
    bool isSend = false;
    bool innerActive = false;
    uint16_t generation = 1;
    int peer = -1;
    uint64_t tag = 0;
    const char* data = nullptr;
    size_t bytes = 0;
    RecvSink sink;
    uint32_t chunks = 0;      // in the message (1 for 0 bytes)
    uint32_t nextChunk = 0;   // next to hand to shm
    size_t chunkOffset = 0;   // of the chunk shm is receiving
    RequestId inner = 0;
    uint64_t readyNs = 0;     // sender: modeled time the message is ready
    uint64_t gateNs = 0;      // completes no earlier
    Result error = snclSuccess;
    Request* next = nullptr;  // in its pair's queue
  };
  struct Queue {
    Request* head = nullptr;
    Request* tail = nullptr;
    void push(Request* r);
    void pop();
  };
  // Route of this rank to a peer, flattened for the hot path.
  struct Hop {
    uint64_t channel;
    double fraction;       // of the flow on this link direction
    double wallNsPerByte;  // fraction x timescale / bandwidth
  };
  struct Pair {
    bool served = false;
    std::vector<Hop> hops;
    uint64_t latencyWallNs = 0;
    uint64_t sendSeq = 0;  // chunks sent to the peer
    uint64_t recvSeq = 0;  // chunks received from it
    Queue sends, recvs;
    // Set when a lost link crosses the pair's route: its requests fail from failAtNs on.
    Result failCode = snclSuccess;
    std::string failMessage;
    uint64_t failAtNs = 0;
    topo::LinkId lostLink = topo::kNone;
  };
  // A link seen down that the comm has not yet agreed on (marked down in the topology).
  struct LostLink {
    topo::LinkId link;
    bool used;          // a route of the comm crosses it
    uint64_t downCall;  // the call it went down in
  };

  Result computeRoutes();
  Request* acquire(RequestId* id);
  Request* find(RequestId id);
  void release(Request* r);
  Result post(bool isSend, int peer, uint64_t tag, const void* data, size_t bytes, RecvSink sink, RequestId* id);
  void progress();
  bool innerDone(Request& r);
  void progressSends(int peer, Pair& p);
  void progressRecvs(int peer, Pair& p);
  uint64_t reserveChunk(Pair& p, uint64_t readyNs, size_t bytes, uint64_t* leftNs);
  static void deliverChunk(void* ctx, size_t offset, const void* data, size_t bytes);

  // faults and health
  Result applyFault(const Fault& f);
  Result logLinkChange(topo::LinkId link, Health state, uint32_t slowdownX1k);
  void takeChanges(uint64_t count, uint64_t seq);
  void checkTriggers(bool atCallBegin);
  void syncHealth();
  void failAll(Result code, std::string message, uint64_t atNs);
  void linkLost(topo::LinkId l, const LinkHealth& lh);
  void countLostTransfer(const Request& r);
  Result setupInner(uint32_t attempt);

  BusOptions options_;
  int rank_ = -1;
  int nranks_ = 0;
  int64_t timeoutMs_ = 60000;
  std::string commName_;
  const CommTopology* topology_ = nullptr;
  TransportContext ctx_;              // for a fresh inner transport after reset()
  std::vector<int> peers_;
  std::unique_ptr<Transport> inner_;  // shm: moves the bytes
  std::unique_ptr<SharedState> state_;
  std::vector<Pair> pairs_;           // by rank
  std::vector<Request> pool_;
  std::vector<uint32_t> free_;
  uint32_t ringEntries_ = 0;
  uint64_t detectWallNs_ = 0;

  // modeled clock
  bool inCall_ = false;
  uint64_t cursorNs_ = 0;
  uint64_t callStartNs_ = 0;
  uint64_t lastCallWallNs_ = 0;
  uint64_t lastCallStartNs_ = 0;  // of the last finished call
  uint64_t lastCallEndNs_ = 0;
  uint64_t totalWallNs_ = 0;
  uint64_t calls_ = 0;
  uint64_t earliestGateNs_ = UINT64_MAX;

  // faults
  std::vector<Fault> pending_;  // with a trigger not reached yet
  uint64_t seenHealthEpoch_ = 0;
  std::vector<LinkChange> dueChanges_;  // taken from the shared log, to apply outside its lock
  std::vector<uint64_t> linkBackAtNs_;  // per link: injection time of the last change taken (0: none)
  std::vector<uint64_t> agreedDownNs_;  // per link: when the failure the comm last agreed on happened (0: none)
  std::mt19937_64 rng_;
  Result failCode_ = snclSuccess;  // set once the bus failed for this rank
  std::vector<LostLink> lost_;     // seen down, not agreed yet
  std::string failMessage_;
  uint64_t failAtNs_ = 0;
  std::atomic<bool> aborted_{false};
};

}  // namespace sncl::bus
