// Ping-pong in nccl-tests' format: ranks pair up (0-1, 2-3, ...; an odd last rank idles);
// the even rank of a pair sends and then receives, the odd one receives and then sends,
// one message in flight at a time, as fi_pingpong and OSU's osu_latency run.
// MPI_Send/MPI_Recv in the same pattern beside it. Bus bandwidth is one-way bandwidth as
// fi_pingpong reports it: two messages of the size per iteration, one after the other.
// sendrecv_perf sends both ways at once, which on a CPU-bound link is another measurement.
#include "perf/common/harness.h"

namespace {

using perf::Call;

int peer(const Call& c) { return (c.rank ^ 1) < c.nranks ? (c.rank ^ 1) : -1; }
bool pings(const Call& c) { return c.rank % 2 == 0; }

double busFactor(int) { return 2.0; }
snclResult_t run(const Call& c) {
  const int p = peer(c);
  if (p < 0) return snclSuccess;
  if (pings(c)) {
    snclResult_t r = snclSend(c.send, c.count, c.type, p, c.comm, nullptr);
    return r != snclSuccess ? r : snclRecv(c.recv, c.count, c.type, p, c.comm, nullptr);
  }
  snclResult_t r = snclRecv(c.recv, c.count, c.type, p, c.comm, nullptr);
  return r != snclSuccess ? r : snclSend(c.send, c.count, c.type, p, c.comm, nullptr);
}
int runMpi(const Call& c, MPI_Datatype type, MPI_Op) {
  const int p = peer(c);
  if (p < 0) return MPI_SUCCESS;
  const int n = static_cast<int>(c.count);
  if (pings(c)) {
    int r = MPI_Send(c.send, n, type, p, 0, MPI_COMM_WORLD);
    return r != MPI_SUCCESS ? r : MPI_Recv(c.recv, n, type, p, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  int r = MPI_Recv(c.recv, n, type, p, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return r != MPI_SUCCESS ? r : MPI_Send(c.send, n, type, p, 0, MPI_COMM_WORLD);
}
void fill(const Call& c) { perf::fillPattern(perf::typeSize(c.type), c.rank, const_cast<void*>(c.send), c.count); }
size_t check(const Call& c) {
  const int p = peer(c);
  return p < 0 ? 0 : perf::checkPattern(perf::typeSize(c.type), p, c.recv, c.count);
}

}  // namespace

int main(int argc, char** argv) {
  perf::Collective c{"pingpong", false, false, false, false, nullptr, nullptr, busFactor, run, runMpi, fill, check};
  return perf::run(argc, argv, c);
}
