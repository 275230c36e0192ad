#include "lib/linear_fit.h"

#include <algorithm>
#include <cmath>

namespace sncl {

Result fitLine(std::span<const double> x, std::span<const double> y, LineFit* out) {
  if (x.size() != y.size()) return fail(snclInvalidArgument, "line fit: {} x values but {} y values", x.size(), y.size());
  if (x.size() < 2) return fail(snclInvalidArgument, "line fit: needs at least two samples, got {}", x.size());
  const double n = double(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i]))
      return fail(snclInvalidArgument, "line fit: sample {} is not finite ({}, {})", i, x[i], y[i]);
    mx += x[i];
    my += y[i];
  }
  mx /= n;
  my /= n;
  // Centered sums: sizes span 1 B .. 100s of MB, so raw sums of squares lose the digits.
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx <= 0) return fail(snclInvalidArgument, "line fit: all {} samples have the same x ({})", x.size(), mx);
  LineFit f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  double ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = y[i] - (f.intercept + f.slope * x[i]);
    ss += r * r;
    if (y[i] != 0) f.maxRelResidual = std::max(f.maxRelResidual, std::abs(r / y[i]));
  }
  f.rmsResidual = std::sqrt(ss / n);
  *out = f;
  return snclSuccess;
}

}  // namespace sncl
