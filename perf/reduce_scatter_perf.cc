// Reduce-Scatter benchmark in nccl-tests' format (size: the reduced buffer), with
// MPI_Reduce_scatter_block beside it.
#include "perf/common/harness.h"

namespace {

using perf::Call;

double busFactor(int n) { return (n - 1.0) / n; }
size_t ownBlock(size_t count, int rank, int) { return static_cast<size_t>(rank) * count; }
snclResult_t run(const Call& c) { return snclReduceScatter(c.send, c.recv, c.count, c.type, c.op, c.comm, nullptr); }
int runMpi(const Call& c, MPI_Datatype type, MPI_Op op) {
  return MPI_Reduce_scatter_block(c.send, c.recv, static_cast<int>(c.count), type, op, MPI_COMM_WORLD);
}
void fill(const Call& c) { perf::fillReduction(c, c.count * static_cast<size_t>(c.nranks)); }
size_t check(const Call& c) { return perf::checkReduction(c, c.recv, c.count, static_cast<size_t>(c.rank) * c.count); }

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"reduce_scatter", true, false, true, true, nullptr, ownBlock, busFactor, run, runMpi, fill, check};
  return perf::run(argc, argv, c);
}
