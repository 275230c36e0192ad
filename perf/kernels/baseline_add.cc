// The baseline of reduce_kernels_bench: the plain loops a[i] += b[i] and c[i] = a[i] + b[i]
// on floats, compiled alone with -O3 -march=native (see CMakeLists.txt).
#include <cstddef>

namespace sncl::bench {

__attribute__((noinline)) void addInPlace(float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

__attribute__((noinline)) void addOutOfPlace(float* __restrict c, const float* __restrict a,
                                             const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

}  // namespace sncl::bench
