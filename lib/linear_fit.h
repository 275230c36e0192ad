// Least-squares line through (x, y) samples: y = intercept + slope * x. sncl-tune fits
// ping-pong times against message size (intercept = α, 1 / slope = β) and step times
// against rank count.
#pragma once

#include <span>

#include "lib/error.h"

namespace sncl {

struct LineFit {
  double intercept = 0;
  double slope = 0;
  double rmsResidual = 0;  // root mean square of y - fitted y, in y's unit
  double maxRelResidual = 0;  // largest |y - fitted y| / y over the samples
};

// Needs at least two distinct x; finite values only. Otherwise InvalidArgument.
Result fitLine(std::span<const double> x, std::span<const double> y, LineFit* out);

}  // namespace sncl
