// The C API of the bytes-moved counters (include/sncl/sncl_ext.h): the sum of what the
// comm's transports and its executor counted, and the calls the comm finished.
#include <cstddef>
#include <cstring>

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
