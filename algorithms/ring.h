// Ring algorithms: every rank sends to rank+1 and receives from rank-1, so each link
// carries (n-1)/n of the data whatever n is. Pipelined: the data is cut into rounds of
// chunks of at most chunkCount elements (per rank's part), each round one pass around
// the ring.
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

// All-Reduce: each round of nranks chunks is a reduce-scatter (nranks-1 steps) then an
// all-gather (nranks-1 steps).
struct RingAllReduce {
  // Fills out (cleared first) with rank's steps. chunkCount >= 1.
  static void build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out);
};

// All-Gather of count elements per rank: Output holds nranks blocks of count, block r
// from rank r. In-place when Input is Output's block `rank` (nothing is copied then).
struct RingAllGather {
  static void build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out);
};

// Reduce-Scatter to count elements per rank: Input holds nranks blocks of count; rank r's
// Output is block r reduced over all ranks. In-place when Output is Input's block `rank`.
// Partial sums wait in two scratch slots of a chunk each.
struct RingReduceScatter {
  static void build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out);
};

}  // namespace sncl::algo
