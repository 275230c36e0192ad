/* A plain MPI program (no sncl) for the drop-in test: it runs every collective that
 * libsncl_mpi.so serves, blocking and nonblocking (several outstanding, completed by
 * MPI_Waitall, MPI_Testall loops, MPI_Waitany and MPI_Waitsome, mixed with point-to-point
 * requests), with odd and random counts, in-place forms, every root, bitwise and logical
 * ops, derived types with and without gaps, ranks with different but matching types, on
 * MPI_COMM_WORLD, duplicates and a split; reductions sncl lacks the op or type for (MAXLOC,
 * user ops, short: served by a callback reduction); and an intercommunicator (falls back).
 * Rank 0 prints a digest of every result of every rank; runs with and without the preload
 * must print the same. Values are small integers, so floating sums are exact in any order. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_program.h"

#define MAX_RESULTS 1200
static uint64_t digests[MAX_RESULTS];
static const char* names[MAX_RESULTS];
static int nresults;

void record(const char* name, const void* buf, size_t bytes) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < bytes; ++i) h = (h ^ ((const unsigned char*)buf)[i]) * 1099511628211ull;
  if (nresults >= MAX_RESULTS) {
    fprintf(stderr, "mpi_program: more than %d results; raise MAX_RESULTS\n", MAX_RESULTS);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  names[nresults] = name;
  digests[nresults++] = h;
}

static void myMax(void* in, void* inout, int* len, MPI_Datatype* t) {
  for (int i = 0; i < *len; ++i) ((int*)inout)[i] = ((int*)in)[i] > ((int*)inout)[i] ? ((int*)in)[i] : ((int*)inout)[i];
}

/* Every collective of the suite on comm; tag names the communicator in the output. */
static void suite(MPI_Comm comm, int big) {
  int rank, n;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const int count = big ? (1 << 18) + 3 : 37;
  int* ia = malloc(sizeof(int) * count * n);
  int* ib = malloc(sizeof(int) * count * n);
  float* fa = malloc(sizeof(float) * count * n);
  float* fb = malloc(sizeof(float) * count * n);
  double* da = malloc(sizeof(double) * count);
  long long* la = malloc(sizeof(long long) * count);
  short* sa = malloc(sizeof(short) * count);
  for (int i = 0; i < count * n; ++i) {
    ia[i] = (i * 7 + rank * 13) % 101 - 50;
    fa[i] = (float)((i + rank * 3) % 17);
  }
  for (int i = 0; i < count; ++i) {
    da[i] = (double)((i * 5 + rank) % 23) - 11.0;
    la[i] = (long long)(i - rank * 1000003LL);
    sa[i] = (short)(i % 9 + rank);
  }

  MPI_Allreduce(ia, ib, count, MPI_INT, MPI_SUM, comm);
  record("allreduce int sum", ib, sizeof(int) * count);
  MPI_Allreduce(fa, fb, count, MPI_FLOAT, MPI_SUM, comm);
  record("allreduce float sum", fb, sizeof(float) * count);
  memcpy(fb, fa, sizeof(float) * count);
  MPI_Allreduce(MPI_IN_PLACE, fb, count, MPI_FLOAT, MPI_MAX, comm);
  record("allreduce float max in place", fb, sizeof(float) * count);
  MPI_Allreduce(MPI_IN_PLACE, da, count, MPI_DOUBLE, MPI_MIN, comm);
  record("allreduce double min in place", da, sizeof(double) * count);
  MPI_Allreduce(MPI_IN_PLACE, la, count, MPI_LONG_LONG, MPI_PROD, comm);
  record("allreduce long long prod in place", la, sizeof(long long) * count);
  MPI_Allreduce(MPI_IN_PLACE, sa, count, MPI_SHORT, MPI_SUM, comm);
  record("allreduce short sum (callback reduction)", sa, sizeof(short) * count);
  int flags[2] = {rank % 2, 1}, land[2];
  MPI_Allreduce(flags, land, 2, MPI_INT, MPI_LAND, comm);
  record("allreduce land", land, sizeof(land));
  int pair[2] = {(rank * 37) % n, rank}, maxloc[2];
  MPI_Allreduce(pair, maxloc, 1, MPI_2INT, MPI_MAXLOC, comm);
  record("allreduce maxloc (callback reduction)", maxloc, sizeof(maxloc));
  MPI_Op op;
  MPI_Op_create(myMax, 1, &op);
  MPI_Allreduce(ia, ib, count, MPI_INT, op, comm);
  record("allreduce user op (callback reduction)", ib, sizeof(int) * count);
  MPI_Op_free(&op);

  const int root = n - 1;
  memcpy(ib, ia, sizeof(int) * count);
  MPI_Bcast(ib, count, MPI_INT, root, comm);
  record("bcast int", ib, sizeof(int) * count);
  MPI_Datatype every2;
  MPI_Type_vector(count / 2, 1, 2, MPI_FLOAT, &every2);
  MPI_Type_commit(&every2);
  memcpy(fb, fa, sizeof(float) * count);
  MPI_Bcast(fb, 1, every2, 0, comm);
  record("bcast vector type", fb, sizeof(float) * count);
  MPI_Type_free(&every2);

  memset(ib, 0, sizeof(int) * count);
  MPI_Reduce(ia, ib, count, MPI_INT, MPI_MAX, root, comm);
  /* recvbuf matters at the root only */
  record("reduce int max", ib, rank == root ? sizeof(int) * count : 0);
  memcpy(fb, fa, sizeof(float) * count);
  MPI_Reduce(rank == 0 ? MPI_IN_PLACE : fb, fb, count, MPI_FLOAT, MPI_SUM, 0, comm);
  record("reduce float sum in place", fb, rank == 0 ? sizeof(float) * count : 0);

  MPI_Allgather(ia, count, MPI_INT, ib, count, MPI_INT, comm);
  record("allgather int", ib, sizeof(int) * count * n);
  memcpy(fb + (size_t)rank * count, fa, sizeof(float) * count);
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, fb, count, MPI_FLOAT, comm);
  record("allgather float in place", fb, sizeof(float) * count * n);

  MPI_Reduce_scatter_block(ia, ib, count, MPI_INT, MPI_SUM, comm);
  record("reduce_scatter_block int sum", ib, sizeof(int) * count);
  memcpy(fb, fa, sizeof(float) * count * n);
  MPI_Reduce_scatter_block(MPI_IN_PLACE, fb, count, MPI_FLOAT, MPI_MIN, comm);
  record("reduce_scatter_block float min in place", fb, sizeof(float) * count);

  MPI_Alltoall(ia, count, MPI_INT, ib, count, MPI_INT, comm);
  record("alltoall int", ib, sizeof(int) * count * n);
  memcpy(fb, fa, sizeof(float) * count * n);
  MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, fb, count, MPI_FLOAT, comm);
  record("alltoall float in place", fb, sizeof(float) * count * n);

  MPI_Barrier(comm);
  free(ia), free(ib), free(fa), free(fb), free(da), free(la), free(sa);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  suite(MPI_COMM_WORLD, 0);
  suite(MPI_COMM_WORLD, 1);
  more(MPI_COMM_WORLD, 1);
  mixedTypes(MPI_COMM_WORLD);
  userOps(MPI_COMM_WORLD);
  MPI_Comm dup, half;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  suite(dup, 0);
  /* Calls on the duplicate and the world interleaved: each has its own sncl comm. */
  more(dup, 2);
  MPI_Comm_free(&dup);
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half); /* reversed order inside */
  suite(half, 0);
  more(half, 3);
  mixedTypes(half);
  userOps(half);
  /* An intercommunicator between the halves: passed to MPI (sum over the other half). */
  MPI_Comm inter;
  const int other = 1 - rank % 2, otherLeader = other + 2 * ((n - 1 - other) / 2); /* its rank 0: highest */
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, otherLeader, 99, &inter);
  int mine[3] = {rank, rank * rank, 1}, theirs[3];
  MPI_Allreduce(mine, theirs, 3, MPI_INT, MPI_SUM, inter);
  record("intercommunicator allreduce (fallback)", theirs, sizeof theirs);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
  MPI_Comm_dup(MPI_COMM_WORLD, &dup); /* a handle MPI may reuse: needs a fresh sncl comm */
  suite(dup, 0);
  more(dup, 4);
  MPI_Comm_free(&dup);

  uint64_t* all = rank == 0 ? malloc(sizeof(uint64_t) * MAX_RESULTS * n) : NULL;
  MPI_Gather(digests, MAX_RESULTS * 8, MPI_BYTE, all, MAX_RESULTS * 8, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < nresults; ++i) printf("rank %d %2d %-40s %016llx\n", r, i, names[i],
                                              (unsigned long long)all[(size_t)r * MAX_RESULTS + i]);
    free(all);
  }
  MPI_Finalize();
  return 0;
}
