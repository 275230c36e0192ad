// The planner picks, for each collective call, the algorithm and its pipeline chunk by the
// cost model (lib/plan/cost_model.h: α-β per link from the comm's topology, shared links
// dividing bandwidth), and builds this rank's schedule. Plans are cached per (collective,
// size bucket) for the topology epoch they were made in; the rank count is the planner's.
// SNCL_ALGO forces or excludes algorithms (NCCL's syntax).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/hierarchical.h"
#include "algorithms/schedule.h"
#include "lib/plan/cost_model.h"

namespace sncl {

// Every call the API takes. Send and Recv are not planned: a group's sends and receives
// on a comm become one point-to-point schedule (algorithms/p2p.h). The v-forms and the
// scans (after Recv, so that the older values keep their numbers) have one algorithm each.
enum class CollType : uint8_t {
  AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, Send, Recv,
  AllGatherV, AlltoAllV, GatherV, ScatterV, ReduceScatterV, Scan, Exscan, kCount
};
// Direct is the one-shot "mesh" algorithm; Hierarchical composes the others over the
// topology's levels.
enum class Algorithm : uint8_t { Ring, Direct, Chain, Tree, HalvingDoubling, Hierarchical, kCount };

const char* collName(CollType c);
const char* algorithmName(Algorithm a);
constexpr bool isPointToPoint(CollType c) { return c == CollType::Send || c == CollType::Recv; }
// Collectives whose schedule needs per-rank counts and displacements (CollShape::layout).
constexpr bool hasLayout(CollType c) {
  return c == CollType::AllGatherV || c == CollType::AlltoAllV || c == CollType::GatherV || c == CollType::ScatterV ||
         c == CollType::ReduceScatterV;
}
// A collective (not send or recv) by its collName; not the v-forms, which a size alone
// does not describe (tools and snclCommExplainPlan take a size).
bool parseCollName(std::string_view name, CollType* out);
// Collectives that combine values with a reduction op.
constexpr bool reduces(CollType c) {
  return c == CollType::AllReduce || c == CollType::Reduce || c == CollType::ReduceScatter ||
         c == CollType::ReduceScatterV || c == CollType::Scan || c == CollType::Exscan;
}
constexpr bool hasRoot(CollType c) {
  return c == CollType::Broadcast || c == CollType::Reduce || c == CollType::Gather || c == CollType::Scatter ||
         c == CollType::GatherV || c == CollType::ScatterV;
}
// Collectives whose schedule differs when Input is Output.
constexpr bool shapedByInPlace(CollType c) {
  return c == CollType::AlltoAll || c == CollType::AlltoAllV || c == CollType::ReduceScatterV;
}

// Direct algorithms put all of a call's messages in flight at once (and direct All-Reduce
// keeps a whole input in scratch); above this they are not candidates.
constexpr size_t kDirectMaxBytes = 4u << 20;
// A scan by recursive doubling keeps two copies of its input in scratch: bounded the same way.
constexpr bool scanByDoubling(CollType c, Algorithm a) {
  return (c == CollType::Scan || c == CollType::Exscan) && a == Algorithm::HalvingDoubling;
}

// What a schedule depends on besides the algorithm. count is in elements: per rank for
// All-Gather (sent) and Reduce-Scatter (received), per peer for All-to-All, Gather and
// Scatter, the whole buffer otherwise; for the v-forms this rank's own (sent, or received
// for Scatter-V and Reduce-Scatter-V; all it sends for All-to-All-V). inPlace matters only where shapedByInPlace. layout: the v-forms'
// per-rank arrays, laid out as CollOp::layout (lib/comm/op.h) says; not owned.
struct CollShape {
  size_t count = 0;
  size_t elemSize = 0;
  int root = 0;
  bool inPlace = false;
  const size_t* layout = nullptr;
};

// CollShape's count in bytes for a collective of nccl-tests' size (the whole buffer, which
// every tool and snclCommExplainPlan take): divided by nranks where count is per rank or
// per peer.
constexpr bool countIsPerRank(CollType c) {
  return c == CollType::AllGather || c == CollType::ReduceScatter || c == CollType::AlltoAll ||
         c == CollType::Gather || c == CollType::Scatter;
}
constexpr size_t planBytesOfSize(CollType c, size_t bytes, int nranks) {
  return countIsPerRank(c) && nranks > 0 ? bytes / size_t(nranks) : bytes;
}

// A way to split the ranks into levels for the hierarchical composition, finest first.
struct Hierarchy {
  std::string name;                       // level names joined by '+', e.g. "node+supernode"
  std::vector<std::vector<int>> groupOf;  // [level][rank]
};

struct Plan {
  CollType coll = CollType::AllReduce;
  Algorithm algorithm = Algorithm::Ring;
  size_t chunkBytes = 0;     // pipeline chunk per rank per step
  double estimateUs = 0.0;
  // Hierarchical only: which of the planner's hierarchies, and the algorithms inside the
  // groups and across them.
  int hierarchy = -1;
  algo::GroupAlgo inner = algo::GroupAlgo::Ring;
  algo::FlatAllReduce outer = algo::FlatAllReduce::Ring;

  // The variant beside the algorithm, for cache keys: 0 unless hierarchical.
  uint32_t variant() const {
    return hierarchy < 0 ? 0 : 1 + uint32_t(hierarchy) * 16 + uint32_t(inner) * 4 + uint32_t(outer);
  }
};

struct PlannerOptions {
  std::string algoSpec;          // SNCL_ALGO
  size_t chunkBytes = 1u << 20;  // SNCL_CHUNK_SIZE
};

class Planner {
 public:
  // model's ranks are the comm's; rank is this one.
  Planner(int rank, std::shared_ptr<const CostModel> model, const PlannerOptions& options);

  // The plan for a collective of `bytes` (CollShape's count in bytes); logged with every
  // candidate's estimate at INFO (PLAN) the first time per bucket and epoch.
  const Plan& choose(CollType coll, size_t bytes);
  // Every allowed candidate for coll at bytes with its estimate, cheapest first.
  std::vector<Plan> candidates(CollType coll, size_t bytes) const;
  // This rank's schedule for plan.
  void build(const Plan& plan, const CollShape& shape, algo::Schedule* out) const;
  // From now on coll runs plan whatever the size (tests, tools).
  void force(const Plan& plan);

  bool allowed(CollType coll, Algorithm a) const;
  // Whether algorithm a has a schedule for coll.
  static bool supports(CollType coll, Algorithm a);
  // "ring", "hier[node](ring/tree)", ...
  std::string describe(const Plan& plan) const;
  const std::vector<Hierarchy>& hierarchies() const { return hierarchies_; }
  const CostModel& model() const { return *model_; }
  // plan's modeled time on the topology as it is now (a re-run after a lost link).
  double estimateUs(CollType coll, const Plan& plan, size_t bytes) const;

 private:
  void findHierarchies();
  // The allowed candidates for coll at bytes, in a fixed order (the tie-break), unestimated.
  std::vector<Plan> enumerate(CollType coll, size_t bytes) const;
  // estimateUs, or infinity as soon as a partial sum exceeds budget (plan_estimate.h).
  double estimateWithin(CollType coll, const Plan& plan, size_t bytes, double budget) const;
  void buildWithLayout(CollType coll, const CollShape& shape, algo::Schedule* out) const;

  int rank_;
  int nranks_;
  std::shared_ptr<const CostModel> model_;
  size_t chunkBytes_;
  std::vector<Hierarchy> hierarchies_;
  // allowed_[coll][algo], from SNCL_ALGO.
  std::array<std::array<bool, static_cast<size_t>(Algorithm::kCount)>, static_cast<size_t>(CollType::kCount)> allowed_{};
  std::array<bool, static_cast<size_t>(CollType::kCount)> named_{};  // by a "coll:" clause
  static constexpr int kBuckets = 64;  // log2 of the size
  struct CacheEntry {
    bool valid = false;
    uint64_t epoch = 0;
    Plan plan;
  };
  std::array<std::array<CacheEntry, kBuckets>, static_cast<size_t>(CollType::kCount)> cache_{};
  std::array<CacheEntry, static_cast<size_t>(CollType::kCount)> forced_{};
};

}  // namespace sncl
