// Send/Recv benchmark in nccl-tests' format: every rank sends to rank+1 and receives from
// rank-1 in one group; MPI_Sendrecv in the same ring beside it. No in-place form: a send
// and a receive of one buffer would race.
#include "perf/common/harness.h"

namespace {

using perf::Call;

int next(const Call& c) { return (c.rank + 1) % c.nranks; }
int prev(const Call& c) { return (c.rank + c.nranks - 1) % c.nranks; }

double busFactor(int) { return 1.0; }
snclResult_t run(const Call& c) {
  snclGroupStart();
  snclSend(c.send, c.count, c.type, next(c), c.comm, nullptr);
  snclRecv(c.recv, c.count, c.type, prev(c), c.comm, nullptr);
  return snclGroupEnd();
}
int runMpi(const Call& c, MPI_Datatype type, MPI_Op) {
  const int n = static_cast<int>(c.count);
  return MPI_Sendrecv(c.send, n, type, next(c), 0, c.recv, n, type, prev(c), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}
void fill(const Call& c) { perf::fillPattern(perf::typeSize(c.type), c.rank, const_cast<void*>(c.send), c.count); }
size_t check(const Call& c) { return perf::checkPattern(perf::typeSize(c.type), prev(c), c.recv, c.count); }

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"sendrecv", false, false, false, false, nullptr, nullptr, busFactor, run, runMpi, fill, check};
  return perf::run(argc, argv, c);
}
