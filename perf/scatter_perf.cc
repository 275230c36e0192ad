// Scatter benchmark in nccl-tests' format (size: root's whole send buffer; -r root), with
// MPI_Scatter beside it.
#include "perf/common/harness.h"

namespace {

using perf::Call;

double busFactor(int n) { return (n - 1.0) / n; }
size_t ownBlock(size_t count, int rank, int) { return static_cast<size_t>(rank) * count; }
snclResult_t run(const Call& c) { return snclScatter(c.send, c.recv, c.count, c.type, c.root, c.comm, nullptr); }
int runMpi(const Call& c, MPI_Datatype type, MPI_Op) {
  const int n = static_cast<int>(c.count);
  return MPI_Scatter(c.send, n, type, c.recv, n, type, c.root, MPI_COMM_WORLD);
}
void fill(const Call& c) {
  if (c.rank == c.root)
    perf::fillPattern(perf::typeSize(c.type), c.root, const_cast<void*>(c.send), c.count * static_cast<size_t>(c.nranks));
}
size_t check(const Call& c) {
  return perf::checkPattern(perf::typeSize(c.type), c.root, c.recv, c.count, static_cast<size_t>(c.rank) * c.count);
}

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"scatter", false, true, true, true, nullptr, ownBlock, busFactor, run, runMpi, fill, check};
  return perf::run(argc, argv, c);
}
