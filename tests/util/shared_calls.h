// Random collectives on real ranks for the shared-buffer and staged paths
// (lib/exec/shared_colls.*, lib/exec/staged_colls.*): calls drawn from a seed every rank
// shares (collectives, dtypes, ops, counts above the cell size, roots, in-place forms,
// offsets inside larger allocations from snclMemAlloc or the heap), each checked bit for bit
// against a rank-order reference, with guards around every output, and the comm's path
// counters against what the calls should have taken.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sncl/sncl.h"

namespace sncl::test::shared {

constexpr size_t kCellBytes = 4096;  // shm.h's default cell size: the shared path starts above it

// The seed of the calls: SNCL_TEST_SEED, else random; printed once.
uint64_t testSeed();
std::chrono::milliseconds::rep msSince(std::chrono::steady_clock::time_point t);

enum class Coll { AllReduce, AllGather, Broadcast, Reduce, ReduceScatter };
const char* collName(Coll c);

// One call, the same on every rank (drawn from the shared seed).
struct Call {
  Coll coll = Coll::AllReduce;
  snclDataType_t type = snclFloat32;
  snclRedOp_t op = snclSum;
  size_t count = 0;  // as the API counts: AllGather per rank's input, ReduceScatter per output
  int root = 0;
  bool inPlace = false;
};

// What a loop draws. orderFree: only reductions whose result does not depend on the order
// in which ranks combine (integers, max/min), for calls the planner's schedule runs.
struct Draw {
  bool orderFree = false;
  size_t maxRankBytes = 3 << 20;   // a rank's block, at most
  size_t maxTotalBytes = 4 << 20;  // a whole All-Gather output / Reduce-Scatter input, at most
  std::vector<Coll> colls = {Coll::AllReduce, Coll::AllGather, Coll::Broadcast, Coll::Reduce, Coll::ReduceScatter};
  // Some calls of up to the cell size (zero included) between the shared ones: those run on
  // the cells, so the two paths alternate on the same cells.
  bool small = false;
};

struct LoopOptions {
  Draw draw;
  int calls = 50;
  int perGroup = 1;          // calls issued together in one snclGroupStart/End (1: none)
  bool onStream = false;     // on a stream, then snclStreamSynchronize; else the NULL stream
  bool sharedMem = true;     // false: every rank's buffers come from the heap
  bool threads = false;      // the ranks are threads of one process: any buffers run in place
  int heapRank = -1;         // this rank's buffers come from the heap (the mixed case)
  bool churn = false;        // free and allocate the arenas again before every call
  int pool = 0;              // > 0: each call in one of this many arenas, kept (peers' maps cycle)
  bool expectShared = true;  // the path is on (else it neither runs nor declines a call)
  // Calls the path cannot run in place (a buffer on the heap) go through the staging areas
  // (else every rank declines them).
  bool staged = true;
  // Bytes per rank up to which they stage (the tuning's crossover for the comm's rank
  // count); -1: the default tuning's (defaultTuning(), whose figures test_tuning pins).
  int64_t stagedMaxBytes = -1;
  size_t sharedMin = kCellBytes + 1;  // bytes per rank from which calls take it
  int killRank = -1, killAt = -1;
  std::chrono::steady_clock::time_point* callStart = nullptr;
};

// Runs opt.calls random calls on comm, checking each and the path counters; returns
// failures (printed). *lastResult: the last call's result.
int callLoop(snclComm_t comm, int rank, int nranks, uint64_t seed, const LoopOptions& opt, snclResult_t* lastResult);
// Checks that comm has the shared path as expected; "" or why not.
std::string pathState(snclComm_t comm, bool sharedOn, size_t sharedMin = kCellBytes + 1);
// One process rank: init, check the path's state, run the loop, destroy; the exit code.
int processRank(int rank, int nranks, const snclUniqueId& id, uint64_t seed, const LoopOptions& opt, bool sharedOn);

}  // namespace sncl::test::shared
