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
// nullopt when MPI serves comm (not initialized, finalized, null, intercommunicator, an
// init that failed on some rank).
std::optional<Target> served(MPI_Comm comm);
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

// Runs a served call: with req == nullptr, at once on this thread if t.stream is idle (enqueue
// gets a null stream), else queued on t.stream and waited for (with everything queued before
// it); otherwise queued, and *req becomes a generalized request that MPI_Wait/Test
// (intercepted) complete. An sncl failure calls comm's error
// handler with MPI_ERR_OTHER, as MPI would on a failed collective.
int run(Kind k, MPI_Comm comm, const Target& t, MPI_Request* req, std::unique_ptr<Job> job, const Enqueue& enqueue);

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

// sncl failed: says so, calls comm's error handler, returns MPI_ERR_OTHER.
int failed(snclResult_t r, Kind k, MPI_Comm comm);

// p advanced by bytes (an MPI buffer at a byte offset).
inline char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }
inline const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }

// The nonblocking kind of k when req is given.
inline Kind kindOf(Kind k, const MPI_Request* req) { return req ? static_cast<Kind>(k + kNumBlocking) : k; }

}  // namespace sncl_mpi
