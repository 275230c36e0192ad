// Inputs whose reductions are exact in every type (as nccl-tests chooses them), the
// expected results, and patterns for the collectives that only move data, so that
// multi-rank tests compare bit for bit. Values are small integers chosen per type and
// rank count: every partial sum or product stays within the integers the type holds
// exactly (float8 e5m2: 0..8, e4m3: 0..16), whatever order the ranks combine them in.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sncl/sncl.h"

namespace sncl::test {

// Stands for a pre-multiplied sum (snclRedOpCreatePreMulSum) in the functions below.
constexpr snclRedOp_t kPreMulSum = static_cast<snclRedOp_t>(snclNumOps);

// The scalar rank passes to snclRedOpCreatePreMulSum: 1 or 2, exact in every type.
double preMulScalar(int rank);

// The value rank contributes at element i of its input.
double inputValue(snclDataType_t type, snclRedOp_t op, int rank, int nranks, size_t i);
// The reduction over nranks ranks at element i, rounded like the kernels (avg: the exact
// sum times 1/nranks, rounded once; integers truncate).
double expectedValue(snclDataType_t type, snclRedOp_t op, int nranks, size_t i);

// Element i of type at base from/to a double: rounds to nearest even (narrow floats
// convert directly, float8 e4m3 saturates at 448 like the kernels); integers truncate.
void storeElement(snclDataType_t type, void* base, size_t i, double v);
double loadElement(snclDataType_t type, const void* base, size_t i);

// Fills count elements of rank's input, starting at element `first` of it.
void fillInput(snclDataType_t type, snclRedOp_t op, int rank, int nranks, void* buf, size_t count, size_t first = 0);
// Elements of buf[0..count) that differ from the reduction at elements first.. .
size_t countWrong(snclDataType_t type, snclRedOp_t op, int nranks, const void* buf, size_t count, size_t first = 0);

// A 64-bit mixing function (the murmur3 finalizer): well-spread bits for test data.
uint64_t mix64(uint64_t x);

// Rank's input of call at elements [first, first + count), computed anywhere from (seed,
// call, rank): floats finite with full mantissas (a reduction out of rank order shows in the
// rounding) and small enough that an 8-rank product stays finite; integers arbitrary bits.
void fillSeeded(snclDataType_t type, uint64_t seed, uint64_t call, int rank, void* buf, size_t count, size_t first = 0);

// Data that collectives only move: arbitrary bytes per (rank, element), elements `first`..
void fillPattern(size_t elemSize, int rank, void* buf, size_t count, size_t first = 0);
size_t countWrongPattern(size_t elemSize, int rank, const void* buf, size_t count, size_t first = 0);

}  // namespace sncl::test
