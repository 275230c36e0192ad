// Direct (one-shot) All-Reduce for small messages and fully connected domains: every rank
// sends its whole input to every peer and reduces what it receives itself. One message
// latency instead of 2(n-1); (n-1)x the bytes on each link. Every rank reduces in rank
// order, so all ranks get bit-identical results.
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

struct DirectAllReduce {
  // Uses count elements of scratch (so that in-place inputs stay intact while sent).
  static void build(int rank, int nranks, size_t count, Schedule* out);
};

}  // namespace sncl::algo
