// The communicator: a rank's bootstrap, peer table, transports, planner and executor.
// Calls on one comm are serialized (the caller's thread, stream threads and its group
// worker share it).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/p2p.h"
#include "algorithms/schedule.h"
#include "lib/base/error.h"
#include "lib/comm/catch_up.h"
#include "lib/comm/cells_path.h"
#include "lib/comm/fault.h"
#include "lib/comm/group.h"
#include "lib/comm/history.h"
#include "lib/comm/observe.h"
#include "lib/comm/op.h"
#include "lib/comm/p2p_group.h"
#include "lib/comm/progress_board.h"
#include "lib/comm/redop.h"
#include "lib/comm/threading.h"
#include "lib/exec/executor.h"
#include "lib/net/bootstrap.h"
#include "lib/plan/planner.h"
#include "lib/topo/comm_topo.h"
#include "lib/transport/transport.h"
#include "sncl/sncl.h"

namespace sncl {
struct CompressState;  // lib/comm/compressed.h
}

struct snclComm {
  int rank = 0;
  int nranks = 0;
  std::string name;
  int64_t timeoutMs = 60000;
  bool blocking = true;  // from the config; snclCommSplit passes it on
  uint64_t commId = 0;
  // Set before init by split and shrink: this process's endpoint in the parent's topology
  // file, kept in the new comm (-1: ranks in endpoint or rank_map order).
  int64_t inheritedEndpoint = -1;
  // snclCommGetUniqueId's id for growing this comm, single use (lib/api/api_membership.cc).
  std::optional<snclUniqueId> growId;

  std::unique_ptr<sncl::Bootstrap> bootstrap;
  std::vector<sncl::PeerInfo> peers;
  sncl::ThreadModel threads;  // who runs the work and how waits wait (lib/comm/threading.h)
  // Built at init, before the transports; shared read-only (link health aside).
  std::shared_ptr<const sncl::CommTopology> topology;
  std::vector<std::unique_ptr<sncl::Transport>> transports;
  std::unique_ptr<sncl::Planner> planner;
  std::unique_ptr<sncl::Executor> executor;

  std::mutex runMutex;  // one call (or one group's part) at a time on this comm
  uint64_t seq = 0;     // collectives started, equal on every rank
  sncl::algo::Schedule schedule;  // reused: no allocation once warm
  std::vector<char> scratch;      // grows to the largest schedule's need, then stays
  struct {
    sncl::CollType coll = sncl::CollType::kCount;
    sncl::Algorithm algorithm = sncl::Algorithm::kCount;
    uint32_t variant = 0;  // Plan::variant()
    size_t count = SIZE_MAX;
    size_t elemSize = 0;
    size_t chunkBytes = 0;
    int root = -1;
    bool inPlace = false;
  } scheduleKey;
  // A group's sends and receives: built per group into reused vectors.
  sncl::algo::P2pState p2p;
  sncl::algo::Schedule p2pSchedule;
  std::vector<sncl::algo::P2pOp> p2pOps;
  std::vector<void*> p2pBuffers;
  sncl::P2pGroupState p2pGroup;  // the group in flight, for a fault's survey (lib/comm/p2p_group.h)

  // Reduction ops made by snclRedOpCreatePreMulSum, indexed by the handle (lib/comm/redop.h).
  std::mutex userOpsMutex;
  std::vector<sncl::UserRedOp> userOps;
  uint32_t userOpTag = 0;  // in this comm's handles, so that another comm's are told apart

  std::atomic<snclResult_t> initResult{snclInProgress};
  std::thread initThread;  // non-blocking init only
  std::atomic<snclResult_t> asyncError{snclSuccess};
  std::atomic<bool> aborted{false};
  std::atomic<bool> finalized{false};
  std::atomic<int> inflight{0};  // queued or running stream work
  sncl::FaultState fault;        // detection, agreement, retry, shrink (lib/comm/fault.h)
  sncl::ProgressBoard board;     // how many calls each rank finished, where they share memory
  sncl::CallHistory history;     // what is kept of the last calls, for ranks still in them after a fault (lib/comm/history.h)
  sncl::ReplayState replay;      // a catch-up's replays and pinned plans (lib/comm/catch_up.h)
  sncl::Observation obs;         // status, profiler hook, trace (lib/comm/observe.h)
  std::shared_ptr<sncl::CompressState> compress;  // compressed All-Reduce's scratch and setting
  size_t compressFromBytes = SIZE_MAX;  // compress's threshold, read without a call (SIZE_MAX: off)
  sncl::CellsPath cells;         // small collectives on shared-memory cells (lib/comm/cells_path.h)

  // Last: stopped (joined) before anything it may use is destroyed.
  sncl::GroupWorker worker;
};

namespace sncl {

// Builds comm for rank of nranks meeting at id; on failure comm holds what was made.
Result commInit(snclComm* comm, const snclUniqueId& id, int rank, int nranks, const snclConfig_t* config);
// Runs one validated call to completion on the calling thread.
Result commRun(snclComm* comm, const CollOp& op);
// Runs validated calls on comm to completion on the calling thread: the collectives in
// order, then all sends and receives as one step. Stops at the first failure.
Result commRunBatch(snclComm* comm, const GroupTask* tasks, size_t n);
// Records the first asynchronous error.
void commSetAsyncError(snclComm* comm, Result r);
// Wakes and fails everything in flight; never blocks.
void commAbortTransports(snclComm* comm);
// Waits up to timeoutMs for queued stream work of comm to finish.
bool commWaitIdle(snclComm* comm, int64_t timeoutMs);

}  // namespace sncl
