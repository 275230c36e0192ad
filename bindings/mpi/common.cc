#include "bindings/mpi/common.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "bindings/mpi/comm_cache.h"
#include "bindings/mpi/requests.h"

namespace sncl_mpi {
namespace {

constexpr const char* kNames[kNumBlocking] = {
    "Allreduce", "Reduce", "Bcast", "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Gather",
    "Gatherv", "Scatter", "Scatterv", "Reduce_scatter", "Reduce_scatter_block", "Scan", "Exscan", "Barrier"};
std::atomic<long> bySncl[kNumKinds];
std::atomic<long> byMpi[kNumKinds];

std::mutex logMu;
std::set<std::pair<int, std::string>> logged;  // (kind, reason) already reported

}  // namespace

const char* kindName(int k) {
  static const auto names = [] {
    std::vector<std::string> v(kNumKinds);
    for (int i = 0; i < kNumBlocking; ++i) {
      v[i] = std::string("MPI_") + kNames[i];
      std::string lower = kNames[i];
      lower[0] = static_cast<char>(lower[0] - 'A' + 'a');
      v[i + kNumBlocking] = "MPI_I" + lower;
    }
    return v;
  }();
  return k >= 0 && k < kNumKinds ? names[k].c_str() : "?";
}

int debugLevel() {
  static const int level = [] {
    const char* s = std::getenv("SNCL_MPI_DEBUG");
    return s ? std::atoi(s) : 0;
  }();
  return level;
}

int worldRank() {
  int rank = -1, fin = 0;
  PMPI_Finalized(&fin);
  if (!fin) PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void noteSncl(Kind k, size_t bytes) {
  bySncl[k].fetch_add(1, std::memory_order_relaxed);
  if (debugLevel() >= 2)
    std::fprintf(stderr, "sncl_mpi: rank %d: %s %zu bytes -> sncl\n", worldRank(), kindName(k), bytes);
}

void noteMpi(Kind k, const char* why) {
  byMpi[k].fetch_add(1, std::memory_order_relaxed);
  if (debugLevel() >= 2) {
    std::fprintf(stderr, "sncl_mpi: rank %d: %s -> MPI (%s)\n", worldRank(), kindName(k), why);
  } else if (debugLevel() == 1) {
    std::lock_guard<std::mutex> lock(logMu);
    if (logged.emplace(k, why).second)
      std::fprintf(stderr, "sncl_mpi: rank %d: %s -> MPI (%s); reported once\n", worldRank(), kindName(k), why);
  }
}

void printCounts() {
  const int rank = worldRank();
  long s = 0, m = 0;
  for (int k = 0; k < kNumKinds; ++k) {
    const long ks = bySncl[k].load(), km = byMpi[k].load();
    s += ks;
    m += km;
    if (ks || km) std::fprintf(stderr, "sncl_mpi: rank %d: %s: %ld by sncl, %ld by MPI\n", rank, kindName(k), ks, km);
  }
  if (s + m)
    std::fprintf(stderr, "sncl_mpi: rank %d: served %ld of %ld collective calls (%.1f%%)\n", rank, s, s + m,
                 100.0 * static_cast<double>(s) / static_cast<double>(s + m));
}

int rankIn(MPI_Comm comm) {
  int r = 0;
  PMPI_Comm_rank(comm, &r);
  return r;
}

int sizeOf(MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  return n;
}

std::atomic<int> mpiState{kMpiUnknown};

void noteFinalize() { mpiState.store(kMpiFinalized, std::memory_order_release); }

std::optional<Target> servedLookup(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return std::nullopt;
  const int state = mpiState.load(std::memory_order_acquire);
  if (state == kMpiFinalized) return std::nullopt;
  if (state == kMpiUnknown) {
    int init = 0, fin = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fin);
    if (!init || fin) return std::nullopt;
    int expected = kMpiUnknown;
    mpiState.compare_exchange_strong(expected, kMpiUp);
  }
  Target t;
  if (!commFor(comm, &t)) return std::nullopt;
  return t;
}

int failed(snclResult_t r, Kind k, MPI_Comm comm) {
  std::fprintf(stderr, "sncl_mpi: rank %d: %s failed in sncl: %s: %s\n", worldRank(), kindName(k),
               snclGetErrorString(r), snclGetLastError(nullptr));
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

namespace {

constexpr int kProgressTag = 32766;  // MPI guarantees tags up to 32767

// A probe that finds nothing runs MPI's progress engine (one that matched would return at
// once, so it asks for a tag on MPI_COMM_SELF nobody uses).
void driveMpiProgress() {
  int flag = 0;
  PMPI_Iprobe(0, kProgressTag, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

}  // namespace

SNCL_MPI_THREAD_LOCAL constinit bool runningInline = false;

void waitHook(void*) {
  if (runningInline) driveMpiProgress();
}

snclResult_t waitProgressing(bool drive, const std::function<snclResult_t()>& query,
                             const std::function<snclResult_t()>& sync) {
  if (drive) {
    Inline here;  // sncl runs the queued calls on this thread: its waits may drive MPI
    return sync();
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const snclResult_t r = query();
    if (r != snclInProgress) return r;
    driveMpiProgress();
    if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

namespace {

constexpr size_t kSpareJobs = 4;
SNCL_MPI_THREAD_LOCAL std::vector<std::unique_ptr<Job>> spareJobs;

}  // namespace

void recycle(std::unique_ptr<Job> job) {
  if (!job || spareJobs.size() >= kSpareJobs) return;
  job->arrays.clear();
  job->scratch.clear();
  job->packedUsed = 0;
  job->after = nullptr;
  spareJobs.push_back(std::move(job));
}

unsigned char* Job::room(size_t n) {
  if (packedUsed == packed.size()) packed.emplace_back();
  std::vector<unsigned char>& v = packed[packedUsed++];
  if (v.size() < n) v.resize(n);
  return v.data();
}

std::unique_ptr<Job> newJob() {
  if (spareJobs.empty()) return std::make_unique<Job>();
  std::unique_ptr<Job> job = std::move(spareJobs.back());
  spareJobs.pop_back();
  return job;
}

int runQueued(Kind k, MPI_Comm comm, const Target& t, MPI_Request* req, std::unique_ptr<Job> job,
              const Enqueue& enqueue) {
  if (!req && job && streamIdle(t)) {
    // As run(), for a blocking call whose Job (packed buffers, arrays) the thread keeps.
    snclResult_t r;
    {
      Inline here;
      r = enqueue(Target{t.comm, nullptr, t.drive, t.mark}, *job);
    }
    if (r != snclSuccess) return failed(r, k, comm);
    if (job->after) job->after();
    recycle(std::move(job));
    return MPI_SUCCESS;
  }
  if (!job) job = newJob();
  t.mark->queued.fetch_add(1, std::memory_order_relaxed);
  snclResult_t r = enqueue(t, *job);
  if (r != snclSuccess) return failed(r, k, comm);
  if (req) return startRequest(k, comm, t, std::move(job), req);
  // Blocking: everything queued on the stream before this call runs first (MPI's order on
  // one communicator), so waiting for the stream waits for this call. Synchronize then
  // returns at once, with the first error of the calls it covered.
  waitProgressing(
      t.drive, [&] { return snclStreamQuery(t.stream); }, [&] { return snclStreamSynchronize(t.stream); });
  r = snclStreamSynchronize(t.stream);
  if (r != snclSuccess) return failed(r, k, comm);
  if (job->after) job->after();
  return MPI_SUCCESS;
}

int nothing(Kind k, MPI_Comm comm, const Target& t, MPI_Request* req) {
  return run(k, comm, t, req, nullptr, [](const Target&, Job&) { return snclSuccess; });
}

}  // namespace sncl_mpi
