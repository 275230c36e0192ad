#include "lib/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <sstream>

#include "algorithms/chain.h"
#include "algorithms/direct.h"
#include "algorithms/ring.h"
#include "lib/log.h"

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
    default: return "?";
  }
}

const char* algorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Direct: return "direct";
    case Algorithm::Chain: return "chain";
    default: return "?";
  }
}

namespace {

template <class E>
constexpr size_t idx(E e) {
  return static_cast<size_t>(e);
}

bool parseAlgorithm(std::string name, Algorithm* out) {
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  for (size_t a = 0; a < idx(Algorithm::kCount); ++a) {
    if (name == algorithmName(static_cast<Algorithm>(a))) {
      *out = static_cast<Algorithm>(a);
      return true;
    }
  }
  return false;
}

}  // namespace

// SNCL_ALGO follows NCCL_ALGO: "ring,tree" allows only those, "^tree" excludes, and
// "allreduce:ring;broadcast:^tree" sets it per collective.
Planner::Planner(int rank, int nranks, LinkCost link, const std::string& algoSpec, size_t chunkBytes)
    : rank_(rank), nranks_(nranks), link_(link), chunkBytes_(std::max<size_t>(chunkBytes, 64)) {
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
}

bool Planner::allowed(CollType coll, Algorithm a) const { return allowed_[idx(coll)][idx(a)]; }

double Planner::estimateUs(CollType coll, Algorithm a, size_t bytes) const {
  const double n = nranks_;
  const double linkBytesPerUs = link_.betaGBs * 1e3, memBytesPerUs = link_.memGBs * 1e3;
  const double b = static_cast<double>(bytes), chunk = static_cast<double>(chunkBytes_);
  if (!supports(coll, a)) return std::numeric_limits<double>::infinity();
  if (nranks_ == 1) return b / memBytesPerUs;  // a copy, whatever the algorithm
  if (a == Algorithm::Direct && bytes > kDirectMaxBytes) return std::numeric_limits<double>::infinity();
  // Direct: one message latency; every rank sends or receives (n-1) messages of b at once.
  const double direct = link_.alphaUs + (n - 1.0) * b / linkBytesPerUs;
  switch (coll) {
    case CollType::AllReduce:
      if (a == Algorithm::Ring) {
        // 2(n-1) steps per round, each moving one chunk; each rank reduces and copies out
        // (n-1)/n of the data.
        const double rounds = std::max(1.0, std::ceil(b / (n * chunk)));
        return 2.0 * (n - 1.0) * rounds * link_.alphaUs + 2.0 * (n - 1.0) / n * b * (1.0 / linkBytesPerUs + 1.0 / memBytesPerUs);
      }
      // The input leaves n-1 times; n-1 reductions and a copy out.
      return direct + n * b / memBytesPerUs;
    case CollType::Broadcast:
    case CollType::Reduce: {
      const double reduceCost = coll == CollType::Reduce ? 1.0 / memBytesPerUs : 0.0;
      if (a == Algorithm::Direct) return direct + (n - 1.0) * b * reduceCost;
      // Chain: chunks + n - 2 steps of one chunk each; every link carries the data once.
      const double chunks = std::max(1.0, std::ceil(b / chunk));
      return (chunks + n - 2.0) * (link_.alphaUs + std::min(b, chunk) * (1.0 / linkBytesPerUs + reduceCost));
    }
    case CollType::AllGather:
    case CollType::ReduceScatter: {
      const double reduceCost = coll == CollType::ReduceScatter ? (n - 1.0) * b / memBytesPerUs : 0.0;
      if (a == Algorithm::Direct) return direct + reduceCost;
      // Ring: n-1 steps per round of one chunk per rank.
      const double rounds = std::max(1.0, std::ceil(b / chunk));
      return (n - 1.0) * rounds * link_.alphaUs + (n - 1.0) * b / linkBytesPerUs + reduceCost;
    }
    default: return direct;  // AlltoAll, Gather, Scatter: direct only
  }
}

bool Planner::supports(CollType coll, Algorithm a) {
  switch (coll) {
    case CollType::AllReduce:
    case CollType::AllGather:
    case CollType::ReduceScatter: return a == Algorithm::Ring || a == Algorithm::Direct;
    case CollType::Broadcast:
    case CollType::Reduce: return a == Algorithm::Chain || a == Algorithm::Direct;
    case CollType::AlltoAll:
    case CollType::Gather:
    case CollType::Scatter: return a == Algorithm::Direct;
    default: return false;
  }
}

const Plan& Planner::choose(CollType coll, size_t bytes) {
  const int bucket = bytes ? std::bit_width(bytes) : 0;
  CacheEntry& entry = cache_[idx(coll)][std::min(bucket, kBuckets - 1)];
  if (entry.valid) return entry.plan;
  // Estimated at the bucket's largest size, so that one plan fits the whole bucket.
  bytes = bucket == 0 ? 0 : (bucket >= 64 ? SIZE_MAX : (size_t(1) << bucket) - 1);
  Plan best;
  best.coll = coll;
  // When SNCL_ALGO leaves only algorithms that do not fit this size, the bandwidth-bound
  // one of the collective runs.
  best.algorithm = supports(coll, Algorithm::Ring) ? Algorithm::Ring
                   : supports(coll, Algorithm::Chain) ? Algorithm::Chain
                                                      : Algorithm::Direct;
  best.estimateUs = std::numeric_limits<double>::infinity();
  std::string candidates;
  for (size_t a = 0; a < idx(Algorithm::kCount); ++a) {
    Algorithm alg = static_cast<Algorithm>(a);
    if (!allowed(coll, alg)) continue;
    double est = estimateUs(coll, alg, bytes);
    if (est == std::numeric_limits<double>::infinity()) continue;
    candidates += fmt::format(" {}={:.1f}us", algorithmName(alg), est);
    if (est < best.estimateUs) {
      best.algorithm = alg;
      best.estimateUs = est;
    }
  }
  best.chunkBytes = chunkBytes_;
  entry = {true, best};
  if (rank_ == 0)
    log::info(log::Subsys::Plan, "plan {} up to {} B on {} ranks: {} chunk {} B, estimate {:.1f} us; candidates:{}", collName(coll), bytes,
              nranks_, algorithmName(best.algorithm), best.chunkBytes, best.estimateUs, candidates);
  return entry.plan;
}

void Planner::build(const Plan& plan, const CollShape& shape, algo::Schedule* out) const {
  const size_t count = shape.count, chunkCount = std::max<size_t>(1, plan.chunkBytes / shape.elemSize);
  const int root = shape.root;
  const bool direct = plan.algorithm == Algorithm::Direct;
  switch (plan.coll) {
    case CollType::AllReduce:
      if (direct) algo::DirectAllReduce::build(rank_, nranks_, count, out);
      else algo::RingAllReduce::build(rank_, nranks_, count, chunkCount, out);
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
    default: out->clear(); break;  // point-to-point is not planned
  }
}

}  // namespace sncl
