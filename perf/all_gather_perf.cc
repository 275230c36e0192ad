// All-Gather benchmark in nccl-tests' format (size: the gathered buffer), with
// MPI_Allgather beside it.
#include "perf/common/harness.h"

namespace {

using perf::Call;

double busFactor(int n) { return (n - 1.0) / n; }
size_t ownBlock(size_t count, int rank, int) { return static_cast<size_t>(rank) * count; }
snclResult_t run(const Call& c) { return snclAllGather(c.send, c.recv, c.count, c.type, c.comm, nullptr); }
int runMpi(const Call& c, MPI_Datatype type, MPI_Op) {
  const int n = static_cast<int>(c.count);
  return MPI_Allgather(c.send, n, type, c.recv, n, type, MPI_COMM_WORLD);
}
void fill(const Call& c) { perf::fillPattern(perf::typeSize(c.type), c.rank, const_cast<void*>(c.send), c.count); }
size_t check(const Call& c) {
  const size_t elem = perf::typeSize(c.type);
  size_t wrong = 0;
  for (int p = 0; p < c.nranks; ++p)
    wrong += perf::checkPattern(elem, p, static_cast<const char*>(c.recv) + p * c.count * elem, c.count);
  return wrong;
}

bool runGloo(const Call& c) { return c.gloo->allGather(c.send, c.recv, c.count, c.type); }

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"all_gather", false, false, true, true, ownBlock, nullptr, busFactor, run, runMpi, fill, check, runGloo};
  return perf::run(argc, argv, c);
}
