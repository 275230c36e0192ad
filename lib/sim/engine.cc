// The exact engine: every message of every rank's schedule is a flow, every change of the
// set of flows in flight re-solves the fair shares. Cost grows with ranks x steps x flows
// in flight, so it serves up to a few hundred ranks (and checks the aggregated engine).
#include <deque>
#include <limits>
#include <queue>
#include <unordered_map>

#include "lib/sim/flows.h"
#include "lib/sim/sim.h"

namespace sncl::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Posted {  // a receive
  int rank;
  uint32_t tag;
  size_t bytes;
  bool reduce;  // a RecvReduce
};

struct Flow {
  int src, dst;
  const Path* path;
  double bytes, remaining, rate = 0;
  uint32_t bottleneck = UINT32_MAX;
  uint32_t tag;
  bool started = false, arrived = false, recvPosted = false, reduce = false;
};

enum class EvKind : uint8_t { Sent, Arrival, RecvReady, ReduceDone, LocalDone };
struct Event {
  double t;
  uint64_t seq;  // ties in posting order, so runs are reproducible
  EvKind kind;
  uint32_t id;  // flow, or rank (LocalDone)
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct RankState {
  size_t step = 0;
  uint32_t pending = 0;
  double stepStart = 0, cpuFree = 0, finish = -1;
  uint32_t lastFlow = UINT32_MAX;  // the op that completed last in the current step
  bool lastSending = false;
  Critical longest;                // this rank's longest step
};

class Exact {
 public:
  Exact(Network& net, const Workload& w, const SimOptions& o, SimResult* out)
      : net_(net), w_(w), o_(o), fs_(net.fairShare()), out_(out) {}

  Result run() {
    const int n = w_.nranks;
    sched_.resize(n);
    rs_.resize(n);
    size_t ops = 0;
    for (int r = 0; r < n; ++r) {
      w_.build(r, &sched_[r]);
      ops += sched_[r].ops.size();
      if (ops > o_.maxExactOps)
        return fail(snclInvalidArgument, "simulator: more than {} operations for the exact engine; use the aggregated one",
                    o_.maxExactOps);
      out_->steps = std::max<uint64_t>(out_->steps, sched_[r].numSteps());
      ++out_->built;
    }
    out_->classBytes.assign(net_.classCount(), 0.0);
    for (int r = 0; r < n; ++r) SNCL_CHECK(beginStep(r));
    SNCL_CHECK(loop());
    int last = 0;
    for (int r = 0; r < n; ++r) {
      if (rs_[r].finish < 0)
        return fail(snclInternalError, "simulator: schedules deadlock: rank {} waits in step {} of {}", r, rs_[r].step,
                    sched_[r].numSteps());
      if (rs_[r].finish > rs_[last].finish) last = r;
    }
    out_->timeUs = rs_[last].finish;
    out_->critical = rs_[last].longest;
    return snclSuccess;
  }

 private:
  Result loop() {
    std::vector<const Path*> paths;
    std::vector<double> rates;
    std::vector<uint32_t> bottleneck;
    while (true) {
      if (dirty_) {
        paths.clear();
        for (uint32_t f : active_) paths.push_back(flows_[f].path);
        fs_.solve(paths, &rates, &bottleneck);
        for (size_t i = 0; i < active_.size(); ++i) {
          flows_[active_[i]].rate = rates[i];
          flows_[active_[i]].bottleneck = bottleneck[i];
        }
        dirty_ = false;
      }
      double tTx = kInf;
      for (uint32_t f : active_) tTx = std::min(tTx, now_ + flows_[f].remaining / flows_[f].rate);
      const double tEv = events_.empty() ? kInf : events_.top().t;
      const double t = std::min(tTx, tEv);
      if (t == kInf) return snclSuccess;
      for (uint32_t f : active_) flows_[f].remaining -= flows_[f].rate * (t - now_);
      now_ = t;
      if (tTx <= tEv) {
        size_t keep = 0;
        for (uint32_t f : active_) {
          Flow& fl = flows_[f];
          if (fl.remaining > 1e-9 * fl.bytes + 1e-9) {
            active_[keep++] = f;
            continue;
          }
          // The send completes as its last byte leaves (the bus ends the sender's hold
          // there); the receive sees it one route latency later.
          push(now_, EvKind::Sent, f);
          push(now_ + fl.path->latencyUs, EvKind::Arrival, f);
          dirty_ = true;
        }
        active_.resize(keep);
      }
      while (!events_.empty() && events_.top().t <= now_) {
        Event e = events_.top();
        events_.pop();
        SNCL_CHECK(handle(e));
      }
    }
  }

  Result handle(const Event& e) {
    if (e.kind == EvKind::LocalDone) return opDone(int(e.id), UINT32_MAX, false);
    if (e.kind == EvKind::ReduceDone) return opDone(flows_[e.id].dst, e.id, false);
    if (e.kind == EvKind::RecvReady) return recvDone(e.id);
    if (e.kind == EvKind::Sent) return opDone(flows_[e.id].src, e.id, true);
    flows_[e.id].arrived = true;
    return flows_[e.id].recvPosted ? recvDone(e.id) : snclSuccess;
  }

  // The message is in and its receive posted: a RecvReduce still has to reduce it.
  Result recvDone(uint32_t id) {
    const Flow& f = flows_[id];
    if (f.reduce && o_.memGBs > 0) {
      RankState& d = rs_[f.dst];
      d.cpuFree = std::max(d.cpuFree, now_) + f.bytes / (o_.memGBs * kBytesPerUsPerGBs);
      push(d.cpuFree, EvKind::ReduceDone, id);
      return snclSuccess;
    }
    return opDone(f.dst, id, false);
  }

  Result opDone(int r, uint32_t flow, bool sending) {
    RankState& s = rs_[r];
    s.lastFlow = flow;
    s.lastSending = sending;
    if (--s.pending > 0) return snclSuccess;
    const double dur = now_ - s.stepStart;
    if (dur > s.longest.stepUs) {
      Critical& c = s.longest;
      c = Critical{};
      c.rank = r;
      c.step = s.step;
      c.stepUs = dur;
      if (flow != UINT32_MAX) {
        const Flow& f = flows_[flow];
        c.peer = sending ? f.dst : f.src;
        c.sending = sending;
        c.latencyUs = f.path->latencyUs;
        c.rateGBs = f.rate / kBytesPerUsPerGBs;
        if (f.bottleneck != UINT32_MAX) c.bottleneck = net_.channelName(f.bottleneck);
      }
    }
    ++s.step;
    return beginStep(r);
  }

  // Posts rank r's next non-empty step (or finishes it).
  Result beginStep(int r) {
    RankState& s = rs_[r];
    const algo::Schedule& sc = sched_[r];
    for (; s.step < sc.numSteps(); ++s.step) {
      s.stepStart = now_;
      s.pending = 0;
      double local = 0;
      for (uint32_t i = sc.stepBegin(s.step); i < sc.stepEnd[s.step]; ++i) {
        const algo::Op& op = sc.ops[i];
        if (op.kind == algo::OpKind::Copy || op.kind == algo::OpKind::Reduce) {
          if (o_.memGBs > 0) local += opBytes(op, w_.elemSize) / (o_.memGBs * kBytesPerUsPerGBs);
          continue;
        }
        if (op.peer < 0 || op.peer >= w_.nranks || op.peer == r)
          return fail(snclInternalError, "simulator: rank {} step {} names peer {}", r, s.step, op.peer);
        ++s.pending;
      }
      if (local > 0) {
        ++s.pending;
        s.cpuFree = std::max(s.cpuFree, now_) + local;
        push(s.cpuFree, EvKind::LocalDone, uint32_t(r));
      }
      if (s.pending == 0) continue;
      for (uint32_t i = sc.stepBegin(s.step); i < sc.stepEnd[s.step]; ++i) {
        const algo::Op& op = sc.ops[i];
        if (op.kind == algo::OpKind::Copy || op.kind == algo::OpKind::Reduce) continue;
        SNCL_CHECK(post(r, op));
      }
      return snclSuccess;
    }
    s.finish = now_;
    return snclSuccess;
  }

  static uint64_t pairKey(int src, int dst) { return uint64_t(uint32_t(src)) << 32 | uint32_t(dst); }

  // A send of up to eagerBytes is eager (the transport buffers it): its flow starts when it
  // is posted. A longer one streams through the transport's buffer, so its flow starts
  // once the matching receive is posted too. A send completes when its last byte left; a
  // receive when its message arrived and it is posted (matched in posting order per pair).
  Result post(int r, const algo::Op& op) {
    const size_t bytes = opBytes(op, w_.elemSize);
    const bool reduce = op.kind == algo::OpKind::RecvReduce;
    if (op.kind == algo::OpKind::Send) {
      const Path* path = nullptr;
      SNCL_CHECK(net_.path(r, op.peer, &path));
      const uint32_t id = uint32_t(flows_.size());
      flows_.push_back({r, op.peer, path, double(bytes), double(bytes), 0, UINT32_MAX, op.tag});
      auto& waiting = recvs_[pairKey(r, op.peer)];
      if (waiting.empty()) {
        sends_[pairKey(r, op.peer)].push_back(id);
        if (bytes <= o_.eagerBytes) start(id);
        return snclSuccess;
      }
      const Posted rv = waiting.front();
      waiting.pop_front();
      SNCL_CHECK(match(id, rv));
      start(id);
      return snclSuccess;
    }
    auto& unmatched = sends_[pairKey(op.peer, r)];
    if (unmatched.empty()) {
      recvs_[pairKey(op.peer, r)].push_back({r, op.tag, bytes, reduce});
      return snclSuccess;
    }
    const uint32_t id = unmatched.front();
    unmatched.pop_front();
    SNCL_CHECK(match(id, {r, op.tag, bytes, reduce}));
    if (!flows_[id].started) start(id);
    // Already in: complete it from the event loop, not while this step is being posted.
    if (flows_[id].arrived) push(now_, EvKind::RecvReady, id);
    return snclSuccess;
  }

  void start(uint32_t id) {
    Flow& f = flows_[id];
    f.started = true;
    active_.push_back(id);
    for (auto [ch, fr] : f.path->hops) out_->classBytes[net_.classOf(ch)] += f.bytes * fr * net_.multiplicity(ch);
    ++out_->messages;
    dirty_ = true;
  }

  Result match(uint32_t id, const Posted& rv) {
    Flow& f = flows_[id];
    if (f.tag != rv.tag || size_t(f.bytes) != rv.bytes)
      return fail(snclInternalError, "simulator: message {} -> {} mismatched (tag {} vs {}, {} vs {} bytes)", f.src, f.dst,
                  f.tag, rv.tag, size_t(f.bytes), rv.bytes);
    f.recvPosted = true;
    f.reduce = rv.reduce;
    return snclSuccess;
  }

  void push(double t, EvKind k, uint32_t id) { events_.push({t, seq_++, k, id}); }

  Network& net_;
  const Workload& w_;
  SimOptions o_;
  FairShare& fs_;
  SimResult* out_;
  std::vector<algo::Schedule> sched_;
  std::vector<RankState> rs_;
  std::unordered_map<uint64_t, std::deque<uint32_t>> sends_;  // flows not yet received
  std::unordered_map<uint64_t, std::deque<Posted>> recvs_;    // receives not yet sent
  std::vector<Flow> flows_;
  std::vector<uint32_t> active_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  double now_ = 0;
  bool dirty_ = false;
};

}  // namespace

Result simulateExact(Network& net, const Workload& w, const SimOptions& o, SimResult* out) {
  *out = SimResult{};
  if (w.nranks < 1 || w.nranks > net.ranks())
    return fail(snclInvalidArgument, "simulator: {} ranks on a topology of {}", w.nranks, net.ranks());
  uint32_t runs = 0;
  SNCL_CHECK(runBundled(
      net, o.bundle,
      [&] {
        *out = SimResult{};
        return Exact(net, w, o, out).run();
      },
      &runs));
  out->runs = runs;
  return snclSuccess;
}

}  // namespace sncl::sim
