// BusTransport: options, setup, posting, chunk reservation and progress. Faults, health
// and counters: bus_health.cc.
#include "transports/bus/bus_transport.h"

#include <time.h>

#include <algorithm>
#include <cmath>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "transports/shm/shm.h"

namespace sncl {

std::unique_ptr<Transport> createBusTransport() {
  return std::make_unique<bus::BusTransport>(bus::BusOptions::fromEnv());
}

namespace bus {
namespace {

// Salts that keep the bus's segments apart from the comm's own shm transport's.
constexpr uint64_t kInnerShmSalt = 0xb05b05b05b05b05bull;
constexpr uint64_t kStateSalt = 0x5747e5747e5747e5ull;
constexpr size_t kPoolCapacity = 4096;
// Ring entries per ordered pair: enough for a step's chunks, within a bounded segment.
constexpr size_t kRingBudgetBytes = 16u << 20;

double envDouble(const char* name, double dflt, double lo, double hi) {
  auto s = env::str(name);
  if (!s) return dflt;
  char* end = nullptr;
  double v = strtod(s->c_str(), &end);
  if (end == s->c_str() || *end != '\0' || !(v >= lo && v <= hi)) {
    log::warn("{}={} is not a number in [{}, {}]; using {}", name, *s, lo, hi, dflt);
    return dflt;
  }
  return v;
}

void sleepNs(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

}  // namespace

BusOptions BusOptions::fromEnv() {
  BusOptions o;
  o.timescale = envDouble("SNCL_BUS_TIMESCALE", o.timescale, 1e-3, 1e9);
  o.chunkBytes = std::max<size_t>(64, env::bytes("SNCL_BUS_CHUNK_BYTES", o.chunkBytes) / 64 * 64);
  o.detectUs = envDouble("SNCL_BUS_DETECT_US", o.detectUs, 0, 1e9);
  o.faults = env::str("SNCL_FAULTS").value_or("");
  return o;
}

void BusTransport::Queue::push(Request* r) {
  r->next = nullptr;
  (tail ? tail->next : head) = r;
  tail = r;
}

void BusTransport::Queue::pop() {
  Request* r = head;
  head = r->next;
  if (!head) tail = nullptr;
  r->next = nullptr;
}

Result BusTransport::setup(const TransportContext& ctx, const std::vector<int>& peers) {
  if (state_) return fail(snclInvalidUsage, "bus: setup called twice");
  if (!ctx.topology || !ctx.bootstrap || !ctx.peers)
    return fail(snclInternalError, "bus: setup needs the comm's topology, bootstrap and peer table");
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  timeoutMs_ = ctx.timeoutMs;
  commName_ = ctx.commName;
  topology_ = ctx.topology;
  const topo::Graph& g = topology_->graph();
  for (int p : peers)
    if ((*ctx.peers)[p].bootId != (*ctx.peers)[rank_].bootId)
      return fail(snclInvalidUsage, "bus: rank {} and rank {} are on different machines; the emulated bus runs on one",
                  rank_, p);

  ringEntries_ = uint32_t(std::clamp<size_t>(kRingBudgetBytes / (sizeof(ArrivalEntry) * nranks_ * nranks_), 16, 1024));
  SNCL_CHECK(SharedState::open(ctx, ctx.commId ^ kStateSalt, uint32_t(g.linkCount()), ringEntries_, &state_));

  ctx_ = ctx;
  peers_ = peers;
  SNCL_CHECK(setupInner(0));

  pairs_.resize(nranks_);
  for (int p : peers) pairs_[p].served = true;
  pool_.assign(kPoolCapacity, Request{});
  free_.clear();
  for (size_t i = kPoolCapacity; i-- > 0;) free_.push_back(uint32_t(i));
  detectWallNs_ = uint64_t(options_.detectUs * 1000 * options_.timescale);
  rng_.seed(ctx.commId * 31 + uint64_t(rank_));
  linkBackAtNs_.assign(topology_->graph().linkCount(), 0);
  agreedDownNs_.assign(topology_->graph().linkCount(), 0);
  SNCL_CHECK(computeRoutes());
  if (!options_.faults.empty()) SNCL_CHECK(injectFaults(options_.faults));
  cursorNs_ = wallNs();
  if (!peers.empty())
    log::info(log::Subsys::Transport, "bus: {}rank {}/{}: {} peers on {}, timescale {}, chunk {} KiB, detection {} us",
              commName_.empty() ? "" : commName_ + " ", rank_, nranks_, peers.size(), g.name(), options_.timescale,
              options_.chunkBytes >> 10, options_.detectUs);
  return snclSuccess;
}

// The shm transport that moves the bytes; each attempt gets segments of its own, so
// nothing of a failed attempt can reach a re-run.
Result BusTransport::setupInner(uint32_t attempt) {
  TransportContext innerCtx = ctx_;
  innerCtx.commId = ctx_.commId ^ kInnerShmSalt ^ (uint64_t(attempt) * 0x9e3779b97f4a7c15ull);
  inner_ = createShmTransport();
  return inner_->setup(innerCtx, peers_);
}

// Routes of this rank to every served peer, from the topology's current health.
Result BusTransport::computeRoutes() {
  const topo::Graph& g = topology_->graph();
  topo::Route route;
  for (int peer = 0; peer < nranks_; ++peer) {
    Pair& p = pairs_[peer];
    if (!p.served) continue;
    SNCL_CHECK(topology_->routeRanks(rank_, peer, &route));
    p.hops.clear();
    if (!route.reachable) continue;  // failed by syncHealth, which names the link
    for (const topo::LinkShare& s : route.shares) {
      const double bw = g.linkBandwidthGBps(s.link);  // bytes per ns; degraded links included
      p.hops.push_back({s.channel(g), s.fraction, s.fraction * options_.timescale / bw});
    }
    p.latencyWallNs = uint64_t(route.latencyUs * 1000 * options_.timescale);
  }
  return snclSuccess;
}

BusTransport::Request* BusTransport::acquire(RequestId* id) {
  if (free_.empty()) return nullptr;
  const uint32_t index = free_.back();
  free_.pop_back();
  Request& r = pool_[index];
  *id = (RequestId(r.generation) << 16) | index;
  return &r;
}

BusTransport::Request* BusTransport::find(RequestId id) {
  const uint32_t index = id & 0xffff;
  if (index >= pool_.size()) return nullptr;
  Request& r = pool_[index];
  if (r.state == Request::State::Free || r.generation != id >> 16) return nullptr;
  return &r;
}

void BusTransport::release(Request* r) {
  const uint16_t generation = uint16_t(r->generation + 1);
  *r = Request{};
  r->generation = generation == 0 ? 1 : generation;
  free_.push_back(uint32_t(r - pool_.data()));
}

Result BusTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) {
  if (bytes != 0 && !data) return fail(snclInvalidArgument, "bus: isend of {} bytes from NULL", bytes);
  return post(true, peer, tag, data, bytes, RecvSink{}, req);
}

Result BusTransport::irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) {
  if (bytes != 0 && !sink.deliver) return fail(snclInvalidArgument, "bus: irecv of {} bytes without a sink", bytes);
  return post(false, peer, tag, nullptr, bytes, sink, req);
}

Result BusTransport::post(bool isSend, int peer, uint64_t tag, const void* data, size_t bytes, RecvSink sink,
                          RequestId* id) {
  if (aborted_.load(std::memory_order_relaxed)) return fail(snclInvalidUsage, "bus: rank {}: aborted", rank_);
  if (!state_) return fail(snclInvalidUsage, "bus: isend/irecv before setup");
  if (peer < 0 || peer >= nranks_ || !pairs_[peer].served)
    return fail(snclInvalidArgument, "bus: rank {} is not connected to rank {}", rank_, peer);
  syncHealth();
  Request* r = acquire(id);
  if (!r) return fail(snclInvalidUsage, "bus: rank {}: more than {} requests outstanding", rank_, pool_.size());
  r->state = Request::State::Queued;
  r->isSend = isSend;
  r->peer = peer;
  r->tag = tag;
  r->data = static_cast<const char*>(data);
  r->bytes = bytes;
  r->sink = sink;
  r->chunks = uint32_t(std::max<size_t>(1, (bytes + options_.chunkBytes - 1) / options_.chunkBytes));
  r->readyNs = inCall_ ? cursorNs_ : wallNs();
  Pair& p = pairs_[peer];
  if (failCode_ != snclSuccess || p.failCode != snclSuccess) return snclSuccess;  // test() reports it
  (isSend ? p.sends : p.recvs).push(r);
  return snclSuccess;
}

// Reserves one chunk on every link direction of the route; returns its arrival, and in
// *leftNs when it has left the links.
uint64_t BusTransport::reserveChunk(Pair& p, uint64_t readyNs, size_t bytes, uint64_t* leftNs) {
  uint64_t end = readyNs;
  for (const Hop& h : p.hops) {
    Channel& ch = state_->channel(h.channel);
    const uint64_t hold = uint64_t(std::llround(double(bytes) * h.wallNsPerByte));
    end = std::max(end, ch.reserved.book(readyNs, hold));
    ch.bytes.fetch_add(uint64_t(std::llround(double(bytes) * h.fraction)), std::memory_order_relaxed);
    ch.chunks.fetch_add(1, std::memory_order_relaxed);
    ch.busyWallNs.fetch_add(hold, std::memory_order_relaxed);
  }
  *leftNs = end;
  uint64_t arrival = end + p.latencyWallNs;
  const uint64_t ppm = state_->header().jitterPpm.load(std::memory_order_relaxed);
  if (ppm && rng_() % 1000000 < ppm) {
    arrival += state_->header().jitterWallNs.load(std::memory_order_relaxed);
    if (!p.hops.empty()) state_->channel(p.hops.front().channel).jittered.fetch_add(1, std::memory_order_relaxed);
  }
  return arrival;
}

void BusTransport::deliverChunk(void* ctx, size_t offset, const void* data, size_t bytes) {
  auto* r = static_cast<Request*>(ctx);
  if (!r->sink.deliver) return;  // released after a failure: its buffer is not ours to write
  r->sink.deliver(r->sink.ctx, r->chunkOffset + offset, data, bytes);
}

// Whether r's chunk in the shm data path finished; a failure there fails the bus.
bool BusTransport::innerDone(Request& r) {
  bool done = false;
  Result e = inner_->test(r.inner, &done);
  if (!done) return false;
  r.innerActive = false;
  if (e != snclSuccess) {
    failAll(e, lastError(), wallNs());
    return false;
  }
  return true;
}

// The head send of a pair hands its chunks to shm one at a time, reserving each first;
// once all are handed over it waits (Landing) for its last chunk to leave the links.
void BusTransport::progressSends(int peer, Pair& p) {
  while (Request* r = p.sends.head) {
    if (r->innerActive) {
      if (!innerDone(*r)) return;
    }
    if (r->nextChunk == r->chunks) {
      r->state = Request::State::Landing;
      p.sends.pop();
      continue;
    }
    if (p.hops.empty() && failCode_ == snclSuccess) return;  // unreachable: syncHealth fails the bus
    const uint64_t seq = p.sendSeq;
    if (seq - state_->consumed(rank_, peer).load(std::memory_order_acquire) >= ringEntries_) return;
    const size_t offset = size_t(r->nextChunk) * options_.chunkBytes;
    const size_t len = std::min(options_.chunkBytes, r->bytes - std::min(r->bytes, offset));
    uint64_t left = 0;
    const uint64_t arrival = reserveChunk(p, r->readyNs, len, &left);
    ArrivalEntry& e = state_->ring(rank_, peer)[seq % ringEntries_];
    e.arrivalNs = arrival;
    e.seq.store(seq + 1, std::memory_order_release);
    Result posted = inner_->isend(peer, r->tag, r->data ? r->data + offset : nullptr, len, &r->inner);
    if (posted != snclSuccess) {
      failAll(posted, lastError(), wallNs());
      return;
    }
    p.sendSeq = seq + 1;
    r->innerActive = true;
    r->gateNs = std::max(r->gateNs, left);
    ++r->nextChunk;
  }
}

// The head receive takes chunks one at a time; each one's arrival comes from the ring.
void BusTransport::progressRecvs(int peer, Pair& p) {
  while (Request* r = p.recvs.head) {
    if (r->innerActive) {
      if (!innerDone(*r)) return;
      const uint64_t seq = p.recvSeq;
      ArrivalEntry& entry = state_->ring(peer, rank_)[seq % ringEntries_];
      if (entry.seq.load(std::memory_order_acquire) != seq + 1) {
        failAll(fail(snclInternalError, "bus: rank {} <- rank {}: chunk {} came without its arrival time", rank_, peer,
                     seq),
                lastError(), wallNs());
        return;
      }
      r->gateNs = std::max(r->gateNs, entry.arrivalNs);
      state_->consumed(peer, rank_).store(seq + 1, std::memory_order_release);
      p.recvSeq = seq + 1;
      ++r->nextChunk;
    }
    if (r->nextChunk == r->chunks) {
      r->state = Request::State::Landing;
      p.recvs.pop();
      continue;
    }
    r->chunkOffset = size_t(r->nextChunk) * options_.chunkBytes;
    const size_t len = std::min(options_.chunkBytes, r->bytes - std::min(r->bytes, r->chunkOffset));
    Result posted = inner_->irecv(peer, r->tag, len, RecvSink{deliverChunk, r}, &r->inner);
    if (posted != snclSuccess) {
      failAll(posted, lastError(), wallNs());
      return;
    }
    r->innerActive = true;
  }
}

void BusTransport::progress() {
  syncHealth();
  if (failCode_ != snclSuccess) return;
  checkTriggers(false);
  for (int peer = 0; peer < nranks_; ++peer) {
    Pair& p = pairs_[peer];
    if (!p.served || p.failCode != snclSuccess) continue;
    if (p.sends.head) progressSends(peer, p);
    if (p.recvs.head) progressRecvs(peer, p);
  }
}

Result BusTransport::test(RequestId id, bool* done) {
  *done = false;
  Request* r = find(id);
  if (!r) return fail(snclInvalidUsage, "bus: rank {}: unknown request id {:#x}", rank_, id);
  if (aborted_.load(std::memory_order_acquire) && failCode_ == snclSuccess)
    failAll(snclInvalidUsage, fmt::format("bus: rank {}: the transport was aborted", rank_), wallNs());
  progress();
  const uint64_t now = wallNs();
  // The bus's failure, else the pair's (a lost link on its route).
  const Pair& pair = pairs_[r->peer];
  const bool global = failCode_ != snclSuccess;
  const Result code = global ? failCode_ : pair.failCode;
  const uint64_t failAt = global ? failAtNs_ : pair.failAtNs;
  const bool landedBefore = r->state == Request::State::Landing && r->gateNs <= failAt;
  if (code != snclSuccess && !landedBefore) {
    // Not before the failure is detected: the model's detection time.
    if (now < failAt && !aborted_.load(std::memory_order_relaxed)) {
      earliestGateNs_ = std::min(earliestGateNs_, failAt);
      return snclSuccess;
    }
    *done = true;
    cursorNs_ = std::max(cursorNs_, failAt);
    countLostTransfer(*r);
    release(r);
    return fail(code, "{}", global ? failMessage_ : pair.failMessage);
  }
  if (r->state == Request::State::Queued) return snclSuccess;
  if (now < r->gateNs) {  // bytes are in; the model says they land later
    earliestGateNs_ = std::min(earliestGateNs_, r->gateNs);
    return snclSuccess;
  }
  *done = true;
  cursorNs_ = std::max(cursorNs_, r->gateNs);
  release(r);
  return snclSuccess;
}

void BusTransport::wait(int64_t maxMicros) {
  const uint64_t now = wallNs();
  const uint64_t gate = earliestGateNs_;
  earliestGateNs_ = UINT64_MAX;
  uint64_t sleep = uint64_t(std::max<int64_t>(0, maxMicros)) * 1000;
  if (gate != UINT64_MAX) {
    if (gate <= now) return;  // something is due: let the caller test it
    sleep = std::min(sleep, gate - now);
  }
  bool moving = false;  // requests still waiting for shm
  for (const Pair& p : pairs_) moving |= p.sends.head || p.recvs.head;
  if (moving && failCode_ == snclSuccess) inner_->wait(int64_t(sleep / 1000));
  else sleepNs(sleep);
}

void BusTransport::abort() {
  aborted_.store(true, std::memory_order_release);
  if (inner_) inner_->abort();
}

void BusTransport::callBegin(const CallHints& hints) {
  if (inner_) inner_->callBegin(hints);
  ++calls_;
  inCall_ = true;
  callStartNs_ = wallNs();
  cursorNs_ = callStartNs_;
  if (state_) checkTriggers(true);
}

void BusTransport::callEnd() {
  if (inner_) inner_->callEnd();
  inCall_ = false;
  lastCallWallNs_ = cursorNs_ > callStartNs_ ? cursorNs_ - callStartNs_ : 0;
  totalWallNs_ += lastCallWallNs_;
  lastCallStartNs_ = callStartNs_;
  lastCallEndNs_ = callStartNs_ + lastCallWallNs_;
}

void BusTransport::lastCallSpanUs(double* startUs, double* endUs) const {
  const uint64_t origin = state_ ? state_->header().originNs : 0;
  auto since = [&](uint64_t ns) { return ns > origin ? double(ns - origin) / options_.timescale / 1000 : 0.0; };
  *startUs = since(lastCallStartNs_);
  *endUs = since(lastCallEndNs_);
}

void BusTransport::modeledTimeUs(double* lastCallUs, double* totalUs) const {
  if (lastCallUs) *lastCallUs = double(lastCallWallNs_) / options_.timescale / 1000;
  if (totalUs) *totalUs = double(totalWallNs_) / options_.timescale / 1000;
}

}  // namespace bus
}  // namespace sncl
