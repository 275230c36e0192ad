// Driving a transport's requests to completion in tests, for any transport (shm, ofi, bus):
// test all, wait when idle, as the executor does, within a deadline.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/base/error.h"
#include "lib/transport/transport.h"

namespace sncl::test {

// Returns the first error (its message in lastError()), or Timeout after timeoutMs.
Result completeAll(Transport& t, std::vector<RequestId> reqs, int64_t timeoutMs = 20000);
Result complete(Transport& t, RequestId req, int64_t timeoutMs = 20000);

}  // namespace sncl::test
