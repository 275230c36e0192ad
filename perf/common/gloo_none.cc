// Built when Gloo's development package is missing: `--baseline gloo` says so.
#include <cstdio>

#include "perf/common/gloo_peer.h"

namespace perf {

struct GlooPeer::Impl {};
GlooPeer::GlooPeer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooPeer::~GlooPeer() = default;

std::unique_ptr<GlooPeer> GlooPeer::connect(MPI_Comm comm, int) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) fprintf(stderr, "gloo: this build has no Gloo (install libgloo-dev and reconfigure)\n");
  return nullptr;
}
bool GlooPeer::supports(snclDataType_t, bool, snclRedOp_t) { return false; }
bool GlooPeer::allReduce(const void*, void*, size_t, snclDataType_t, snclRedOp_t) { return false; }
bool GlooPeer::broadcast(const void*, void*, size_t, snclDataType_t, int) { return false; }
bool GlooPeer::allGather(const void*, void*, size_t, snclDataType_t) { return false; }
bool GlooPeer::alltoAll(const void*, void*, size_t, snclDataType_t) { return false; }

}  // namespace perf
