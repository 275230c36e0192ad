// The C API of the bytes-moved counters (include/sncl/sncl_ext.h): the sum of what the
// comm's transports and its executor counted, and the calls the comm finished.
#include <cstddef>
#include <cstring>
#include <mutex>

#include "lib/api/api_checks.h"
#include "lib/comm/comm.h"
#include "sncl/sncl_ext.h"

using sncl::fail;

SNCL_API snclResult_t snclCommGetCounters(snclComm_t comm, snclCounters_t* counters) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommGetCounters"));
  if (!counters) return fail(snclInvalidArgument, "snclCommGetCounters: counters is NULL");
  const size_t size = counters->size;
  if (size < offsetof(snclCounters_t, bytesSent))
    return fail(snclInvalidArgument, "snclCommGetCounters: counters->size is {}: set it to sizeof(snclCounters_t) ({})",
                size, sizeof(snclCounters_t));
  snclCounters_t c{};
  c.size = size < sizeof(c) ? size : sizeof(c);
  c.calls = comm->obs.finished.load(std::memory_order_relaxed);
  // Transports and executor exist once init succeeded (a non-blocking init may still run).
  if (comm->initResult.load() == snclSuccess) {
    sncl::TransportCounters t;
    for (const auto& transport : comm->transports)
      if (transport) transport->addCounters(&t);
    c.bytesSent = t.bytesSent;
    c.bytesReceived = t.bytesReceived;
    c.bytesCopied = t.bytesCopied;
    if (comm->executor) {
      c.bytesCopied += comm->executor->bytesCopied();
      c.bytesReduced = comm->executor->bytesReduced();
    }
  }
  memcpy(counters, &c, c.size);
  return snclSuccess;
}

SNCL_API snclResult_t snclCommGetMemoryUsage(snclComm_t comm, snclMemoryUsage_t* out) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommGetMemoryUsage"));
  if (!out) return fail(snclInvalidArgument, "snclCommGetMemoryUsage: out is NULL");
  if (out->size != sizeof(snclMemoryUsage_t))
    return fail(snclInvalidArgument,
                "snclCommGetMemoryUsage: out->size is {}: set it to sizeof(snclMemoryUsage_t) ({})",
                out->size, sizeof(snclMemoryUsage_t));
  if (comm->initResult.load() != snclSuccess)
    return fail(snclInvalidUsage, "snclCommGetMemoryUsage: comm is not initialized ({})",
                sncl::resultName(comm->initResult.load()));
  std::lock_guard<std::mutex> lock(comm->runMutex);  // a call grows what it reads
  snclMemoryUsage_t u{};
  u.size = sizeof(u);
  const sncl::CallHistory& h = comm->history;
  u.budget = h.budget;
  u.retryHeld = h.arena.held();
  u.retryPeak = h.stats.peakHeld;
  u.retryResident = h.arena.touched();
  u.retryKept = h.stats.kept;
  u.retrySkipped = h.stats.skipped;
  u.retryWaits = h.stats.waits;
  u.retryDropped = h.stats.dropped;
  u.retryNotKept = h.stats.notKept;
  u.retryOverBudget = h.stats.overBudget;
  u.scratchBytes = comm->scratch.capacity() + comm->replay.scratch.capacity() + comm->replay.sink.capacity() +
                   comm->cells.scratch.capacity();
  const auto stepBytes = [](const sncl::algo::Schedule& s) {
    return s.ops.capacity() * sizeof(s.ops[0]) + s.stepEnd.capacity() * sizeof(uint32_t);
  };
  u.scheduleBytes = stepBytes(comm->schedule) + stepBytes(comm->p2pSchedule) + stepBytes(comm->replay.schedule);
  for (const auto& t : comm->transports)
    if (t) u.transportBytes += t->memoryBytes();
  u.stagingBytes = comm->cells.stage ? 4 * comm->cells.stagePartBytes : 0;
  if (comm->obs.trace) u.traceBytes = comm->obs.trace->buffer.capacity() * sizeof(sncl::trace::Event);
  u.boardBytes = comm->board.bytes();
  u.totalBytes = u.retryResident + u.scratchBytes + u.scheduleBytes + u.transportBytes + u.stagingBytes +
                 u.traceBytes + u.boardBytes;
  *out = u;
  return snclSuccess;
}
