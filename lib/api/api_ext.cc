// The C extension API (include/sncl/sncl_ext.h): control and observation of the emulated
// bus, reached through BusControl among the comm's transports.
#include <cstdio>
#include <mutex>

#include "lib/api/api_checks.h"
#include "lib/comm/comm.h"
#include "lib/plan/planner.h"
#include "lib/transport/bus_control.h"
#include "sncl/sncl_ext.h"

using sncl::fail;
using sncl::Result;

namespace {

Result busOf(snclComm* comm, const char* fn, sncl::BusControl** out) {
  SNCL_CHECK(sncl::api::checkComm(comm, fn));
  if (comm->initResult.load() != snclSuccess)
    return fail(snclInvalidUsage, "{}: comm is not initialized ({})", fn, sncl::resultName(comm->initResult.load()));
  for (auto& t : comm->transports)
    if (auto* bus = dynamic_cast<sncl::BusControl*>(t.get())) {
      *out = bus;
      return snclSuccess;
    }
  return fail(snclInvalidUsage, "{}: comm {} rank {} has no bus transport (set SNCL_TRANSPORT=bus, or a topology "
              "file whose supernode holds the ranks)", fn, comm->name, comm->rank);
}

}  // namespace

SNCL_API snclResult_t snclBusInjectFault(snclComm_t comm, const char* spec) {
  sncl::BusControl* bus = nullptr;
  SNCL_CHECK(busOf(comm, "snclBusInjectFault", &bus));
  if (!spec) return fail(snclInvalidArgument, "snclBusInjectFault: spec is NULL");
  std::lock_guard<std::mutex> lock(comm->runMutex);  // not while a call runs on the comm
  return bus->injectFaults(spec);
}

SNCL_API snclResult_t snclBusGetLinkCounters(snclComm_t comm, const char* link, snclBusCounters_t* out) {
  sncl::BusControl* bus = nullptr;
  SNCL_CHECK(busOf(comm, "snclBusGetLinkCounters", &bus));
  if (!out) return fail(snclInvalidArgument, "snclBusGetLinkCounters: out is NULL");
  return bus->linkCounters(link ? link : "", out);
}

SNCL_API snclResult_t snclBusModeledTimeUs(snclComm_t comm, double* lastCallUs, double* totalUs) {
  sncl::BusControl* bus = nullptr;
  SNCL_CHECK(busOf(comm, "snclBusModeledTimeUs", &bus));
  if (!lastCallUs && !totalUs) return fail(snclInvalidArgument, "snclBusModeledTimeUs: both outputs are NULL");
  std::lock_guard<std::mutex> lock(comm->runMutex);  // the clock is written by the running call
  bus->modeledTimeUs(lastCallUs, totalUs);
  return snclSuccess;
}

SNCL_API snclResult_t snclBusLastCallSpanUs(snclComm_t comm, double* startUs, double* endUs) {
  sncl::BusControl* bus = nullptr;
  SNCL_CHECK(busOf(comm, "snclBusLastCallSpanUs", &bus));
  if (!startUs || !endUs) return fail(snclInvalidArgument, "snclBusLastCallSpanUs: an output is NULL");
  std::lock_guard<std::mutex> lock(comm->runMutex);
  bus->lastCallSpanUs(startUs, endUs);
  return snclSuccess;
}

SNCL_API snclResult_t snclCommGetFaultStats(snclComm_t comm, snclFaultStats_t* out) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommGetFaultStats"));
  if (!out) return fail(snclInvalidArgument, "snclCommGetFaultStats: out is NULL");
  std::lock_guard<std::mutex> lock(comm->runMutex);  // written by the running call
  *out = comm->fault.stats;
  out->stalls = comm->executor ? comm->executor->stalls() : 0;
  snclBusCounters_t c{};
  for (auto& t : comm->transports)
    if (auto* bus = dynamic_cast<sncl::BusControl*>(t.get()); bus && bus->linkCounters("", &c) == snclSuccess)
      out->jittered = c.jittered;
  return snclSuccess;
}

SNCL_API snclResult_t snclCommGetThreading(snclComm_t comm, snclThreading_t* out) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommGetThreading"));
  if (!out) return fail(snclInvalidArgument, "snclCommGetThreading: out is NULL");
  if (comm->initResult.load() != snclSuccess)
    return fail(snclInvalidUsage, "snclCommGetThreading: comm is not initialized ({})",
                sncl::resultName(comm->initResult.load()));
  const sncl::ThreadModel& t = comm->threads;
  *out = snclThreading_t{};
  out->cpus = t.cpus.usable();
  out->hostRanks = t.hostRanks;
  out->hostCpus = t.hostCpus;
  out->oversubscribed = t.oversubscribed;
  out->waiterDrives = t.waiterDrives;
  out->spinMicros = static_cast<int>(t.wait.spinMicros);
  snprintf(out->text, sizeof(out->text), "%s", t.describe().c_str());
  return snclSuccess;
}

SNCL_API snclResult_t snclCommSetWaitHook(snclComm_t comm, void (*hook)(void* user), void* user) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommSetWaitHook"));
  std::lock_guard<std::mutex> lock(comm->runMutex);  // read by the running call
  if (comm->executor) comm->executor->setWaitHook({hook, hook ? user : nullptr});
  return snclSuccess;
}

SNCL_API snclResult_t snclCommExplainPlan(snclComm_t comm, const char* collective, size_t bytes, char* plan,
                                          size_t planLen, double* estimateUs) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommExplainPlan"));
  if (comm->initResult.load() != snclSuccess)
    return fail(snclInvalidUsage, "snclCommExplainPlan: comm is not initialized ({})",
                sncl::resultName(comm->initResult.load()));
  if (!collective) return fail(snclInvalidArgument, "snclCommExplainPlan: collective is NULL");
  if (!plan || planLen == 0) return fail(snclInvalidArgument, "snclCommExplainPlan: plan is NULL or planLen is 0");
  sncl::CollType coll;
  if (!sncl::parseCollName(collective, &coll))
    return fail(snclInvalidArgument, "snclCommExplainPlan: unknown collective \"{}\" (allreduce, allgather, "
                "reducescatter, broadcast, reduce, alltoall, gather, scatter, scan or exscan)", collective);
  std::lock_guard<std::mutex> lock(comm->runMutex);  // the planner's cache belongs to the running call
  const size_t planBytes = sncl::planBytesOfSize(coll, bytes, comm->nranks);
  const sncl::Plan& chosen = comm->planner->choose(coll, planBytes);
  snprintf(plan, planLen, "%s", comm->planner->describe(chosen).c_str());
  if (estimateUs) *estimateUs = comm->planner->estimateUs(coll, chosen, planBytes);
  return snclSuccess;
}
