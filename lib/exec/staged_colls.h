// Collectives on buffers peers cannot map (heap memory, a framework's caching allocator)
// between processes that can map each other's shared allocations: each rank copies its
// data into its staging area (a shared allocation of the comm), ranks reduce or copy out of
// each other's staging areas, and each rank copies its results out. An All-Reduce rank
// moves about 2S + S/n bytes (copy in, reduce its slice, copy every slice out) where the
// FIFO ring moves about 9S(n-1)/n.
//
// A call runs in chunks of at most a staging part; a staging area has four parts, an input
// and an output for each parity of the chunk number, so that a rank's copy into chunk i+2's
// parts waits only for the barrier of chunk i+1, which every rank passes after its reads of
// chunk i. Barriers are cell calls: All-Reduce and Reduce take two per chunk (inputs staged;
// slices reduced), the others one. No barrier ends the call: the next call on the shared
// path begins with the descriptors' round, which no rank passes before every rank finished
// this one, and no other path touches the staging areas.
#pragma once

#include <cstddef>

#include "lib/base/error.h"
#include "lib/exec/cells_wait.h"
#include "lib/exec/shared_colls.h"

namespace sncl {

// Where every rank's staging area is in this process, and the bytes of one of its four
// parts (the smallest over the ranks).
struct StagedAreas {
  char* const* base = nullptr;  // [nranks]
  size_t partBytes = 0;
};

// Runs call through the staging areas. mapFailed: this rank could not map a peer's area;
// every rank learns it at the first barrier and declines alike (*declined). Errors as
// runShared's.
Result runStaged(LocalCells& cells, CellsWaiter& waiter, int rank, int nranks, const SharedCall& call,
                 const StagedAreas& areas, bool mapFailed, bool* declined, SharedMoved* moved);

// The chunk of a staged call, in elements of call's count: at least one (part bytes of
// at least elemSize * nranks, as the comm allocates them).
size_t stagedChunk(const SharedCall& call, int nranks, size_t partBytes);

}  // namespace sncl
