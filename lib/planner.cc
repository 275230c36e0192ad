#include "lib/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <sstream>

#include "algorithms/direct.h"
#include "algorithms/ring.h"
#include "lib/log.h"

namespace sncl {

const char* collName(CollType c) {
  switch (c) {
    case CollType::AllReduce: return "allreduce";
    default: return "?";
  }
}

const char* algorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Direct: return "direct";
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
        if (coll == collName(static_cast<CollType>(c))) colls.push_back(c);
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
  for (size_t c = 0; c < idx(CollType::kCount); ++c) {
    if (std::none_of(allowed_[c].begin(), allowed_[c].end(), [](bool b) { return b; })) {
      log::warn("SNCL_ALGO='{}' leaves no algorithm for {}; using all", algoSpec, collName(static_cast<CollType>(c)));
      allowed_[c].fill(true);
    }
  }
}

bool Planner::allowed(CollType coll, Algorithm a) const { return allowed_[idx(coll)][idx(a)]; }

double Planner::estimateUs(CollType coll, Algorithm a, size_t bytes) const {
  const double n = nranks_;
  const double linkBytesPerUs = link_.betaGBs * 1e3, memBytesPerUs = link_.memGBs * 1e3;
  if (nranks_ == 1) return bytes / memBytesPerUs;  // a copy, whatever the algorithm
  switch (a) {
    case Algorithm::Ring: {
      // 2(n-1) steps per round, each moving one chunk; each rank reduces and copies out
      // (n-1)/n of the data.
      const double rounds = std::max(1.0, std::ceil(bytes / (n * chunkBytes_)));
      const double steps = 2.0 * (n - 1.0) * rounds;
      return steps * link_.alphaUs + 2.0 * (n - 1.0) / n * bytes * (1.0 / linkBytesPerUs + 1.0 / memBytesPerUs);
    }
    case Algorithm::Direct: {
      if (coll != CollType::AllReduce || bytes > kDirectMaxBytes) break;
      // One message latency; the input leaves n-1 times; n-1 reductions and a copy out.
      return link_.alphaUs + (n - 1.0) * bytes / linkBytesPerUs + n * bytes / memBytesPerUs;
    }
    default: break;
  }
  return std::numeric_limits<double>::infinity();
}

const Plan& Planner::choose(CollType coll, size_t bytes) {
  const int bucket = bytes ? std::bit_width(bytes) : 0;
  CacheEntry& entry = cache_[idx(coll)][std::min(bucket, kBuckets - 1)];
  if (entry.valid) return entry.plan;
  // Estimated at the bucket's largest size, so that one plan fits the whole bucket.
  bytes = bucket == 0 ? 0 : (bucket >= 64 ? SIZE_MAX : (size_t(1) << bucket) - 1);
  Plan best;
  best.coll = coll;
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

void Planner::build(const Plan& plan, size_t count, size_t elemSize, algo::Schedule* out) const {
  const size_t chunkCount = std::max<size_t>(1, plan.chunkBytes / elemSize);
  switch (plan.algorithm) {
    case Algorithm::Direct: algo::DirectAllReduce::build(rank_, nranks_, count, out); break;
    case Algorithm::Ring:
    default: algo::RingAllReduce::build(rank_, nranks_, count, chunkCount, out); break;
  }
}

}  // namespace sncl
