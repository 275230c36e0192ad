/* All-Reduce with the unique id shared by MPI_Bcast, as nccl-tests does.
 *   mpirun -np 4 ./build/examples/allreduce_mpi */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "sncl/sncl.h"

#define CHECK(call)                                                                           \
  do {                                                                                        \
    snclResult_t r_ = (call);                                                                 \
    if (r_ != snclSuccess) {                                                                  \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, snclGetErrorString(r_), snclGetLastError(NULL)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

int main(int argc, char** argv) {
  int rank, nranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  snclUniqueId id;
  if (rank == 0) CHECK(snclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  snclComm_t comm;
  CHECK(snclCommInitRank(&comm, nranks, id, rank));

  const size_t count = 1 << 20;
  float* data = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) data[i] = (float)(rank + 1);

  /* On a stream: the call returns at once and the progress thread runs it. */
  snclStream_t stream;
  CHECK(snclStreamCreate(&stream));
  CHECK(snclAllReduce(data, data, count, snclFloat32, snclSum, comm, stream));
  CHECK(snclStreamSynchronize(stream));

  const float expect = nranks * (nranks + 1) / 2.0f;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += data[i] != expect;
  printf("rank %d/%d: all-reduce of %zu floats: %zu wrong (expected %.0f everywhere)\n", rank, nranks, count, wrong,
         expect);

  CHECK(snclStreamDestroy(stream));
  CHECK(snclCommDestroy(comm));
  free(data);
  MPI_Finalize();
  return wrong != 0;
}
