// Broadcast benchmark in nccl-tests' format (-r root), with MPI_Bcast beside it.
#include <cstring>

#include "perf/common/harness.h"

namespace {

using perf::Call;

double busFactor(int) { return 1.0; }
snclResult_t run(const Call& c) { return snclBroadcast(c.send, c.recv, c.count, c.type, c.root, c.comm, nullptr); }
// MPI_Bcast works in place: root copies its input over first, as sncl does out of place.
int runMpi(const Call& c, MPI_Datatype type, MPI_Op) {
  if (c.rank == c.root) memcpy(c.recv, c.send, c.count * perf::typeSize(c.type));
  return MPI_Bcast(c.recv, static_cast<int>(c.count), type, c.root, MPI_COMM_WORLD);
}
void fill(const Call& c) {
  if (c.rank == c.root) perf::fillPattern(perf::typeSize(c.type), c.root, const_cast<void*>(c.send), c.count);
}
size_t check(const Call& c) { return perf::checkPattern(perf::typeSize(c.type), c.root, c.recv, c.count); }

bool runGloo(const Call& c) { return c.gloo->broadcast(c.send, c.recv, c.count, c.type, c.root); }

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"broadcast", false, true, false, true, nullptr, nullptr, busFactor, run, runMpi, fill, check, runGloo};
  return perf::run(argc, argv, c);
}
