// What a comm tells about its calls (docs/observability.md): a status that any thread may
// read while a call runs (snclCommGetStatus), the profiler hook (snclCommSetProfiler) and
// the trace (SNCL_TRACE), whose file lib/comm/trace_file.cc writes.
//
// Cost when neither a profiler nor SNCL_TRACE is set: per call, two reads of the coarse
// clock and a few relaxed atomic stores for the status, and one branch for the profiler and
// the trace together; per executor step, one relaxed store and one branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lib/base/error.h"
#include "lib/base/trace.h"
#include "lib/comm/op.h"
#include "lib/plan/planner.h"
#include "sncl/sncl_ext.h"

struct snclComm;

namespace sncl {

struct Decision;

// The name a status and a profiler give to a group's sends and receives, which run as one
// step of the executor.
constexpr const char* kSendRecvName = "sendrecv";
constexpr uint8_t kSendRecvColl = static_cast<uint8_t>(CollType::kCount);

// A recovery round as the trace shows it (rare: kept as text, allocated when it happens).
struct RoundInfo {
  std::string agreed, links, ranksLost;
};

struct TraceState {
  TraceState(size_t capacity, std::string pattern) : buffer(capacity), pattern(std::move(pattern)) {}
  trace::Buffer buffer;
  std::string pattern;  // SNCL_TRACE
  std::vector<RoundInfo> rounds;
  uint64_t lastRoundSeq = UINT64_MAX;  // for the attempt number of a call's rounds
  int attempt = 0;
  bool written = false;
};

// A plan's description, kept for the comm's life: the profiler's and the trace's plan
// string. Made the first time a plan runs (the only allocation), at a stable address.
struct PlanName {
  CollType coll;
  Algorithm algorithm;
  uint32_t variant;
  size_t chunkBytes;
  std::string text;
};

struct Observation {
  // The running (or last) call, published as a seqlock: the one writer (the comm's
  // runMutex holder) makes version odd while it writes; readers retry on a change.
  std::atomic<uint64_t> version{0};
  std::atomic<uint64_t> started{0}, finished{0};
  std::atomic<uint8_t> coll{0};
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> bytes{0};  // a collective's count x type size (0: a group's sends and receives)
  std::atomic<int64_t> startNs{0}, endNs{0};
  std::atomic<int32_t> lastResult{snclSuccess};
  // Fault handling, updated after each recovery round.
  std::atomic<uint64_t> rounds{0};
  std::atomic<uint32_t> linksDown{0}, ranksLost{0};
  // The last failed call's message: held only while copying it, never during a call.
  std::mutex errorMu;
  char lastError[256] = {};

  // Set and read under the comm's runMutex.
  bool profiling = false;
  snclProfiler_v1_t profiler{};
  std::deque<PlanName> planNames;
  std::unique_ptr<TraceState> trace;  // SNCL_TRACE set
};

// Brackets one call of the comm, on the thread that runs it (under the comm's runMutex):
// the status, the profiler's callBegin/callEnd, the call's trace event.
class CallObserver {
 public:
  // A collective (onStream: run by a stream, for the trace's thread role).
  CallObserver(snclComm* comm, const CollOp& op, bool onStream);
  // A group's sends and receives on comm (the point-to-point ones among tasks).
  CallObserver(snclComm* comm, const GroupTask* tasks, size_t n);
  // Ends the call as a system error if end() was not reached (an exception).
  ~CallObserver();
  CallObserver(const CallObserver&) = delete;
  CallObserver& operator=(const CallObserver&) = delete;
  // The plan chosen: the profiler's callBegin fires now, so that it names the plan.
  void planned(const Plan& plan);
  // A call on another path than a plan's schedule (a static name: "cells").
  void planned(const char* path);
  void end(Result r);

 private:
  // bytes: the call's (0 for a group's sends and receives).
  void begin(uint8_t coll, size_t bytes, bool onStream);
  void fireBegin();

  snclComm* comm_;
  bool ended_ = false;
  bool begun_ = false;      // callBegin delivered
  bool detailed_ = false;   // a profiler or the trace wants the details below
  uint8_t coll_ = 0;
  uint8_t dtype_ = 0;
  int32_t op_ = 0;          // -1: a pre-multiplied sum
  int32_t plan_ = -1;       // index into planNames
  uint64_t sendRecv_ = 0;   // sends << 32 | receives
  int64_t startNs_ = 0;
  snclProfilerCall_t call_{};
};

// snclCommGetStatus: any thread, any time, no lock a call holds.
void observeStatus(snclComm* comm, snclCommStatus_t* out);
// Reads SNCL_TRACE and SNCL_TRACE_EVENTS; at the end of commInit.
void observeInit(snclComm* comm);
// After a recovery round of the call seq that started at startNs (lib/comm/fault.cc).
void observeRound(snclComm* comm, uint64_t seq, int64_t startNs, uint32_t round, const Decision& d, bool coordinated,
                  bool pulledIn);
// The comm's trace file, once (finalize, destroy or abort); snclSuccess without SNCL_TRACE.
// The caller holds the comm's runMutex or knows no call runs.
Result traceWrite(snclComm* comm);
// The file name of rank's trace for SNCL_TRACE=pattern (docs/observability.md).
std::string tracePath(const std::string& pattern, int rank);

}  // namespace sncl
