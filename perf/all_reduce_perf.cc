// All-Reduce benchmark in nccl-tests' format, with MPI_Allreduce beside it.
#include "perf/common/harness.h"

namespace {

size_t countFor(size_t bytes, size_t elemSize, int) { return bytes / elemSize; }
double busFactor(int nranks) { return 2.0 * (nranks - 1) / nranks; }

snclResult_t run(const void* in, void* out, size_t count, snclDataType_t type, snclRedOp_t op, snclComm_t comm) {
  return snclAllReduce(in, out, count, type, op, comm, nullptr);
}
int runMpi(const void* in, void* out, size_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  return MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, static_cast<int>(count), type, op, comm);
}
void fill(void* in, size_t count, snclDataType_t type, snclRedOp_t op, int rank, int nranks) {
  for (size_t i = 0; i < count; ++i) perf::store(type, in, i, perf::valueOf(op, rank, nranks, i));
}
size_t check(const void* out, size_t count, snclDataType_t type, snclRedOp_t op, int, int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += perf::load(type, out, i) != perf::reducedValue(op, nranks, i);
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"all_reduce", countFor, busFactor, run, runMpi, fill, check};
  return perf::run(argc, argv, c);
}
