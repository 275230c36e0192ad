// Direct schedules of the variable-count movers (MPI's v-forms): every message goes straight
// from the rank that has the data to the rank that needs it, all posted in one step, as the
// equal-count direct algorithms (algorithms/direct.h) and a group of sends and receives
// (algorithms/p2p.h) do. They run as collectives (tagged by the comm's call number, in issue
// order, re-run from kept inputs after a fault), not through the point-to-point path, whose
// tags count a pair's user messages across groups.
//
// Every pair the pattern connects exchanges one message even when it carries no element:
// ranks that disagree on a count then fail with a size mismatch on that message, whereas a
// message skipped on one side would leave its peer waiting for it until the deadline. A
// message of no element has offset 0, so that no schedule offsets a NULL buffer.
//
// counts[p] and displs[p] are per rank, in elements, as the caller passed them (validated
// by the API: a message's own count matches, extents fit the buffers).
#pragma once

#include "algorithms/schedule.h"

namespace sncl::algo {

// All-Gather-V: this rank's sendCount elements of Input (sendCount == counts[rank]) go to
// every rank's Output at displs[rank]; block p of Output comes from rank p. In place
// (Input is Output's block `rank`) the own copy is a copy onto itself, which the executor
// skips.
struct DirectAllGatherV {
  static void build(int rank, int nranks, size_t sendCount, const size_t* counts, const size_t* displs, Schedule* out);
};

// All-to-All-V: sendCounts[p] elements at sdispls[p] of Input go to rank p, recvCounts[p]
// at rdispls[p] of Output come from it. In place (Input is Output, with equal send and
// receive arrays) each block from a peer waits in scratch until every send has left, since
// a block is overwritten by the peer it is being sent to; scratch is the sum of the blocks
// received from peers.
struct DirectAlltoAllV {
  static void build(int rank, int nranks, const size_t* sendCounts, const size_t* sdispls, const size_t* recvCounts,
                    const size_t* rdispls, bool inPlace, Schedule* out);
};

// Gather-V: every rank's sendCount elements of Input to root's Output at displs[rank].
// counts and displs are read on root only.
struct DirectGatherV {
  static void build(int rank, int nranks, int root, size_t sendCount, const size_t* counts, const size_t* displs,
                    Schedule* out);
};

// Scatter-V: counts[p] elements at displs[p] of root's Input to rank p's Output (recvCount
// elements; recvCount == counts[root] on root). counts and displs are read on root only.
struct DirectScatterV {
  static void build(int rank, int nranks, int root, size_t recvCount, const size_t* counts, const size_t* displs,
                    Schedule* out);
};

}  // namespace sncl::algo
