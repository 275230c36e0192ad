// What every served call of libsncl_mpi.so shares: the call kinds and their counters
// (SNCL_MPI_DEBUG), the choice between sncl and PMPI, and the way a served call runs:
// blocking forms on the caller's thread when nothing is queued on the communicator's sncl
// stream, else queued on it and waited for; nonblocking forms queued and handed back as an
// MPI generalized request (bindings/mpi/requests.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "bindings/mpi/tls.h"
#include "bindings/mpi/types.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

namespace sncl_mpi {

// Blocking kinds first; the nonblocking form of kind k is k + kNumBlocking.
enum Kind {
  kAllreduce, kReduce, kBcast, kAllgather, kAllgatherv, kAlltoall, kAlltoallv, kGather, kGatherv, kScatter,
  kScatterv, kReduceScatter, kReduceScatterBlock, kScan, kExscan, kBarrier, kNumBlocking,
  kNumKinds = 2 * kNumBlocking
};
const char* kindName(int k);  // "MPI_Allreduce", "MPI_Iallreduce", ...

int debugLevel();
int worldRank();

// Counts a call; a fallback's reason is logged once per (kind, reason) at SNCL_MPI_DEBUG=1,
// every call at 2.
void noteSncl(Kind k, size_t bytes);
void noteMpi(Kind k, const char* why);
// Per kind: calls by sncl and by MPI, and the share served, on stderr (MPI_Finalize).
void printCounts();

int rankIn(MPI_Comm comm);
int sizeOf(MPI_Comm comm);

// Why served() refused a communicator (MPI_COMM_NULL and calls outside MPI_Init and
// MPI_Finalize too, which PMPI then reports).
constexpr const char* kCommWhy = "intercommunicator, failed sncl init, or MPI not initialized";

// Calls run() queued on a comm's stream, and their number when the stream was last seen
// idle (run() asks the stream only when the two differ).
struct QueueMark {
  std::atomic<uint64_t> queued{0};
  std::atomic<uint64_t> idleAt{0};
};

// The sncl comm and stream serving an MPI communicator.
struct Target {
  snclComm_t comm = nullptr;
  snclStream_t stream = nullptr;
  bool drive = false;  // the comm's waiter runs queued work (snclCommGetThreading): wait by synchronizing
  QueueMark* mark = nullptr;
};
// The communicator this thread was last served on, good while the cache's generation
// (bumped whenever a comm is released or forgotten) is the one it saw then: a served call
// finds its target in a few loads, without MPI's attribute lookup and its lock.
struct CommMemo {
  bool valid = false;
  MPI_Comm mpi{};
  uint64_t generation = 0;
  Target target;  // comm nullptr: MPI serves it
};
extern SNCL_MPI_THREAD_LOCAL constinit CommMemo tCommMemo;
extern std::atomic<uint64_t> commGeneration;
// MPI's state as the drop-in last saw it: asked of MPI (two calls that take its lock) only
// until it is up; MPI_Finalize's wrapper says when it goes.
enum MpiState { kMpiUnknown, kMpiUp, kMpiFinalized };
extern std::atomic<int> mpiState;

// served() and commFor() past their memos (comm_cache.cc, common.cc).
bool commLookup(MPI_Comm comm, Target* t);
std::optional<Target> servedLookup(MPI_Comm comm);

// The sncl comm, stream and queue mark for comm; false when sncl cannot serve it
// (intercommunicator, a failed init: every rank then agrees to fall back). Collective over
// comm on first use (comm_cache.h).
inline bool commFor(MPI_Comm comm, Target* t) {
  const CommMemo& m = tCommMemo;
  if (!m.valid || comm != m.mpi || m.generation != commGeneration.load(std::memory_order_acquire))
    return commLookup(comm, t);
  *t = m.target;
  return t->comm != nullptr;
}

// nullopt when MPI serves comm (not initialized, finalized, null, intercommunicator, an
// init that failed on some rank).
inline std::optional<Target> served(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL || mpiState.load(std::memory_order_acquire) != kMpiUp) return servedLookup(comm);
  Target t;
  if (!commFor(comm, &t)) return std::nullopt;
  return t;
}
// MPI_Finalize began: nothing is served from here on.
void noteFinalize();

// What a queued call needs until it ran: converted count arrays, a scratch buffer, packed
// copies of buffers with gaps (bindings/mpi/staging.h), and a step to run once it finished
// (unpacking, moving an in-place result into place).
struct Job {
  std::vector<size_t> arrays;
  std::vector<unsigned char> scratch;
  std::vector<std::vector<unsigned char>> packed;
  size_t packedUsed = 0;  // entries of packed this call uses (a recycled job may hold more)
  std::function<void()> after;
  // n bytes for one packed buffer, reusing a recycled job's storage when it is large enough.
  unsigned char* room(size_t n);
};
// A Job for a served call: one that a blocking call of this thread finished with (its
// buffers keep their capacity, so repeated packed or v-form calls stop allocating), or a
// new one. run() recycles the jobs of the blocking calls it runs on this thread, a
// request's free those of the nonblocking ones.
std::unique_ptr<Job> newJob();
// Keeps job (its `after` already run) for this thread's next newJob().
void recycle(std::unique_ptr<Job> job);

// The call that queues (or runs) a served collective: a reference to the caller's lambda,
// used only during run(), so that a call neither copies nor allocates it.
class Enqueue {
 public:
  template <class F>
  Enqueue(const F& f)  // NOLINT: implicit, as a lambda is passed
      : fn_(&f), call_([](const void* fn, const Target& t, Job& job) { return (*static_cast<const F*>(fn))(t, job); }) {}
  snclResult_t operator()(const Target& t, Job& job) const { return call_(fn_, t, job); }

 private:
  const void* fn_;
  snclResult_t (*call_)(const void*, const Target&, Job&);
};

// Set while this thread runs sncl calls itself (a blocking call inline, or queued calls
// that a query runs on the waiting thread when the rank has no spare core): only the
// application's thread may call MPI (a stream's thread may not, below MPI_THREAD_MULTIPLE).
extern SNCL_MPI_THREAD_LOCAL constinit bool runningInline;
struct Inline {
  Inline() : was(runningInline) { runningInline = true; }
  ~Inline() { runningInline = was; }
  bool was;
};

// Whether t's stream has nothing queued (nor failed there). Only run() queues on it: when
// nothing was queued since it was last seen idle, it still is, and the stream's lock is
// not taken (a third of the drop-in's own time in a small blocking call).
inline bool streamIdle(const Target& t) {
  const uint64_t queued = t.mark->queued.load(std::memory_order_relaxed);
  if (t.mark->idleAt.load(std::memory_order_relaxed) == queued) return true;
  if (snclStreamQuery(t.stream) != snclSuccess) return false;
  t.mark->idleAt.store(queued, std::memory_order_relaxed);
  return true;
}

// sncl failed: says so, calls comm's error handler, returns MPI_ERR_OTHER.
int failed(snclResult_t r, Kind k, MPI_Comm comm);

// run() for all but a blocking call without a Job on an idle stream.
int runQueued(Kind k, MPI_Comm comm, const Target& t, MPI_Request* req, std::unique_ptr<Job> job,
              const Enqueue& enqueue);

// Runs a served call: with req == nullptr, at once on this thread if t.stream is idle (enqueue
// gets a null stream), else queued on t.stream and waited for (with everything queued before
// it); otherwise queued, and *req becomes a generalized request that MPI_Wait/Test
// (intercepted) complete. An sncl failure calls comm's error
// handler with MPI_ERR_OTHER, as MPI would on a failed collective.
// A blocking call on contiguous buffers (no Job), nearly every small one, runs here inline,
// enqueue called directly (two calls fewer than through Enqueue and runQueued).
template <class F>
int run(Kind k, MPI_Comm comm, const Target& t, MPI_Request* req, std::unique_ptr<Job> job, const F& enqueue) {
  if (!req && !job && streamIdle(t)) {
    // Blocking with nothing queued on the stream (nor failed there): run it on this
    // thread, which saves two thread hand-offs per call (the bulk of a small call's time
    // through the stream). MPI's progress goes on from sncl's waits through waitHook.
    Job none;  // a call without arrays or scratch allocates nothing here
    snclResult_t r;
    {
      Inline here;
      r = enqueue(Target{t.comm, nullptr, t.drive, t.mark}, none);
    }
    if (r != snclSuccess) return failed(r, k, comm);
    return MPI_SUCCESS;
  }
  return runQueued(k, comm, t, req, std::move(job), Enqueue(enqueue));
}

// A served call that moves no data (zero bytes on every rank, as MPI's matching signatures
// make them): completes at once, as a request too.
int nothing(Kind k, MPI_Comm comm, const Target& t, MPI_Request* req);

// Waits until query() is no longer snclInProgress and returns its answer, calling into MPI
// meanwhile: a peer may need this rank's MPI progress (a rendezvous send to a receive this
// rank posted) before it reaches the sncl call this rank waits for, as MPI's progress rule
// allows. Yields first, then sleeps in short steps. Bounded by the sncl comm's deadlines,
// which end every queued call.
// With drive (the rank has no spare core), sync instead: the queued calls then run on this
// thread, whose sncl waits drive MPI's progress through waitHook.
snclResult_t waitProgressing(bool drive, const std::function<snclResult_t()>& query,
                             const std::function<snclResult_t()>& sync);

// The sncl comms' wait hook (snclCommSetWaitHook): drives MPI's progress while a blocking
// call that run() runs on the application's thread waits for peers.
void waitHook(void* user);

// p advanced by bytes (an MPI buffer at a byte offset).
inline char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }
inline const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }

// The nonblocking kind of k when req is given.
inline Kind kindOf(Kind k, const MPI_Request* req) { return req ? static_cast<Kind>(k + kNumBlocking) : k; }

}  // namespace sncl_mpi
