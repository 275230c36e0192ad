// The C API of communicators, streams and errors: validates every argument (never crash
// on bad input). Collectives, groups and reduction ops: lib/api/api_colls.cc.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "lib/api/api_checks.h"
#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/base/hot_tls.h"
#include "lib/base/log.h"
#include "lib/comm/comm.h"
#include "lib/comm/job_view.h"
#include "lib/comm/group.h"
#include "lib/comm/stream.h"
#include "lib/exec/reduce.h"
#include "lib/net/bootstrap.h"
#include "sncl/sncl.h"

using sncl::fail;
using sncl::Result;

namespace {

constexpr unsigned kConfigMagic = 0x5c1c0f16u;

// Live handles, so that a call on a destroyed or aborted comm (or a stray pointer) gets
// InvalidUsage instead of a crash.
struct Handles {
  std::mutex mu;
  std::unordered_set<const void*> comms;
  std::unordered_set<const void*> streams;
  // One more at every unregister: what a thread found live stays live until then.
  std::atomic<uint64_t> removals{0};
};
Handles& handles() {
  static Handles h;
  return h;
}
// The handle this thread last found live in a set, and the removals count then: a thread
// that calls on one comm again and again checks it without the lock (two of them per call,
// about a tenth of a small call's own time).
struct LastLive {
  const void* handle = nullptr;
  uint64_t removals = 0;
};
SNCL_HOT_THREAD_LOCAL LastLive lastComm, lastStream;

void registerHandle(std::unordered_set<const void*>& set, const void* p) {
  std::lock_guard<std::mutex> lock(handles().mu);
  set.insert(p);
}
bool unregisterHandle(std::unordered_set<const void*>& set, const void* p) {
  std::lock_guard<std::mutex> lock(handles().mu);
  handles().removals.fetch_add(1, std::memory_order_acq_rel);
  return set.erase(p) > 0;
}
bool isLive(std::unordered_set<const void*>& set, const void* p) {
  LastLive& last = &set == &handles().comms ? lastComm : lastStream;
  const uint64_t removals = handles().removals.load(std::memory_order_acquire);
  if (last.handle == p && last.removals == removals) return true;
  std::lock_guard<std::mutex> lock(handles().mu);
  if (set.count(p) == 0) return false;
  last = {p, handles().removals.load(std::memory_order_relaxed)};
  return true;
}

// Frees the comm once no stream work references it; a comm whose work does not drain
// (a transport that ignores abort) is leaked rather than freed under a running thread.
void freeComm(snclComm* comm, int64_t waitMs) {
  if (comm->initThread.joinable()) comm->initThread.join();
  if (!sncl::commWaitIdle(comm, waitMs)) {
    sncl::log::warn("comm {} rank {}: stream work did not drain in {} ms; leaking it", comm->name, comm->rank, waitMs);
    return;
  }
  {
    // SNCL_TRACE's file, unless finalize wrote it; a call still running on another thread
    // (aborted meanwhile) ends first. A failure is logged: the comm goes all the same.
    std::lock_guard<std::mutex> lock(comm->runMutex);
    (void)sncl::traceWrite(comm);
  }
  sncl::jobview::remove(comm);
  delete comm;
}

}  // namespace

namespace sncl::api {

Result checkComm(const snclComm* comm, const char* fn) {
  if (!comm) return fail(snclInvalidArgument, "{}: comm is NULL", fn);
  if (!isLive(handles().comms, comm))
    return fail(snclInvalidUsage, "{}: comm {} is not a live communicator (destroyed or aborted?)", fn,
                static_cast<const void*>(comm));
  return snclSuccess;
}

// A comm usable for collectives: initialized, not aborted, not finalized.
Result checkReady(snclComm* comm, const char* fn) {
  SNCL_CHECK(checkComm(comm, fn));
  if (comm->aborted.load()) return fail(snclInvalidUsage, "{}: comm was aborted", fn);
  if (comm->finalized.load()) return fail(snclInvalidUsage, "{}: comm was finalized", fn);
  snclResult_t init = comm->initResult.load();
  if (init == snclInProgress) {
    if (comm->initThread.joinable()) comm->initThread.join();  // non-blocking init: wait for it
    init = comm->initResult.load();
  }
  if (init != snclSuccess) return fail(snclInvalidUsage, "{}: comm initialization failed ({})", fn, sncl::resultName(init));
  SNCL_CHECK(comm->asyncError.load() == snclSuccess
                 ? snclSuccess
                 : fail(snclInvalidUsage, "{}: comm has an asynchronous error ({}); abort it", fn,
                        sncl::resultName(comm->asyncError.load())));
  return snclSuccess;
}

Result checkStream(snclStream* stream, const char* fn) {
  if (stream && !isLive(handles().streams, stream))
    return fail(snclInvalidArgument, "{}: stream {} is not a live stream", fn, static_cast<void*>(stream));
  return snclSuccess;
}

}  // namespace sncl::api

using sncl::api::checkComm;
using sncl::api::checkReady;
using sncl::api::checkStream;

SNCL_API snclResult_t snclGetVersion(int* version) {
  if (!version) return fail(snclInvalidArgument, "snclGetVersion: version is NULL");
  *version = SNCL_VERSION_CODE;
  return snclSuccess;
}

SNCL_API snclResult_t snclGetUniqueId(snclUniqueId* uniqueId) {
  if (!uniqueId) return fail(snclInvalidArgument, "snclGetUniqueId: uniqueId is NULL");
  // With SNCL_COMM_ID every rank derives the id from the address; only rank 0 (SNCL_RANK,
  // default 0) starts the root there.
  if (sncl::env::str("SNCL_COMM_ID")) return sncl::bootstrapIdFromEnv(uniqueId, sncl::env::integer("SNCL_RANK", 0) == 0);
  return sncl::bootstrapCreateRoot(uniqueId);
}

namespace sncl::api {

Result initRank(snclComm_t* comm, int nranks, snclUniqueId commId, int rank, snclConfig_t* config,
                int64_t endpoint) {
  if (!comm) return fail(snclInvalidArgument, "snclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1) return fail(snclInvalidArgument, "snclCommInitRank: nranks {} < 1", nranks);
  if (rank < 0 || rank >= nranks)
    return fail(snclInvalidArgument, "snclCommInitRank: rank {} out of range [0, {})", rank, nranks);
  if (config && (config->magic != kConfigMagic || config->size != sizeof(snclConfig_t)))
    return fail(snclInvalidArgument, "snclCommInitRank: config was not initialized with SNCL_CONFIG_INITIALIZER");
  SNCL_CHECK(sncl::bootstrapCheckId(commId));

  auto* c = new snclComm();
  c->inheritedEndpoint = endpoint;
  registerHandle(handles().comms, c);
  *comm = c;
  const bool blocking = !config || config->blocking == SNCL_CONFIG_UNDEF_INT || config->blocking != 0;
  snclConfig_t cfg = config ? *config : snclConfig_t SNCL_CONFIG_INITIALIZER;
  if (!blocking) {
    // The name must outlive the caller's string.
    std::string name = cfg.commName ? cfg.commName : "sncl";
    c->initThread = std::thread([c, commId, rank, nranks, cfg, name]() mutable {
      cfg.commName = name.c_str();
      Result r = sncl::commInit(c, commId, rank, nranks, &cfg);
      c->initResult.store(r);
      if (r != snclSuccess) sncl::commSetAsyncError(c, r);
    });
    return snclInProgress;
  }
  Result r = sncl::commInit(c, commId, rank, nranks, &cfg);
  c->initResult.store(r);
  if (r != snclSuccess) {
    std::string msg = sncl::lastError();
    unregisterHandle(handles().comms, c);
    sncl::commAbortTransports(c);
    freeComm(c, 0);
    *comm = nullptr;
    sncl::recordError(r, msg);
  }
  return r;
}

int64_t endpointOf(const snclComm* comm) {
  if (!comm->topology || !comm->topology->fromFile()) return -1;
  return int64_t(comm->topology->graph().rankEndpoint(comm->rank));
}

}  // namespace sncl::api

using sncl::api::initRank;

SNCL_API snclResult_t snclCommInitRankConfig(snclComm_t* comm, int nranks, snclUniqueId commId, int rank,
                                             snclConfig_t* config) {
  return initRank(comm, nranks, commId, rank, config, -1);
}

SNCL_API snclResult_t snclCommInitRank(snclComm_t* comm, int nranks, snclUniqueId commId, int rank) {
  return snclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

SNCL_API snclResult_t snclCommInitAll(snclComm_t* comms, int ndev, const int* devlist) {
  (void)devlist;  // no devices: ranks are threads
  if (!comms) return fail(snclInvalidArgument, "snclCommInitAll: comms is NULL");
  if (ndev < 1) return fail(snclInvalidArgument, "snclCommInitAll: ndev {} < 1", ndev);
  snclUniqueId id;
  SNCL_CHECK(sncl::bootstrapCreateRoot(&id));
  std::vector<Result> results(ndev, snclSuccess);
  std::vector<std::string> messages(ndev);
  std::vector<std::thread> threads;
  for (int r = 0; r < ndev; ++r) {
    threads.emplace_back([&, r] {
      results[r] = snclCommInitRank(&comms[r], ndev, id, r);
      if (results[r] != snclSuccess) messages[r] = sncl::lastError();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ndev; ++r) {
    if (results[r] == snclSuccess) continue;
    for (int q = 0; q < ndev; ++q)
      if (comms[q]) snclCommAbort(comms[q]), comms[q] = nullptr;
    return sncl::recordError(results[r], fmt::format("snclCommInitAll: rank {}: {}", r, messages[r]));
  }
  return snclSuccess;
}

SNCL_API snclResult_t snclCommFinalize(snclComm_t comm) {
  SNCL_CHECK(checkComm(comm, "snclCommFinalize"));
  if (comm->initThread.joinable()) comm->initThread.join();
  if (!sncl::commWaitIdle(comm, comm->timeoutMs))
    return fail(snclTimeout, "snclCommFinalize: queued work did not finish in {} ms", comm->timeoutMs);
  // With retry on, a last collective: a rank that finished its calls stays until every rank
  // finished theirs, so that a link failing in a peer's last call is still caught up
  // (docs/faults.md) instead of finding this rank gone.
  if (comm->fault.retry && comm->nranks > 1 && comm->asyncError.load() == snclSuccess && !comm->finalized.load()) {
    int32_t one = 1, sum = 0;
    sncl::CollOp op;
    op.coll = sncl::CollType::AllReduce;
    op.input = &one;
    op.output = &sum;
    op.count = 1;
    op.dtype = snclInt32;
    SNCL_CHECK(sncl::commRun(comm, op));
  }
  comm->finalized.store(true);
  {
    std::lock_guard<std::mutex> lock(comm->runMutex);
    (void)sncl::traceWrite(comm);  // a failure is logged; the trace is not the comm's result
  }
  return comm->asyncError.load();
}

SNCL_API snclResult_t snclCommDestroy(snclComm_t comm) {
  SNCL_CHECK(checkComm(comm, "snclCommDestroy"));
  unregisterHandle(handles().comms, comm);
  if (comm->initThread.joinable()) comm->initThread.join();
  if (!sncl::commWaitIdle(comm, comm->timeoutMs)) sncl::commAbortTransports(comm);
  freeComm(comm, comm->timeoutMs);
  return snclSuccess;
}

SNCL_API snclResult_t snclCommAbort(snclComm_t comm) {
  SNCL_CHECK(checkComm(comm, "snclCommAbort"));
  unregisterHandle(handles().comms, comm);
  comm->aborted.store(true);
  sncl::commAbortTransports(comm);
  freeComm(comm, 10000);
  return snclSuccess;
}

SNCL_API snclResult_t snclCommCount(const snclComm_t comm, int* count) {
  SNCL_CHECK(checkComm(comm, "snclCommCount"));
  if (!count) return fail(snclInvalidArgument, "snclCommCount: count is NULL");
  *count = comm->nranks;
  return snclSuccess;
}

SNCL_API snclResult_t snclCommUserRank(const snclComm_t comm, int* rank) {
  SNCL_CHECK(checkComm(comm, "snclCommUserRank"));
  if (!rank) return fail(snclInvalidArgument, "snclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return snclSuccess;
}

SNCL_API snclResult_t snclCommGetAsyncError(snclComm_t comm, snclResult_t* asyncError) {
  SNCL_CHECK(checkComm(comm, "snclCommGetAsyncError"));
  if (!asyncError) return fail(snclInvalidArgument, "snclCommGetAsyncError: asyncError is NULL");
  snclResult_t init = comm->initResult.load();
  *asyncError = init != snclSuccess ? init : comm->asyncError.load();
  return snclSuccess;
}

SNCL_API const char* snclGetErrorString(snclResult_t result) {
  switch (result) {
    case snclSuccess: return "no error";
    case snclSystemError: return "unhandled system error (run with SNCL_DEBUG=INFO for details)";
    case snclInternalError: return "internal error - please report this issue";
    case snclInvalidArgument: return "invalid argument (run with SNCL_DEBUG=WARN for details)";
    case snclInvalidUsage: return "invalid usage (run with SNCL_DEBUG=WARN for details)";
    case snclRemoteError: return "remote process exited or there was a network error";
    case snclInProgress: return "operation in progress";
    case snclTimeout: return "a deadline passed";
    default: return "unknown result code";
  }
}

SNCL_API const char* snclGetLastError(snclComm_t comm) {
  (void)comm;  // messages are per thread: the calling thread's last failure
  return sncl::lastError();
}

SNCL_API snclResult_t snclStreamCreate(snclStream_t* stream) {
  if (!stream) return fail(snclInvalidArgument, "snclStreamCreate: stream is NULL");
  try {
    *stream = new snclStream();
  } catch (const std::system_error& e) {
    return fail(snclSystemError, "snclStreamCreate: cannot start the progress thread: {}", e.what());
  }
  registerHandle(handles().streams, *stream);
  return snclSuccess;
}

SNCL_API snclResult_t snclStreamDestroy(snclStream_t stream) {
  if (!stream) return fail(snclInvalidArgument, "snclStreamDestroy: stream is NULL");
  if (!unregisterHandle(handles().streams, stream))
    return fail(snclInvalidArgument, "snclStreamDestroy: stream is not a live stream");
  delete stream;
  return snclSuccess;
}

SNCL_API snclResult_t snclStreamSynchronize(snclStream_t stream) {
  if (!stream) return snclSuccess;
  SNCL_CHECK(checkStream(stream, "snclStreamSynchronize"));
  return stream->synchronize();
}

SNCL_API snclResult_t snclStreamQuery(snclStream_t stream) {
  if (!stream) return snclSuccess;
  SNCL_CHECK(checkStream(stream, "snclStreamQuery"));
  return stream->query();
}
