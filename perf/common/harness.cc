#include "perf/common/harness.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "perf/common/ceiling.h"
#include "perf/common/report.h"
#include "sncl/sncl_ext.h"

namespace perf {
namespace {

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
    case snclBand: return MPI_BAND;
    case snclBor: return MPI_BOR;
    case snclBxor: return MPI_BXOR;
    case snclLand: return MPI_LAND;
    case snclLor: return MPI_LOR;
    case snclLxor: return MPI_LXOR;
    default: return MPI_OP_NULL;  // avg, mulsum
  }
}

struct Shared {
  const Options* opt;
  const Collective* coll;
  snclUniqueId id;
  int mpiRank, mpiSize, nranks;
  pthread_barrier_t barrier;
  std::vector<Ceiling> ceilings;  // per thread of this process
  // Per thread of this process, for the threads' sums of a row (-t > 1).
  std::vector<double> moved;
  std::vector<std::vector<long>> wrong;
  std::vector<long> warmups;  // per thread: the warm-up iterations each wants
  std::vector<std::string> cpus;  // per thread: its CPU list
};

// Bytes this rank moved through memory (copied + reduced, snclCommGetCounters) and calls
// finished; -1 bytes when the counters are not available.
struct Moved {
  double bytes = -1;
  double calls = 0;
};
Moved movedSoFar(snclComm_t comm) {
  snclCounters_t c{};
  c.size = sizeof(c);
  if (snclCommGetCounters(comm, &c) != snclSuccess) return {};
  return {static_cast<double>(c.bytesCopied + c.bytesReduced), static_cast<double>(c.calls)};
}

// The most any rank of the run says (threads: of this process).
long agreeMax(Shared* sh, int thread, long v) {
  if (sh->opt->threads == 1) {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    return v;
  }
  sh->warmups[static_cast<size_t>(thread)] = v;
  pthread_barrier_wait(&sh->barrier);
  v = *std::max_element(sh->warmups.begin(), sh->warmups.end());
  pthread_barrier_wait(&sh->barrier);
  return v;
}

// Warm-up runs -w iterations, then more until kWarmupUs have passed (all ranks run the
// most any rank needs). On the test machine (a virtual machine) a buffer's first 10-40
// rounds of a 2-rank 4 MiB All-Gather took 150-400 us against 120 after (the same in a
// plain copy loop): five iterations left a 20-iteration row mostly in that ramp, which fell
// on whichever library ran first in the row (sncl) and made one run's ratio 1.1 and the
// next one's 2.2.
constexpr double kWarmupUs = 10000;
constexpr long kMaxExtraWarmup = 1000;

double timeIters(Shared* sh, int thread, const std::function<bool()>& once, int warmup, int iters, bool* ok) {
  const auto w0 = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup; ++i) *ok &= once();
  const double spent = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count();
  long extra = 0;
  if (warmup > 0 && spent < kWarmupUs)
    extra = std::min(kMaxExtraWarmup, static_cast<long>((kWarmupUs - spent) / std::max(spent / warmup, 0.01)) + 1);
  extra = agreeMax(sh, thread, extra);
  for (long i = 0; i < extra; ++i) *ok &= once();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) *ok &= once();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// One process's ranks agree on a figure (threads: within the process only; MPI is called
// by one thread per process when -t 1).
void combineTimes(const Options& o, double* times, int n, int nranks) {
  if (o.threads != 1) return;
  if (o.average == 0) {
    MPI_Bcast(times, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  } else {
    MPI_Allreduce(MPI_IN_PLACE, times, n, MPI_DOUBLE, o.average == 1 ? MPI_SUM : o.average == 2 ? MPI_MIN : MPI_MAX,
                  MPI_COMM_WORLD);
    if (o.average == 1)
      for (int i = 0; i < n; ++i) times[i] /= nranks;
  }
}

// A rank's buffer: from snclMemAlloc (-R 1, the default: ranks on one host then read and
// write each other's buffers in place) or the heap (-R 0); touched once here.
class HostBuffer {
 public:
  HostBuffer(size_t bytes, bool shared, int fill) : bytes_(bytes) {
    if (bytes == 0) return;
    if (shared && snclMemAlloc(reinterpret_cast<void**>(&data_), bytes) == snclSuccess) {
      shared_ = true;
    } else {
      if (shared) fprintf(stderr, "snclMemAlloc(%zu) failed (%s): heap buffers\n", bytes, snclGetLastError(nullptr));
      data_ = static_cast<char*>(malloc(bytes));
      if (!data_) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        abort();
      }
    }
    memset(data_, fill, bytes);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() {
    if (shared_) snclMemFree(data_);
    else free(data_);
  }
  char* data() { return data_; }
  size_t size() const { return bytes_; }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
  bool shared_ = false;
};

// The machine's ceiling with every rank running at once; the slowest rank's figures.
Ceiling ceilingOf(Shared* sh, int thread, HostBuffer& a, HostBuffer& b) {
  const Options& o = *sh->opt;
  constexpr size_t kMinBytes = 32u << 20;  // past the caches
  std::vector<char> ownA, ownB;
  void *pa = a.data(), *pb = b.data();
  size_t bytes = a.size() & ~size_t{63};
  if (bytes < kMinBytes) {
    ownA.assign(kMinBytes, 1);
    ownB.assign(kMinBytes, 2);
    pa = ownA.data(), pb = ownB.data(), bytes = kMinBytes;
  }
  auto barrier = [&] {
    if (o.threads == 1) MPI_Barrier(MPI_COMM_WORLD);
    else pthread_barrier_wait(&sh->barrier);
  };
  Ceiling c = measureCeiling(pa, pb, bytes, barrier);
  if (o.threads == 1) {
    MPI_Allreduce(MPI_IN_PLACE, &c.copyGBs, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &c.addGBs, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    return c;
  }
  sh->ceilings[static_cast<size_t>(thread)] = c;
  pthread_barrier_wait(&sh->barrier);
  for (const Ceiling& t : sh->ceilings) c.copyGBs = std::min(c.copyGBs, t.copyGBs), c.addGBs = std::min(c.addGBs, t.addGBs);
  return c;
}

// This thread's CPU list ("0-3,6"), as taskset -c prints it.
std::string cpuList() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "?";
  std::string out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int end = cpu;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &set)) ++end;
    char range[32];
    if (end > cpu) snprintf(range, sizeof(range), "%s%d-%d", out.empty() ? "" : ",", cpu, end);
    else snprintf(range, sizeof(range), "%s%d", out.empty() ? "" : ",", cpu);
    out += range;
    cpu = end;
  }
  return out;
}

std::string threadingText(snclComm_t comm) {
  snclThreading_t t{};
  if (snclCommGetThreading(comm, &t) != snclSuccess) return std::string("? (") + snclGetLastError(comm) + ")";
  return t.text;
}

// Every rank's CPU list, on every rank (a collective over MPI and the process's threads).
std::vector<std::string> cpusOfRanks(Shared* sh, int thread, int rank) {
  constexpr size_t kLen = 64;
  const int threads = sh->opt->threads;
  char mine[kLen] = {};
  snprintf(mine, kLen, "%s", cpuList().c_str());
  std::vector<char> all(kLen * size_t(sh->nranks));
  memcpy(&all[kLen * size_t(rank)], mine, kLen);
  if (threads == 1) {
    MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD);
  } else {
    sh->cpus[size_t(thread)] = mine;
    pthread_barrier_wait(&sh->barrier);
    for (int t = 0; t < threads; ++t)
      snprintf(&all[kLen * size_t(sh->mpiRank * threads + t)], kLen, "%s", sh->cpus[size_t(t)].c_str());
    pthread_barrier_wait(&sh->barrier);
  }
  std::vector<std::string> out;
  for (int r = 0; r < sh->nranks; ++r) out.emplace_back(all[kLen * size_t(r)] ? &all[kLen * size_t(r)] : "?");
  return out;
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
  // Peers need one rank per process: MPI and Gloo address processes.
  std::vector<Peer> peers;
  std::unique_ptr<GlooPeer> gloo;
  for (Peer p : o.peers) {
    if (o.threads != 1) break;
    if (p == Peer::Mpi && c.runMpi) peers.push_back(p);
    if (p == Peer::Gloo && c.runGloo) {
      gloo = GlooPeer::connect(MPI_COMM_WORLD, 60000);
      if (!gloo) {
        *exitCode = 1;
        snclCommDestroy(comm);
        return;
      }
      peers.push_back(p);
    }
  }
  // Buffers are allocated and touched once, outside the timed loops (first touch costs
  // ~11 us a page); a row never needs more than maxBytes in either.
  const size_t bufBytes = o.maxBytes + 64;
  // The peers get heap buffers of their own whatever -R says: Open MPI's single-copy reads
  // (CMA) of shared-memory pages measured up to 1.5x slower than of heap pages here.
  HostBuffer send(bufBytes, o.sharedBuffers, 1), recv(bufBytes, o.sharedBuffers, 1),
      peerSend(peers.empty() ? 0 : bufBytes, false, 1), peerRecv(peers.empty() ? 0 : bufBytes, false, 1);
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
  Ceiling ceiling;
  if (o.ceiling) ceiling = ceilingOf(sh, thread, send, recv);
  Report report(o, {c.name, c.reduces, c.hasInPlace, nranks, sh->mpiSize, o.threads, peers, o.ceiling ? &ceiling : nullptr,
                    placementText(cpusOfRanks(sh, thread, rank)), threadingText(comm)});
  if (leader) report.header();
  const int root = c.rooted ? o.root : -1;
  long totalWrong = 0;
  const std::vector<snclRedOp_t> noOp{snclSum};
  const int nvariants = 2 + static_cast<int>(peers.size());  // sncl out of place, in place, each peer
  for (snclDataType_t type : o.types) {
    const size_t elem = typeSize(type);
    for (snclRedOp_t refOp : c.reduces ? o.ops : noOp) {
      if (c.reduces && integerOnlyOp(refOp) && type > snclUint64) continue;  // sncl refuses the pair
      const MPI_Datatype mt = mpiType(type, c.reduces);
      const MPI_Op mo = c.reduces ? mpiOp(refOp) : MPI_OP_NULL;
      for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.stepFactor) {
        const size_t blocks = c.blocks ? static_cast<size_t>(nranks) : 1;
        const size_t count = bytes / elem / blocks, rowCount = count * blocks, rowBytes = rowCount * elem;
        std::vector<double> times(static_cast<size_t>(nvariants), 0.0);
        std::vector<long> wrong(static_cast<size_t>(nvariants), 0);
        std::vector<bool> ran(static_cast<size_t>(nvariants), false);
        double movedPerCall = -1;  // sncl out of place, bytes per rank per call
        for (int variant = 0; variant < nvariants; ++variant) {
          const bool inPlace = variant == 1, isPeer = variant >= 2;
          const Peer peer = isPeer ? peers[static_cast<size_t>(variant - 2)] : Peer::Mpi;
          if (inPlace && !c.hasInPlace) continue;
          if (isPeer && peer == Peer::Mpi && (mt == MPI_DATATYPE_NULL || (c.reduces && mo == MPI_OP_NULL))) continue;
          if (isPeer && peer == Peer::Gloo && !GlooPeer::supports(type, c.reduces, refOp)) continue;
          ran[static_cast<size_t>(variant)] = true;
          Call call{isPeer ? peerSend.data() : send.data(), isPeer ? peerRecv.data() : recv.data(), count, type,
                    refOp == kMulSum ? mulSum[type] : refOp, refOp, root < 0 ? 0 : root, rank, nranks, comm, gloo.get()};
          if (inPlace) {
            call.send = send.data() + (c.sendOffset ? c.sendOffset(count, rank, call.root) : 0) * elem;
            call.recv = send.data() + (c.recvOffset ? c.recvOffset(count, rank, call.root) : 0) * elem;
          }
          auto once = [&] {
            if (!isPeer) return c.run(call) == snclSuccess;
            return peer == Peer::Mpi ? c.runMpi(call, mt, mo) == MPI_SUCCESS : c.runGloo(call);
          };
          if (o.check) {
            // Nothing left from an earlier row can pass for a result.
            memset(isPeer ? peerSend.data() : send.data(), 0xa5, rowBytes);
            if (!inPlace) memset(call.recv, 0xa5, rowBytes);
            c.fill(call);
            const bool ok = once();
            wrong[variant] = ok ? static_cast<long>(c.check(call)) : static_cast<long>(rowCount);
            if (!ok) fprintf(stderr, "rank %d: %s failed: %s\n", rank, c.name, isPeer ? peerName(peer) : snclGetLastError(comm));
          }
          bool ok = true;
          if (o.threads == 1) MPI_Barrier(MPI_COMM_WORLD);
          else pthread_barrier_wait(&sh->barrier);
          const Moved before = variant == 0 ? movedSoFar(comm) : Moved{};
          times[variant] = timeIters(sh, thread, once, o.warmup, o.iters, &ok);
          if (!ok) wrong[variant] = static_cast<long>(rowCount);
          if (variant == 0) {
            const Moved after = movedSoFar(comm);
            const double calls = after.calls - before.calls;
            movedPerCall = before.bytes >= 0 && after.bytes >= 0 && calls > 0 ? (after.bytes - before.bytes) / calls : -1;
          }
        }
        combineTimes(o, times.data(), nvariants, nranks);
        // Bytes moved: the mean over ranks; wrong results: the sum over ranks (threads: over
        // this process's threads).
        if (o.threads == 1) {
          double v[2] = {movedPerCall, movedPerCall < 0 ? 1.0 : 0.0};
          MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
          movedPerCall = v[1] > 0 ? -1 : v[0] / nranks;
          MPI_Allreduce(MPI_IN_PLACE, wrong.data(), nvariants, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        } else {
          sh->moved[static_cast<size_t>(thread)] = movedPerCall;
          sh->wrong[static_cast<size_t>(thread)] = wrong;
          pthread_barrier_wait(&sh->barrier);
          double sum = 0;
          for (double m : sh->moved) sum = m < 0 || sum < 0 ? -1 : sum + m;
          movedPerCall = sum < 0 ? -1 : sum / o.threads;
          std::fill(wrong.begin(), wrong.end(), 0);
          for (const auto& w : sh->wrong)
            for (size_t v = 0; v < wrong.size(); ++v) wrong[v] += w[v];
          pthread_barrier_wait(&sh->barrier);  // every thread read the row before the next one writes
        }
        for (long w : wrong) totalWrong += w;
        if (!leader) continue;
        const double f = c.busFactor(nranks);
        auto measure = [&](int v) {
          Measure m;
          m.ran = ran[static_cast<size_t>(v)];
          m.timeUs = times[static_cast<size_t>(v)];
          m.algbw = m.timeUs > 0 ? rowBytes / m.timeUs / 1e3 : 0.0;
          m.busbw = m.algbw * f;
          m.wrong = wrong[static_cast<size_t>(v)];
          return m;
        };
        Row row{rowBytes, rowCount, type, refOp, root, measure(0), measure(1), {}};
        row.sncl.movedBytes = movedPerCall;
        for (int v = 2; v < nvariants; ++v) row.peers.push_back(measure(v));
        report.row(row);
      }
    }
  }
  // Max RSS of each process (of rank 0's process with -t > 1: its threads share it).
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::vector<long> rss(o.threads == 1 ? size_t(sh->mpiSize) : 1, usage.ru_maxrss);
  if (o.threads == 1) MPI_Gather(&usage.ru_maxrss, 1, MPI_LONG, rss.data(), 1, MPI_LONG, 0, MPI_COMM_WORLD);
  // What sncl itself holds at the end (snclCommGetMemoryUsage): every part, and the retry
  // history's resident pages, per process.
  snclMemoryUsage_t mu{};
  mu.size = sizeof(mu);
  if (snclCommGetMemoryUsage(comm, &mu) != snclSuccess) mu = snclMemoryUsage_t{};
  std::vector<long> own(2 * rss.size(), 0);
  const long mine[2] = {long(mu.totalBytes >> 10), long(mu.retryResident >> 10)};
  if (o.threads == 1) MPI_Gather(mine, 2, MPI_LONG, own.data(), 2, MPI_LONG, 0, MPI_COMM_WORLD);
  else own.assign(mine, mine + 2);
  if (leader) {
    report.setMaxRss(rss);
    report.setSnclMemory(own);
    report.footer();
    if (!o.jsonPath.empty() && !report.writeJson(o.jsonPath)) *exitCode = 1;
  }
  for (snclDataType_t t : o.types)
    if (c.reduces) snclRedOpDestroy(mulSum[t], comm);
  gloo.reset();
  if (snclCommDestroy(comm) != snclSuccess) *exitCode = 1;
  if (totalWrong) *exitCode = 1;
}

}  // namespace

int run(int argc, char** argv, const Collective& coll) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  Options o;
  bool help = false;
  if (!parseOptions(argc, argv, &o, &help)) {
    MPI_Finalize();
    return help ? 0 : 2;
  }
  Shared sh;
  sh.opt = &o;
  sh.coll = &coll;
  MPI_Comm_rank(MPI_COMM_WORLD, &sh.mpiRank);
  MPI_Comm_size(MPI_COMM_WORLD, &sh.mpiSize);
  sh.nranks = sh.mpiSize * o.threads;
  sh.ceilings.resize(static_cast<size_t>(o.threads));
  sh.moved.resize(static_cast<size_t>(o.threads));
  sh.wrong.resize(static_cast<size_t>(o.threads));
  sh.warmups.resize(static_cast<size_t>(o.threads));
  sh.cpus.resize(static_cast<size_t>(o.threads));
  if (coll.rooted && (o.root < 0 || o.root >= sh.nranks)) {
    if (sh.mpiRank == 0) fprintf(stderr, "root %d out of range [0, %d)\n", o.root, sh.nranks);
    MPI_Finalize();
    return 2;
  }
  if (sh.mpiRank == 0 && snclGetUniqueId(&sh.id) != snclSuccess) {
    fprintf(stderr, "snclGetUniqueId failed: %s\n", snclGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(&sh.id, sizeof(sh.id), MPI_BYTE, 0, MPI_COMM_WORLD);
  pthread_barrier_init(&sh.barrier, nullptr, static_cast<unsigned>(o.threads));
  std::vector<int> codes(static_cast<size_t>(o.threads), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(rankMain, &sh, t, &codes[static_cast<size_t>(t)]);
  for (auto& t : threads) t.join();
  pthread_barrier_destroy(&sh.barrier);
  int code = *std::max_element(codes.begin(), codes.end());
  MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return code;
}

}  // namespace perf
