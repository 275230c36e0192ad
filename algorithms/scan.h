// Prefix reductions over ranks (MPI_Scan, MPI_Exscan), two algorithms; the planner takes
// the cheaper by its estimates (recursive doubling for small counts, the chain for large).
//
// ChainScan, a pipelined chain 0 -> 1 -> ... -> n-1: rank r receives the prefix of ranks 0..r-1 from r-1 chunk by chunk, combines it
// with its input, and passes chunk c on to r+1 while it receives chunk c+1, so large counts
// pipeline (n-2 + chunks steps end to end) and every link carries the data once.
// Inclusive: the middle ranks reduce on arrival straight into Output (RecvReduce) and
// send from there. Exclusive: a rank's result is the prefix it receives, so it lands in
// Output as it is and the sum with the input that goes on is made in two scratch chunk
// slots (a copy of the input chunk, taken before the chunk's receive overwrites an in-place
// input, then a Reduce). Rank 0's Output is untouched by Exscan.
// At least one message (maybe empty) crosses each link, so ranks that disagree on the
// count fail with a size mismatch instead of waiting.
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

struct ChainScan {
  static void build(int rank, int nranks, size_t count, size_t chunkCount, bool exclusive, Schedule* out);
};

// Recursive doubling (Hillis-Steele): ceil(log2 n) rounds; in round k (d = 2^k) rank r
// sends its running prefix to r+d and combines the one from r-d into it (RecvReduce from
// one scratch copy into the other, so that the copy being sent is never written). Every
// round moves the whole count, so it pays for small counts only. Exclusive: the inclusive
// result goes one rank on in a last step, straight into Output (rank 0's stays untouched).
// Output is written only at the end, so an in-place input is read safely. Scratch: 2 x count.
struct RecursiveDoublingScan {
  static void build(int rank, int nranks, size_t count, bool exclusive, Schedule* out);
};

}  // namespace sncl::algo
