// The job view (docs/observability.md, "The job view"): what every comm of this process is
// doing, in the two forms the outside reads. With SNCL_OBSERVE_PORT=P set, the process
// serves them over HTTP on loopback (job_view_server.cc), on port P + the rank of the first
// comm it makes, so that the ranks of a job on one machine sit on P, P+1, ...:
//   GET /status   one JSON document (what tools/sncl-top reads)
//   GET /metrics  the Prometheus text exposition of the same counters
// Any thread may build them while calls run: they read the comms' status, counters, the
// progress board and the bus's link health, never a lock a call holds.
#pragma once

#include <string>

struct snclComm;

namespace sncl::jobview {

// After a comm's init succeeded: it appears in the view (and the server starts, once,
// when SNCL_OBSERVE_PORT is set).
void add(snclComm* comm);
// Before the comm is freed.
void remove(snclComm* comm);

std::string statusJson();
std::string metricsText();

// The port the server listens on, 0 when it does not (tests).
int port();

}  // namespace sncl::jobview
