// The C API of observation (include/sncl/sncl_ext.h, docs/observability.md): the profiler
// hook and the status of a comm, which lib/comm/observe.* keep.
#include <cstdio>
#include <mutex>

#include "lib/api/api_checks.h"
#include "lib/base/trace.h"
#include "lib/comm/comm.h"
#include "sncl/sncl_ext.h"

using sncl::fail;

SNCL_API snclResult_t snclCommSetProfiler(snclComm_t comm, const snclProfiler_v1_t* profiler) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommSetProfiler"));
  std::lock_guard<std::mutex> lock(comm->runMutex);  // read by the running call
  comm->obs.profiling = profiler && (profiler->callBegin || profiler->callEnd);
  comm->obs.profiler = profiler ? *profiler : snclProfiler_v1_t{};
  return snclSuccess;
}

// Reads the call's fields as one snapshot (a seqlock, lib/comm/observe.cc: the running call
// writes them without waiting for readers); the executor's step is read beside them, as it
// moves per step.
SNCL_API snclResult_t snclCommGetStatus(snclComm_t comm, snclCommStatus_t* out) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommGetStatus"));
  if (!out) return fail(snclInvalidArgument, "snclCommGetStatus: out is NULL");
  const sncl::Observation& o = comm->obs;
  *out = snclCommStatus_t{};
  uint8_t coll = 0;
  int64_t startNs = 0, endNs = 0;
  for (;;) {
    const uint64_t v1 = o.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;  // a write is under way: a few stores, soon done
    out->callsStarted = o.started.load(std::memory_order_acquire);
    out->callsFinished = o.finished.load(std::memory_order_acquire);
    coll = o.coll.load(std::memory_order_acquire);
    out->seq = o.seq.load(std::memory_order_acquire);
    startNs = o.startNs.load(std::memory_order_acquire);
    endNs = o.endNs.load(std::memory_order_acquire);
    out->lastResult = snclResult_t(o.lastResult.load(std::memory_order_acquire));
    if (o.version.load(std::memory_order_relaxed) == v1) break;
  }
  out->inCall = out->callsStarted != out->callsFinished;
  if (out->callsStarted > 0) {
    const char* name = coll == sncl::kSendRecvColl ? sncl::kSendRecvName : sncl::collName(sncl::CollType(coll));
    snprintf(out->callName, sizeof(out->callName), "%s", name);
    out->elapsedUs = double((out->inCall ? sncl::trace::coarseNowNs() : endNs) - startNs) / 1000.0;
  }
  // The executor exists once init succeeded (a non-blocking init may still run).
  if (comm->initResult.load() == snclSuccess && comm->executor) comm->executor->progress(&out->step, &out->steps);
  out->faultRounds = o.rounds.load(std::memory_order_relaxed);
  out->linksDown = o.linksDown.load(std::memory_order_relaxed);
  out->ranksLost = o.ranksLost.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(comm->obs.errorMu);
    snprintf(out->lastError, sizeof(out->lastError), "%s", o.lastError);
  }
  return snclSuccess;
}
