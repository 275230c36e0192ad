/* OSU-style latency of MPI_Allreduce and of MPI_Iallreduce + MPI_Wait, 8 B to 16 MiB of
 * floats (sum), plain MPI: run it as is and under the sncl drop-in (osu_compare.sh runs
 * both and prints them side by side).
 *   mpirun -np 2 ./osu_allreduce [--min 8] [--max 16777216] [--iters 100]
 * Per size: a warm-up, then iterations (fewer for large sizes); the latency is the average
 * over ranks of each rank's mean time per call, as osu_allreduce reports it. Every result of
 * the last iteration of each size is checked (small integers: exact in any order); a wrong
 * one fails the run. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(const float* r, size_t count, int n) {
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += (float)((i + (size_t)q) % 5 + 1);
    if (r[i] != want) return 1;
  }
  return 0;
}

static void fill(float* s, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) s[i] = (float)((i + (size_t)rank) % 5 + 1);
}

/* Mean seconds per call of one form over iters calls (after warmup), averaged over ranks. */
static double timeIt(int nonblocking, float* s, float* r, size_t count, int iters, int warmup) {
  double t0 = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
    }
    if (nonblocking) {
      MPI_Request req;
      MPI_Iallreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
      MPI_Allreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  }
  double t = (MPI_Wtime() - t0) / iters, sum = 0;
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Reduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  return sum / n;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n, iters = 100;
  long minB = 8, maxB = 16 << 20;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min")) minB = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--max")) maxB = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
  }
  if (minB < 4 || maxB < minB || iters < 1) {
    if (rank == 0) fprintf(stderr, "usage: osu_allreduce [--min B>=4] [--max B] [--iters N]\n");
    MPI_Finalize();
    return 2;
  }
  const size_t maxCount = (size_t)maxB / sizeof(float);
  float* s = malloc(maxCount * sizeof(float));
  float* r = malloc(maxCount * sizeof(float));
  int bad = 0;
  if (rank == 0) printf("# osu_allreduce (float sum), %d ranks\n# %10s %18s %22s\n", n, "bytes", "Allreduce us",
                        "Iallreduce+Wait us");
  for (long bytes = minB; bytes <= maxB; bytes *= 2) {
    const size_t count = (size_t)bytes / sizeof(float);
    /* Large sizes: fewer iterations, about 64 MiB moved per form and size at least 5 times. */
    int it = iters;
    while (it > 5 && (double)it * (double)bytes > 64.0 * (1 << 20)) it /= 2;
    fill(s, count, rank);
    const double tb = timeIt(0, s, r, count, it, it / 10 + 1);
    bad += check(r, count, n);
    memset(r, 0, count * sizeof(float));
    const double tn = timeIt(1, s, r, count, it, it / 10 + 1);
    bad += check(r, count, n);
    if (rank == 0) printf("  %10ld %18.2f %22.2f\n", bytes, tb * 1e6, tn * 1e6);
    fflush(stdout);
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && bad) printf("osu_allreduce: %d WRONG results\n", bad);
  free(s);
  free(r);
  MPI_Finalize();
  return bad ? 1 : 0;
}
