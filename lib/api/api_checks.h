// Argument checks shared by the C API's files (lib/api/api.cc, lib/api/api_colls.cc).
#pragma once

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

}  // namespace sncl::api
