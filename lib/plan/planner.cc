#include "lib/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "algorithms/chain.h"
#include "algorithms/direct.h"
#include "algorithms/direct_v.h"
#include "algorithms/halving_doubling.h"
#include "algorithms/pairwise.h"
#include "algorithms/ring.h"
#include "algorithms/scan.h"
#include "algorithms/tree.h"
#include "lib/base/log.h"
#include "lib/plan/plan_estimate.h"

namespace sncl {

const char* collName(CollType c) {
  switch (c) {
    case CollType::AllReduce: return "allreduce";
    case CollType::Broadcast: return "broadcast";
    case CollType::Reduce: return "reduce";
    case CollType::AllGather: return "allgather";
    case CollType::ReduceScatter: return "reducescatter";
    case CollType::AlltoAll: return "alltoall";
    case CollType::Gather: return "gather";
    case CollType::Scatter: return "scatter";
    case CollType::Send: return "send";
    case CollType::Recv: return "recv";
    case CollType::AllGatherV: return "allgatherv";
    case CollType::AlltoAllV: return "alltoallv";
    case CollType::GatherV: return "gatherv";
    case CollType::ScatterV: return "scatterv";
    case CollType::ReduceScatterV: return "reducescatterv";
    case CollType::Scan: return "scan";
    case CollType::Exscan: return "exscan";
    default: return "?";
  }
}

bool parseCollName(std::string_view name, CollType* out) {
  for (size_t c = 0; c < size_t(CollType::kCount); ++c)
    if (!isPointToPoint(CollType(c)) && !hasLayout(CollType(c)) && name == collName(CollType(c))) {
      *out = CollType(c);
      return true;
    }
  return false;
}

const char* algorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Direct: return "direct";
    case Algorithm::Chain: return "chain";
    case Algorithm::Tree: return "tree";
    case Algorithm::HalvingDoubling: return "hd";
    case Algorithm::Hierarchical: return "hier";
    default: return "?";
  }
}

namespace {

template <class E>
constexpr size_t idx(E e) {
  return static_cast<size_t>(e);
}

constexpr double kInf = std::numeric_limits<double>::infinity();

bool parseAlgorithm(std::string name, Algorithm* out) {
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  // NCCL's and the literature's names besides ours.
  static const std::map<std::string, Algorithm> aliases = {
      {"mesh", Algorithm::Direct}, {"halvingdoubling", Algorithm::HalvingDoubling},
      {"hierarchical", Algorithm::Hierarchical}};
  if (auto it = aliases.find(name); it != aliases.end()) return *out = it->second, true;
  for (size_t a = 0; a < idx(Algorithm::kCount); ++a) {
    if (name == algorithmName(static_cast<Algorithm>(a))) {
      *out = static_cast<Algorithm>(a);
      return true;
    }
  }
  return false;
}

const char* groupAlgoName(algo::GroupAlgo a) { return a == algo::GroupAlgo::Ring ? "ring" : "direct"; }
const char* flatName(algo::FlatAllReduce a) {
  switch (a) {
    case algo::FlatAllReduce::Ring: return "ring";
    case algo::FlatAllReduce::Direct: return "direct";
    case algo::FlatAllReduce::Tree: return "tree";
    case algo::FlatAllReduce::HalvingDoubling: return "hd";
  }
  return "?";
}

algo::FlatAllReduce flatOf(Algorithm a) {
  switch (a) {
    case Algorithm::Direct: return algo::FlatAllReduce::Direct;
    case Algorithm::Tree: return algo::FlatAllReduce::Tree;
    case Algorithm::HalvingDoubling: return algo::FlatAllReduce::HalvingDoubling;
    default: return algo::FlatAllReduce::Ring;
  }
}

}  // namespace

// SNCL_ALGO follows NCCL_ALGO: "ring,tree" allows only those, "^tree" excludes, and
// "allreduce:ring;broadcast:^tree" sets it per collective.
Planner::Planner(int rank, std::shared_ptr<const CostModel> model, const PlannerOptions& options)
    : rank_(rank), nranks_(model->nranks()), model_(std::move(model)), chunkBytes_(std::max<size_t>(options.chunkBytes, 64)) {
  const std::string& algoSpec = options.algoSpec;
  for (auto& row : allowed_) row.fill(true);
  std::stringstream clauses(algoSpec);
  std::string clause;
  while (std::getline(clauses, clause, ';')) {
    if (clause.empty()) continue;
    std::vector<size_t> colls;
    std::string list = clause;
    if (auto colon = clause.find(':'); colon != std::string::npos) {
      std::string coll = clause.substr(0, colon);
      list = clause.substr(colon + 1);
      for (size_t c = 0; c < idx(CollType::kCount); ++c)
        if (coll == collName(static_cast<CollType>(c))) colls.push_back(c), named_[c] = true;
      if (colls.empty()) log::warn("SNCL_ALGO: unknown collective '{}' ignored", coll);
    } else {
      for (size_t c = 0; c < idx(CollType::kCount); ++c) colls.push_back(c);
    }
    bool exclude = !list.empty() && list[0] == '^';
    if (exclude) list.erase(0, 1);
    std::array<bool, idx(Algorithm::kCount)> named{};
    std::stringstream names(list);
    std::string name;
    while (std::getline(names, name, ',')) {
      Algorithm a;
      if (parseAlgorithm(name, &a)) named[idx(a)] = true;
      else log::warn("SNCL_ALGO: unknown algorithm '{}' ignored", name);
    }
    for (size_t c : colls)
      for (size_t a = 0; a < idx(Algorithm::kCount); ++a) allowed_[c][a] = exclude ? !named[a] : named[a];
  }
  // A spec for all collectives ("ring") may name no algorithm that some collective has
  // (broadcast has no ring): that collective keeps all of its own. Only a clause that
  // names the collective is worth a warning.
  for (size_t c = 0; c < idx(CollType::kCount); ++c) {
    const CollType coll = static_cast<CollType>(c);
    if (isPointToPoint(coll)) continue;
    bool any = false;
    for (size_t a = 0; a < idx(Algorithm::kCount); ++a) any |= allowed_[c][a] && supports(coll, static_cast<Algorithm>(a));
    if (any) continue;
    if (named_[c]) log::warn("SNCL_ALGO='{}' leaves no algorithm for {}; using all", algoSpec, collName(coll));
    else log::info(log::Subsys::Plan, "SNCL_ALGO='{}' names no algorithm of {}; using all", algoSpec, collName(coll));
    allowed_[c].fill(true);
  }
  findHierarchies();
}

// The levels of the topology that split this comm's ranks differently from the level
// below (and into more than one group); every one alone and every pair is a hierarchy.
void Planner::findHierarchies() {
  const topo::Graph& g = model_->graph();
  const auto& rankVertex = model_->rankVertex();
  std::vector<std::pair<topo::Level, std::vector<int>>> levels;
  std::vector<int> prev(nranks_);
  for (int r = 0; r < nranks_; ++r) prev[r] = r;
  for (int l = int(topo::Level::Numa); l < topo::kNumLevels; ++l) {
    std::vector<int> groups(nranks_);
    std::map<int, int> ids;  // numbered by first rank, so that equal partitions compare equal
    for (int r = 0; r < nranks_; ++r) {
      const topo::EndpointId e = g.endpointOf(rankVertex[r]);
      if (e == topo::kNone) return;
      groups[r] = ids.emplace(g.groupOf(e, topo::Level(l)), int(ids.size())).first->second;
    }
    if (ids.size() <= 1) break;
    if (groups == prev) continue;
    levels.emplace_back(topo::Level(l), groups);
    prev = std::move(groups);
  }
  auto add = [&](std::vector<size_t> which) {
    Hierarchy h;
    for (size_t i : which) {
      // (append, not "x" + string: GCC 12 warns falsely on the latter, -Wrestrict)
      h.name.append(h.name.empty() ? "" : "+").append(topo::levelName(levels[i].first));
      h.groupOf.push_back(levels[i].second);
    }
    if (algo::HierarchicalAllReduce::check(nranks_, h.groupOf).empty()) hierarchies_.push_back(std::move(h));
  };
  for (size_t i = 0; i < levels.size(); ++i) add({i});
  for (size_t i = 0; i < levels.size(); ++i)
    for (size_t j = i + 1; j < levels.size(); ++j) add({i, j});
}

bool Planner::allowed(CollType coll, Algorithm a) const { return allowed_[idx(coll)][idx(a)]; }

bool Planner::supports(CollType coll, Algorithm a) {
  switch (coll) {
    case CollType::AllReduce:
      return a == Algorithm::Ring || a == Algorithm::Direct || a == Algorithm::Tree || a == Algorithm::HalvingDoubling ||
             a == Algorithm::Hierarchical;
    case CollType::AllGather:
    case CollType::ReduceScatter: return a == Algorithm::Ring || a == Algorithm::Direct;
    case CollType::Broadcast:
    case CollType::Reduce: return a == Algorithm::Chain || a == Algorithm::Direct;
    case CollType::AlltoAll:
    case CollType::Gather:
    case CollType::Scatter: return a == Algorithm::Direct;
    // The v-forms have one algorithm each (docs/planner.md), direct (Reduce-Scatter-V's
    // pairwise exchange is direct too: every block goes straight to its rank); the scans a
    // chain or recursive doubling ("hd").
    case CollType::AllGatherV:
    case CollType::AlltoAllV:
    case CollType::GatherV:
    case CollType::ScatterV:
    case CollType::ReduceScatterV: return a == Algorithm::Direct;
    case CollType::Scan:
    case CollType::Exscan: return a == Algorithm::Chain || a == Algorithm::HalvingDoubling;
    default: return false;
  }
}

std::string Planner::describe(const Plan& p) const {
  if (p.algorithm != Algorithm::Hierarchical) return algorithmName(p.algorithm);
  const std::string levels = p.hierarchy >= 0 && size_t(p.hierarchy) < hierarchies_.size() ? hierarchies_[p.hierarchy].name : "?";
  return fmt::format("hier[{}]({}/{})", levels, groupAlgoName(p.inner), flatName(p.outer));
}

// Estimates are per rank's bytes as choose() gets them (see CollShape).
double Planner::estimateUs(CollType coll, const Plan& plan, size_t bytes) const {
  return estimateWithin(coll, plan, bytes, estimate::kNoBudget);
}

double Planner::estimateWithin(CollType coll, const Plan& plan, size_t bytes, double budget) const {
  const CostModel& m = *model_;
  const double b = static_cast<double>(bytes), chunk = static_cast<double>(chunkBytes_);
  const Algorithm a = plan.algorithm;
  if (!supports(coll, a)) return kInf;
  if (nranks_ == 1) return b / m.memBytesPerUs();  // a copy, whatever the algorithm
  estimate::Groups all(1);
  for (int r = 0; r < nranks_; ++r) all[0].push_back(r);
  switch (coll) {
    case CollType::AllReduce:
      if (a == Algorithm::Hierarchical) {
        algo::HierarchicalSpec spec{hierarchies_[plan.hierarchy].groupOf, plan.inner, plan.outer};
        return estimate::hierarchical(m, spec, b, chunk, budget);
      }
      return estimate::allReduce(m, flatOf(a), all, b, chunk, budget);
    case CollType::Broadcast:
    case CollType::Reduce: {
      const bool reduce = coll == CollType::Reduce;
      return a == Algorithm::Chain ? estimate::chain(m, 0, b, chunk, reduce) : estimate::directRooted(m, 0, b, reduce, reduce);
    }
    case CollType::AllGather:
      return estimate::allGather(m, a == Algorithm::Direct ? algo::GroupAlgo::Direct : algo::GroupAlgo::Ring, all, b, chunk);
    case CollType::ReduceScatter:
      return estimate::reduceScatter(m, a == Algorithm::Direct ? algo::GroupAlgo::Direct : algo::GroupAlgo::Ring, all, b, chunk);
    case CollType::AlltoAll: return estimate::allToAll(m, b);
    case CollType::Gather: return estimate::directRooted(m, 0, b, true, false);
    case CollType::Scatter: return estimate::directRooted(m, 0, b, false, false);
    // The v-forms at this rank's count as if every rank had it: their only algorithm runs
    // whatever the estimate, which is for the log.
    case CollType::AllGatherV: return estimate::allGather(m, algo::GroupAlgo::Direct, all, b, chunk);
    case CollType::AlltoAllV: return estimate::allToAll(m, b);
    case CollType::GatherV: return estimate::directRooted(m, 0, b, true, false);
    case CollType::ScatterV: return estimate::directRooted(m, 0, b, false, false);
    case CollType::ReduceScatterV: return estimate::reduceScatter(m, algo::GroupAlgo::Direct, all, b, chunk);
    // The chain reduces on the way, as Reduce's toward its root.
    case CollType::Scan:
    case CollType::Exscan:
      return a == Algorithm::HalvingDoubling ? estimate::recursiveDoublingScan(m, b, coll == CollType::Exscan)
                                             : estimate::chain(m, 0, b, chunk, true);
    default: return kInf;
  }
}

std::vector<Plan> Planner::enumerate(CollType coll, size_t bytes) const {
  std::vector<Plan> out;
  auto consider = [&](Plan p) {
    p.coll = coll;
    p.chunkBytes = chunkBytes_;
    out.push_back(p);
  };
  for (size_t i = 0; i < idx(Algorithm::kCount); ++i) {
    const Algorithm a = static_cast<Algorithm>(i);
    if (!allowed(coll, a) || !supports(coll, a)) continue;
    if ((a == Algorithm::Direct || scanByDoubling(coll, a)) && bytes > kDirectMaxBytes) continue;
    if (a != Algorithm::Hierarchical) {
      consider({.algorithm = a});
      continue;
    }
    for (size_t h = 0; h < hierarchies_.size(); ++h)
      for (auto inner : {algo::GroupAlgo::Ring, algo::GroupAlgo::Direct})
        for (auto outer : {algo::FlatAllReduce::Ring, algo::FlatAllReduce::Tree, algo::FlatAllReduce::HalvingDoubling,
                           algo::FlatAllReduce::Direct}) {
          // Direct pieces keep whole blocks in flight at once, as flat direct does.
          if ((inner == algo::GroupAlgo::Direct || outer == algo::FlatAllReduce::Direct) && bytes > kDirectMaxBytes) continue;
          consider({.algorithm = a, .hierarchy = int(h), .inner = inner, .outer = outer});
        }
  }
  return out;
}

std::vector<Plan> Planner::candidates(CollType coll, size_t bytes) const {
  std::vector<Plan> out;
  for (Plan p : enumerate(coll, bytes)) {
    p.estimateUs = estimateUs(coll, p, bytes);
    if (p.estimateUs < kInf) out.push_back(p);
  }
  std::stable_sort(out.begin(), out.end(), [](const Plan& x, const Plan& y) { return x.estimateUs < y.estimateUs; });
  return out;
}

void Planner::force(const Plan& plan) {
  CacheEntry& f = forced_[idx(plan.coll)];
  f.valid = true;
  f.plan = plan;
  if (f.plan.chunkBytes == 0) f.plan.chunkBytes = chunkBytes_;
}

const Plan& Planner::choose(CollType coll, size_t bytes) {
  if (forced_[idx(coll)].valid) return forced_[idx(coll)].plan;
  const int bucket = bytes ? std::bit_width(bytes) : 0;
  CacheEntry& entry = cache_[idx(coll)][std::min(bucket, kBuckets - 1)];
  const uint64_t epoch = model_->epoch();
  if (entry.valid && entry.epoch == epoch) return entry.plan;
  // One plan serves the bucket [2^(b-1), 2^b): estimated at its smallest size (the power
  // of two callers use most), with the size limits of direct algorithms applied to its
  // largest.
  const size_t low = bucket == 0 ? 0 : size_t(1) << (bucket - 1);
  const size_t high = bucket == 0 ? 0 : (bucket >= 64 ? SIZE_MAX : (size_t(1) << bucket) - 1);
  auto tooLarge = [&](const Plan& p) {
    return high > kDirectMaxBytes &&
           (p.algorithm == Algorithm::Direct || scanByDoubling(p.coll, p.algorithm) ||
            (p.algorithm == Algorithm::Hierarchical && (p.inner == algo::GroupAlgo::Direct || p.outer == algo::FlatAllReduce::Direct)));
  };
  const bool explain = rank_ == 0 && log::level() >= log::Level::Info && log::enabled(log::Subsys::Plan);
  std::vector<Plan> all;  // every candidate's estimate, for the log only
  Plan best;
  bool found = false;
  if (explain) {
    all = candidates(coll, low);
    std::erase_if(all, tooLarge);
    if (!all.empty()) best = all.front(), found = true;
  } else {
    // Pruned: the likely best first (halving-doubling, then the hierarchies: they win at
    // scale), every other candidate only while its partial sum stays at or under the best
    // estimate so far. A pruned one costs more than the best whatever its remaining steps
    // add, so the choice and its estimate are the full comparison's; ties go to the first
    // in candidates()'s order, as its stable sort does.
    std::vector<Plan> list = enumerate(coll, low);
    std::erase_if(list, tooLarge);
    std::vector<size_t> order(list.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto rankOf = [](const Plan& p) {
      return p.algorithm == Algorithm::HalvingDoubling ? 0 : p.algorithm == Algorithm::Hierarchical ? 1 : 2;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return rankOf(list[x]) < rankOf(list[y]); });
    size_t bestAt = SIZE_MAX;
    double bestUs = kInf;
    for (size_t i : order) {
      const double us = estimateWithin(coll, list[i], low, bestUs);
      if (!(us < kInf)) continue;
      if (us < bestUs || (us == bestUs && i < bestAt)) bestUs = us, bestAt = i;
    }
    if (bestAt != SIZE_MAX) {
      best = list[bestAt];
      best.estimateUs = bestUs;
      found = true;
    }
  }
  if (!found) {
    // SNCL_ALGO left only algorithms that do not fit this size: the bandwidth-bound one
    // of the collective runs.
    best.coll = coll;
    best.algorithm = supports(coll, Algorithm::Ring) ? Algorithm::Ring
                     : supports(coll, Algorithm::Chain) ? Algorithm::Chain
                                                        : Algorithm::Direct;
    best.chunkBytes = chunkBytes_;
    best.estimateUs = estimateUs(coll, best, low);
  }
  entry = {true, epoch, best};
  if (explain) {
    std::string list;
    for (const Plan& p : all) list += fmt::format(" {}={:.1f}us", describe(p), p.estimateUs);
    log::info(log::Subsys::Plan, "plan {} {}..{} B on {} ranks (topology {}, epoch {}, tuning {}, {} clock): {} chunk {} B, estimate {:.1f} us",
              collName(coll), low, high, nranks_, model_->graph().name(), epoch, model_->tuning().source,
              clockName(model_->clock()), describe(best),
              best.chunkBytes, best.estimateUs);
    log::info(log::Subsys::Plan, "candidates {} {} B:{}", collName(coll), low, list);
  }
  return entry.plan;
}

// The v-forms, from CollShape::layout (laid out as CollOp::layout); without one (a tool
// that has only a size) nothing: an empty schedule.
void Planner::buildWithLayout(CollType coll, const CollShape& shape, algo::Schedule* out) const {
  const size_t* l = shape.layout;
  const size_t n = size_t(nranks_);
  const bool rootOnly = coll == CollType::GatherV || coll == CollType::ScatterV;
  if (!l && !(rootOnly && rank_ != shape.root)) {
    out->clear();
    return;
  }
  switch (coll) {
    case CollType::AllGatherV: algo::DirectAllGatherV::build(rank_, nranks_, shape.count, l, l + n, out); break;
    case CollType::AlltoAllV:
      algo::DirectAlltoAllV::build(rank_, nranks_, l, l + n, l + 2 * n, l + 3 * n, shape.inPlace, out);
      break;
    case CollType::GatherV:
      algo::DirectGatherV::build(rank_, nranks_, shape.root, shape.count, l, l ? l + n : nullptr, out);
      break;
    case CollType::ScatterV:
      algo::DirectScatterV::build(rank_, nranks_, shape.root, shape.count, l, l ? l + n : nullptr, out);
      break;
    case CollType::ReduceScatterV:
      algo::PairwiseReduceScatterV::build(rank_, nranks_, l, l + n, shape.inPlace, out);
      break;
    default: out->clear(); break;
  }
}

void Planner::build(const Plan& plan, const CollShape& shape, algo::Schedule* out) const {
  const size_t count = shape.count, chunkCount = std::max<size_t>(1, plan.chunkBytes / shape.elemSize);
  const int root = shape.root;
  const bool direct = plan.algorithm == Algorithm::Direct;
  switch (plan.coll) {
    case CollType::AllReduce:
      switch (plan.algorithm) {
        case Algorithm::Direct: algo::DirectAllReduce::build(rank_, nranks_, count, out); break;
        case Algorithm::Tree: algo::TreeAllReduce::build(rank_, nranks_, count, chunkCount, out); break;
        case Algorithm::HalvingDoubling: algo::HalvingDoublingAllReduce::build(rank_, nranks_, count, out); break;
        case Algorithm::Hierarchical: {
          const algo::HierarchicalSpec spec{hierarchies_[plan.hierarchy].groupOf, plan.inner, plan.outer};
          algo::HierarchicalAllReduce::build(rank_, nranks_, spec, count, chunkCount, out);
          break;
        }
        default: algo::RingAllReduce::build(rank_, nranks_, count, chunkCount, out); break;
      }
      break;
    case CollType::Broadcast:
      if (direct) algo::DirectBroadcast::build(rank_, nranks_, root, count, out);
      else algo::ChainBroadcast::build(rank_, nranks_, root, count, chunkCount, out);
      break;
    case CollType::Reduce:
      if (direct) algo::DirectReduce::build(rank_, nranks_, root, count, out);
      else algo::ChainReduce::build(rank_, nranks_, root, count, chunkCount, out);
      break;
    case CollType::AllGather:
      if (direct) algo::DirectAllGather::build(rank_, nranks_, count, out);
      else algo::RingAllGather::build(rank_, nranks_, count, chunkCount, out);
      break;
    case CollType::ReduceScatter:
      if (direct) algo::DirectReduceScatter::build(rank_, nranks_, count, out);
      else algo::RingReduceScatter::build(rank_, nranks_, count, chunkCount, out);
      break;
    case CollType::AlltoAll: algo::DirectAlltoAll::build(rank_, nranks_, count, shape.inPlace, out); break;
    case CollType::Gather: algo::DirectGather::build(rank_, nranks_, root, count, out); break;
    case CollType::Scatter: algo::DirectScatter::build(rank_, nranks_, root, count, out); break;
    case CollType::Scan:
    case CollType::Exscan:
      if (plan.algorithm == Algorithm::HalvingDoubling)
        algo::RecursiveDoublingScan::build(rank_, nranks_, count, plan.coll == CollType::Exscan, out);
      else algo::ChainScan::build(rank_, nranks_, count, chunkCount, plan.coll == CollType::Exscan, out);
      break;
    default:
      if (hasLayout(plan.coll)) buildWithLayout(plan.coll, shape, out);
      else out->clear();  // point-to-point is not planned
      break;
  }
}

}  // namespace sncl
