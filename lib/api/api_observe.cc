// The C API of observation (include/sncl/sncl_ext.h, docs/observability.md): the profiler
// hook and the status of a comm, which lib/comm/observe.* keep.
#include <cstdio>
#include <mutex>
#include <vector>

#include "lib/api/api_checks.h"
#include "lib/base/trace.h"
#include "lib/comm/comm.h"
#include "lib/transport/link_verdict.h"
#include "sncl/sncl_ext.h"

using sncl::fail;

SNCL_API snclResult_t snclCommSetProfiler(snclComm_t comm, const snclProfiler_v1_t* profiler) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommSetProfiler"));
  std::lock_guard<std::mutex> lock(comm->runMutex);  // read by the running call
  comm->obs.profiling = profiler && (profiler->callBegin || profiler->callEnd);
  comm->obs.profiler = profiler ? *profiler : snclProfiler_v1_t{};
  return snclSuccess;
}

SNCL_API snclResult_t snclCommGetStatus(snclComm_t comm, snclCommStatus_t* out) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommGetStatus"));
  if (!out) return fail(snclInvalidArgument, "snclCommGetStatus: out is NULL");
  sncl::observeStatus(comm, out);
  return snclSuccess;
}

SNCL_API snclResult_t snclCommGetLinks(snclComm_t comm, snclLinkStatus_t* links, int maxLinks, int* nlinks) {
  SNCL_CHECK(sncl::api::checkComm(comm, "snclCommGetLinks"));
  if (!nlinks) return fail(snclInvalidArgument, "snclCommGetLinks: nlinks is NULL");
  if (maxLinks < 0 || (maxLinks > 0 && !links))
    return fail(snclInvalidArgument, "snclCommGetLinks: links is NULL or maxLinks {} is negative", maxLinks);
  if (comm->initResult.load() != snclSuccess)
    return fail(snclInvalidUsage, "snclCommGetLinks: comm is not initialized ({})",
                sncl::resultName(comm->initResult.load()));
  std::vector<sncl::LinkView> views;
  for (const auto& t : comm->transports)
    if (t) t->linkViews(&views);
  *nlinks = int(views.size());
  for (size_t i = 0; i < views.size() && int(i) < maxLinks; ++i) {
    const sncl::LinkView& v = views[i];
    snclLinkStatus_t& out = links[i];
    out = snclLinkStatus_t{};
    snprintf(out.name, sizeof(out.name), "%s", v.name.c_str());
    out.state = v.state == sncl::LinkView::State::Down ? 2 : v.state == sncl::LinkView::State::Degraded ? 1 : 0;
    out.verdict = int(sncl::linkverdict::judge(v).verdict);
    out.slowdown = v.slowdown;
    out.jitterScore = sncl::linkverdict::jitterScore(v);
    out.bytes = v.bytes;
    out.transfers = v.transfers;
    out.errors = v.errors;
    out.jittered = v.jittered;
    out.downs = v.downs;
    out.faultAlarms = v.faultAlarms;
  }
  return snclSuccess;
}
