#include "perf/common/ceiling.h"

#include <chrono>
#include <cstring>

namespace perf {
namespace {

// The same loop as the kernel benchmark's reference: what the compiler vectorizes.
void addFloats(float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

// Best of a few timed passes (bytes per second), after one untimed pass.
template <class F>
double bestRate(size_t bytes, const std::function<void()>& barrier, F&& pass) {
  pass();
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    barrier();
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0 && bytes / s > best) best = bytes / s;
  }
  return best;
}

}  // namespace

Ceiling measureCeiling(void* a, void* b, size_t bytes, const std::function<void()>& barrier) {
  Ceiling c;
  c.copyGBs = bestRate(bytes, barrier, [&] { memcpy(a, b, bytes); }) / 1e9;
  const size_t n = bytes / sizeof(float);
  // Zeros in b keep a's values finite however many passes run.
  memset(b, 0, n * sizeof(float));
  c.addGBs = bestRate(n * sizeof(float), barrier,
                      [&] { addFloats(static_cast<float*>(a), static_cast<const float*>(b), n); }) / 1e9;
  return c;
}

}  // namespace perf
