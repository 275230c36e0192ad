// What the C extension API (include/sncl/sncl_ext.h) asks of the emulated bus transport.
// The core finds it among the comm's transports by dynamic_cast, so lib/ needs no
// transports/ include.
#pragma once

#include <string_view>

#include "lib/base/error.h"
#include "sncl/sncl_ext.h"

namespace sncl {

class BusControl {
 public:
  virtual ~BusControl() = default;
  virtual Result injectFaults(std::string_view spec) = 0;
  // link "a-b" (direction a -> b), or empty for the sum over all link directions.
  virtual Result linkCounters(std::string_view link, snclBusCounters_t* out) const = 0;
  virtual void modeledTimeUs(double* lastCallUs, double* totalUs) const = 0;
  virtual void lastCallSpanUs(double* startUs, double* endUs) const = 0;
};

}  // namespace sncl
