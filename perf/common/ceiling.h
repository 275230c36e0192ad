// What this machine allows (`--ceiling`): memcpy and a[i]+=b[i] bandwidth per rank, measured
// with every rank running at once (as many threads as ranks), in the same run as sncl.
#pragma once

#include <cstddef>
#include <functional>

namespace perf {

struct Ceiling {
  double copyGBs = 0;  // bytes copied per second by one rank while all copy
  double addGBs = 0;   // bytes of a[] updated per second (float a[i] += b[i]) by one rank while all add
};

// Runs on every rank between barrier() calls; a and b hold `bytes` each (touched already).
// Returns the slowest rank's figures once the caller has combined them (min over ranks).
Ceiling measureCeiling(void* a, void* b, size_t bytes, const std::function<void()>& barrier);

}  // namespace perf
