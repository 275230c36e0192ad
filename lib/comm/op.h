// One call, as the API validated it: what, how much, which dtype and op, and the buffers.
#pragma once

#include <cstddef>
#include <vector>

#include "lib/plan/planner.h"
#include "sncl/sncl.h"

struct snclComm;
struct snclStream;

namespace sncl {

struct CollOp {
  CollType coll = CollType::AllReduce;
  const void* input = nullptr;  // Send's buffer
  void* output = nullptr;       // Recv's buffer
  // Elements: per rank for All-Gather (sent) and Reduce-Scatter (received), per peer for
  // All-to-All, Gather and Scatter, the whole buffer otherwise; for the v-forms as
  // CollShape::count (lib/plan/planner.h).
  size_t count = 0;
  snclDataType_t dtype = snclFloat32;
  snclRedOp_t op = snclSum;  // a built-in op; a pre-multiplied sum is sum with preMul
  int root = 0;              // Broadcast, Reduce, Gather, Scatter
  int peer = -1;             // Send, Recv
  // Pre-multiplied sum: this rank's input is scaled before it is summed, by *scalarPtr
  // read when the call runs (snclScalarDevice), else by scalar.
  bool preMul = false;
  double scalar = 1.0;
  const void* scalarPtr = nullptr;
  // The v-forms (hasLayout): the caller's arrays, copied, so that a queued call owns them
  // (a copy into a slot that held one before reuses its capacity). n = nranks:
  //   All-Gather-V  recvcounts[n] displs[n]       All-to-All-V  sendcounts sdispls recvcounts rdispls
  //   Gather-V      recvcounts displs (root only) Scatter-V     sendcounts displs (root only)
  //   Reduce-Scatter-V  recvcounts[n] and their prefix sums[n] (the blocks' offsets in the input)
  // and the elements of the buffers the schedule may touch (the largest displacement plus
  // count; the sum for Reduce-Scatter-V's input).
  std::vector<size_t> layout;
  size_t inputExtent = 0, outputExtent = 0;
};

// A call inside a group (or queued on a stream): the op and where it goes. order is the
// position in the group, so that sorting by comm keeps each comm's calls in issue order.
struct GroupTask {
  snclComm* comm = nullptr;
  snclStream* stream = nullptr;
  uint32_t order = 0;
  CollOp op;
};

// Elements of a rank's input (All-Gather: sent, Reduce-Scatter: nranks blocks, ...).
inline size_t inputCount(const CollOp& op, int nranks) {
  switch (op.coll) {
    case CollType::ReduceScatter:
    case CollType::AlltoAll: return op.count * static_cast<size_t>(nranks);
    default: return hasLayout(op.coll) ? op.inputExtent : op.count;
  }
}

// Elements of a rank's output buffer (where the schedule may write).
inline size_t outputCount(const CollOp& op, int nranks) {
  switch (op.coll) {
    case CollType::AllGather:
    case CollType::AlltoAll:
    case CollType::Gather: return op.count * static_cast<size_t>(nranks);
    default: return hasLayout(op.coll) ? op.outputExtent : op.count;
  }
}

}  // namespace sncl
