// Small collectives through the cells of ranks that share memory (LocalCells,
// lib/transport/transport.h) instead of a schedule's messages: each rank writes its input
// into its cell and publishes it; the others read it in place. No message, no system call
// while the ranks keep up. Every rank reads the cells in rank order, so that every rank
// gets the same bits, those of a reduction in rank order.
//
// Reusing a cell: a rank has two, by call parity. Before it writes its cell of call n, which
// held call n-2, it waits until every peer published call n-1: a peer publishes n-1 only
// once it finished call n-2, reading included. So no rank is ever two calls ahead of another.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/base/error.h"
#include "lib/exec/cells_wait.h"
#include "lib/exec/reduce.h"
#include "lib/transport/transport.h"

namespace sncl {

// The collectives the cells run; the comm maps its own kinds to these.
// ReduceScatter: shared buffers only (shared_colls.h).
enum class CellsColl : uint8_t { AllReduce = 1, AllGather, Broadcast, Reduce, ReduceScatter };

struct CellsCall {
  CellsColl coll = CellsColl::AllReduce;
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;           // elements per rank: All-Reduce, Broadcast, Reduce: the buffer; All-Gather: a rank's block
  size_t elemSize = 1;
  ReduceFn reduce = nullptr;  // All-Reduce and Reduce
  int root = 0;               // Broadcast and Reduce
  uint32_t typeOp = 0;        // dtype and op, compared with the peers' (a mismatch is an error)
  size_t bytes() const { return count * elemSize; }
};

// Runs call on cells for rank of nranks (>= 2). Errors: a dead or failed peer (RemoteError
// naming it), no publish by the deadline (Timeout naming the rank), a peer that ran
// another collective, size, dtype or op (InvalidArgument). *interrupted: stopped by
// wait.interrupt (returns RemoteError, recording nothing).
Result runCells(LocalCells& cells, int rank, int nranks, const CellsCall& call, const CellsWait& wait,
                bool* interrupted);

// Whether the cells can take a call of coll with bytes per rank.
inline bool cellsFit(const LocalCells& cells, size_t bytes) {
  return bytes <= cells.cellBytes();
}

const char* cellsCollName(CellsColl c);

}  // namespace sncl
