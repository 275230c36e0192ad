// Collectives on shared buffers: when every rank's buffers lie in memory all ranks of the
// host map (snclMemAlloc, lib/transport/shared_mem.h; or all ranks are threads of one
// process), ranks read and write each other's buffers in place instead of sending copies.
// Each byte moves once: an All-Reduce rank reduces its slice of every input and writes the
// result into every output; Reduce-Scatter and Reduce the same into their destinations;
// All-Gather and Broadcast ranks copy the blocks they need straight from their owners.
//
// Two cell calls (LocalCells) carry it: in the first each rank publishes where its buffers
// are; every rank reads all of them and decides alike whether the call can run here (else
// it is declined, and every rank runs its schedule instead). The second is the barrier
// after which no rank touches another's buffers, so a rank returns only once its output is
// written and its input no longer read. A rank that could not map a peer's buffer says so
// in that barrier, and every rank fails the call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/base/error.h"
#include "lib/exec/cells.h"
#include "lib/exec/cells_wait.h"
#include "lib/exec/reduce.h"
#include "lib/transport/transport.h"

namespace sncl {

struct SharedCall {
  CellsColl coll = CellsColl::AllReduce;
  const void* input = nullptr;
  void* output = nullptr;
  // Elements: All-Reduce, Broadcast, Reduce: of the buffer; All-Gather: of a rank's input;
  // Reduce-Scatter: of a rank's output.
  size_t count = 0;
  size_t elemSize = 1;
  ReduceFn reduce = nullptr;
  int root = 0;
  uint32_t typeOp = 0;     // dtype and op, compared with the peers'
  char* scratch = nullptr;  // a block of reduced results before they are written out
  size_t scratchBytes = 0;  // at least 64
  uint64_t cacheBytes = 0;  // of the last-level cache: past it outputs are streamed (pastTheCache)
  // This rank's staging area (a shared allocation of four parts, staged_colls.h), for calls
  // whose buffers peers cannot map; nullptr: none, or not for this call (the planner's
  // crossover, lib/comm/cells_path.cc): such calls are declined.
  char* stage = nullptr;
  size_t stagePartBytes = 0;
};

// Bytes this rank copied and reduced (the results' bytes), as the executor counts them.
struct SharedMoved {
  uint64_t copied = 0;
  uint64_t reduced = 0;
};

// The most ranks a call on shared buffers (or staged) takes: their buffers stay mapped
// together (SharedMaps).
constexpr int kSharedMaxRanks = 32;

// The descriptor's bytes in a cell: the path needs cells at least this large.
size_t sharedDescBytes();

// Runs call for rank of nranks on shared buffers, or through the ranks' staging areas when
// some buffer is not shared and every rank has one (*staged), or declines it (*declined:
// the ranks' buffers do not allow it; every rank declines alike). Errors as runCells, plus a buffer
// that could not be mapped (SystemError here, RemoteError naming the rank elsewhere).
Result runShared(LocalCells& cells, int rank, int nranks, const SharedCall& call, const CellsWait& wait,
                 bool* interrupted, bool* declined, bool* staged, SharedMoved* moved);

}  // namespace sncl
