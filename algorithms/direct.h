// Direct (one-shot) algorithms for small messages and fully connected domains: every
// message goes straight from the rank that has the data to the rank that needs it, all
// posted in one step. One message latency instead of n-1 (ring) or n-2+chunks (chain);
// more messages in flight per rank.
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

// All-Reduce: every rank sends its whole input to every peer and reduces what it receives
// itself, in rank order, so that all ranks get bit-identical results. Every receive is
// posted with the sends (a send may not complete before its receive is posted), so the
// inputs wait in nranks-2 scratch slots beside the sum (count elements, which keeps
// in-place inputs intact while sent).
struct DirectAllReduce {
  static void build(int rank, int nranks, size_t count, Schedule* out);
};

// Broadcast: root sends its Input to every peer.
struct DirectBroadcast {
  static void build(int rank, int nranks, int root, size_t count, Schedule* out);
};

// Reduce: every rank sends its Input to root, which starts from its own and adds the
// others in rank order into Output (so Input may be Output: in-place).
struct DirectReduce {
  static void build(int rank, int nranks, int root, size_t count, Schedule* out);
};

// All-Gather of count elements per rank into nranks blocks (see RingAllGather).
struct DirectAllGather {
  static void build(int rank, int nranks, size_t count, Schedule* out);
};

// Reduce-Scatter to count elements per rank (see RingReduceScatter): block p of Input goes
// to rank p, which starts from its own block and adds the others in rank order; all
// receives are posted with the sends, the blocks after the first waiting in nranks-2
// scratch slots.
struct DirectReduceScatter {
  static void build(int rank, int nranks, size_t count, Schedule* out);
};

// All-to-All of count elements per peer: block p of Input goes to rank p, block p of
// Output comes from rank p. In-place (Input is Output) receives into scratch first, since
// a block is overwritten by the peer it is being sent to.
struct DirectAlltoAll {
  static void build(int rank, int nranks, size_t count, bool inPlace, Schedule* out);
};

// Gather of count elements per rank into root's Output (block r from rank r). In-place
// when root's Input is its Output block `root`.
struct DirectGather {
  static void build(int rank, int nranks, int root, size_t count, Schedule* out);
};

// Scatter of root's Input (block r for rank r) to count elements per rank. In-place when
// root's Output is its Input block `root`.
struct DirectScatter {
  static void build(int rank, int nranks, int root, size_t count, Schedule* out);
};

}  // namespace sncl::algo
