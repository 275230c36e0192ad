// BusTransport: faults (injection, triggers), health shared through the segment, the
// failure they cause, and the counters.
#include <algorithm>

#include "lib/base/log.h"
#include "lib/transport/link_verdict.h"
#include "transports/bus/bus_transport.h"
#include "transports/bus/pid_lock.h"

namespace sncl::bus {
namespace {

std::string describeChannel(const topo::Graph& g, uint64_t channel) {
  const topo::LinkId l = topo::LinkId(channel / 2);
  const bool forward = channel % 2 == 0;
  return fmt::format("{}>{}", g.vertexName(forward ? g.linkA(l) : g.linkB(l)),
                     g.vertexName(forward ? g.linkB(l) : g.linkA(l)));
}

}  // namespace

BusTransport::~BusTransport() {
  if (!state_) return;
  const uint32_t gone = state_->header().detached.fetch_add(1) + 1;
  // The last rank out prints the counters all ranks shared.
  if (gone != uint32_t(nranks_) || log::level() < log::Level::Info || !log::enabled(log::Subsys::Transport)) return;
  const topo::Graph& g = topology_->graph();
  std::string lines;
  for (uint64_t c = 0; c < state_->channelCount(); ++c) {
    const Channel& ch = state_->channel(c);
    if (!ch.chunks.load() && !ch.errors.load()) continue;
    lines += fmt::format("\n  {:<32} {:>14} bytes {:>9} chunks {:>12.1f} us busy {:>5} errors {:>5} jittered",
                         describeChannel(g, c), ch.bytes.load(), ch.chunks.load(),
                         double(ch.busyWallNs.load()) / options_.timescale / 1000, ch.errors.load(), ch.jittered.load());
  }
  log::info(log::Subsys::Transport, "bus: {}link counters (modeled time){}", commName_.empty() ? "" : commName_ + " ",
            lines.empty() ? std::string(" none") : lines);
}

Result BusTransport::injectFaults(std::string_view spec) {
  if (!state_) return fail(snclInvalidUsage, "bus: faults injected before setup");
  std::vector<Fault> faults;
  SNCL_CHECK(parseFaults(spec, topology_->graph(), nranks_, &faults));
  for (const Fault& f : faults) {
    if (f.trigger == Fault::Trigger::Now) SNCL_CHECK(applyFault(f));
    else pending_.push_back(f);
  }
  syncHealth();
  return snclSuccess;
}

// Writes the fault into the shared segment, where every rank sees it.
Result BusTransport::applyFault(const Fault& f) {
  Header& h = state_->header();
  const uint64_t now = wallNs();
  log::info(log::Subsys::Fault, "bus: rank {} applies fault \"{}\"", rank_, f.text);
  switch (f.kind) {
    case Fault::Kind::LinkDown: {
      LinkHealth& l = state_->link(f.link);
      uint64_t never = 0;
      if (l.downAtNs.compare_exchange_strong(never, now))  // the first rank to apply it sets the time
        l.downCall.store(inCall_ ? calls_ : calls_ + 1);
      if (Health(l.state.exchange(uint32_t(Health::Down), std::memory_order_acq_rel)) != Health::Down) {
        const uint64_t downs = l.downs.fetch_add(1) + 1;
        l.recentDownNs[downs % 3].store(now);
        l.faultAlarms.fetch_add(1);
      }
      break;
    }
    case Fault::Kind::LinkUp: {
      SNCL_CHECK(logLinkChange(f.link, Health::Up, 1000));
      LinkHealth& l = state_->link(f.link);
      l.state.store(uint32_t(Health::Up), std::memory_order_release);
      l.downAtNs.store(0);
      l.downCall.store(0);
      break;
    }
    case Fault::Kind::LinkDegrade: {
      const uint32_t slowdownX1k = uint32_t(std::llround(f.slowdown * 1000));
      SNCL_CHECK(logLinkChange(f.link, Health::Degraded, slowdownX1k));
      LinkHealth& l = state_->link(f.link);
      const uint32_t before = l.slowdownX1k.exchange(slowdownX1k);
      const Health was = Health(l.state.exchange(uint32_t(Health::Degraded), std::memory_order_acq_rel));
      const bool wasFault = was == Health::Down || (was == Health::Degraded && linkverdict::isFaultSlowdown(before / 1000.0));
      if (!wasFault && linkverdict::isFaultSlowdown(f.slowdown)) l.faultAlarms.fetch_add(1);
      break;
    }
    case Fault::Kind::Jitter:
      h.jitterWallNs.store(uint64_t(f.jitterUs * 1000 * options_.timescale));
      h.jitterPpm.store(uint64_t(std::llround(f.jitterFraction * 1e6)));
      return snclSuccess;
    case Fault::Kind::RankKill: {
      uint64_t alive = 0;
      state_->rank(f.rank).deadAtNs.compare_exchange_strong(alive, now);
      break;
    }
  }
  h.healthEpoch.fetch_add(1, std::memory_order_acq_rel);
  return snclSuccess;
}

// Appends a link's change to the shared log, taking effect from the first collective no
// rank has planned yet. Every rank publishes the collective it plans before it looks at
// the log (beforePlan), all seq_cst: while a writer is announced, planning ranks take the
// lock, so each rank either planned before the change was stamped or sees it when it plans.
Result BusTransport::logLinkChange(topo::LinkId link, Health state, uint32_t slowdownX1k) {
  LinkChanges& changes = state_->header().changes;
  changes.writers.fetch_add(1);
  Result result = snclSuccess;
  {
    PidLock lock(changes.owner);
    const uint64_t count = changes.count.load();
    uint64_t from = 0, oldest = count;
    int laggard = -1;
    for (int r = 0; r < nranks_; ++r) {
      const RankHealth& h = state_->rank(r);
      from = std::max(from, h.plannedSeq.load());
      if (h.deadAtNs.load() == 0 && h.appliedChanges < oldest) oldest = h.appliedChanges, laggard = r;
    }
    if (count - oldest >= LinkChanges::kEntries) {
      result = fail(snclInvalidUsage, "bus: {} link changes wait for rank {} to plan a collective; no room for another",
                    count - oldest, laggard);
    } else {
      changes.entry[count % LinkChanges::kEntries] = {from, uint32_t(link), uint32_t(state), slowdownX1k, 0, wallNs()};
      changes.count.store(count + 1);
    }
  }
  changes.writers.fetch_sub(1);
  return result;
}

// The link changes due by collective seq go into this rank's topology (a new epoch, new
// routes) before the planner reads it. Without a writer announced and with every logged
// change applied there is nothing to take: no lock on a collective's way in.
void BusTransport::beforePlan(uint64_t seq) {
  if (!state_) return;
  LinkChanges& changes = state_->header().changes;
  RankHealth& me = state_->rank(rank_);
  if (me.plannedSeq.load(std::memory_order_relaxed) < seq + 1) me.plannedSeq.store(seq + 1);
  if (changes.writers.load() == 0 && changes.count.load() == me.appliedChanges) return;
  takeChanges(UINT64_MAX, seq);
}

uint64_t BusTransport::linkChangesLogged() const {
  return state_ ? state_->header().changes.count.load() : 0;
}

void BusTransport::takeLinkChanges(uint64_t count) {
  if (state_) takeChanges(count, UINT64_MAX);
}

// Applies the logged changes below count (UINT64_MAX: all there are) that are due by
// collective seq (UINT64_MAX: every one, whatever it was stamped for).
void BusTransport::takeChanges(uint64_t count, uint64_t seq) {
  LinkChanges& changes = state_->header().changes;
  RankHealth& me = state_->rank(rank_);
  {
    PidLock lock(changes.owner);
    for (; me.appliedChanges < std::min(count, changes.count.load()); ++me.appliedChanges) {
      const LinkChange& c = changes.entry[me.appliedChanges % LinkChanges::kEntries];
      if (seq != UINT64_MAX && c.fromSeq > seq) break;
      dueChanges_.push_back(c);
    }
  }
  if (dueChanges_.empty()) return;
  for (const LinkChange& c : dueChanges_) {
    // A change made before the link failed, reaching a rank after the comm agreed on that
    // failure: the failure is newer (ranks that took the change before the agreement mark
    // the link down in it, linkBackUp), so every rank ends with the link down. The time is
    // the agreed one, not the link's latest failure: a failure after the change, not agreed
    // yet, must not make some ranks skip the change and others take it.
    if (topology_->graph().linkState(c.link) == topo::LinkState::Down && c.atNs < agreedDownNs_[c.link]) continue;
    if (c.link < linkBackAtNs_.size()) linkBackAtNs_[c.link] = c.atNs;
    const bool degraded = Health(c.state) == Health::Degraded;
    const double factor = degraded ? 1000.0 / std::max<uint32_t>(1001, c.slowdownX1k) : 1.0;
    if (topology_->setLinkState(c.link, degraded ? topo::LinkState::Degraded : topo::LinkState::Up, factor) !=
        snclSuccess)
      log::warn("bus: rank {}: link {} cannot change state: {}", rank_, topology_->graph().linkName(c.link),
                lastError());
  }
  dueChanges_.clear();
  if (failCode_ == snclSuccess && computeRoutes() != snclSuccess) failAll(snclInternalError, lastError(), wallNs());
}

bool BusTransport::linkBackUp(uint32_t link, uint64_t downNs) const {
  if (!state_ || link >= linkBackAtNs_.size() || linkBackAtNs_[link] == 0) return false;
  return linkBackAtNs_[link] > downNs;  // taken back after the failure agreed on
}

uint64_t BusTransport::linkDownAtNs(uint32_t link) const {
  if (!state_ || link >= agreedDownNs_.size()) return 0;
  return state_->link(link).downAtNs.load(std::memory_order_acquire);
}

void BusTransport::linkAgreedDown(uint32_t link, uint64_t downNs) {
  if (link < agreedDownNs_.size()) agreedDownNs_[link] = downNs;
}

// Fires pending faults whose trigger came: op=N as this rank begins its N-th call (a
// rank's kill only on that rank), t=T once T modeled microseconds passed since setup.
void BusTransport::checkTriggers(bool atCallBegin) {
  if (pending_.empty()) return;
  const double elapsedUs = double(wallNs() - state_->header().originNs) / options_.timescale / 1000;
  for (size_t i = 0; i < pending_.size();) {
    const Fault& f = pending_[i];
    const bool due = (f.trigger == Fault::Trigger::Op && atCallBegin && calls_ >= f.op) ||
                     (f.trigger == Fault::Trigger::Time && elapsedUs >= f.atUs);
    if (!due) {
      ++i;
      continue;
    }
    if (f.kind != Fault::Kind::RankKill || f.rank == rank_) {
      if (applyFault(f) != snclSuccess) log::warn("bus: fault \"{}\" could not be applied: {}", f.text, lastError());
    }
    pending_.erase(pending_.begin() + ptrdiff_t(i));
  }
  syncHealth();
}

// Brings this rank's topology to the shared health: a lost rank, or a down link that a
// route of the comm crossed, fails the bus (after the detection time); other changes
// re-route. Runs only when the shared epoch moved.
void BusTransport::syncHealth() {
  const uint64_t epoch = state_->header().healthEpoch.load(std::memory_order_acquire);
  if (epoch == seenHealthEpoch_) return;
  seenHealthEpoch_ = epoch;
  for (int r = 0; r < nranks_; ++r) {
    const uint64_t deadAt = state_->rank(r).deadAtNs.load(std::memory_order_acquire);
    if (!deadAt) continue;
    if (r == rank_)
      failAll(snclSystemError, fmt::format("bus: rank {} was killed by fault injection", rank_), deadAt);
    else
      failAll(snclRemoteError,
              fmt::format("bus: rank {} stopped responding (killed by fault injection); rank {} detected it after "
                          "{} us (modeled)",
                          r, rank_, options_.detectUs),
              deadAt + detectWallNs_);
  }
  // A link down is marked in the topology once the comm's ranks agreed; one back up or
  // degraded at the collective the shared log says (beforePlan).
  const topo::Graph& g = topology_->graph();
  for (topo::LinkId l = 0; l < g.linkCount(); ++l) {
    const LinkHealth& lh = state_->link(l);
    if (Health(lh.state.load(std::memory_order_acquire)) == Health::Down && g.linkState(l) != topo::LinkState::Down)
      linkLost(l, lh);
  }
  if (failCode_ != snclSuccess) return;  // routes stay as they were: counters name the lost link
  for (int peer = 0; peer < nranks_; ++peer)
    if (pairs_[peer].served && pairs_[peer].hops.empty() && failCode_ == snclSuccess)
      failAll(snclRemoteError, fmt::format("bus: rank {} cannot reach rank {}: links are down", rank_, peer), wallNs());
}

// A link the shared health says is down and the comm's topology does not yet: the pairs
// of this rank whose route crosses it lose what is in flight and fail once the detection
// time passed. Remembered (with whether any route of the comm crossed it) for
// faultPending() and observedFaults().
void BusTransport::linkLost(topo::LinkId l, const LinkHealth& lh) {
  const topo::Graph& g = topology_->graph();
  const uint64_t at = lh.downAtNs.load() + detectWallNs_;
  for (int peer = 0; peer < nranks_; ++peer) {
    Pair& p = pairs_[peer];
    if (!p.served || p.failCode != snclSuccess) continue;
    bool crosses = false;
    for (const Hop& h : p.hops) crosses |= h.channel / 2 == l;
    if (!crosses) continue;
    p.failCode = snclRemoteError;
    p.failMessage = fmt::format("bus: link {} is down; rank {} detected it after {} us (modeled) on its route to rank {}",
                                g.linkName(l), rank_, options_.detectUs, peer);
    p.failAtNs = at;
    p.lostLink = l;
    p.sends = Queue{}, p.recvs = Queue{};
    log::info(log::Subsys::Fault, "{}", p.failMessage);
  }
  for (const LostLink& x : lost_)
    if (x.link == l) return;
  bool used = false;
  topo::Route route;
  for (int a = 0; a < nranks_ && !used; ++a)
    for (int b = 0; b < nranks_ && !used; ++b) {
      if (a == b || topology_->routeRanks(a, b, &route) != snclSuccess) continue;
      for (const topo::LinkShare& s : route.shares) used |= s.link == l;
    }
  lost_.push_back({l, used, lh.downCall.load()});
  // A link no route crossed needs no agreement: routes stay as they are.
  if (!used && topology_->setLinkState(l, topo::LinkState::Down) != snclSuccess)
    log::warn("bus: rank {}: link {} cannot be marked down: {}", rank_, g.linkName(l), lastError());
}

// A lost link this rank's current (or an earlier) call ran into, or a dead rank: the
// comm must agree even when this rank's own requests all completed.
bool BusTransport::faultPending() {
  if (!state_) return false;
  syncHealth();
  if (failCode_ != snclSuccess) return true;
  for (const LostLink& x : lost_)
    if (x.used && x.downCall <= calls_) return true;
  return false;
}

void BusTransport::observedFaults(std::vector<uint32_t>* links, std::vector<int>* deadRanks) const {
  if (!state_) return;
  for (const LostLink& x : lost_)
    if (x.used) links->push_back(x.link);
  for (int r = 0; r < nranks_; ++r)
    if (state_->rank(r).deadAtNs.load()) deadRanks->push_back(r);
  if (inner_) inner_->observedFaults(links, deadRanks);
}

// Every rank stopped posting (the comm's decision came after all reported). Requests and
// arrival rings start over, the bytes in flight go with the old shm transport, and routes
// follow the topology, where the agreed links are now down.
size_t BusTransport::memoryBytes() const {
  return (inner_ ? inner_->memoryBytes() : 0) + (state_ ? state_->bytes() : 0);
}

Result BusTransport::reset(uint32_t attempt, Deadline deadline) {
  (void)deadline;  // the inner setup keeps the comm's own
  if (!state_) return fail(snclInvalidUsage, "bus: reset before setup");
  if (failCode_ != snclSuccess) return fail(failCode_, "bus: cannot reset after: {}", failMessage_);
  for (Request& r : pool_)
    if (r.state != Request::State::Free) release(&r);
  for (int peer = 0; peer < nranks_; ++peer) {
    Pair& p = pairs_[peer];
    p.sends = Queue{}, p.recvs = Queue{};
    p.failCode = snclSuccess;
    p.failMessage.clear();
    p.lostLink = topo::kNone;
    p.sendSeq = p.recvSeq = 0;
    if (!p.served) continue;
    ArrivalEntry* ring = state_->ring(rank_, peer);
    for (uint32_t i = 0; i < ringEntries_; ++i) ring[i].seq.store(0, std::memory_order_relaxed);
    state_->consumed(peer, rank_).store(0, std::memory_order_release);
  }
  earliestGateNs_ = UINT64_MAX;
  lost_.clear();
  inner_->abort();
  inner_.reset();
  // Its setup exchanges over the bootstrap: a barrier after which every rank's rings are clean.
  SNCL_CHECK(setupInner(attempt));
  seenHealthEpoch_ = 0;  // links still down but not agreed come back as lost
  SNCL_CHECK(computeRoutes());
  syncHealth();
  return snclSuccess;
}

// A transfer of this rank that a lost link failed: an error on the link direction it
// would have crossed (a receive: the reverse of this rank's route to the peer).
void BusTransport::countLostTransfer(const Request& r) {
  const Pair& p = pairs_[r.peer];
  if (p.lostLink == topo::kNone) return;
  for (const Hop& h : p.hops)
    if (h.channel / 2 == p.lostLink) state_->channel(r.isSend ? h.channel : h.channel ^ 1).errors.fetch_add(1);
}

// The bus fails for this rank from atNs on: every outstanding and later request fails
// then with code and message. Pairs stop moving bytes (what shm holds is abandoned).
void BusTransport::failAll(Result code, std::string message, uint64_t atNs) {
  if (failCode_ != snclSuccess) return;
  failCode_ = code;
  failMessage_ = std::move(message);
  failAtNs_ = atNs;
  for (Pair& p : pairs_) p.sends = Queue{}, p.recvs = Queue{};
  log::info(log::Subsys::Fault, "{}", failMessage_);
}

void BusTransport::linkViews(std::vector<LinkView>* out) const {
  if (!state_) return;
  const topo::Graph& g = topology_->graph();
  const uint64_t now = wallNs(), jitterNs = state_->header().jitterWallNs.load(std::memory_order_relaxed);
  for (uint32_t l = 0; l < uint32_t(g.linkCount()); ++l) {
    LinkView v;
    v.name = g.linkName(l);
    const LinkHealth& h = state_->link(l);
    const Health health = Health(h.state.load(std::memory_order_acquire));
    v.state = health == Health::Down       ? LinkView::State::Down
              : health == Health::Degraded ? LinkView::State::Degraded
                                           : LinkView::State::Up;
    if (health == Health::Degraded) v.slowdown = h.slowdownX1k.load(std::memory_order_relaxed) / 1000.0;
    uint64_t busyNs = 0;
    for (uint64_t c : {2ull * l, 2ull * l + 1}) {
      const Channel& ch = state_->channel(c);
      v.bytes += ch.bytes.load(std::memory_order_relaxed);
      v.transfers += ch.chunks.load(std::memory_order_relaxed);
      v.errors += ch.errors.load(std::memory_order_relaxed);
      v.jittered += ch.jittered.load(std::memory_order_relaxed);
      busyNs += ch.busyWallNs.load(std::memory_order_relaxed);
    }
    v.transferNs = v.transfers ? double(busyNs) / double(v.transfers) : 0;
    v.jitterNs = double(jitterNs);
    v.downs = h.downs.load(std::memory_order_relaxed);
    v.faultAlarms = h.faultAlarms.load(std::memory_order_relaxed);
    for (uint64_t k = 0; k < 3 && k < v.downs; ++k) {
      const uint64_t at = h.recentDownNs[(v.downs - k) % 3].load(std::memory_order_relaxed);
      v.downAgesMs[k] = at && at <= now ? int64_t((now - at) / 1000000) : 0;
    }
    out->push_back(std::move(v));
  }
}

Result BusTransport::linkCounters(std::string_view link, snclBusCounters_t* out) const {
  if (!state_) return fail(snclInvalidUsage, "bus: counters before setup");
  *out = snclBusCounters_t{};
  const topo::Graph& g = topology_->graph();
  auto add = [&](uint64_t c) {
    const Channel& ch = state_->channel(c);
    out->bytes += ch.bytes.load();
    out->chunks += ch.chunks.load();
    out->errors += ch.errors.load();
    out->jittered += ch.jittered.load();
    out->busyUs += double(ch.busyWallNs.load()) / options_.timescale / 1000;
  };
  if (link.empty()) {
    for (uint64_t c = 0; c < state_->channelCount(); ++c) add(c);
    return snclSuccess;
  }
  const size_t dash = link.find('-');
  const topo::VertexId a = dash == std::string_view::npos ? topo::kNone : g.findVertex(link.substr(0, dash));
  const topo::VertexId b = dash == std::string_view::npos ? topo::kNone : g.findVertex(link.substr(dash + 1));
  const topo::LinkId l = a == topo::kNone || b == topo::kNone ? topo::kNone : g.findLink(a, b);
  if (l == topo::kNone) return fail(snclInvalidArgument, "bus: no link \"{}\" in topology {}", link, g.name());
  add(2ull * l + (g.linkA(l) == a ? 0 : 1));
  return snclSuccess;
}

}  // namespace sncl::bus
