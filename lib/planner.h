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

enum class CollType : uint8_t { AllReduce, kCount };
enum class Algorithm : uint8_t { Ring, Direct, kCount };

const char* collName(CollType c);
const char* algorithmName(Algorithm a);

// Cost of moving data on the links this comm uses: startup α (µs) and bandwidth β (GB/s).
// Reductions and copies cost memory bandwidth memGBs on the rank that does them.
struct LinkCost {
  double alphaUs = 1.0;
  double betaGBs = 8.0;
  double memGBs = 10.0;
};

// Direct All-Reduce keeps a whole input in scratch; above this it is not a candidate.
constexpr size_t kDirectMaxBytes = 4u << 20;

struct Plan {
  CollType coll = CollType::AllReduce;
  Algorithm algorithm = Algorithm::Ring;
  size_t chunkBytes = 0;     // pipeline chunk per rank per step
  double estimateUs = 0.0;
};

class Planner {
 public:
  Planner(int rank, int nranks, LinkCost link, const std::string& algoSpec, size_t chunkBytes);

  // The plan for a call of `bytes` per rank; logged at INFO the first time per bucket.
  const Plan& choose(CollType coll, size_t bytes);
  // This rank's schedule for plan over count elements of elemSize bytes.
  void build(const Plan& plan, size_t count, size_t elemSize, algo::Schedule* out) const;

  bool allowed(CollType coll, Algorithm a) const;

 private:
  double estimateUs(CollType coll, Algorithm a, size_t bytes) const;

  int rank_;
  int nranks_;
  LinkCost link_;
  size_t chunkBytes_;
  // allowed_[coll][algo], from SNCL_ALGO.
  std::array<std::array<bool, static_cast<size_t>(Algorithm::kCount)>, static_cast<size_t>(CollType::kCount)> allowed_{};
  static constexpr int kBuckets = 64;  // log2 of the size
  struct CacheEntry {
    bool valid = false;
    Plan plan;
  };
  std::array<std::array<CacheEntry, kBuckets>, static_cast<size_t>(CollType::kCount)> cache_{};
};

}  // namespace sncl
