/* OSU-style latency of MPI_Allreduce and of MPI_Iallreduce + MPI_Wait, 8 B to 16 MiB of
 * floats (sum), plain MPI: run it as is and under the sncl drop-in.
 *   mpirun -np 2 ./osu_allreduce [--min 8] [--max 16777216] [--iters 100] [--pmpi]
 * Per size: a warm-up, then iterations (fewer for large sizes); the latency is the average
 * over ranks of each rank's mean time per call, as osu_allreduce reports it. Every result of
 * the last iteration of each size is checked (small integers: exact in any order); a wrong
 * one fails the run.
 * --pmpi: the same calls through PMPI_* as well, which a preloaded drop-in does not
 * intercept, so one run times the drop-in and the MPI beneath it side by side: five rounds
 * per size, each form alternated with its PMPI twin, medians of the rounds and their ratio.
 * Launches of one program differ by up to 2x on a virtual machine (where its virtual CPUs
 * land); calls of one launch share that. Without a drop-in both columns are MPI's (ratio
 * about 1: the check of the method). */
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

/* The calls one column times: MPI's names (a preloaded drop-in's) or PMPI's. */
typedef struct {
  int (*allreduce)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm);
  int (*iallreduce)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request*);
  int (*wait)(MPI_Request*, MPI_Status*);
} Api;

/* Mean seconds per call of one form over iters calls (after warmup), averaged over ranks. */
static double timeIt(const Api* api, int nonblocking, float* s, float* r, size_t count, int iters, int warmup) {
  double t0 = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
    }
    if (nonblocking) {
      MPI_Request req;
      api->iallreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
      api->wait(&req, MPI_STATUS_IGNORE);
    } else {
      api->allreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  }
  double t = (MPI_Wtime() - t0) / iters, sum = 0;
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Reduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  return sum / n;
}

static int less(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), less);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Times one form through api (and through PMPI alternately with --pmpi: *other), checking
 * each column's last result; returns the number of wrong results. */
static int timeForm(const Api* api, const Api* pmpi, int nonblocking, float* s, float* r, size_t count, int n,
                    int it, double* t, double* other) {
  enum { kRounds = 5 };
  double a[kRounds], b[kRounds];
  const int rounds = pmpi ? kRounds : 1;
  int bad = 0;
  for (int k = 0; k < rounds; ++k) {
    memset(r, 0, count * sizeof(float));
    a[k] = timeIt(api, nonblocking, s, r, count, it, it / 10 + 1);
    bad += check(r, count, n);
    if (!pmpi) continue;
    memset(r, 0, count * sizeof(float));
    b[k] = timeIt(pmpi, nonblocking, s, r, count, it, it / 10 + 1);
    bad += check(r, count, n);
  }
  *t = median(a, rounds);
  *other = pmpi ? median(b, rounds) : 0;
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n, iters = 100, withPmpi = 0;
  long minB = 8, maxB = 16 << 20;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--pmpi")) withPmpi = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--min")) minB = atol(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--max")) maxB = atol(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--iters")) iters = atoi(argv[++i]);
    else minB = 0; /* unknown: the usage below */
  }
  if (minB < 4 || maxB < minB || iters < 1) {
    if (rank == 0) fprintf(stderr, "usage: osu_allreduce [--min B>=4] [--max B] [--iters N] [--pmpi]\n");
    MPI_Finalize();
    return 2;
  }
  const Api mpi = {MPI_Allreduce, MPI_Iallreduce, MPI_Wait}, pmpi = {PMPI_Allreduce, PMPI_Iallreduce, PMPI_Wait};
  const size_t maxCount = (size_t)maxB / sizeof(float);
  float* s = malloc(maxCount * sizeof(float));
  float* r = malloc(maxCount * sizeof(float));
  int bad = 0;
  if (rank == 0) {
    printf("# osu_allreduce (float sum), %d ranks%s\n# %10s %18s %22s", n,
           withPmpi ? "; MPI_* (the drop-in when preloaded) and PMPI_* (MPI) alternated, medians of 5 rounds" : "",
           "bytes", "Allreduce us", "Iallreduce+Wait us");
    if (withPmpi) printf(" %18s %22s %10s %10s", "PMPI Allreduce", "PMPI Iallr+Wait", "MPI/PMPI", "(Iallr)");
    printf("\n");
  }
  for (long bytes = minB; bytes <= maxB; bytes *= 2) {
    const size_t count = (size_t)bytes / sizeof(float);
    /* Large sizes: fewer iterations, about 64 MiB moved per form and size at least 5 times. */
    int it = iters;
    while (it > 5 && (double)it * (double)bytes > 64.0 * (1 << 20)) it /= 2;
    fill(s, count, rank);
    double tb, pb, tn, pn;
    bad += timeForm(&mpi, withPmpi ? &pmpi : NULL, 0, s, r, count, n, it, &tb, &pb);
    bad += timeForm(&mpi, withPmpi ? &pmpi : NULL, 1, s, r, count, n, it, &tn, &pn);
    if (rank == 0) {
      printf("  %10ld %18.2f %22.2f", bytes, tb * 1e6, tn * 1e6);
      if (withPmpi) printf(" %18.2f %22.2f %10.2f %10.2f", pb * 1e6, pn * 1e6, tb / pb, tn / pn);
      printf("\n");
    }
    fflush(stdout);
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && bad) printf("osu_allreduce: %d WRONG results\n", bad);
  free(s);
  free(r);
  MPI_Finalize();
  return bad ? 1 : 0;
}
