// Gloo as a peer in the benchmarks (`--baseline gloo`): what PyTorch users on CPUs run
// today. A full-mesh Gloo context over its TCP transport on loopback; ranks meet through a
// file store in a directory that rank 0 creates and MPI announces.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

#include "sncl/sncl.h"

namespace perf {

class GlooPeer {
 public:
  // nullptr, with the reason on stderr, when Gloo is not built in or cannot connect.
  // Collective over comm.
  static std::unique_ptr<GlooPeer> connect(MPI_Comm comm, int timeoutMs);
  ~GlooPeer();

  // Whether Gloo has this type (and op, for reductions): no bfloat16, fp8, avg or
  // pre-multiplied sums.
  static bool supports(snclDataType_t type, bool reduces, snclRedOp_t op);

  // Gloo's own algorithms, out of place; false (with a message) on a Gloo error.
  bool allReduce(const void* send, void* recv, size_t count, snclDataType_t type, snclRedOp_t op);
  bool broadcast(const void* send, void* recv, size_t count, snclDataType_t type, int root);
  bool allGather(const void* send, void* recv, size_t count, snclDataType_t type);
  bool alltoAll(const void* send, void* recv, size_t count, snclDataType_t type);

  struct Impl;

 private:
  explicit GlooPeer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace perf
