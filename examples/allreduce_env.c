/* All-Reduce without MPI: ranks meet at SNCL_COMM_ID=host:port (like NCCL_COMM_ID or
 * torchrun's rendezvous), each told its SNCL_RANK and SNCL_NRANKS.
 *   for r in 0 1 2 3; do SNCL_COMM_ID=127.0.0.1:29500 SNCL_RANK=$r SNCL_NRANKS=4 \
 *     ./build/examples/allreduce_env & done; wait */
#include <stdio.h>
#include <stdlib.h>

#include "sncl/sncl.h"

static int envInt(const char* name) {
  const char* v = getenv(name);
  if (!v) {
    fprintf(stderr, "set %s\n", name);
    exit(2);
  }
  return atoi(v);
}

int main(void) {
  const int rank = envInt("SNCL_RANK"), nranks = envInt("SNCL_NRANKS");
  if (!getenv("SNCL_COMM_ID")) {
    fprintf(stderr, "set SNCL_COMM_ID=host:port\n");
    return 2;
  }
  snclUniqueId id; /* derived from SNCL_COMM_ID; rank 0 also starts the rendezvous there */
  snclComm_t comm;
  snclResult_t r = snclGetUniqueId(&id);
  if (r == snclSuccess) r = snclCommInitRank(&comm, nranks, id, rank);
  if (r != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s: %s\n", rank, snclGetErrorString(r), snclGetLastError(NULL));
    return 1;
  }
  double data[8];
  for (int i = 0; i < 8; ++i) data[i] = rank * 8 + i;
  r = snclAllReduce(data, data, 8, snclFloat64, snclMax, comm, NULL);
  if (r != snclSuccess) {
    fprintf(stderr, "rank %d: all-reduce failed: %s\n", rank, snclGetLastError(comm));
    snclCommAbort(comm);
    return 1;
  }
  int wrong = 0;
  for (int i = 0; i < 8; ++i) wrong += data[i] != (nranks - 1) * 8 + i;
  printf("rank %d/%d: max all-reduce %s\n", rank, nranks, wrong ? "WRONG" : "ok");
  snclCommDestroy(comm);
  return wrong != 0;
}
