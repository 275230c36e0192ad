// Pairwise exchange for Reduce-Scatter with a block per rank of any size (MPI's
// Reduce_scatter with recvcounts): n-1 steps; at step k rank r sends its Input block of rank
// r+k to it and receives rank r-k's contribution to its own block, reducing it on arrival
// (RecvReduce) into the accumulator. One message in flight each way per step, no scratch
// out of place, so the scratch is bounded by the output whatever the counts; the
// transport streams each block, so large blocks pipeline inside their step. Every step
// exchanges a message even of no element, so ranks that disagree on a count fail with a
// size mismatch instead of waiting.
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

// counts[p]: elements of rank p's block, at offsets[p] of Input (the prefix sums). Output
// gets counts[rank] elements. In place (Input is Output: the whole input, the result at
// its start), the sum builds up in scratch (counts[rank] elements) and is copied to Output
// at the end, since Output's start holds other ranks' blocks until the last send left.
struct PairwiseReduceScatterV {
  static void build(int rank, int nranks, const size_t* counts, const size_t* offsets, bool inPlace, Schedule* out);
};

}  // namespace sncl::algo
