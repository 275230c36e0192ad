// Reduce benchmark in nccl-tests' format (-r root), with MPI_Reduce beside it.
#include "perf/common/harness.h"

namespace {

using perf::Call;

double busFactor(int) { return 1.0; }
snclResult_t run(const Call& c) { return snclReduce(c.send, c.recv, c.count, c.type, c.op, c.root, c.comm, nullptr); }
int runMpi(const Call& c, MPI_Datatype type, MPI_Op op) {
  return MPI_Reduce(c.send, c.recv, static_cast<int>(c.count), type, op, c.root, MPI_COMM_WORLD);
}
void fill(const Call& c) { perf::fillReduction(c, c.count); }
size_t check(const Call& c) { return c.rank == c.root ? perf::checkReduction(c, c.recv, c.count) : 0; }

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"reduce", true, true, false, true, nullptr, nullptr, busFactor, run, runMpi, fill, check};
  return perf::run(argc, argv, c);
}
