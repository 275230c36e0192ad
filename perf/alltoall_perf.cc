// All-to-All benchmark in nccl-tests' format (size: one rank's whole send buffer), with
// MPI_Alltoall beside it.
#include "perf/common/harness.h"

namespace {

using perf::Call;

double busFactor(int n) { return (n - 1.0) / n; }
snclResult_t run(const Call& c) { return snclAlltoAll(c.send, c.recv, c.count, c.type, c.comm, nullptr); }
int runMpi(const Call& c, MPI_Datatype type, MPI_Op) {
  const int n = static_cast<int>(c.count);
  return MPI_Alltoall(c.send, n, type, c.recv, n, type, MPI_COMM_WORLD);
}
// Block p of rank q's input is elements p*count.. of q's pattern.
void fill(const Call& c) {
  perf::fillPattern(perf::typeSize(c.type), c.rank, const_cast<void*>(c.send), c.count * static_cast<size_t>(c.nranks));
}
size_t check(const Call& c) {
  const size_t elem = perf::typeSize(c.type);
  size_t wrong = 0;
  for (int p = 0; p < c.nranks; ++p)
    wrong += perf::checkPattern(elem, p, static_cast<const char*>(c.recv) + p * c.count * elem, c.count,
                                static_cast<size_t>(c.rank) * c.count);
  return wrong;
}

bool runGloo(const Call& c) { return c.gloo->alltoAll(c.send, c.recv, c.count, c.type); }

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"alltoall", false, false, true, true, nullptr, nullptr, busFactor, run, runMpi, fill, check, runGloo};
  return perf::run(argc, argv, c);
}
