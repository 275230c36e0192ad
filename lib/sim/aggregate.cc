// The aggregated engine, for 10,000+ ranks (docs/simulator.md, "Aggregation"):
//
// 1. Each rank's schedule is built once (lazily, rank by rank, into one reused buffer) and
//    compressed into runs of consecutive steps of the same shape: the same operations (kind,
//    peer) with byte counts equal within kCountTolerance (a run keeps the largest). Under
//    the workload's symmetry (sim.h) only one rank per class and a checked sample are
//    built; the others are derived.
// 2. Steps are put on one lockstep clock ("levels"): a message must sit at the same level on
//    both ends (messages are matched in posting order per pair, as the transports do). Runs
//    start at their step index; where the two ends of a message disagree, the earlier side
//    is delayed (its run split there if needed) until every message lines up — e.g. the
//    ranks that skip a phase of a composed schedule, or halving-doubling's extra pairs.
// 3. The clock is cut into segments where no rank changes run. Within a segment every step
//    has the same flows, so one step is simulated (all its flows start together, fair
//    shares re-solved as flows finish, then each rank's completion rule) and its duration
//    multiplied by the segment's length. A segment whose step has the shape of one of the
//    last few simulated (same ranks, operations and peers, bytes within kCountTolerance) takes
//    that step's result: a pipelined phase alternates between two or three shapes.
//
// Lockstep is exact when ranks are coupled step by step (ring, tree, halving-doubling on a
// uniform network); it charges every rank the slowest rank's step, where the exact engine
// lets loosely coupled ranks run ahead. tests/test_sim.cc bounds the difference.
//
// Longer than most files here on purpose: the steps above are one algorithm over shared
// state, and splitting it would spread that state over several files.
#include <algorithm>
#include <limits>
#include <map>

#include "lib/base/hash.h"
#include "lib/sim/flows.h"
#include "lib/sim/sim.h"

namespace sncl::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kCountTolerance = 1e-3;  // relative; merges ring parts of q and q+1 elements
constexpr int kMaxAlignPasses = 10000;
// Messages one rank posts in one step: beyond this (a direct algorithm on thousands of
// ranks) a step alone would not fit in memory.
constexpr size_t kMaxOpsPerStep = 4096;
// Step shapes remembered for reuse: enough for the alternations of pipelined phases.
constexpr size_t kRememberedShapes = 4;

struct ROp {
  algo::OpKind kind;
  int32_t peer;
  uint64_t bytes;
};

struct Run {
  uint64_t level;   // lockstep index of the run's first step
  uint64_t length;  // identical steps
  uint32_t opBegin, opEnd;
};

// A run's messages with one peer in one direction: messages seqStart.. of the pair, perStep
// per step.
struct MsgRun {  // 24 bytes: there are millions
  int32_t peer;
  uint32_t run;
  uint64_t seqStart;
  uint32_t perStep;  // at most kMaxOpsPerStep
  bool send;
  bool operator<(const MsgRun& o) const {
    return peer != o.peer ? peer < o.peer : send != o.send ? send < o.send : seqStart < o.seqStart;
  }
};

struct RankRuns {
  std::vector<Run> runs;
  std::vector<ROp> ops;
  std::vector<MsgRun> msgs;  // sorted

  void index() {
    msgs.clear();
    std::map<std::pair<int32_t, bool>, uint64_t> next;       // (peer, send) -> next message
    std::map<std::pair<int32_t, bool>, size_t> inRun;        // -> its entry in this run
    for (uint32_t j = 0; j < runs.size(); ++j) {
      inRun.clear();
      for (uint32_t i = runs[j].opBegin; i < runs[j].opEnd; ++i) {
        const ROp& op = ops[i];
        if (op.peer < 0) continue;
        const std::pair<int32_t, bool> key{op.peer, op.kind == algo::OpKind::Send};
        auto [it, fresh] = inRun.emplace(key, msgs.size());
        if (fresh) msgs.push_back({op.peer, j, next[key], 1, key.second});
        else ++msgs[it->second].perStep;
      }
      for (auto& [key, k] : inRun) next[key] += msgs[k].perStep * runs[j].length;
    }
    std::sort(msgs.begin(), msgs.end());
    msgs.shrink_to_fit();  // 16k ranks' indexes: growth slack alone would double them
  }

  // The entry holding message seq of (peer, send), or nullptr.
  const MsgRun* find(int32_t peer, bool send, uint64_t seq) const {
    auto it = std::upper_bound(msgs.begin(), msgs.end(), MsgRun{peer, 0, seq, 0, send});
    if (it == msgs.begin()) return nullptr;
    --it;
    if (it->peer != peer || it->send != send) return nullptr;
    if (seq >= it->seqStart + it->perStep * runs[it->run].length) return nullptr;
    return &*it;
  }

  // Splits run j after k steps (0 < k < length).
  void split(uint32_t j, uint64_t k) {
    Run tail = runs[j];
    tail.level += k;
    tail.length -= k;
    runs[j].length = k;
    runs.insert(runs.begin() + j + 1, tail);
  }

  // Delays run `from` by `by` levels and later runs only as far as order requires, so no
  // step is put later than some message forces it to be.
  void delay(uint32_t from, uint64_t by) {
    runs[from].level += by;
    for (size_t j = from + 1; j < runs.size(); ++j) {
      const uint64_t earliest = runs[j - 1].level + runs[j - 1].length;
      if (runs[j].level >= earliest) break;
      runs[j].level = earliest;
    }
  }
};

bool sameCount(uint64_t a, uint64_t b) {
  return a == b || double(a > b ? a - b : b - a) <= kCountTolerance * double(std::max(a, b));
}

class Aggregated {
 public:
  Aggregated(Network& net, const Workload& w, const SimOptions& o, SimResult* out)
      : net_(net),
        w_(w),
        o_(o),
        fs_(net.fairShare()),
        out_(out),
        ranks_(w.nranks),
        firstFlow_(w.nranks),
        inFirst_(w.nranks),
        inCount_(w.nranks),
        pos_(w.nranks, -1) {}

  // Builds, compresses and aligns the schedules; sweep() then runs them, once per bundling.
  Result prepare() {
    algo::Schedule sched;
    if (!fromSample(sched)) {
      for (int r = 0; r < w_.nranks; ++r) {
        w_.build(r, &sched);
        SNCL_CHECK(compress(r, sched, &ranks_[r]));
      }
    }
    for (RankRuns& rr : ranks_) rr.index();
    return align();
  }

  // What a sweep does: simulate every step; stop at the first step after which the
  // network's bundles overlap (the answer is then not kept); or only ask the network for
  // every step's routes, which is what refining the bundles needs (network.h).
  enum class Pass { Full, UntilConflict, RoutesOnly };

  // Runs the aligned schedules under the network's current bundling; *out's time, bytes,
  // messages, segments and critical step are this pass's.
  Result sweep(Pass pass) {
    out_->timeUs = 0;
    out_->messages = 0;
    out_->segments = 0;
    out_->critical = Critical{};
    for (Shape& s : shapes_) s.valid = false;  // their results are of the last bundling
    nextShape_ = 0;
    std::fill(pos_.begin(), pos_.end(), -1);  // an early stop leaves ranks active
    pass_ = pass;
    return sweepSteps();
  }

 private:
  // A ring's 2(n-1) steps on each of 16k ranks are too many to build (a billion
  // operations), and a hierarchical schedule's 5,886 take most of the budget. Under the
  // workload's symmetry one representative per class is built; kSampleRanks others spread
  // over the ranks are built and checked to be their representative's mapped (the
  // neighbours of rank 0 among them), and the representatives keep the largest byte counts
  // seen. If the claim holds, every other rank is derived; otherwise (false) every rank is
  // built.
  bool fromSample(algo::Schedule& sched) {
    constexpr int kSampleRanks = 64;
    const Workload::Symmetry sym = w_.symmetry;
    const int n = w_.nranks, block = sym.block;
    if (block < 1 || n % block || (!sym.rotate && !sym.translate)) return false;
    std::vector<int> reps;
    for (int r = 0; r < n; ++r)
      if (representative(r) == r) reps.push_back(r);
    if (size_t(n) - reps.size() <= 2 * size_t(kSampleRanks)) return false;
    for (int r : reps) {
      w_.build(r, &sched);
      if (compress(r, sched, &ranks_[r]) != snclSuccess) return reset();
    }
    RankRuns other;
    for (int i = 0; i < kSampleRanks; ++i) {
      const int r = i < 2 ? (i == 0 ? 1 : n - 1) : int(1 + int64_t(i) * (n - 2) / kSampleRanks);
      if (representative(r) == r) continue;
      RankRuns& base = ranks_[representative(r)];
      other = RankRuns{};
      w_.build(r, &sched);
      if (compress(r, sched, &other) != snclSuccess || other.runs.size() != base.runs.size() ||
          other.ops.size() != base.ops.size())
        return reset();
      for (size_t j = 0; j < base.runs.size(); ++j)
        if (other.runs[j].level != base.runs[j].level || other.runs[j].length != base.runs[j].length ||
            other.runs[j].opBegin != base.runs[j].opBegin)
          return reset();
      for (size_t k = 0; k < base.ops.size(); ++k) {
        ROp& b = base.ops[k];
        const ROp& o = other.ops[k];
        if (b.kind != o.kind || !sameCount(b.bytes, o.bytes) || (b.peer < 0) != (o.peer < 0) ||
            (b.peer >= 0 && mapPeer(r, b.peer) != o.peer))
          return reset();
        b.bytes = std::max(b.bytes, o.bytes);
      }
    }
    for (int r = 0; r < n; ++r) {
      const int rep = representative(r);
      if (rep == r) continue;
      ranks_[r].runs = ranks_[rep].runs;
      ranks_[r].ops = ranks_[rep].ops;
      for (ROp& op : ranks_[r].ops)
        if (op.peer >= 0) op.peer = mapPeer(r, op.peer);
    }
    return true;
  }

  // The rank whose schedule rank r's is derived from under the workload's symmetry.
  int representative(int r) const {
    const int block = w_.symmetry.block;
    if (w_.symmetry.rotate && w_.symmetry.translate) return 0;
    return w_.symmetry.rotate ? r - r % block : r % block;
  }

  // Peer p of rank r's representative, as rank r's peer.
  int32_t mapPeer(int r, int32_t p) const {
    const int block = w_.symmetry.block, blocks = w_.nranks / block;
    const int b = r / block, i = r % block;
    int64_t peerBlock = p / block, peerIndex = p % block;
    if (w_.symmetry.rotate) peerIndex = (peerIndex + i) % block;
    if (w_.symmetry.translate) peerBlock = (peerBlock + b) % blocks;
    return int32_t(peerBlock * block + peerIndex);
  }

  // Forgets what fromSample built: every rank gets built.
  bool reset() {
    for (RankRuns& rr : ranks_) rr = RankRuns{};
    return false;
  }

  Result compress(int r, const algo::Schedule& sc, RankRuns* target) {
    RankRuns& rr = *target;
    std::vector<uint64_t> firstBytes;  // the current run's first step, for the tolerance
    for (size_t s = 0; s < sc.numSteps(); ++s) {
      const uint32_t b = sc.stepBegin(s), e = sc.stepEnd[s];
      if (e - b > kMaxOpsPerStep)
        return fail(snclInvalidArgument, "simulator: rank {} posts {} operations in one step (at most {} here)", r, e - b,
                    kMaxOpsPerStep);
      for (uint32_t i = b; i < e; ++i) {
        const algo::Op& op = sc.ops[i];
        const bool local = op.kind == algo::OpKind::Copy || op.kind == algo::OpKind::Reduce;
        if (!local && (op.peer < 0 || op.peer >= w_.nranks || op.peer == r))
          return fail(snclInternalError, "simulator: rank {} step {} names peer {}", r, s, op.peer);
      }
      bool same = !rr.runs.empty() && rr.runs.back().opEnd - rr.runs.back().opBegin == e - b;
      for (uint32_t i = b; same && i < e; ++i) {
        const algo::Op& op = sc.ops[i];
        const ROp& ro = rr.ops[rr.runs.back().opBegin + (i - b)];
        same = ro.kind == op.kind && ro.peer == (op.peer < 0 ? -1 : op.peer) &&
               sameCount(firstBytes[i - b], opBytes(op, w_.elemSize));
      }
      if (same) {
        Run& run = rr.runs.back();
        ++run.length;
        for (uint32_t i = b; i < e; ++i) {
          ROp& ro = rr.ops[run.opBegin + (i - b)];
          ro.bytes = std::max<uint64_t>(ro.bytes, opBytes(sc.ops[i], w_.elemSize));
        }
        continue;
      }
      rr.runs.push_back({s, 1, uint32_t(rr.ops.size()), uint32_t(rr.ops.size() + (e - b))});
      firstBytes.clear();
      for (uint32_t i = b; i < e; ++i) {
        const algo::Op& op = sc.ops[i];
        const bool local = op.kind == algo::OpKind::Copy || op.kind == algo::OpKind::Reduce;
        rr.ops.push_back({op.kind, local ? -1 : op.peer, opBytes(op, w_.elemSize)});
        firstBytes.push_back(opBytes(op, w_.elemSize));
      }
    }
    out_->steps = std::max<uint64_t>(out_->steps, sc.numSteps());
    ++out_->built;
    rr.runs.shrink_to_fit();
    rr.ops.shrink_to_fit();
    return snclSuccess;
  }

  // Level of message m's k-th message (k counted from m.seqStart) on its rank.
  uint64_t levelOf(const RankRuns& rr, const MsgRun& m, uint64_t seq) const {
    return rr.runs[m.run].level + (seq - m.seqStart) / m.perStep;
  }

  Result align() {
    for (int pass = 0; pass < kMaxAlignPasses; ++pass) {
      bool changed = false;
      for (int r = 0; r < w_.nranks; ++r) {
        for (size_t i = 0; i < ranks_[r].msgs.size(); ++i) {
          const MsgRun m = ranks_[r].msgs[i];
          RankRuns& peer = ranks_[m.peer];
          const MsgRun* c = peer.find(r, !m.send, m.seqStart);
          if (!c)
            return fail(snclInternalError, "simulator: rank {}'s message {} {} rank {} has no partner", r, m.seqStart,
                        m.send ? "to" : "from", m.peer);
          if (c->perStep != m.perStep || (m.seqStart - c->seqStart) % c->perStep)
            return fail(snclInvalidArgument,
                        "simulator: ranks {} and {} exchange {} and {} messages per step; the aggregated engine "
                        "needs them in the same steps (use the exact engine)",
                        r, m.peer, m.perStep, c->perStep);
          const uint64_t mine = levelOf(ranks_[r], m, m.seqStart), theirs = levelOf(peer, *c, m.seqStart);
          if (mine == theirs) continue;
          changed = true;
          if (mine < theirs) {
            ranks_[r].delay(m.run, theirs - mine);
            continue;
          }
          // The peer is early in the middle of a run: split it there, delay the rest.
          uint32_t j = c->run;
          const uint64_t k = (m.seqStart - c->seqStart) / c->perStep;
          if (k > 0) peer.split(j++, k);
          peer.delay(j, mine - theirs);
          if (k > 0) peer.index();
        }
      }
      if (!changed) return snclSuccess;
    }
    return fail(snclInvalidArgument, "simulator: schedules do not line up on one step clock (use the exact engine)");
  }

  struct ShapeOp {
    algo::OpKind kind;
    int32_t peer;
    uint64_t bytes;
  };
  // A simulated step and its result.
  struct Shape {
    bool valid = false;
    uint64_t hash = 0;
    std::vector<int32_t> ranks;     // active ranks, ascending
    std::vector<uint32_t> opStart;  // per rank of ranks: its first operation in ops
    std::vector<ShapeOp> ops;
    double stepUs = 0;
    Critical crit;
    std::vector<double> classBytes;  // carried per network class in one step
    uint64_t messages = 0;
  };

  struct StepFlow {
    int src, dst;
    uint64_t bytes;
    const Path* path;
    double left = 0, arrival = 0, rate = 0;  // last byte left the sender; arrived
    uint32_t bottleneck = UINT32_MAX;
  };

  Result sweepSteps() {
    // Run starts and ends bucketed by level, the ends of a level before its starts (bucket
    // 2 x level + 1), so a rank's next run replaces its last; a rank has at most one run
    // active at a time.
    struct Edge {
      int rank;
      int32_t run;  // -1: the rank's run ends here
    };
    uint64_t levels = 0;
    for (const RankRuns& rr : ranks_)
      if (!rr.runs.empty()) levels = std::max(levels, rr.runs.back().level + rr.runs.back().length);
    std::vector<uint32_t> bucketStart(2 * (levels + 1) + 1, 0);
    for (const RankRuns& rr : ranks_)
      for (const Run& run : rr.runs) ++bucketStart[2 * run.level + 2], ++bucketStart[2 * (run.level + run.length) + 1];
    for (size_t b = 1; b < bucketStart.size(); ++b) bucketStart[b] += bucketStart[b - 1];
    std::vector<Edge> edges(bucketStart.back());
    {
      std::vector<uint32_t> fill(bucketStart.begin(), bucketStart.end() - 1);
      for (int r = 0; r < w_.nranks; ++r)
        for (uint32_t j = 0; j < ranks_[r].runs.size(); ++j) {
          const Run& run = ranks_[r].runs[j];
          edges[fill[2 * (run.level + run.length)]++] = {r, -1};
          edges[fill[2 * run.level + 1]++] = {r, int32_t(j)};
        }
    }
    std::vector<uint64_t> marked;  // levels where some run starts or ends
    for (uint64_t level = 0; level <= levels; ++level)
      if (bucketStart[2 * level] != bucketStart[2 * level + 2]) marked.push_back(level);
    std::vector<int32_t> current(w_.nranks, -1);
    std::vector<int> active;
    out_->classBytes.assign(net_.classCount(), 0.0);
    double worst = -1;
    for (size_t m = 0; m < marked.size(); ++m) {
      const uint64_t level = marked[m];
      for (uint32_t i = bucketStart[2 * level]; i < bucketStart[2 * level + 2]; ++i) {
        const Edge& e = edges[i];
        if (e.run < 0) {
          if (pos_[e.rank] < 0) continue;
          const int moved = active.back();
          active[pos_[e.rank]] = moved;
          pos_[moved] = pos_[e.rank];
          active.pop_back();
          pos_[e.rank] = -1;
          current[e.rank] = -1;
        } else {
          current[e.rank] = e.run;
          if (pos_[e.rank] < 0) pos_[e.rank] = int32_t(active.size()), active.push_back(e.rank);
        }
      }
      if (m + 1 == marked.size() || active.empty()) continue;
      const uint64_t length = marked[m + 1] - level;
      const Shape* shape = remembered(current);
      if (!shape) {
        Shape& fresh = shapes_[nextShape_];
        nextShape_ = (nextShape_ + 1) % kRememberedShapes;
        std::swap(fresh, probe_);
        fresh.classBytes.assign(net_.classCount(), 0.0);
        SNCL_CHECK(step(active, current, &fresh));
        if (pass_ == Pass::UntilConflict && net_.bundlingConflict()) return snclSuccess;
        fresh.valid = true;
        ++out_->segments;
        net_.trim(o_.maxCachedHops);
        shape = &fresh;
      }
      const double stepUs = shape->stepUs;
      out_->timeUs += stepUs * double(length);
      out_->messages += shape->messages * length;
      for (size_t c = 0; c < shape->classBytes.size(); ++c) out_->classBytes[c] += shape->classBytes[c] * double(length);
      if (stepUs * double(length) > worst) {
        worst = stepUs * double(length);
        out_->critical = shape->crit;
        out_->critical.step = level;
        out_->critical.repeats = length;
        out_->critical.stepUs = stepUs;
      }
    }
    return snclSuccess;
  }

  // Fills probe_ with the active ranks' step shape and returns the remembered shape equal
  // to it, or nullptr (probe_ then holds the shape to simulate).
  const Shape* remembered(const std::vector<int32_t>& current) {
    Shape& p = probe_;
    p.ranks.clear();  // ascending: pos_ marks the active ranks
    for (int r = 0; r < w_.nranks; ++r)
      if (pos_[r] >= 0) p.ranks.push_back(r);
    p.opStart.clear();
    p.ops.clear();
    uint64_t hash = kFnvBasis;  // over ranks, kinds and peers
    const auto mix = [&hash](uint64_t v) { hash = fnvMix(hash, v); };
    for (int r : p.ranks) {
      const Run& run = ranks_[r].runs[current[r]];
      p.opStart.push_back(uint32_t(p.ops.size()));
      mix(uint64_t(r));
      for (uint32_t i = run.opBegin; i < run.opEnd; ++i) {
        const ROp& op = ranks_[r].ops[i];
        p.ops.push_back({op.kind, op.peer, op.bytes});
        mix(uint64_t(op.kind) << 32 | uint32_t(op.peer));
      }
    }
    p.hash = hash;
    for (const Shape& s : shapes_) {
      if (!s.valid || s.hash != p.hash || s.ranks != p.ranks || s.opStart != p.opStart || s.ops.size() != p.ops.size())
        continue;
      bool same = true;
      for (size_t k = 0; same && k < p.ops.size(); ++k)
        same = s.ops[k].kind == p.ops[k].kind && s.ops[k].peer == p.ops[k].peer && sameCount(s.ops[k].bytes, p.ops[k].bytes);
      if (same) return &s;
    }
    return nullptr;
  }

  // One step of the active runs: its duration, what bounded it, bytes per class, messages.
  Result step(const std::vector<int>& active, const std::vector<int32_t>& current, Shape* shape) {
    // Flows in rank order; a rank's sends are its flows in op order, its receives are found
    // in its inbox (flows by destination): the k-th receive from a peer in a step is the
    // k-th message of that pair (posting order).
    flows_.clear();
    for (int r : active) {
      const Run& run = ranks_[r].runs[current[r]];
      firstFlow_[r] = uint32_t(flows_.size());
      for (uint32_t i = run.opBegin; i < run.opEnd; ++i) {
        const ROp& op = ranks_[r].ops[i];
        if (op.kind != algo::OpKind::Send) continue;
        const Path* path = nullptr;  // valid until the network's next trim
        SNCL_CHECK(net_.path(r, op.peer, &path));
        flows_.push_back({r, op.peer, op.bytes, path});
        for (auto [ch, f] : path->hops)
          shape->classBytes[net_.classOf(ch)] += double(op.bytes) * f * net_.multiplicity(ch);
      }
    }
    shape->messages = flows_.size();
    if (pass_ == Pass::RoutesOnly) return snclSuccess;
    fluid();
    for (int r : active) inCount_[r] = 0;
    for (const StepFlow& f : flows_) ++inCount_[f.dst];
    uint32_t at = 0;
    for (int r : active) inFirst_[r] = at, at += inCount_[r], inCount_[r] = 0;
    inbox_.resize(at);
    for (uint32_t i = 0; i < flows_.size(); ++i) {
      const int d = flows_[i].dst;
      if (pos_[d] < 0) return fail(snclInternalError, "simulator: rank {} sends to idle rank {}", flows_[i].src, d);
      inbox_[inFirst_[d] + inCount_[d]++] = i;
    }
    const double memBytesPerUs = o_.memGBs * kBytesPerUsPerGBs;
    double* stepUs = &shape->stepUs;
    *stepUs = 0;
    int slowRank = -1;
    uint32_t slowFlow = UINT32_MAX;
    bool slowSending = false;
    for (int r : active) {
      const Run& run = ranks_[r].runs[current[r]];
      double cpu = 0, end = 0;
      uint32_t last = UINT32_MAX, sends = 0;
      bool lastSending = false;
      recvs_.clear();
      for (uint32_t i = run.opBegin; i < run.opEnd; ++i) {
        const ROp& op = ranks_[r].ops[i];
        if (op.peer < 0) {
          if (memBytesPerUs > 0) cpu += double(op.bytes) / memBytesPerUs;
          continue;
        }
        const bool send = op.kind == algo::OpKind::Send;
        uint32_t flow = UINT32_MAX;
        if (send) {
          flow = firstFlow_[r] + sends++;
        } else {
          int k = 0;  // earlier receives from this peer in the step
          for (uint32_t j = run.opBegin; j < i; ++j) k += ranks_[r].ops[j].peer == op.peer && ranks_[r].ops[j].kind != algo::OpKind::Send;
          for (uint32_t m = inFirst_[r]; m < inFirst_[r] + inCount_[r]; ++m)
            if (flows_[inbox_[m]].src == op.peer && k-- == 0) {
              flow = inbox_[m];
              break;
            }
          if (flow == UINT32_MAX)
            return fail(snclInternalError, "simulator: rank {} waits for a message from rank {} at level {}", r, op.peer,
                        run.level);
        }
        if (send) {
          if (flows_[flow].left > end) end = flows_[flow].left, last = flow, lastSending = true;
        } else {
          recvs_.push_back({flows_[flow].arrival, flow, op.kind == algo::OpKind::RecvReduce});
        }
      }
      std::sort(recvs_.begin(), recvs_.end(), [](const Recv& a, const Recv& b) { return a.arrival < b.arrival; });
      for (const Recv& rv : recvs_) {
        double t = rv.arrival;
        if (rv.reduce && memBytesPerUs > 0) t = cpu = std::max(cpu, rv.arrival) + double(flows_[rv.flow].bytes) / memBytesPerUs;
        if (t >= end) end = t, last = rv.flow, lastSending = false;
      }
      if (cpu > end) end = cpu, last = UINT32_MAX;
      if (end > *stepUs) *stepUs = end, slowRank = r, slowFlow = last, slowSending = lastSending;
    }
    Critical* crit = &shape->crit;
    *crit = Critical{};
    crit->rank = slowRank;
    if (slowFlow != UINT32_MAX) {
      const StepFlow& f = flows_[slowFlow];
      crit->peer = slowSending ? f.dst : f.src;
      crit->sending = slowSending;
      crit->latencyUs = f.path->latencyUs;
      crit->rateGBs = f.rate / kBytesPerUsPerGBs;
      if (f.bottleneck != UINT32_MAX) crit->bottleneck = net_.channelName(f.bottleneck);
    }
    return snclSuccess;
  }

  // All flows start at 0; shares are re-solved whenever some finish.
  void fluid() {
    std::vector<uint32_t> live(flows_.size());
    std::vector<double> remaining(flows_.size());
    for (size_t i = 0; i < flows_.size(); ++i) live[i] = uint32_t(i), remaining[i] = double(flows_[i].bytes);
    double now = 0;
    while (!live.empty()) {
      paths_.clear();
      for (uint32_t f : live) paths_.push_back(flows_[f].path);
      fs_.solve(paths_, &rates_, &bottleneck_);
      double dt = kInf;
      for (size_t i = 0; i < live.size(); ++i) {
        flows_[live[i]].rate = rates_[i];
        flows_[live[i]].bottleneck = bottleneck_[i];
        dt = std::min(dt, remaining[live[i]] / rates_[i]);
      }
      now += dt;
      size_t keep = 0;
      for (size_t i = 0; i < live.size(); ++i) {
        const uint32_t f = live[i];
        remaining[f] -= rates_[i] * dt;
        if (remaining[f] > 1e-9 * double(flows_[f].bytes) + 1e-9) {
          live[keep++] = f;
          continue;
        }
        flows_[f].left = now;
        flows_[f].arrival = now + flows_[f].path->latencyUs;
      }
      live.resize(keep);
    }
  }

  struct Recv {
    double arrival;
    uint32_t flow;
    bool reduce;
  };

  Network& net_;
  const Workload& w_;
  SimOptions o_;
  Pass pass_ = Pass::Full;
  FairShare& fs_;
  SimResult* out_;
  std::vector<RankRuns> ranks_;
  std::vector<Shape> shapes_ = std::vector<Shape>(kRememberedShapes);
  size_t nextShape_ = 0;
  Shape probe_;
  std::vector<StepFlow> flows_;
  // Per rank (indexed by rank, valid for active ranks): first own flow, inbox range.
  std::vector<uint32_t> firstFlow_, inFirst_, inCount_, inbox_;
  std::vector<int32_t> pos_;  // position among active ranks, -1 when idle
  std::vector<Recv> recvs_;
  std::vector<const Path*> paths_;
  std::vector<double> rates_;
  std::vector<uint32_t> bottleneck_;
};

}  // namespace

Result simulateAggregated(Network& net, const Workload& w, const SimOptions& o, SimResult* out) {
  *out = SimResult{};
  if (w.nranks < 1 || w.nranks > net.ranks())
    return fail(snclInvalidArgument, "simulator: {} ranks on a topology of {}", w.nranks, net.ranks());
  // runBundled's sequence (network.h) on one set of built schedules: the first pass stops
  // as soon as bundles overlap, a second only collects the routes the refinement needs.
  Aggregated a(net, w, o, out);
  SNCL_CHECK(a.prepare());
  using Pass = Aggregated::Pass;
  net.setBundling(o.bundle);
  out->runs = 1;
  SNCL_CHECK(a.sweep(Pass::UntilConflict));
  if (!net.bundlingConflict()) return snclSuccess;
  SNCL_CHECK(a.sweep(Pass::RoutesOnly));
  net.refineBundles();
  out->runs = 2;
  SNCL_CHECK(a.sweep(Pass::Full));
  if (!net.bundlingConflict()) return snclSuccess;
  net.setBundling(false);
  out->runs = 3;
  return a.sweep(Pass::Full);
}

}  // namespace sncl::sim
