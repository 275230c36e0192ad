#include "lib/plan/linear_fit.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sncl {

Result fitLine(std::span<const double> x, std::span<const double> y, LineFit* out, FitWeight weight) {
  if (x.size() != y.size()) return fail(snclInvalidArgument, "line fit: {} x values but {} y values", x.size(), y.size());
  if (x.size() < 2) return fail(snclInvalidArgument, "line fit: needs at least two samples, got {}", x.size());
  std::vector<double> w(x.size(), 1.0);
  double sw = 0, mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i]))
      return fail(snclInvalidArgument, "line fit: sample {} is not finite ({}, {})", i, x[i], y[i]);
    if (weight == FitWeight::Relative) {
      if (y[i] <= 0) return fail(snclInvalidArgument, "line fit: sample {} has y {} (a relative fit needs y > 0)", i, y[i]);
      w[i] = 1 / (y[i] * y[i]);
    }
    sw += w[i];
    mx += w[i] * x[i];
    my += w[i] * y[i];
  }
  mx /= sw;
  my /= sw;
  // Centered sums: sizes span 1 B .. 100s of MB, so raw sums of squares lose the digits.
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += w[i] * (x[i] - mx) * (x[i] - mx);
    sxy += w[i] * (x[i] - mx) * (y[i] - my);
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
  f.rmsResidual = std::sqrt(ss / double(x.size()));
  *out = f;
  return snclSuccess;
}

}  // namespace sncl
