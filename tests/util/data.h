// Inputs whose reductions are exact in every type (as nccl-tests chooses them), and the
// expected results, so multi-rank tests can compare bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sncl/sncl.h"

namespace sncl::test {

// The value rank contributes at element i for op, as a double (small integers).
double inputValue(snclRedOp_t op, int rank, int nranks, size_t i);
// The exact reduction over nranks ranks at element i.
double expectedValue(snclRedOp_t op, int nranks, size_t i);

// Encodes/decodes one element of type from/to a double (small integers only).
void storeElement(snclDataType_t type, void* base, size_t i, double v);
double loadElement(snclDataType_t type, const void* base, size_t i);

// Fills count elements of rank's input.
void fillInput(snclDataType_t type, snclRedOp_t op, int rank, int nranks, void* buf, size_t count);
// Number of elements that differ from the expected reduction.
size_t countWrong(snclDataType_t type, snclRedOp_t op, int nranks, const void* buf, size_t count);

}  // namespace sncl::test
