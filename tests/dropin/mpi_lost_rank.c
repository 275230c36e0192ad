/* A rank lost in the middle of an MPI job: rank `victim` kills itself (SIGKILL) before
 * call `at` of a loop of MPI_Allreduce, each result checked. Run plain and under the
 * drop-in by run_mpi_lost_rank.sh: Open MPI (without ULFM) ends the whole job either way,
 * and the drop-in must not change that into a hang or a wrong result first.
 *   mpi_lost_rank <victim> <at> */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int victim = argc > 1 ? atoi(argv[1]) % n : 1, at = argc > 2 ? atoi(argv[2]) : 50;
  enum { kCount = 1021 };
  static double in[kCount], out[kCount];
  for (int call = 0; call < 100000; ++call) {
    if (call == at && rank == victim) {
      fprintf(stderr, "rank %d: killing itself before call %d\n", rank, call);
      fflush(stderr);
      raise(SIGKILL);
    }
    for (int i = 0; i < kCount; ++i) in[i] = rank + i + call;
    MPI_Allreduce(in, out, kCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < kCount; ++i)
      if (out[i] != (double)n * (n - 1) / 2 + (double)n * (i + call)) {
        fprintf(stderr, "rank %d: call %d element %d wrong\n", rank, call, i);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
  }
  MPI_Finalize();
  return 0;
}
