// Least-squares line through (x, y) samples: y = intercept + slope * x. sncl-tune fits
// ping-pong times against message size (intercept = α, 1 / slope = β) and step times
// against rank count.
#pragma once

#include <span>

#include "lib/base/error.h"

namespace sncl {

struct LineFit {
  double intercept = 0;
  double slope = 0;
  double rmsResidual = 0;  // root mean square of y - fitted y, in y's unit
  double maxRelResidual = 0;  // largest |y - fitted y| / y over the samples
};

// Uniform: ordinary least squares. Relative: each sample weighted by 1 / y^2, so that
// times spanning orders of magnitude (1 µs .. 10 ms) are fitted to their relative error
// and the small sizes still decide α. Needs at least two distinct x, finite values (and
// for Relative, positive y). Otherwise InvalidArgument.
enum class FitWeight { Uniform, Relative };
Result fitLine(std::span<const double> x, std::span<const double> y, LineFit* out, FitWeight weight = FitWeight::Uniform);

}  // namespace sncl
