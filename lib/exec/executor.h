// The executor runs one rank's schedule on real bytes: it posts each step's operations on
// the peers' transports, reduces received fragments straight out of the transport's
// staging memory, and waits (spin, then sleep) until the step is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "algorithms/schedule.h"
#include "lib/base/error.h"
#include "lib/base/trace.h"
#include "lib/base/wait_policy.h"
#include "lib/exec/reduce.h"
#include "lib/transport/transport.h"

namespace sncl {

struct ExecArgs {
  const void* input = nullptr;
  void* output = nullptr;
  void* scratch = nullptr;
  void* const* userBuffers = nullptr;  // algo::userBuf(k) is userBuffers[k] (point-to-point)
  size_t elemSize = 0;
  ReduceFn reduce = nullptr;  // for RecvReduce ops
  uint64_t seq = 0;           // the collective's sequence number on this comm (goes into tags)
  // The call as every rank must make it (collective, size, type, op, root; 24 bits), folded
  // into its tags: a rank that made another call fails at its first message, since the
  // transports refuse a tag other than the one posted (never a silent wrong result).
  uint32_t signature = 0;
  uint8_t* opDone = nullptr;  // if set, opDone[i] = 1 once schedule op i completed (a fault's survey)
};

class Executor {
 public:
  // transportOfPeer[r] serves peer r (nullptr for this rank); wait is the comm's policy.
  Executor(int rank, std::vector<Transport*> transportOfPeer, int64_t timeoutMs, WaitPolicy wait = {});

  Result run(const algo::Schedule& schedule, const ExecArgs& args);

  // Asked while a step waits (rate-limited by the callee): true stops the run with
  // snclRemoteError and interrupted() set, recording no error (the comm's fault handling
  // takes over).
  struct Interrupt {
    bool (*check)(void* ctx) = nullptr;
    void* ctx = nullptr;
  };
  void setInterrupt(Interrupt i) { interrupt_ = i; }
  // Called while a step waits, as often as Interrupt (snclCommSetWaitHook): lets a runtime
  // sncl is embedded in make its own progress meanwhile.
  struct WaitHook {
    void (*fn)(void* user) = nullptr;
    void* user = nullptr;
  };
  void setWaitHook(WaitHook h) { waitHook_ = h; }
  WaitHook waitHook() const { return waitHook_; }
  bool interrupted() const { return interrupted_; }
  // Steps that waited over a quarter of the deadline without progress, then went on.
  uint64_t stalls() const { return stalls_; }
  // The peer of the request that failed the last run (-1: none).
  int failedPeer() const { return failedPeer_; }
  // Records each step as an event (SNCL_TRACE); nullptr: none.
  void setTrace(trace::Buffer* buffer) { trace_ = buffer; }
  // The step running (or last run) and the steps of its schedule; any thread may ask
  // while a run goes on (snclCommGetStatus).
  void resetProgress() {  // a new call: no schedule yet
    steps_.store(0, std::memory_order_relaxed);
    step_.store(0, std::memory_order_relaxed);
  }
  // Memory traffic of this rank's runs since construction, any thread may ask: bytes the
  // executor copied (received fragments placed into their destination, local Copy ops) and
  // bytes it reduced (the result bytes of each reduction, which read twice as many).
  uint64_t bytesCopied() const { return bytesCopied_.load(std::memory_order_relaxed); }
  uint64_t bytesReduced() const { return bytesReduced_.load(std::memory_order_relaxed); }
  // Progress of a call that runs outside the executor (cells, shared buffers), for
  // snclCommGetStatus: its rounds as steps.
  void setProgress(uint32_t step, uint32_t steps) {
    steps_.store(steps, std::memory_order_relaxed);
    step_.store(step, std::memory_order_relaxed);
  }
  // Traffic of a call that ran outside the executor (shared buffers), by its thread.
  void countMoved(uint64_t copied, uint64_t reduced) {
    count(bytesCopied_, copied);
    count(bytesReduced_, reduced);
  }
  void progress(uint32_t* step, uint32_t* steps) const {
    *steps = steps_.load(std::memory_order_relaxed);
    *step = step_.load(std::memory_order_relaxed);
  }
  // The peer the running step has waited on since sinceNs (coarse steady clock) once it
  // stopped spinning; -1 while it makes progress or no call runs (the job view).
  void waiting(int* peer, int64_t* sinceNs) const {
    *peer = waitPeer_.load(std::memory_order_relaxed);
    *sinceNs = waitSinceNs_.load(std::memory_order_relaxed);
  }

 private:
  struct Pending {
    Transport* transport;
    RequestId req;
    int peer;
    uint32_t op;  // its index in the schedule
  };
  // What a receive's sink needs to place or reduce a fragment.
  struct SinkTarget {
    char* dst;
    const char* src;  // local operand of RecvReduce, nullptr for Recv
    ReduceFn reduce;
    size_t elemSize;
    Executor* exec;  // for the byte counters
  };
  // Written by the running thread only: relaxed, no RMW.
  static void count(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  static void deliverCopy(void* ctx, size_t offset, const void* data, size_t bytes);
  static void deliverReduce(void* ctx, size_t offset, const void* data, size_t bytes);

  Result post(uint32_t index, const algo::Op& op, const ExecArgs& args, SinkTarget* sink);
  Result waitAll(size_t stepIndex, uint8_t* opDone);
  // Returns the step's end, the next step's start.
  int64_t recordStep(const algo::Schedule& schedule, size_t step, uint64_t seq, size_t elemSize, int64_t startNs);

  int rank_;
  std::vector<Transport*> transportOfPeer_;
  std::vector<Transport*> transports_;  // distinct transports, for wait()
  bool yieldPolls_ = false;              // oversubscribed over several transports (kYieldPollMicros)
  int64_t timeoutMs_;
  std::vector<Pending> pending_;        // reused across steps: no allocation once warm
  std::vector<SinkTarget> sinks_;
  Interrupt interrupt_;
  WaitHook waitHook_;
  bool interrupted_ = false;
  int failedPeer_ = -1;
  uint64_t stalls_ = 0;
  trace::Buffer* trace_ = nullptr;
  std::atomic<uint32_t> step_{0};
  std::atomic<uint32_t> steps_{0};
  std::atomic<int32_t> waitPeer_{-1};
  std::atomic<int64_t> waitSinceNs_{0};
  std::atomic<uint64_t> bytesCopied_{0};
  std::atomic<uint64_t> bytesReduced_{0};
};

}  // namespace sncl
