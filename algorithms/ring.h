// Ring All-Reduce, pipelined: the data is cut into rounds of nranks chunks of at most
// chunkCount elements; each round is a reduce-scatter (nranks-1 steps) then an all-gather
// (nranks-1 steps) around the ring rank -> rank+1.
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

struct RingAllReduce {
  // Fills out (cleared first) with rank's steps. chunkCount >= 1.
  static void build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out);
};

}  // namespace sncl::algo
