#include "perf/common/harness.h"

#include <getopt.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace perf {
namespace {

const char* kTypeNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                            "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
const char* kOpNames[] = {"sum", "prod", "max", "min", "avg"};

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  switch (end && *end ? *end : 0) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return static_cast<size_t>(v);
}

MPI_Datatype mpiType(snclDataType_t t) {
  switch (t) {
    case snclInt8: return MPI_INT8_T;
    case snclUint8: return MPI_UINT8_T;
    case snclInt32: return MPI_INT32_T;
    case snclUint32: return MPI_UINT32_T;
    case snclInt64: return MPI_INT64_T;
    case snclUint64: return MPI_UINT64_T;
    case snclFloat32: return MPI_FLOAT;
    case snclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpiOp(snclRedOp_t op) {
  switch (op) {
    case snclSum: return MPI_SUM;
    case snclProd: return MPI_PROD;
    case snclMax: return MPI_MAX;
    case snclMin: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup] [-c check 0/1]\n"
          "          [-t threads per process] [-d type] [-o op] [-B 0/1: MPI baseline]\n",
          prog);
}

struct Shared {
  const Options* opt;
  const Collective* coll;
  snclUniqueId id;
  int mpiRank, mpiSize, nranks;
  pthread_barrier_t barrier;
};

double timeIters(const std::function<bool()>& once, int warmup, int iters, bool* ok) {
  for (int i = 0; i < warmup; ++i) *ok &= once();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) *ok &= once();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// One rank: a thread of this process (rank = mpiRank * threads + thread).
void rankMain(Shared* sh, int thread, int* exitCode) {
  const Options& o = *sh->opt;
  const Collective& c = *sh->coll;
  const int rank = sh->mpiRank * o.threads + thread, nranks = sh->nranks;
  const bool leader = rank == 0;
  snclComm_t comm;
  if (snclCommInitRank(&comm, nranks, sh->id, rank) != snclSuccess) {
    fprintf(stderr, "rank %d: snclCommInitRank failed: %s\n", rank, snclGetLastError(nullptr));
    *exitCode = 1;
    return;
  }
  const size_t esize = typeSize(o.dtype);
  const size_t maxCount = std::max<size_t>(c.countFor(o.maxBytes, esize, nranks), 1);
  // Buffers are allocated and touched once, outside the timed loops (first touch costs ~11 us a page).
  const size_t inBytes = maxCount * esize * nranks, outBytes = maxCount * esize * nranks;
  std::vector<char> in(inBytes), out(outBytes), mpiOut(outBytes);
  memset(in.data(), 1, in.size());
  memset(out.data(), 1, out.size());
  memset(mpiOut.data(), 1, mpiOut.size());
  const bool mpiBaseline = o.baseline && o.threads == 1 && c.runMpi && mpiType(o.dtype) != MPI_DATATYPE_NULL &&
                           mpiOp(o.op) != MPI_OP_NULL;
  if (leader) {
    printf("# sncl %s: %d ranks (%d processes x %d threads), type %s, op %s\n", c.name, nranks, sh->mpiSize, o.threads,
           kTypeNames[o.dtype], kOpNames[o.op]);
    printf("#%11s %12s %8s %6s %9s %7s %7s %6s %9s %7s %7s %6s", "size", "count", "type", "redop", "time", "algbw",
           "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    if (mpiBaseline) printf(" %9s %7s %6s %9s", "mpi time", "busbw", "#wrong", "sncl/mpi");
    printf("\n#%11s %12s %8s %6s %9s %7s %7s %6s %9s %7s %7s %6s", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    if (mpiBaseline) printf(" %9s %7s %6s %9s", "(us)", "(GB/s)", "", "(busbw)");
    printf("\n#%11s %12s %8s %6s %33s %33s\n", "", "", "", "", "out-of-place", "in-place");
    fflush(stdout);
  }
  double busSum = 0;
  int rows = 0;
  long totalWrong = 0;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= std::max<size_t>(o.stepFactor, 2)) {
    const size_t count = c.countFor(bytes, esize, nranks);
    double times[3] = {0, 0, 0};
    long wrong[3] = {0, 0, 0};
    for (int variant = 0; variant < 3; ++variant) {
      const bool inPlace = variant == 1, isMpi = variant == 2;
      if (isMpi && !mpiBaseline) continue;
      void* dst = inPlace ? in.data() : isMpi ? mpiOut.data() : out.data();
      if (o.check) {
        c.fill(in.data(), count, o.dtype, o.op, rank, nranks);
        bool ok = isMpi ? c.runMpi(in.data(), dst, count, mpiType(o.dtype), mpiOp(o.op), MPI_COMM_WORLD) == MPI_SUCCESS
                        : c.run(in.data(), dst, count, o.dtype, o.op, comm) == snclSuccess;
        wrong[variant] = ok ? static_cast<long>(c.check(dst, count, o.dtype, o.op, rank, nranks)) : static_cast<long>(count);
        if (!ok) fprintf(stderr, "rank %d: %s failed: %s\n", rank, c.name, snclGetLastError(comm));
      }
      bool ok = true;
      if (o.threads == 1) MPI_Barrier(MPI_COMM_WORLD);
      else pthread_barrier_wait(&sh->barrier);
      times[variant] = timeIters(
          [&] {
            return isMpi ? c.runMpi(in.data(), dst, count, mpiType(o.dtype), mpiOp(o.op), MPI_COMM_WORLD) == MPI_SUCCESS
                         : c.run(in.data(), dst, count, o.dtype, o.op, comm) == snclSuccess;
          },
          o.warmup, o.iters, &ok);
      if (!ok) wrong[variant] = static_cast<long>(count);
    }
    // Slowest rank's time and everyone's wrong counts (threads: rank 0 of each process reports its own).
    if (o.threads == 1) {
      MPI_Allreduce(MPI_IN_PLACE, times, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, wrong, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    }
    totalWrong += wrong[0] + wrong[1] + wrong[2];
    if (leader) {
      const double algbw[3] = {bytes / times[0] / 1e3, bytes / times[1] / 1e3, times[2] ? bytes / times[2] / 1e3 : 0};
      const double f = c.busFactor(nranks);
      printf(" %11zu %12zu %8s %6s %9.2f %7.2f %7.2f %6ld %9.2f %7.2f %7.2f %6ld", bytes, count, kTypeNames[o.dtype],
             kOpNames[o.op], times[0], algbw[0], algbw[0] * f, o.check ? wrong[0] : -1L, times[1], algbw[1],
             algbw[1] * f, o.check ? wrong[1] : -1L);
      if (mpiBaseline)
        printf(" %9.2f %7.2f %6ld %9.2f", times[2], algbw[2] * f, o.check ? wrong[2] : -1L, times[2] / times[0]);
      printf("\n");
      fflush(stdout);
      busSum += algbw[0] * f;
      ++rows;
    }
  }
  if (leader) {
    printf("# Out of bounds values : %ld %s\n", totalWrong, totalWrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n#\n", rows ? busSum / rows : 0.0);
  }
  if (snclCommDestroy(comm) != snclSuccess) *exitCode = 1;
  if (totalWrong) *exitCode = 1;
}

}  // namespace

size_t typeSize(snclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return t >= 0 && t < snclNumTypes ? sizes[t] : 0;
}

double valueOf(snclRedOp_t op, int rank, int nranks, size_t i) {
  switch (op) {
    case snclProd: return (i % nranks) == static_cast<size_t>(rank) ? 2.0 : 1.0;
    case snclMax:
    case snclMin: return static_cast<double>((static_cast<size_t>(rank) * 5 + i) % 11);
    case snclAvg: return static_cast<double>(nranks * ((i + rank) % 3));
    default: return static_cast<double>((static_cast<size_t>(rank) + i) % 4);
  }
}

double reducedValue(snclRedOp_t op, int nranks, size_t i) {
  double acc = valueOf(op, 0, nranks, i);
  for (int r = 1; r < nranks; ++r) {
    double v = valueOf(op, r, nranks, i);
    acc = op == snclProd ? acc * v : op == snclMax ? std::max(acc, v) : op == snclMin ? std::min(acc, v) : acc + v;
  }
  return op == snclAvg ? acc / nranks : acc;
}

void store(snclDataType_t type, void* base, size_t i, double v) {
  switch (type) {
    case snclInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case snclUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case snclInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case snclUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case snclInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case snclUint64: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case snclFloat64: static_cast<double*>(base)[i] = v; break;
    default: static_cast<float*>(base)[i] = static_cast<float>(v); break;
  }
}

double load(snclDataType_t type, const void* base, size_t i) {
  switch (type) {
    case snclInt8: return static_cast<const int8_t*>(base)[i];
    case snclUint8: return static_cast<const uint8_t*>(base)[i];
    case snclInt32: return static_cast<const int32_t*>(base)[i];
    case snclUint32: return static_cast<const uint32_t*>(base)[i];
    case snclInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case snclUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case snclFloat64: return static_cast<const double*>(base)[i];
    default: return static_cast<const float*>(base)[i];
  }
}

int run(int argc, char** argv, const Collective& coll) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  Options o;
  int ch;
  while ((ch = getopt(argc, argv, "b:e:f:n:w:c:t:d:o:B:h")) != -1) {
    switch (ch) {
      case 'b': o.minBytes = parseSize(optarg); break;
      case 'e': o.maxBytes = parseSize(optarg); break;
      case 'f': o.stepFactor = strtoul(optarg, nullptr, 0); break;
      case 'n': o.iters = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'c': o.check = atoi(optarg); break;
      case 't': o.threads = std::max(1, atoi(optarg)); break;
      case 'B': o.baseline = atoi(optarg) != 0; break;
      case 'd':
      case 'o': {
        const char** names = ch == 'd' ? kTypeNames : kOpNames;
        int n = ch == 'd' ? snclNumTypes : snclNumOps, found = -1;
        for (int i = 0; i < n; ++i)
          if (!strcmp(optarg, names[i])) found = i;
        if (found < 0) {
          fprintf(stderr, "unknown %s '%s'\n", ch == 'd' ? "type" : "op", optarg);
          MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (ch == 'd') o.dtype = static_cast<snclDataType_t>(found);
        else o.op = static_cast<snclRedOp_t>(found);
        break;
      }
      default: usage(argv[0]); MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  Shared sh;
  sh.opt = &o;
  sh.coll = &coll;
  MPI_Comm_rank(MPI_COMM_WORLD, &sh.mpiRank);
  MPI_Comm_size(MPI_COMM_WORLD, &sh.mpiSize);
  sh.nranks = sh.mpiSize * o.threads;
  if (sh.mpiRank == 0 && snclGetUniqueId(&sh.id) != snclSuccess) {
    fprintf(stderr, "snclGetUniqueId failed: %s\n", snclGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(&sh.id, sizeof(sh.id), MPI_BYTE, 0, MPI_COMM_WORLD);
  pthread_barrier_init(&sh.barrier, nullptr, o.threads);
  std::vector<int> codes(o.threads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(rankMain, &sh, t, &codes[t]);
  for (auto& t : threads) t.join();
  pthread_barrier_destroy(&sh.barrier);
  int code = *std::max_element(codes.begin(), codes.end());
  MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return code;
}

}  // namespace perf
