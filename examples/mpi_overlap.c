/* Overlap of communication and computation, as a data-parallel training step does it: an
 * MPI_Iallreduce of a gradient-sized buffer runs while the rank computes, then MPI_Wait.
 * Uses MPI only; run it as is and under the sncl drop-in to compare:
 *   mpirun -np 2 ./mpi_overlap [--mib 16] [--reps 5]
 *   LD_PRELOAD=<build>/bindings/mpi/libsncl_mpi.so mpirun -np 2 ./mpi_overlap
 * Measures (median of reps, slowest rank) compute alone, the all-reduce alone, and both
 * overlapped, and prints the overlap fraction: (compute + comm - both) / min(compute, comm)
 * (1: the shorter one hid completely; 0: none). During the compute loop the program calls
 * MPI_Test every chunk, as overlapping programs do to let MPI make progress.
 * --compute cpu (default): the compute is a loop on this rank's core, which communication
 * running on the CPU competes with. --compute device: the compute runs on an accelerator
 * and the host thread waits for it (emulated: sleeps in 100 us slices, calling MPI_Test
 * between them), as a training framework's host thread does while its kernels run. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double work(float* a, size_t n, int passes, MPI_Request* req) {
  const size_t chunk = 1 << 16;
  double s = 0;
  for (int p = 0; p < passes; ++p)
    for (size_t i = 0; i < n; i += chunk) {
      const size_t end = i + chunk < n ? i + chunk : n;
      for (size_t j = i; j < end; ++j) a[j] = a[j] * 0.999f + 0.5f;
      s += a[i];
      if (req && *req != MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Test(req, &flag, MPI_STATUS_IGNORE);
      }
    }
  return s;
}

/* The host's side of `seconds` of accelerator compute. */
static void deviceWork(double seconds, MPI_Request* req) {
  const double end = MPI_Wtime() + seconds;
  const struct timespec slice = {0, 100000};
  while (MPI_Wtime() < end) {
    nanosleep(&slice, NULL);
    if (req && *req != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    }
  }
}

static int cmpd(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* The median over reps of the slowest rank's time. */
static double median(double* t, int reps) {
  for (int i = 0; i < reps; ++i) MPI_Allreduce(MPI_IN_PLACE, &t[i], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(t, (size_t)reps, sizeof(double), cmpd);
  return t[reps / 2];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n, mib = 16, reps = 5, device = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--mib")) mib = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--compute")) device = !strcmp(argv[i + 1], "device") ? 1 : strcmp(argv[i + 1], "cpu") ? -1 : 0;
    else device = -1;
  }
  if (mib < 1 || reps < 1 || reps > 100 || device < 0 || argc % 2 == 0) {
    if (rank == 0) fprintf(stderr, "usage: mpi_overlap [--mib N] [--reps R<=100] [--compute cpu|device]\n");
    MPI_Finalize();
    return 2;
  }
  const size_t count = (size_t)mib << 18; /* floats */
  float* grad = malloc(count * sizeof(float));
  const size_t workN = 1 << 20;
  float* act = malloc(workN * sizeof(float));
  for (size_t i = 0; i < workN; ++i) act[i] = (float)(i % 100);
  double tc[100], tm[100], tb[100], sink = 0;
  int bad = 0;

  /* The all-reduce alone first, to size the compute loop to about the same time. */
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < count; ++i) grad[i] = (float)((i + (size_t)rank) % 7);
    MPI_Request req;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Iallreduce(MPI_IN_PLACE, grad, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    tm[r] = MPI_Wtime() - t0;
  }
  const double comm = median(tm, reps);
  /* One pass of the compute loop, warm (the first pass pays the page faults). */
  double t0 = 0, onePass = 1e9;
  for (int i = 0; i < 4; ++i) {
    t0 = MPI_Wtime();
    sink += work(act, workN, 1, NULL);
    const double t = MPI_Wtime() - t0;
    if (i > 0 && t < onePass) onePass = t;
  }
  MPI_Allreduce(MPI_IN_PLACE, &onePass, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int passes = (int)(comm / (onePass > 1e-6 ? onePass : 1e-6)) + 1;
  MPI_Bcast(&passes, 1, MPI_INT, 0, MPI_COMM_WORLD);

  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    if (device) deviceWork(passes * onePass, NULL);
    else sink += work(act, workN, passes, NULL);
    tc[r] = MPI_Wtime() - t0;

    for (size_t i = 0; i < count; ++i) grad[i] = (float)((i + (size_t)rank) % 7);
    MPI_Request req;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    MPI_Iallreduce(MPI_IN_PLACE, grad, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    if (device) deviceWork(passes * onePass, &req);
    else sink += work(act, workN, passes, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    tb[r] = MPI_Wtime() - t0;
    /* Every element is a sum of small integers: exact. */
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += (float)((i + (size_t)q) % 7);
      if (grad[i] != want) {
        ++bad;
        break;
      }
    }
  }
  const double compute = median(tc, reps), both = median(tb, reps);
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    const double shorter = compute < comm ? compute : comm;
    double overlap = (compute + comm - both) / shorter;
    overlap = overlap < 0 ? 0 : overlap > 1 ? 1 : overlap;
    printf("mpi_overlap: %d ranks, %d MiB float sum, %d reps (median of the slowest rank), %s compute\n", n, mib,
           reps, device ? "device" : "cpu");
    printf("  compute alone   %8.2f ms\n  allreduce alone %8.2f ms\n  overlapped      %8.2f ms\n", compute * 1e3,
           comm * 1e3, both * 1e3);
    printf("  overlap fraction %.2f   results %s\n", overlap, bad ? "WRONG" : "correct");
  }
  if (sink == 42.4242) printf("unlikely\n"); /* keeps the compute loop */
  free(grad);
  free(act);
  MPI_Finalize();
  return bad ? 1 : 0;
}
