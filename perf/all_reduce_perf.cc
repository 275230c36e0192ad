// All-Reduce benchmark in nccl-tests' format, with MPI_Allreduce beside it.
#include "perf/common/harness.h"

namespace {

using perf::Call;

double busFactor(int n) { return 2.0 * (n - 1) / n; }
snclResult_t run(const Call& c) { return snclAllReduce(c.send, c.recv, c.count, c.type, c.op, c.comm, nullptr); }
int runMpi(const Call& c, MPI_Datatype type, MPI_Op op) {
  return MPI_Allreduce(c.send, c.recv, static_cast<int>(c.count), type, op, MPI_COMM_WORLD);
}
void fill(const Call& c) { perf::fillReduction(c, c.count); }
size_t check(const Call& c) { return perf::checkReduction(c, c.recv, c.count); }

bool runGloo(const Call& c) { return c.gloo->allReduce(c.send, c.recv, c.count, c.type, c.refOp); }

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"all_reduce", true, false, false, true, nullptr, nullptr, busFactor, run, runMpi, fill, check, runGloo};
  return perf::run(argc, argv, c);
}
