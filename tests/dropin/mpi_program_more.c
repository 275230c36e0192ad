/* Part two of the drop-in test program: every served call not in mpi_program.c's suite,
 * and the nonblocking form of every served call, several outstanding at once. Counts are
 * drawn from a seed all ranks share (odd, random, some zero in the v-forms). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_program.h"

/* record() under a formatted name (kept until exit). */
static void recordf(const void* buf, size_t bytes, const char* fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  record(strdup(tmp), buf, bytes);
}

static int* ints(size_t n, int rank, int salt) {
  int* p = malloc(sizeof(int) * (n ? n : 1));
  for (size_t i = 0; i < n; ++i) p[i] = (int)((i * 31 + (size_t)rank * 17 + (size_t)salt * 7) % 1001) - 500;
  return p;
}

static int* filled(size_t n, int v) {
  int* p = malloc(sizeof(int) * (n ? n : 1));
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return p;
}

/* Open MPI refuses predefined ops on derived types (MPI_ERR_OP), which the drop-in serves
 * by their base type: without the drop-in the program computes those results instead. */
static int preloaded(void) { return dlsym(RTLD_DEFAULT, "snclEventCreate") != NULL; }

/* Rank r's count in the v-forms: 0..40, zero now and then; the sum of a row for displs. */
static int vcount(unsigned seed, int r) {
  if ((seed * 2654435761u + (unsigned)r * 40503u) % 41 % 7 == 0) return 0;
  return (int)((seed + (unsigned)r * 13u) % 41);
}
/* Alltoallv: what rank a sends to rank b (sym: the same both ways, for the in-place form). */
static int pairCount(unsigned seed, int a, int b, int sym) {
  if (sym && a > b) { int t = a; a = b; b = t; }
  return (int)((seed + (unsigned)a * 7u + (unsigned)b * 11u) % 23);
}

/* The blocking calls: v-forms, prefix reductions, every root, bitwise ops, derived types. */
static void blocking(MPI_Comm comm, unsigned seed, const char* tag) {
  int rank, n;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  int* rc = malloc(sizeof(int) * n);
  int* dis = malloc(sizeof(int) * n);
  int total = 0;
  for (int r = 0; r < n; ++r) {
    rc[r] = vcount(seed, r);
    dis[r] = total; /* with a gap of one element after each block */
    total += rc[r] + 1;
  }
  /* Allgatherv, out of place and in place. */
  int* mine = ints((size_t)rc[rank], rank, 1);
  int* out = filled((size_t)total, -7);
  MPI_Allgatherv(mine, rc[rank], MPI_INT, out, rc, dis, MPI_INT, comm);
  recordf(out, sizeof(int) * total, "%s allgatherv", tag);
  int* ip = filled((size_t)total, -7);
  memcpy(ip + dis[rank], mine, sizeof(int) * rc[rank]);
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ip, rc, dis, MPI_INT, comm);
  recordf(ip, sizeof(int) * total, "%s allgatherv in place", tag);
  /* Gatherv and Scatterv at every root, out of place and in place. */
  for (int root = 0; root < n; ++root) {
    memset(out, 0, sizeof(int) * total);
    MPI_Gatherv(mine, rc[rank], MPI_INT, out, rc, dis, MPI_INT, root, comm);
    recordf(out, rank == root ? sizeof(int) * total : 0, "%s gatherv root %d", tag, root);
    if (rank == root) memcpy(out + dis[rank], mine, sizeof(int) * rc[rank]);
    MPI_Gatherv(rank == root ? MPI_IN_PLACE : mine, rc[rank], MPI_INT, out, rc, dis, MPI_INT, root, comm);
    recordf(out, rank == root ? sizeof(int) * total : 0, "%s gatherv in place root %d", tag, root);
    int* src = ints((size_t)total, root, 2);
    int* got = filled((size_t)rc[rank], -1);
    MPI_Scatterv(src, rc, dis, MPI_INT, got, rc[rank], MPI_INT, root, comm);
    recordf(got, sizeof(int) * rc[rank], "%s scatterv root %d", tag, root);
    MPI_Scatterv(src, rc, dis, MPI_INT, rank == root ? MPI_IN_PLACE : got, rc[rank], MPI_INT, root, comm);
    recordf(rank == root ? (void*)src : (void*)got, sizeof(int) * (rank == root ? total : rc[rank]),
            "%s scatterv in place root %d", tag, root);
    /* Gather and Scatter (fixed counts), odd count, in place at the root. */
    const int c = 3 + (int)(seed % 5) * 2;
    int* g = filled((size_t)c * n, 0);
    int* a = ints((size_t)c, rank, 3);
    MPI_Gather(a, c, MPI_INT, g, c, MPI_INT, root, comm);
    recordf(g, rank == root ? sizeof(int) * c * n : 0, "%s gather root %d", tag, root);
    if (rank == root) memcpy(g + c * root, a, sizeof(int) * c);
    MPI_Gather(rank == root ? MPI_IN_PLACE : a, c, MPI_INT, g, c, MPI_INT, root, comm);
    recordf(g, rank == root ? sizeof(int) * c * n : 0, "%s gather in place root %d", tag, root);
    int* sg = ints((size_t)c * n, root, 4);
    MPI_Scatter(sg, c, MPI_INT, a, c, MPI_INT, root, comm);
    recordf(a, sizeof(int) * c, "%s scatter root %d", tag, root);
    MPI_Scatter(sg, c, MPI_INT, rank == root ? MPI_IN_PLACE : a, c, MPI_INT, root, comm);
    recordf(rank == root ? sg : a, sizeof(int) * (rank == root ? c * n : c), "%s scatter in place root %d", tag, root);
    /* Reduce at every root, in place at the root. */
    MPI_Reduce(a, g, c, MPI_INT, MPI_SUM, root, comm);
    recordf(g, rank == root ? sizeof(int) * c : 0, "%s reduce root %d", tag, root);
    free(src), free(got), free(g), free(a), free(sg);
  }
  /* Alltoallv, random counts, and in place with symmetric counts. */
  for (int sym = 0; sym < 2; ++sym) {
    int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n), *rcv = malloc(sizeof(int) * n),
        *rd = malloc(sizeof(int) * n);
    int st = 0, rt = 0;
    for (int r = 0; r < n; ++r) {
      sc[r] = pairCount(seed, rank, r, sym), sd[r] = st, st += sc[r] + 2;
      rcv[r] = pairCount(seed, r, rank, sym), rd[r] = rt, rt += rcv[r] + 1;
    }
    int* s = ints((size_t)st, rank, 5);
    int* r = filled((size_t)rt, -3);
    if (!sym) {
      MPI_Alltoallv(s, sc, sd, MPI_INT, r, rcv, rd, MPI_INT, comm);
      recordf(r, sizeof(int) * rt, "%s alltoallv", tag);
    } else {
      for (int p = 0; p < n; ++p) memcpy(r + rd[p], s + sd[p], sizeof(int) * rcv[p]);
      MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, r, rcv, rd, MPI_INT, comm);
      recordf(r, sizeof(int) * rt, "%s alltoallv in place", tag);
    }
    free(sc), free(sd), free(rcv), free(rd), free(s), free(r);
  }
  /* Reduce_scatter, uneven counts (some zero), out of place and in place. */
  int sum = 0;
  for (int r = 0; r < n; ++r) sum += rc[r];
  int* in = ints((size_t)sum, rank, 6);
  int* res = filled((size_t)rc[rank], 9);
  MPI_Reduce_scatter(in, res, rc, MPI_INT, MPI_SUM, comm);
  recordf(res, sizeof(int) * rc[rank], "%s reduce_scatter", tag);
  MPI_Reduce_scatter(MPI_IN_PLACE, in, rc, MPI_INT, MPI_MAX, comm);
  recordf(in, sizeof(int) * rc[rank], "%s reduce_scatter max in place", tag);
  /* Scan and Exscan, in place too; Exscan's rank 0 result is undefined in MPI. */
  const int sn = 5 + (int)(seed % 9);
  int* x = ints((size_t)sn, rank, 7);
  int* y = filled((size_t)sn, 0);
  MPI_Scan(x, y, sn, MPI_INT, MPI_SUM, comm);
  recordf(y, sizeof(int) * sn, "%s scan", tag);
  MPI_Exscan(x, y, sn, MPI_INT, MPI_MAX, comm);
  recordf(y, rank ? sizeof(int) * sn : 0, "%s exscan max", tag);
  MPI_Scan(MPI_IN_PLACE, x, sn, MPI_INT, MPI_BXOR, comm);
  recordf(x, sizeof(int) * sn, "%s scan bxor in place", tag);
  MPI_Exscan(MPI_IN_PLACE, x, sn, MPI_INT, MPI_SUM, comm);
  recordf(x, rank ? sizeof(int) * sn : 0, "%s exscan in place", tag);
  /* Bitwise and logical ops on integers and bytes. */
  const MPI_Op ops[] = {MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR, MPI_LXOR};
  const char* opNames[] = {"band", "bor", "bxor", "land", "lor", "lxor"};
  for (int o = 0; o < 6; ++o) {
    int v[13];
    unsigned char b[13];
    long long q[13];
    for (int i = 0; i < 13; ++i) {
      v[i] = (int)((unsigned)(i * 2654435761u) >> (rank + i % 5)) * (i % 3 == 0 ? 0 : 1);
      b[i] = (unsigned char)(v[i] ^ rank);
      q[i] = (long long)v[i] << 20;
    }
    MPI_Allreduce(MPI_IN_PLACE, v, 13, MPI_INT, ops[o], comm);
    recordf(v, sizeof v, "%s allreduce int %s", tag, opNames[o]);
    MPI_Allreduce(MPI_IN_PLACE, b, 13, MPI_UNSIGNED_CHAR, ops[o], comm);
    recordf(b, sizeof b, "%s allreduce uchar %s", tag, opNames[o]);
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : q, q, 13, MPI_LONG_LONG, ops[o], 0, comm);
    recordf(q, rank == 0 ? sizeof q : 0, "%s reduce long long %s", tag, opNames[o]);
  }
  unsigned char by[7] = {1, 2, 4, 8, 16, 32, 64};
  for (int i = 0; i < 7; ++i) by[i] = (unsigned char)(by[i] << (rank % 2));
  MPI_Allreduce(MPI_IN_PLACE, by, 7, MPI_BYTE, MPI_BOR, comm);
  recordf(by, sizeof by, "%s allreduce byte bor", tag);
  /* Contiguous derived types: contiguous, vector with stride == blocklength, hvector, dup. */
  MPI_Datatype three, vec, hvec, dupt;
  MPI_Type_contiguous(3, MPI_INT, &three);
  MPI_Type_vector(4, 2, 2, MPI_DOUBLE, &vec);
  MPI_Type_create_hvector(3, 2, 2 * sizeof(float), MPI_FLOAT, &hvec);
  MPI_Type_dup(three, &dupt);
  MPI_Type_commit(&three), MPI_Type_commit(&vec), MPI_Type_commit(&hvec), MPI_Type_commit(&dupt);
  int t3[3 * 11];
  for (int i = 0; i < 33; ++i) t3[i] = i * (rank + 1);
  if (preloaded()) MPI_Allreduce(MPI_IN_PLACE, t3, 11, three, MPI_SUM, comm);
  else
    for (int i = 0; i < 33; ++i) t3[i] = i * n * (n + 1) / 2;
  recordf(t3, sizeof t3, "%s allreduce contiguous(3 int) sum", tag);
  double dv[8 * 3];
  for (int i = 0; i < 24; ++i) dv[i] = rank == n - 1 ? i * 0.5 : -1;
  MPI_Bcast(dv, 3, vec, n - 1, comm);
  recordf(dv, sizeof dv, "%s bcast vector(stride == blocklength)", tag);
  float* hv = malloc(sizeof(float) * 6 * n);
  float hmine[6];
  for (int i = 0; i < 6; ++i) hmine[i] = (float)(rank * 10 + i);
  MPI_Allgather(hmine, 1, hvec, hv, 6, MPI_FLOAT, comm);
  recordf(hv, sizeof(float) * 6 * n, "%s allgather hvector against float", tag);
  int* ta = ints((size_t)3 * 2 * n, rank, 8);
  int* tb = filled((size_t)3 * 2 * n, 0);
  MPI_Alltoall(ta, 2, dupt, tb, 6, MPI_INT, comm);
  recordf(tb, sizeof(int) * 6 * n, "%s alltoall dup(contiguous) against int", tag);
  if (preloaded()) {
    MPI_Reduce_scatter_block(ta, tb, 2, three, MPI_MIN, comm);
  } else {
    for (int r = 0; r < n; ++r) {
      int* other = ints((size_t)3 * 2 * n, r, 8);
      for (int j = 0; j < 6; ++j)
        if (r == 0 || other[rank * 6 + j] < tb[j]) tb[j] = other[rank * 6 + j];
      free(other);
    }
  }
  recordf(tb, sizeof(int) * 6, "%s reduce_scatter_block contiguous min", tag);
  MPI_Type_free(&three), MPI_Type_free(&vec), MPI_Type_free(&hvec), MPI_Type_free(&dupt);
  free(hv), free(ta), free(tb);
  free(rc), free(dis), free(mine), free(out), free(ip), free(in), free(res), free(x), free(y);
}

/* Gives up after 60 s: a request that never completes must fail the test, not hang it. */
static void deadline(time_t start, const char* what) {
  if (time(NULL) - start > 60) {
    fprintf(stderr, "mpi_program: %s did not complete in 60 s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
}

/* The nonblocking forms: a batch of every kind outstanding at once, then completed by
 * MPI_Waitall, by a loop of MPI_Testall, and by MPI_Waitany/MPI_Waitsome with point-to-
 * point requests and a MAXLOC (a callback reduction) among them. */
enum { kBatch = 19 };
static void nonblocking(MPI_Comm comm, unsigned seed, const char* tag, int how) {
  static const char* hows[] = {"waitall", "testall", "waitany", "waitsome"};
  int rank, n;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  MPI_Request req[kBatch + 2];
  void* bufs[kBatch];
  size_t bytes[kBatch];
  const char* what[kBatch];
  int nr = 0;
  const int big = how == 0 ? 100003 : 1 + (int)(seed % 999);
  const int c = 1 + (int)(seed % 17) * 2, root = (int)(seed % (unsigned)n);
  int *rc = malloc(sizeof(int) * n), *dis = malloc(sizeof(int) * n), total = 0;
  for (int r = 0; r < n; ++r) rc[r] = vcount(seed + 1, r), dis[r] = total, total += rc[r];
  int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n), *rcv = malloc(sizeof(int) * n),
      *rd = malloc(sizeof(int) * n), st = 0, rt = 0;
  for (int r = 0; r < n; ++r) {
    sc[r] = pairCount(seed, rank, r, 0), sd[r] = st, st += sc[r];
    rcv[r] = pairCount(seed, r, rank, 0), rd[r] = rt, rt += rcv[r];
  }
#define OUT(name, p, b) (bufs[nr] = (p), bytes[nr] = (b), what[nr] = (name))
  int* a0 = ints((size_t)big, rank, 11);
  int* r0 = filled((size_t)big, 0);
  OUT("iallreduce", r0, sizeof(int) * big), MPI_Iallreduce(a0, r0, big, MPI_INT, MPI_SUM, comm, &req[nr++]);
  float* r1 = malloc(sizeof(float) * c);
  for (int i = 0; i < c; ++i) r1[i] = (float)(i * (rank + 1));
  OUT("iallreduce float max in place", r1, sizeof(float) * c);
  MPI_Iallreduce(MPI_IN_PLACE, r1, c, MPI_FLOAT, MPI_MAX, comm, &req[nr++]);
  int* r2 = rank == root ? ints((size_t)c, rank, 12) : filled((size_t)c, 0);
  OUT("ibcast", r2, sizeof(int) * c), MPI_Ibcast(r2, c, MPI_INT, root, comm, &req[nr++]);
  int* a3 = ints((size_t)c, rank, 13);
  int* r3 = filled((size_t)c, 0);
  OUT("ireduce", r3, rank == root ? sizeof(int) * c : 0);
  MPI_Ireduce(a3, r3, c, MPI_INT, MPI_BOR, root, comm, &req[nr++]);
  int* r4 = filled((size_t)c * n, 0);
  OUT("iallgather", r4, sizeof(int) * c * n), MPI_Iallgather(a3, c, MPI_INT, r4, c, MPI_INT, comm, &req[nr++]);
  int* a5 = ints((size_t)c * n, rank, 14);
  int* r5 = filled((size_t)c * n, 0);
  OUT("ialltoall", r5, sizeof(int) * c * n), MPI_Ialltoall(a5, c, MPI_INT, r5, c, MPI_INT, comm, &req[nr++]);
  int* r6 = ints((size_t)c * n, rank, 15);
  OUT("ireduce_scatter_block in place", r6, sizeof(int) * c);
  MPI_Ireduce_scatter_block(MPI_IN_PLACE, r6, c, MPI_INT, MPI_SUM, comm, &req[nr++]);
  int* r7 = filled((size_t)c, 0);
  OUT("iscan", r7, sizeof(int) * c), MPI_Iscan(a3, r7, c, MPI_INT, MPI_SUM, comm, &req[nr++]);
  int* r8 = filled((size_t)c, 0);
  OUT("iexscan", r8, rank ? sizeof(int) * c : 0), MPI_Iexscan(a3, r8, c, MPI_INT, MPI_PROD, comm, &req[nr++]);
  OUT("ibarrier", NULL, 0), MPI_Ibarrier(comm, &req[nr++]);
  int* r10 = filled((size_t)c * n, 0);
  OUT("igather", r10, rank == root ? sizeof(int) * c * n : 0);
  MPI_Igather(a3, c, MPI_INT, r10, c, MPI_INT, root, comm, &req[nr++]);
  int* r11 = filled((size_t)c, 0);
  OUT("iscatter", r11, sizeof(int) * c), MPI_Iscatter(a5, c, MPI_INT, r11, c, MPI_INT, root, comm, &req[nr++]);
  int* a12 = ints((size_t)rc[rank], rank, 16);
  int* r12 = filled((size_t)total, 0);
  OUT("iallgatherv", r12, sizeof(int) * total);
  MPI_Iallgatherv(a12, rc[rank], MPI_INT, r12, rc, dis, MPI_INT, comm, &req[nr++]);
  int* a13 = ints((size_t)st, rank, 17);
  int* r13 = filled((size_t)rt, 0);
  OUT("ialltoallv", r13, sizeof(int) * rt);
  MPI_Ialltoallv(a13, sc, sd, MPI_INT, r13, rcv, rd, MPI_INT, comm, &req[nr++]);
  int* r14 = filled((size_t)total, 0);
  OUT("igatherv", r14, rank == root ? sizeof(int) * total : 0);
  MPI_Igatherv(a12, rc[rank], MPI_INT, r14, rc, dis, MPI_INT, root, comm, &req[nr++]);
  int* a15 = ints((size_t)total, rank, 18);
  int* r15 = filled((size_t)rc[rank], 0);
  OUT("iscatterv", r15, sizeof(int) * rc[rank]);
  MPI_Iscatterv(a15, rc, dis, MPI_INT, r15, rc[rank], MPI_INT, root, comm, &req[nr++]);
  int* r16 = filled((size_t)rc[rank], 0);
  OUT("ireduce_scatter", r16, sizeof(int) * rc[rank]);
  MPI_Ireduce_scatter(a15, r16, rc, MPI_INT, MPI_MIN, comm, &req[nr++]);
  int pair[2] = {(rank * 5) % n, rank}, r17[2] = {0, 0};
  OUT("iallreduce maxloc (callback reduction)", r17, sizeof r17);
  MPI_Iallreduce(pair, r17, 1, MPI_2INT, MPI_MAXLOC, comm, &req[nr++]);
  unsigned char* r18 = malloc((size_t)c);
  for (int i = 0; i < c; ++i) r18[i] = (unsigned char)(i * 37 + rank);
  OUT("iallreduce uchar bxor in place", r18, (size_t)c);
  MPI_Iallreduce(MPI_IN_PLACE, r18, c, MPI_UNSIGNED_CHAR, MPI_BXOR, comm, &req[nr++]);
#undef OUT
  /* Point-to-point around the ring among them: requests that are not the drop-in's. */
  int token = rank * 1000 + (int)seed, got = -1;
  int np2p = 0;
  if (how >= 2) {
    MPI_Irecv(&got, 1, MPI_INT, (rank + n - 1) % n, 7, comm, &req[nr + np2p++]);
    MPI_Isend(&token, 1, MPI_INT, (rank + 1) % n, 7, comm, &req[nr + np2p++]);
  }
  const int total_reqs = nr + np2p;
  const time_t start = time(NULL);
  if (how == 0) {
    MPI_Waitall(total_reqs, req, MPI_STATUSES_IGNORE);
  } else if (how == 1) {
    int flag = 0;
    while (!flag) {
      MPI_Testall(total_reqs, req, &flag, MPI_STATUSES_IGNORE);
      deadline(start, "MPI_Testall");
    }
  } else {
    int left = total_reqs;
    while (left > 0) {
      if (how == 2) {
        int idx = -1;
        MPI_Waitany(total_reqs, req, &idx, MPI_STATUS_IGNORE);
        if (idx == MPI_UNDEFINED) break;
        --left;
      } else {
        int outc = 0, idx[kBatch + 2];
        MPI_Waitsome(total_reqs, req, &outc, idx, MPI_STATUSES_IGNORE);
        if (outc == MPI_UNDEFINED) break;
        left -= outc;
      }
      deadline(start, "MPI_Waitany/MPI_Waitsome");
    }
  }
  for (int i = 0; i < total_reqs; ++i)
    if (req[i] != MPI_REQUEST_NULL) {
      fprintf(stderr, "mpi_program: request %d not completed by %s\n", i, hows[how]);
      MPI_Abort(MPI_COMM_WORLD, 5);
    }
  for (int i = 0; i < nr; ++i) recordf(bufs[i], bytes[i], "%s %s by %s", tag, what[i], hows[how]);
  if (how >= 2) recordf(&got, sizeof got, "%s ring p2p among them", tag);
  free(a0), free(r0), free(r1), free(r2), free(a3), free(r3), free(r4), free(a5), free(r5), free(r6), free(r7);
  free(r8), free(r10), free(r11), free(a12), free(r12), free(a13), free(r13), free(r14), free(a15), free(r15);
  free(r16), free(r18), free(rc), free(dis), free(sc), free(sd), free(rcv), free(rd);
}

/* A single request completed by MPI_Test, and MPI_Wait on one among outstanding others. */
static void singles(MPI_Comm comm, const char* tag) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  int a[9], b[9], c[9];
  for (int i = 0; i < 9; ++i) a[i] = b[i] = i + rank;
  MPI_Request r1, r2;
  MPI_Iallreduce(MPI_IN_PLACE, a, 9, MPI_INT, MPI_SUM, comm, &r1);
  MPI_Iallreduce(b, c, 9, MPI_INT, MPI_LOR, comm, &r2);
  MPI_Wait(&r2, MPI_STATUS_IGNORE); /* the later one first: the stream runs both in order */
  int flag = 0;
  const time_t start = time(NULL);
  while (!flag) {
    MPI_Test(&r1, &flag, MPI_STATUS_IGNORE);
    deadline(start, "MPI_Test");
  }
  recordf(a, sizeof a, "%s iallreduce by test", tag);
  recordf(c, sizeof c, "%s iallreduce lor by wait", tag);
  /* A blocking call after a nonblocking one on the same communicator: order kept. */
  int d[5] = {rank, rank, rank, rank, rank}, x[5] = {1, 2, 3, 4, rank}, e[5];
  MPI_Request r3;
  MPI_Ibcast(d, 5, MPI_INT, 0, comm, &r3);
  MPI_Allreduce(x, e, 5, MPI_INT, MPI_SUM, comm);
  MPI_Wait(&r3, MPI_STATUS_IGNORE);
  recordf(d, sizeof d, "%s ibcast, then allreduce", tag);
  recordf(e, sizeof e, "%s allreduce after an ibcast", tag);
}

/* MPI's progress rule: one rank posts a receive, then enters a collective; its partner
 * sends a large (rendezvous) message first and joins the collective only once the send
 * completed, which needs the first rank's MPI progress while it waits in the collective. */
static void progress(MPI_Comm comm, const char* tag) {
  int rank, n;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const int count = 1 << 18; /* 1 MiB */
  int* big = ints((size_t)count, rank, 21);
  const int partner = rank % 2 == 0 ? rank + 1 : rank - 1;
  int sum[3] = {rank, 1, 2}, out[3];
  MPI_Request r = MPI_REQUEST_NULL;
  if (partner < n && rank % 2 == 0) MPI_Irecv(big, count, MPI_INT, partner, 5, comm, &r);
  if (partner < n && rank % 2 == 1) MPI_Send(big, count, MPI_INT, partner, 5, comm);
  MPI_Allreduce(sum, out, 3, MPI_INT, MPI_SUM, comm);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  if (partner < n && rank % 2 == 0) recordf(big, sizeof(int) * count, "%s rendezvous receive around an allreduce", tag);
  recordf(out, sizeof out, "%s allreduce around a rendezvous send", tag);
  /* The same with the collective nonblocking, waited for before the receive. */
  MPI_Request c = MPI_REQUEST_NULL;
  r = MPI_REQUEST_NULL;
  if (partner < n && rank % 2 == 0) MPI_Irecv(big, count, MPI_INT, partner, 6, comm, &r);
  if (partner < n && rank % 2 == 1) MPI_Send(big, count, MPI_INT, partner, 6, comm);
  MPI_Iallreduce(sum, out, 3, MPI_INT, MPI_MAX, comm, &c);
  MPI_Wait(&c, MPI_STATUS_IGNORE);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  recordf(out, sizeof out, "%s iallreduce around a rendezvous send", tag);
  free(big);
}

/* Hundreds of requests outstanding at once, twice: more than the drop-in keeps for reuse
 * (its spare requests), so freeing them overflows the spares and the second round reuses
 * them. Counts from the seed (zero and odd among them, and now and then a large odd one,
 * past the cells, so that small and large calls are queued together); the type changes
 * from call to call (int, unsigned), as does the op. The second round completes its
 * requests one by one with MPI_Waitany, in whatever order they finish. */
static void many(MPI_Comm comm, unsigned seed, const char* tag) {
  enum { kRequests = 300 };
  int rank;
  MPI_Comm_rank(comm, &rank);
  int* bufs[kRequests];
  int counts[kRequests];
  MPI_Request reqs[kRequests];
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kRequests; ++i) {
      const unsigned draw = seed * 2654435761u + (unsigned)i * 97u + (unsigned)round;
      counts[i] = draw % 53 == 0 ? (int)(20000 + draw % 4096) | 1 : (int)(draw % 37);
      bufs[i] = ints((size_t)counts[i], rank, i + round);
      MPI_Iallreduce(MPI_IN_PLACE, bufs[i], counts[i], i % 2 ? MPI_UNSIGNED : MPI_INT, i % 3 == 0 ? MPI_MAX : MPI_SUM,
                     comm, &reqs[i]);
    }
    if (round == 0) {
      MPI_Waitall(kRequests, reqs, MPI_STATUSES_IGNORE);
    } else {
      const time_t start = time(NULL);
      for (int done = 0; done < kRequests; ++done) {
        int index = MPI_UNDEFINED;
        MPI_Waitany(kRequests, reqs, &index, MPI_STATUS_IGNORE);
        if (index == MPI_UNDEFINED) {
          fprintf(stderr, "mpi_program: MPI_Waitany found no active request after %d of %d\n", done, kRequests);
          MPI_Abort(MPI_COMM_WORLD, 5);
        }
        deadline(start, "MPI_Waitany");
      }
    }
    size_t total = 0;
    for (int i = 0; i < kRequests; ++i) total += (size_t)counts[i];
    int* all = malloc(sizeof(int) * (total ? total : 1));
    for (int i = 0, at = 0; i < kRequests; at += counts[i], ++i) {
      memcpy(all + at, bufs[i], sizeof(int) * (size_t)counts[i]);
      free(bufs[i]);
    }
    recordf(all, sizeof(int) * total, "%s %d outstanding, round %d", tag, kRequests, round);
    free(all);
  }
}

void more(MPI_Comm comm, unsigned seed) {
  char tag[32];
  snprintf(tag, sizeof tag, "[%u]", seed);
  blocking(comm, seed, tag);
  for (int how = 0; how < 4; ++how) nonblocking(comm, seed * 31 + (unsigned)how, tag, how);
  singles(comm, tag);
  many(comm, seed, tag);
  progress(comm, tag);
}
