// Pipelined chain (root -> root+1 -> ... -> root-1) for the rooted collectives: the data is
// cut into chunks of at most chunkCount elements, and at every step each rank passes one
// chunk on while it receives the next, so the data crosses every link once and the
// pipeline fills in nranks-2 steps. For large messages; small ones go direct.
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

// Broadcast of count elements from root's Input to every rank's Output (root's Input is
// not read elsewhere, and may be its Output: in-place).
struct ChainBroadcast {
  static void build(int rank, int nranks, int root, size_t count, size_t chunkCount, Schedule* out);
};

// Reduce of count elements from every rank's Input to root's Output, along the chain in
// the other direction (root-1 -> ... -> root+1 -> root). Ranks in the middle keep their
// partial sums in two scratch slots of a chunk; only root touches Output.
struct ChainReduce {
  static void build(int rank, int nranks, int root, size_t count, size_t chunkCount, Schedule* out);
};

}  // namespace sncl::algo
