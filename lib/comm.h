// The communicator: a rank's bootstrap, peer table, transports, planner and executor.
// Collectives on one comm are serialized (the caller's thread and stream threads share it).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/schedule.h"
#include "lib/bootstrap.h"
#include "lib/error.h"
#include "lib/executor.h"
#include "lib/op.h"
#include "lib/planner.h"
#include "lib/transport.h"
#include "sncl/sncl.h"

struct snclComm {
  int rank = 0;
  int nranks = 0;
  std::string name;
  int64_t timeoutMs = 60000;
  uint64_t commId = 0;

  std::unique_ptr<sncl::Bootstrap> bootstrap;
  std::vector<sncl::PeerInfo> peers;
  std::vector<std::unique_ptr<sncl::Transport>> transports;
  std::unique_ptr<sncl::Planner> planner;
  std::unique_ptr<sncl::Executor> executor;

  std::mutex runMutex;  // one collective at a time on this comm
  uint64_t seq = 0;     // collectives started, equal on every rank
  sncl::algo::Schedule schedule;  // reused: no allocation once warm
  std::vector<char> scratch;      // grows to the largest schedule's need, then stays
  struct {
    sncl::Algorithm algorithm;
    size_t count = SIZE_MAX;
    size_t elemSize = 0;
    size_t chunkBytes = 0;
  } scheduleKey;

  std::atomic<snclResult_t> initResult{snclInProgress};
  std::thread initThread;  // non-blocking init only
  std::atomic<snclResult_t> asyncError{snclSuccess};
  std::atomic<bool> aborted{false};
  std::atomic<bool> finalized{false};
  std::atomic<int> inflight{0};  // queued or running stream work
};

namespace sncl {

// Builds comm for rank of nranks meeting at id; on failure comm holds what was made.
Result commInit(snclComm* comm, const snclUniqueId& id, int rank, int nranks, const snclConfig_t* config);
// Runs one validated collective to completion on the calling thread.
Result commRun(snclComm* comm, const CollOp& op);
// Records the first asynchronous error.
void commSetAsyncError(snclComm* comm, Result r);
// Wakes and fails everything in flight; never blocks.
void commAbortTransports(snclComm* comm);
// Waits up to timeoutMs for queued stream work of comm to finish.
bool commWaitIdle(snclComm* comm, int64_t timeoutMs);

}  // namespace sncl
