// Reduction kernels, in one place. Vectorized with runtime CPU dispatch; half, bfloat16
// and fp8 are widened to float, reduced, and rounded once with round-to-nearest-even.
//
// Semantics (the same bits on every instruction set; tests/test_reduce.cc holds them):
// - Integers wrap (two's complement); avg on integers truncates toward zero.
// - Floats follow IEEE 754 with round-to-nearest-even. float16, bfloat16 and fp8 results
//   are the exact result rounded once to the type: overflow gives inf for float16,
//   bfloat16 and float8e5m2, and saturates to +-448 for float8e4m3 (which has no inf;
//   NCCL's fp8 conversions saturate too). A NaN result of those narrow types is the
//   canonical 0x7fff / 0x7f; float32/float64 NaNs keep whatever payload the hardware gives.
// - band/bor/bxor/land/lor/lxor exist for the integer types only; the logical ops give 1
//   or 0 (nonzero is true), as MPI's.
// - max/min ignore a NaN operand (IEEE 754-2019 maximumNumber/minimumNumber, as NCCL's
//   fmaxf/__hmax), give NaN only when both are NaN, and order -0 below +0, so they are
//   commutative.
// - Kernels assume the default floating-point environment (no flush-to-zero).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sncl/sncl.h"

namespace sncl {

// dst[i] = a[i] op b[i] for count elements; dst may alias a or b (exactly, not partially).
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);

// Inline: a call asks them several times on its path.
constexpr bool dtypeValid(int type) { return type >= 0 && type < snclNumTypes; }
constexpr size_t dtypeSize(snclDataType_t type) {
  constexpr unsigned char kSizes[snclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};  // in snclDataType_t order
  return dtypeValid(type) ? kSizes[type] : 0;
}
const char* dtypeName(snclDataType_t type);
// NCCL's names ("float16", "bfloat16", "float8e4m3", with or without an nccl/sncl prefix),
// nccl-tests' ("half", "float", "double", "f8e4m3"), and the short ones ("f16", "bf16",
// "fp32", "e4m3"), case-insensitive; false for anything else.
bool dtypeFromName(std::string_view name, snclDataType_t* type);
const char* redOpName(snclRedOp_t op);
bool dtypeInteger(snclDataType_t type);
// Band, bor, bxor, land, lor, lxor: defined on the integer types only.
bool redOpIntegerOnly(snclRedOp_t op);

// Kernel for a base op (sum, prod, max, min; on integers also the bitwise and logical
// ops); nullptr when the pair is not supported. Avg is reduced as sum, then scaled by
// scaleKernel.
ReduceFn reduceKernel(snclDataType_t type, snclRedOp_t op);

// dst[i] = src[i] * factor (integers: dst[i] = src[i] / divisor when divisor != 0), used
// for avg (factor 1/nranks, divisor nranks) and for pre-multiplied sums. dst may alias src.
// Floats multiply by factor rounded to float (float64: by factor itself) and round the
// exact product once. Integers: division truncates toward zero; with divisor 0 they
// multiply, wrapping, by factor truncated to an integer.
using ScaleFn = void (*)(void* dst, const void* src, size_t count, double factor, int64_t divisor);
ScaleFn scaleKernel(snclDataType_t type);

// Which instruction set the dispatcher picked ("avx512", "avx2", "portable"): the best
// this CPU supports, or SNCL_REDUCE_ISA=portable|avx2|avx512 when that one is supported.
const char* reduceIsa();

// Every instruction set's kernels, for tests and benchmarks that compare them.
enum class ReduceIsa { Portable, Avx2, Avx512 };
bool reduceIsaSupported(ReduceIsa isa);
const char* reduceIsaName(ReduceIsa isa);
// Like the functions above, but with isa's kernels; nullptr when this CPU lacks isa.
ReduceFn reduceKernel(snclDataType_t type, snclRedOp_t op, ReduceIsa isa);
ScaleFn scaleKernel(snclDataType_t type, ReduceIsa isa);

}  // namespace sncl
