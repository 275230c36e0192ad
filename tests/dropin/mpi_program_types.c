/* Ranks that pass different but matching datatypes (MPI requires equal type signatures,
 * not equal layouts): a strided vector against contiguous ints, a struct with a gap
 * against plain ints; and zero counts and zero-size types. Under the drop-in each call must still be served by sncl on every rank
 * (the side with gaps is packed), with MPI's results. */
#include <stdlib.h>
#include <string.h>

#include "mpi_program.h"

/* k ints every other int: k elements of signature, extent 2k - 1 ints. */
static MPI_Datatype strided(int k) {
  MPI_Datatype t;
  MPI_Type_vector(k, 1, 2, MPI_INT, &t);
  MPI_Type_commit(&t);
  return t;
}

/* Two ints with a 4-byte gap between them, extent 16 bytes: the signature of 2 MPI_INT. */
static MPI_Datatype pairWithGap(void) {
  const int lens[2] = {1, 1};
  const MPI_Aint displs[2] = {0, 8};
  const MPI_Datatype types[2] = {MPI_INT, MPI_INT};
  MPI_Datatype s, t;
  MPI_Type_create_struct(2, lens, displs, types, &s);
  MPI_Type_create_resized(s, 0, 16, &t);
  MPI_Type_free(&s);
  MPI_Type_commit(&t);
  return t;
}

void mixedTypes(MPI_Comm comm) {
  int rank, n;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const int k = 6;
  int* a = calloc((size_t)(4 * k * n), sizeof(int));
  int* b = calloc((size_t)(4 * k * n), sizeof(int));
  for (int i = 0; i < 4 * k * n; ++i) a[i] = i * 3 + rank * 100;
  MPI_Datatype vec = strided(k), pair = pairWithGap();

  /* Gather: the root receives each rank's k ints strided, the others send them contiguous. */
  const int root = n - 1;
  MPI_Datatype blockVec;
  MPI_Type_create_resized(vec, 0, (MPI_Aint)(2 * k * sizeof(int)), &blockVec);
  MPI_Type_commit(&blockVec);
  memset(b, 0, sizeof(int) * 4 * k * n);
  if (rank == root) MPI_Gather(a, k, MPI_INT, b, 1, blockVec, root, comm);
  else MPI_Gather(a, k, MPI_INT, NULL, 0, MPI_INT, root, comm);
  record("gather strided at the root", b, rank == root ? sizeof(int) * 2 * k * n : 0);

  /* Scatter: the root sends k pairs with gaps per rank, the others receive 2k ints. */
  memset(b, 0, sizeof(int) * 4 * k * n);
  MPI_Scatter(a, k, pair, b, 2 * k, MPI_INT, 0, comm);
  record("scatter struct from the root", b, sizeof(int) * 2 * k);

  /* Bcast: even ranks a strided vector, odd ranks k contiguous ints. */
  memcpy(b, a, sizeof(int) * 2 * k);
  if (rank % 2 == 0) MPI_Bcast(b, 1, vec, 0, comm);
  else MPI_Bcast(b, k, MPI_INT, 0, comm);
  record("bcast vector vs contiguous", b, sizeof(int) * 2 * k);

  /* Allgather: even ranks receive into the strided vector's layout (blockVec per rank), odd
   * ranks k contiguous ints per rank. (Open MPI applies predefined ops to predefined types
   * only, so reductions cannot differ in layout here.) */
  memset(b, 0, sizeof(int) * 4 * k * n);
  if (rank % 2 == 0) MPI_Allgather(a, k, MPI_INT, b, 1, blockVec, comm);
  else MPI_Allgather(a, k, MPI_INT, b, k, MPI_INT, comm);
  record("allgather vector vs contiguous", b, sizeof(int) * 2 * k * n);

  /* Alltoall: odd ranks send pairs with gaps and receive plain ints, even ranks the reverse. */
  memset(b, 0, sizeof(int) * 4 * k * n);
  if (rank % 2) MPI_Alltoall(a, 1, pair, b, 2, MPI_INT, comm);
  else MPI_Alltoall(a, 2, MPI_INT, b, 1, pair, comm);
  record("alltoall struct vs basic", b, sizeof(int) * 4 * n);

  /* Allgatherv: rank i sends i + 1 pairs, with a one-pair gap between blocks; rank 0 sends
   * and receives them as plain ints (twice the counts and displacements). */
  int* counts = malloc(sizeof(int) * (size_t)n);
  int* displs = malloc(sizeof(int) * (size_t)n);
  const int twice = rank == 0 ? 2 : 1;
  for (int i = 0, at = 0; i < n; at += i + 2, ++i) {
    counts[i] = (i + 1) * twice;
    displs[i] = at * twice;
  }
  memset(b, 0, sizeof(int) * 4 * k * n);
  const MPI_Datatype mine = rank == 0 ? MPI_INT : pair;
  MPI_Allgatherv(a, counts[rank], mine, b, counts, displs, mine, comm);
  record("allgatherv struct vs basic", b, sizeof(int) * 4 * k * n);

  /* Zero counts and a zero-size type: nothing to move, on every rank alike. (Mixing them
   * across ranks leaves zero-byte messages unmatched in Open MPI's own algorithms.) */
  MPI_Datatype none;
  MPI_Type_contiguous(0, MPI_INT, &none);
  MPI_Type_commit(&none);
  MPI_Alltoall(a, 0, MPI_INT, b, 0, MPI_INT, comm);
  MPI_Bcast(b, 3, none, 0, comm);
  MPI_Allreduce(a, b, 0, MPI_INT, MPI_SUM, comm);
  record("zero-size types and zero counts", b, sizeof(int) * 4 * n);

  /* Scatterv: the root sends i + 1 pairs with gaps to rank i, which receives plain ints. */
  memset(b, 0, sizeof(int) * 4 * k * n);
  for (int i = 0, at = 0; i < n; at += i + 2, ++i) {
    counts[i] = i + 1;
    displs[i] = at;
  }
  MPI_Scatterv(a, counts, displs, pair, b, 2 * (rank + 1), MPI_INT, 0, comm);
  record("scatterv struct vs basic", b, sizeof(int) * 2 * (size_t)(rank + 1));

  MPI_Type_free(&none);
  MPI_Type_free(&blockVec);
  MPI_Type_free(&vec);
  MPI_Type_free(&pair);
  free(counts);
  free(displs);
  free(a);
  free(b);
}

/* inout = in * inout for 2x2 integer matrices mod 1009: associative, not commutative. */
static void matmul(void* in, void* inout, int* len, MPI_Datatype* t) {
  (void)t;
  const int* a = in;
  int* b = inout;
  for (int i = 0; i < *len; ++i, a += 4, b += 4) {
    const int c[4] = {(a[0] * b[0] + a[1] * b[2]) % 1009, (a[0] * b[1] + a[1] * b[3]) % 1009,
                      (a[2] * b[0] + a[3] * b[2]) % 1009, (a[2] * b[1] + a[3] * b[3]) % 1009};
    memcpy(b, c, sizeof c);
  }
}

void userOps(MPI_Comm comm) {
  int rank, n;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const int k = 5; /* matrices per rank and block */
  MPI_Datatype mat;
  MPI_Type_contiguous(4, MPI_INT, &mat);
  MPI_Type_commit(&mat);
  MPI_Op op;
  MPI_Op_create(matmul, 0, &op);
  int* a = malloc(sizeof(int) * 4 * (size_t)(k * n));
  int* b = calloc((size_t)(4 * k * n), sizeof(int));
  for (int i = 0; i < 4 * k * n; ++i) a[i] = (i * 7 + rank * 31 + 1) % 1009;

  MPI_Allreduce(a, b, k, mat, op, comm);
  record("user op allreduce (non-commutative)", b, sizeof(int) * 4 * k);
  memset(b, 0, sizeof(int) * 4 * k);
  MPI_Reduce(a, b, k, mat, op, n - 1, comm);
  record("user op reduce (non-commutative)", b, rank == n - 1 ? sizeof(int) * 4 * k : 0);
  MPI_Scan(a, b, k, mat, op, comm);
  record("user op scan (non-commutative)", b, sizeof(int) * 4 * k);
  memset(b, 0, sizeof(int) * 4 * k);
  MPI_Exscan(a, b, k, mat, op, comm);
  record("user op exscan (non-commutative)", b, rank ? sizeof(int) * 4 * k : 0);
  MPI_Reduce_scatter_block(a, b, k, mat, op, comm);
  record("user op reduce_scatter_block (non-commutative)", b, sizeof(int) * 4 * k);
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, a, k, mat, op, comm, &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  record("user op iallreduce in place (non-commutative)", a, sizeof(int) * 4 * k);

  struct { double v; int at; } pairs[3], best[3];
  for (int i = 0; i < 3; ++i) {
    pairs[i].v = (double)((rank * 5 + i * 3) % 7);
    pairs[i].at = rank;
  }
  MPI_Reduce(pairs, best, 3, MPI_DOUBLE_INT, MPI_MINLOC, 0, comm);
  if (rank == 0)
    for (int i = 0; i < 3; ++i) record("reduce minloc double-int", &best[i], sizeof(double) + sizeof(int));

  MPI_Op_free(&op);
  MPI_Type_free(&mat);
  free(a);
  free(b);
}
