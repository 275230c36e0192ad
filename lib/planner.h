// The planner picks, for each collective call, the algorithm and its pipeline chunk by
// an α-β cost estimate, and builds this rank's schedule. Plans are cached per
// (collective, size bucket); SNCL_ALGO forces or excludes algorithms (NCCL's syntax).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"

namespace sncl {

// Every call the API takes. Send and Recv are not planned: a group's sends and receives
// on a comm become one point-to-point schedule (algorithms/p2p.h).
enum class CollType : uint8_t {
  AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, Send, Recv, kCount
};
enum class Algorithm : uint8_t { Ring, Direct, Chain, kCount };

const char* collName(CollType c);
const char* algorithmName(Algorithm a);
constexpr bool isPointToPoint(CollType c) { return c == CollType::Send || c == CollType::Recv; }
// Collectives that combine values with a reduction op.
constexpr bool reduces(CollType c) {
  return c == CollType::AllReduce || c == CollType::Reduce || c == CollType::ReduceScatter;
}
constexpr bool hasRoot(CollType c) {
  return c == CollType::Broadcast || c == CollType::Reduce || c == CollType::Gather || c == CollType::Scatter;
}

// Cost of moving data on the links this comm uses: startup α (µs) and bandwidth β (GB/s).
// Reductions and copies cost memory bandwidth memGBs on the rank that does them.
struct LinkCost {
  double alphaUs = 1.0;
  double betaGBs = 8.0;
  double memGBs = 10.0;
};

// Direct algorithms put all of a call's messages in flight at once (and direct All-Reduce
// keeps a whole input in scratch); above this they are not candidates.
constexpr size_t kDirectMaxBytes = 4u << 20;

// What a schedule depends on besides the algorithm. count is in elements: per rank for
// All-Gather (sent) and Reduce-Scatter (received), per peer for All-to-All, Gather and
// Scatter, the whole buffer otherwise. inPlace matters only to All-to-All.
struct CollShape {
  size_t count = 0;
  size_t elemSize = 0;
  int root = 0;
  bool inPlace = false;
};

struct Plan {
  CollType coll = CollType::AllReduce;
  Algorithm algorithm = Algorithm::Ring;
  size_t chunkBytes = 0;     // pipeline chunk per rank per step
  double estimateUs = 0.0;
};

class Planner {
 public:
  Planner(int rank, int nranks, LinkCost link, const std::string& algoSpec, size_t chunkBytes);

  // The plan for a collective of `bytes` (CollShape's count in bytes); logged at INFO the
  // first time per bucket.
  const Plan& choose(CollType coll, size_t bytes);
  // This rank's schedule for plan.
  void build(const Plan& plan, const CollShape& shape, algo::Schedule* out) const;

  bool allowed(CollType coll, Algorithm a) const;
  // Whether algorithm a has a schedule for coll.
  static bool supports(CollType coll, Algorithm a);

 private:
  double estimateUs(CollType coll, Algorithm a, size_t bytes) const;

  int rank_;
  int nranks_;
  LinkCost link_;
  size_t chunkBytes_;
  // allowed_[coll][algo], from SNCL_ALGO.
  std::array<std::array<bool, static_cast<size_t>(Algorithm::kCount)>, static_cast<size_t>(CollType::kCount)> allowed_{};
  std::array<bool, static_cast<size_t>(CollType::kCount)> named_{};  // by a "coll:" clause
  static constexpr int kBuckets = 64;  // log2 of the size
  struct CacheEntry {
    bool valid = false;
    Plan plan;
  };
  std::array<std::array<CacheEntry, kBuckets>, static_cast<size_t>(CollType::kCount)> cache_{};
};

}  // namespace sncl
