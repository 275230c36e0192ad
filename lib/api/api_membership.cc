// The C API of membership: comms made from a comm (split, shrink, grow) and revoking one
// (docs/faults.md). Each is collective over the comm's ranks and agrees on bad arguments,
// so that a mistake on one rank fails all of them at once instead of at the deadline.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "lib/api/api_checks.h"
#include "lib/base/error.h"
#include "lib/comm/comm.h"
#include "lib/comm/group.h"
#include "lib/net/bootstrap.h"
#include "sncl/sncl.h"

using sncl::fail;
using sncl::Result;
using sncl::api::checkComm;
using sncl::api::checkReady;
using sncl::api::endpointOf;
using sncl::api::initRank;

namespace {

// What each rank of the parent tells the others in snclCommSplit.
struct SplitRequest {
  int32_t color;
  int32_t key;
  int32_t status;  // snclResult_t of this rank's argument checks
};
struct SplitRoot {
  int32_t status;  // snclResult_t of creating the root (new comm's rank 0 only)
  snclUniqueId id;
};

constexpr unsigned kConfigMagic = 0x5c1c0f16u;  // SNCL_CONFIG_INITIALIZER's

// A child's config: fields left undefined come from the parent.
Result splitConfig(const snclComm* parent, const snclConfig_t* given, snclConfig_t* out) {
  if (given && (given->magic != kConfigMagic || given->size != sizeof(snclConfig_t)))
    return fail(snclInvalidArgument, "snclCommSplit/Shrink/Grow: config was not initialized with SNCL_CONFIG_INITIALIZER");
  *out = given ? *given : snclConfig_t SNCL_CONFIG_INITIALIZER;
  if (out->blocking == SNCL_CONFIG_UNDEF_INT) out->blocking = parent->blocking ? 1 : 0;
  if (out->timeoutMs == SNCL_CONFIG_UNDEF_INT || out->timeoutMs <= 0)
    out->timeoutMs = static_cast<int>(std::min<int64_t>(parent->timeoutMs, INT32_MAX));
  if (!out->commName) out->commName = parent->name.c_str();
  if (!out->memBudget) out->memBudget = parent->history.budget;
  return snclSuccess;
}

}  // namespace

// Every rank of the parent takes part in both exchanges, even with bad arguments.
SNCL_API snclResult_t snclCommSplit(snclComm_t comm, int color, int key, snclComm_t* newcomm, snclConfig_t* config) {
  constexpr const char* fn = "snclCommSplit";
  if (!newcomm) return fail(snclInvalidArgument, "{}: newcomm is NULL", fn);
  *newcomm = nullptr;
  if (sncl::groupDepth() > 0)
    return fail(snclInvalidUsage, "{}: not supported inside a group; call it on each rank's thread", fn);
  SNCL_CHECK(checkReady(comm, fn));
  snclConfig_t childConfig;
  Result mine = color < 0 && color != SNCL_SPLIT_NOCOLOR
                    ? fail(snclInvalidArgument, "{}: color {} is negative (only SNCL_SPLIT_NOCOLOR may be)", fn, color)
                    : splitConfig(comm, config, &childConfig);
  std::string myMessage = mine == snclSuccess ? std::string() : sncl::lastError();
  const sncl::Deadline deadline = sncl::Deadline::afterMs(comm->timeoutMs);
  std::vector<SplitRequest> requests(comm->nranks);
  requests[comm->rank] = {color, key, mine};
  SNCL_CHECK(comm->bootstrap->allGather(requests.data(), sizeof(SplitRequest), deadline));
  if (mine != snclSuccess) return sncl::recordError(mine, std::move(myMessage));
  for (int r = 0; r < comm->nranks; ++r)
    if (requests[r].status != snclSuccess)
      return fail(snclInvalidArgument, "{}: rank {} passed bad arguments ({})", fn, r,
                  sncl::resultName(static_cast<Result>(requests[r].status)));

  // The new comm's ranks: the parent's ranks of this color, by (key, parent rank).
  std::vector<int> members;
  if (color != SNCL_SPLIT_NOCOLOR)
    for (int r = 0; r < comm->nranks; ++r)
      if (requests[r].color == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return requests[a].key < requests[b].key; });
  const int newRank = static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  // Each new comm's rank 0 makes its rendezvous root; the ids travel over the parent.
  std::vector<SplitRoot> roots(comm->nranks);
  roots[comm->rank].status = snclSuccess;
  if (newRank == 0 && !members.empty()) roots[comm->rank].status = sncl::bootstrapCreateRoot(&roots[comm->rank].id);
  SNCL_CHECK(comm->bootstrap->allGather(roots.data(), sizeof(SplitRoot), deadline));
  if (members.empty()) return snclSuccess;
  const SplitRoot& root = roots[members[0]];
  if (root.status != snclSuccess)
    return fail(snclRemoteError, "{}: rank {} could not create the new comm's rendezvous ({})", fn, members[0],
                sncl::resultName(static_cast<Result>(root.status)));
  return initRank(newcomm, static_cast<int>(members.size()), root.id, newRank, &childConfig, endpointOf(comm));
}

SNCL_API snclResult_t snclCommRevoke(snclComm_t comm, int revokeFlags) {
  constexpr const char* fn = "snclCommRevoke";
  SNCL_CHECK(checkComm(comm, fn));
  if (revokeFlags != SNCL_REVOKE_DEFAULT) return fail(snclInvalidArgument, "{}: unknown flags {:#x}", fn, revokeFlags);
  if (comm->initResult.load() != snclSuccess)
    return fail(snclInvalidUsage, "{}: comm is not initialized ({})", fn, sncl::resultName(comm->initResult.load()));
  return sncl::faultRevoke(comm);
}

// An agreement among the comm's ranks (lib/comm/fault.cc, docs/faults.md): every rank gets the
// same member list, or an error; a rank cut off from the majority never gets a comm of its
// own. Argument errors are agreed on too (this rank still takes part), so that a mistake on
// one rank fails all of them at once instead of at the deadline.
SNCL_API snclResult_t snclCommShrink(snclComm_t comm, int* excludeRanks, int excludeCount, snclComm_t* newcomm,
                                     snclConfig_t* config, int shrinkFlags) {
  constexpr const char* fn = "snclCommShrink";
  if (!newcomm) return fail(snclInvalidArgument, "{}: newcomm is NULL", fn);
  *newcomm = nullptr;
  SNCL_CHECK(checkComm(comm, fn));
  if (comm->initResult.load() != snclSuccess)
    return fail(snclInvalidUsage, "{}: comm is not initialized ({})", fn, sncl::resultName(comm->initResult.load()));
  Result mine = snclSuccess;
  if (shrinkFlags & ~SNCL_SHRINK_ABORT) mine = fail(snclInvalidArgument, "{}: unknown flags {:#x}", fn, shrinkFlags);
  else if (excludeCount < 0 || (excludeCount > 0 && !excludeRanks))
    mine = fail(snclInvalidArgument, "{}: excludeRanks is NULL for excludeCount {}", fn, excludeCount);
  if (shrinkFlags & SNCL_SHRINK_ABORT) comm->fault.revoked.store(true);
  if (!sncl::commWaitIdle(comm, comm->timeoutMs))
    return fail(snclTimeout, "{}: calls in flight did not finish in {} ms (pass SNCL_SHRINK_ABORT)", fn,
                comm->timeoutMs);
  std::lock_guard<std::mutex> lock(comm->runMutex);
  // NULL: the ranks the fault agreement found lost (the same list on every survivor).
  std::vector<int> excluded = comm->fault.deadRanks;
  if (excludeRanks && mine == snclSuccess) excluded.assign(excludeRanks, excludeRanks + excludeCount);
  for (int r : excluded) {
    if (mine != snclSuccess) break;
    if (r < 0 || r >= comm->nranks)
      mine = fail(snclInvalidArgument, "{}: excluded rank {} is out of range [0, {})", fn, r, comm->nranks);
    else if (r == comm->rank)
      mine = fail(snclInvalidArgument, "{}: rank {} excludes itself", fn, r);
  }
  snclConfig_t childConfig;
  if (mine == snclSuccess) mine = splitConfig(comm, config, &childConfig);
  const std::string myMessage = mine == snclSuccess ? std::string() : sncl::lastError();
  std::vector<int> members;
  snclUniqueId root;
  const Result agreed = sncl::faultAgreeMembers(comm, excluded, mine, myMessage, &members, &root);
  if (mine != snclSuccess) return sncl::recordError(mine, myMessage);
  if (agreed != snclSuccess) return agreed;
  const int newRank = int(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  const Result r = initRank(newcomm, int(members.size()), root, newRank, &childConfig, endpointOf(comm));
  if (r != snclSuccess && r != snclInProgress)
    return fail(r, "{}: rank {}: the agreed members of comm {} did not all join the new comm (one may have been cut "
                "off meanwhile): {}", fn, comm->rank, comm->name, sncl::lastError());
  return r;
}

SNCL_API snclResult_t snclCommGetUniqueId(snclComm_t comm, snclUniqueId* uniqueId) {
  constexpr const char* fn = "snclCommGetUniqueId";
  if (!uniqueId) return fail(snclInvalidArgument, "{}: uniqueId is NULL", fn);
  SNCL_CHECK(checkReady(comm, fn));
  snclUniqueId id;
  SNCL_CHECK(sncl::bootstrapCreateRoot(&id));
  std::lock_guard<std::mutex> lock(comm->runMutex);
  comm->growId = id;
  *uniqueId = id;
  return snclSuccess;
}

namespace {

// What each existing rank tells the others in snclCommGrow.
struct GrowRequest {
  int32_t status;  // snclResult_t of this rank's argument checks
  int32_t nranks;
  int32_t hasId;   // this rank is the root: it passed the id
  snclUniqueId id;
};

// The existing ranks' side: they agree on the new size and the root's id over comm, then
// join the new comm under their old numbers, each on its endpoint.
Result growExisting(snclComm_t comm, int nranks, const snclUniqueId* uniqueId, int rank, snclComm_t* newcomm,
                    snclConfig_t* config) {
  constexpr const char* fn = "snclCommGrow";
  SNCL_CHECK(checkReady(comm, fn));
  snclConfig_t childConfig;
  Result mine = snclSuccess;
  if (rank != -1) mine = fail(snclInvalidArgument, "{}: rank {} of comm passed rank {} (existing ranks pass -1)", fn, comm->rank, rank);
  else if (nranks <= comm->nranks)
    mine = fail(snclInvalidArgument, "{}: nranks {} does not grow comm of {} ranks", fn, nranks, comm->nranks);
  else if (uniqueId && (!comm->growId || std::memcmp(uniqueId, &*comm->growId, sizeof(snclUniqueId)) != 0))
    mine = fail(snclInvalidArgument, "{}: rank {}'s id was not made by snclCommGetUniqueId on this comm, or was used",
                fn, comm->rank);
  if (mine == snclSuccess) mine = splitConfig(comm, config, &childConfig);
  std::string myMessage = mine == snclSuccess ? std::string() : sncl::lastError();
  std::vector<GrowRequest> requests(size_t(comm->nranks));
  GrowRequest& me = requests[size_t(comm->rank)];
  me.status = mine;
  me.nranks = nranks;
  me.hasId = uniqueId != nullptr;
  if (uniqueId) me.id = *uniqueId;
  {
    std::lock_guard<std::mutex> lock(comm->runMutex);
    const sncl::Deadline deadline = sncl::Deadline::afterMs(comm->timeoutMs);
    SNCL_CHECK(comm->bootstrap->allGather(requests.data(), sizeof(GrowRequest), deadline));
    if (uniqueId) comm->growId.reset();  // single use
  }
  if (mine != snclSuccess) return sncl::recordError(mine, std::move(myMessage));
  int root = -1;
  for (int r = 0; r < comm->nranks; ++r) {
    const GrowRequest& q = requests[size_t(r)];
    if (q.status != snclSuccess)
      return fail(snclInvalidArgument, "{}: rank {} passed bad arguments ({})", fn, r, sncl::resultName(Result(q.status)));
    if (q.nranks != nranks)
      return fail(snclInvalidArgument, "{}: rank {} grows to {} ranks, rank {} to {}", fn, r, q.nranks, comm->rank, nranks);
    if (!q.hasId) continue;
    if (root >= 0) return fail(snclInvalidArgument, "{}: ranks {} and {} both passed an id (one root passes it)", fn, root, r);
    root = r;
  }
  if (root < 0) return fail(snclInvalidArgument, "{}: no rank of comm passed the id from snclCommGetUniqueId", fn);
  return initRank(newcomm, nranks, requests[size_t(root)].id, comm->rank, &childConfig, endpointOf(comm));
}

}  // namespace

SNCL_API snclResult_t snclCommGrow(snclComm_t comm, int nranks, const snclUniqueId* uniqueId, int rank,
                                   snclComm_t* newcomm, snclConfig_t* config) {
  constexpr const char* fn = "snclCommGrow";
  if (!newcomm) return fail(snclInvalidArgument, "{}: newcomm is NULL", fn);
  *newcomm = nullptr;
  if (sncl::groupDepth() > 0)
    return fail(snclInvalidUsage, "{}: not supported inside a group; call it on each rank's thread", fn);
  if (comm) return growExisting(comm, nranks, uniqueId, rank, newcomm, config);
  // A process new to the job: the id came from the existing ranks' root; it takes the
  // first free endpoint of the topology (a lost rank's place).
  if (!uniqueId) return fail(snclInvalidArgument, "{}: a new rank (comm NULL) needs the root's id", fn);
  if (rank < 0 || rank >= nranks) return fail(snclInvalidArgument, "{}: new rank {} out of range [0, {})", fn, rank, nranks);
  return initRank(newcomm, nranks, *uniqueId, rank, config, -1);
}
