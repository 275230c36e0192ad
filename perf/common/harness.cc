#include "perf/common/harness.h"

#include <getopt.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace perf {
namespace {

const char* kTypeNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                            "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
const char* kOpNames[] = {"sum", "prod", "max", "min", "avg", "mulsum"};
constexpr int kNumOps = snclNumOps + 1;  // with mulsum

struct Options {
  size_t minBytes = 8;
  size_t maxBytes = 64u << 20;
  size_t stepFactor = 2;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int threads = 1;  // ranks per process
  std::vector<snclDataType_t> types{snclFloat32};
  std::vector<snclRedOp_t> ops{snclSum};
  int root = 0;
  bool baseline = true;  // MPI beside sncl
};

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

// Reductions need MPI's arithmetic type; data that is only moved goes as unsigned words.
MPI_Datatype mpiType(snclDataType_t t, bool reduces) {
  if (!reduces) {
    switch (typeSize(t)) {
      case 1: return MPI_UINT8_T;
      case 2: return MPI_UINT16_T;
      case 4: return MPI_UINT32_T;
      default: return MPI_UINT64_T;
    }
  }
  switch (t) {
    case snclInt8: return MPI_INT8_T;
    case snclUint8: return MPI_UINT8_T;
    case snclInt32: return MPI_INT32_T;
    case snclUint32: return MPI_UINT32_T;
    case snclInt64: return MPI_INT64_T;
    case snclUint64: return MPI_UINT64_T;
    case snclFloat32: return MPI_FLOAT;
    case snclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;  // MPI has no half, bfloat16 or fp8
  }
}

MPI_Op mpiOp(snclRedOp_t op) {
  switch (op) {
    case snclSum: return MPI_SUM;
    case snclProd: return MPI_PROD;
    case snclMax: return MPI_MAX;
    case snclMin: return MPI_MIN;
    default: return MPI_OP_NULL;  // avg, mulsum
  }
}

void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup] [-c check 0/1]\n"
          "          [-t threads per process] [-d type|all] [-o op|all] [-r root] [-B 0/1: MPI baseline]\n"
          "types: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 f8e5m2\n"
          "ops: sum prod max min avg mulsum\n",
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

void printHeader(const Shared& sh, bool mpi) {
  const Options& o = *sh.opt;
  printf("# sncl %s: %d ranks (%d processes x %d threads), %zu..%zu bytes x%zu, %d iterations\n", sh.coll->name,
         sh.nranks, sh.mpiSize, o.threads, o.minBytes, o.maxBytes, std::max<size_t>(o.stepFactor, 2), o.iters);
  printf("#%11s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s", "size", "count", "type", "redop", "root", "time",
         "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  if (mpi) printf(" %9s %7s %6s %9s", "mpi time", "busbw", "#wrong", "sncl/mpi");
  printf("\n#%11s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
         "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  if (mpi) printf(" %9s %7s %6s %9s", "(us)", "(GB/s)", "", "(busbw)");
  printf("\n#%11s %12s %8s %6s %5s %33s %33s\n", "", "", "", "", "", "out-of-place", "in-place");
  fflush(stdout);
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
  // Buffers are allocated and touched once, outside the timed loops (first touch costs
  // ~11 us a page); a row never needs more than maxBytes in either.
  const size_t bufBytes = o.maxBytes + 64;
  std::vector<char> send(bufBytes, 1), recv(bufBytes, 1), mpiRecv(bufBytes, 1);
  const bool mpiRuns = o.baseline && o.threads == 1 && c.runMpi;
  // nccl-tests' mulsum: a pre-multiplied sum, each rank's scalar 1 or 2.
  snclRedOp_t mulSum[snclNumTypes];
  for (snclDataType_t t : o.types) {
    if (!c.reduces) break;
    unsigned char scalar[8];
    store(t, scalar, 0, mulSumScalar(rank));
    if (snclRedOpCreatePreMulSum(&mulSum[t], scalar, t, snclScalarHostImmediate, comm) != snclSuccess) {
      fprintf(stderr, "rank %d: snclRedOpCreatePreMulSum failed: %s\n", rank, snclGetLastError(comm));
      *exitCode = 1;
      return;
    }
  }
  if (leader) printHeader(*sh, mpiRuns);
  const int root = c.rooted ? o.root : -1;
  double busSum = 0;
  int rows = 0;
  long totalWrong = 0;
  const std::vector<snclRedOp_t> noOp{snclSum};
  for (snclDataType_t type : o.types) {
    const size_t elem = typeSize(type);
    for (snclRedOp_t refOp : c.reduces ? o.ops : noOp) {
      const MPI_Datatype mt = mpiType(type, c.reduces);
      const MPI_Op mo = c.reduces ? mpiOp(refOp) : MPI_OP_NULL;
      const bool mpiRow = mpiRuns && mt != MPI_DATATYPE_NULL && (!c.reduces || mo != MPI_OP_NULL);
      for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= std::max<size_t>(o.stepFactor, 2)) {
        const size_t blocks = c.blocks ? static_cast<size_t>(nranks) : 1;
        const size_t count = bytes / elem / blocks, rowCount = count * blocks, rowBytes = rowCount * elem;
        double times[3] = {0, 0, 0};
        long wrong[3] = {0, 0, 0};
        for (int variant = 0; variant < 3; ++variant) {
          const bool inPlace = variant == 1, isMpi = variant == 2;
          if ((inPlace && !c.hasInPlace) || (isMpi && !mpiRow)) continue;
          Call call{send.data(), isMpi ? mpiRecv.data() : recv.data(), count, type,
                    refOp == kMulSum ? mulSum[type] : refOp, refOp, root < 0 ? 0 : root, rank, nranks, comm};
          if (inPlace) {
            call.send = send.data() + (c.sendOffset ? c.sendOffset(count, rank, call.root) : 0) * elem;
            call.recv = send.data() + (c.recvOffset ? c.recvOffset(count, rank, call.root) : 0) * elem;
          }
          auto once = [&] { return isMpi ? c.runMpi(call, mt, mo) == MPI_SUCCESS : c.run(call) == snclSuccess; };
          if (o.check) {
            // Nothing left from an earlier row can pass for a result.
            memset(send.data(), 0xa5, rowBytes);
            if (!inPlace) memset(call.recv, 0xa5, rowBytes);
            c.fill(call);
            const bool ok = once();
            wrong[variant] = ok ? static_cast<long>(c.check(call)) : static_cast<long>(rowCount);
            if (!ok) fprintf(stderr, "rank %d: %s failed: %s\n", rank, c.name, isMpi ? "MPI error" : snclGetLastError(comm));
          }
          bool ok = true;
          if (o.threads == 1) MPI_Barrier(MPI_COMM_WORLD);
          else pthread_barrier_wait(&sh->barrier);
          times[variant] = timeIters(once, o.warmup, o.iters, &ok);
          if (!ok) wrong[variant] = static_cast<long>(rowCount);
        }
        // Slowest rank's time and everyone's wrong counts (threads: each process's rank 0 reports its own).
        if (o.threads == 1) {
          MPI_Allreduce(MPI_IN_PLACE, times, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          MPI_Allreduce(MPI_IN_PLACE, wrong, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        }
        totalWrong += wrong[0] + wrong[1] + wrong[2];
        if (!leader) continue;
        const double f = c.busFactor(nranks);
        auto algbw = [&](int v) { return times[v] > 0 ? rowBytes / times[v] / 1e3 : 0.0; };
        printf(" %11zu %12zu %8s %6s %5d %9.2f %7.2f %7.2f %6s", rowBytes, rowCount, kTypeNames[type],
               c.reduces ? kOpNames[refOp] : "none", root, times[0], algbw(0), algbw(0) * f,
               o.check ? std::to_string(wrong[0]).c_str() : "N/A");
        if (c.hasInPlace)
          printf(" %9.2f %7.2f %7.2f %6s", times[1], algbw(1), algbw(1) * f, o.check ? std::to_string(wrong[1]).c_str() : "N/A");
        else
          printf(" %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
        if (mpiRow)
          printf(" %9.2f %7.2f %6s %9.2f", times[2], algbw(2) * f, o.check ? std::to_string(wrong[2]).c_str() : "N/A",
                 times[2] / times[0]);
        else if (mpiRuns)
          printf(" %9s %7s %6s %9s", "N/A", "N/A", "N/A", "N/A");
        printf("\n");
        fflush(stdout);
        busSum += algbw(0) * f;
        ++rows;
      }
    }
  }
  if (leader) {
    printf("# Out of bounds values : %ld %s\n", totalWrong, totalWrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n#\n", rows ? busSum / rows : 0.0);
  }
  for (snclDataType_t t : o.types)
    if (c.reduces) snclRedOpDestroy(mulSum[t], comm);
  if (snclCommDestroy(comm) != snclSuccess) *exitCode = 1;
  if (totalWrong) *exitCode = 1;
}

// "all" or one name of names[0..n).
template <class E>
bool parseList(const char* arg, const char* const* names, int n, std::vector<E>* out) {
  out->clear();
  for (int i = 0; i < n; ++i)
    if (!strcmp(arg, "all") || !strcmp(arg, names[i])) out->push_back(static_cast<E>(i));
  return !out->empty();
}

}  // namespace

int run(int argc, char** argv, const Collective& coll) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  Options o;
  int ch;
  while ((ch = getopt(argc, argv, "b:e:f:n:w:c:t:d:o:r:B:h")) != -1) {
    switch (ch) {
      case 'b': o.minBytes = parseSize(optarg); break;
      case 'e': o.maxBytes = parseSize(optarg); break;
      case 'f': o.stepFactor = strtoul(optarg, nullptr, 0); break;
      case 'n': o.iters = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'c': o.check = atoi(optarg); break;
      case 't': o.threads = std::max(1, atoi(optarg)); break;
      case 'r': o.root = atoi(optarg); break;
      case 'B': o.baseline = atoi(optarg) != 0; break;
      case 'd':
        if (!parseList(optarg, kTypeNames, snclNumTypes, &o.types)) {
          fprintf(stderr, "unknown type '%s'\n", optarg);
          MPI_Abort(MPI_COMM_WORLD, 2);
        }
        break;
      case 'o':
        if (!parseList(optarg, kOpNames, kNumOps, &o.ops)) {
          fprintf(stderr, "unknown op '%s'\n", optarg);
          MPI_Abort(MPI_COMM_WORLD, 2);
        }
        break;
      default: usage(argv[0]); MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  Shared sh;
  sh.opt = &o;
  sh.coll = &coll;
  MPI_Comm_rank(MPI_COMM_WORLD, &sh.mpiRank);
  MPI_Comm_size(MPI_COMM_WORLD, &sh.mpiSize);
  sh.nranks = sh.mpiSize * o.threads;
  if (coll.rooted && (o.root < 0 || o.root >= sh.nranks)) {
    if (sh.mpiRank == 0) fprintf(stderr, "root %d out of range [0, %d)\n", o.root, sh.nranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
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
