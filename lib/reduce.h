// Reduction kernels, in one place. Vectorized with runtime CPU dispatch; half, bfloat16
// and fp8 are widened to float, reduced, and rounded once with round-to-nearest-even.
#pragma once

#include <cstddef>

#include "sncl/sncl.h"

namespace sncl {

// dst[i] = a[i] op b[i] for count elements; dst may alias a or b (exactly, not partially).
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);

size_t dtypeSize(snclDataType_t type);
const char* dtypeName(snclDataType_t type);
const char* redOpName(snclRedOp_t op);
bool dtypeValid(int type);

// Kernel for a base op (sum, prod, max, min); nullptr when the pair is not supported.
// Avg is reduced as sum, then scaled by scaleKernel.
ReduceFn reduceKernel(snclDataType_t type, snclRedOp_t op);

// dst[i] = src[i] * factor (integers: dst[i] = src[i] / divisor when divisor != 0), used
// for avg (factor 1/nranks, divisor nranks) and for pre-multiplied sums.
using ScaleFn = void (*)(void* dst, const void* src, size_t count, double factor, int64_t divisor);
ScaleFn scaleKernel(snclDataType_t type);

// Which instruction set the dispatcher picked ("avx512", "avx2", "portable").
const char* reduceIsa();

}  // namespace sncl
