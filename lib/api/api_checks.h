// Argument checks and comm creation shared by the C API's files.
#pragma once

#include <cstdint>

#include "lib/base/error.h"
#include "sncl/sncl.h"

#define SNCL_API extern "C" __attribute__((visibility("default")))

namespace sncl::api {

// A live (not destroyed, not aborted) comm handle.
Result checkComm(const snclComm* comm, const char* fn);
// A comm usable for calls: live, initialized (waits for a non-blocking init), not
// finalized, without an asynchronous error.
Result checkReady(snclComm* comm, const char* fn);
// NULL or a live stream.
Result checkStream(snclStream* stream, const char* fn);

// snclCommInitRankConfig, for a process that keeps its topology endpoint in the new comm
// (split, shrink, grow: its endpoint in the parent; -1: none, or a process new to the job).
Result initRank(snclComm_t* comm, int nranks, snclUniqueId commId, int rank, snclConfig_t* config, int64_t endpoint);
// This process's endpoint in comm's topology file, for a comm made from it (-1: the
// embedded default topology, which a child of another size builds anew).
int64_t endpointOf(const snclComm* comm);

}  // namespace sncl::api
