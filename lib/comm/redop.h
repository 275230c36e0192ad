// Reduction ops made at run time (snclRedOpCreatePreMulSum): a table per comm, and the
// handles that name them. A handle is snclNumOps + tag * 65536 + index, where tag is the
// comm's (distinct among the 32765 most recently created comms), so that an op used on
// another comm is told apart instead of silently meaning that comm's op.
#pragma once

#include <cstdint>

#include "lib/base/error.h"
#include "sncl/sncl.h"

struct snclComm;

namespace sncl {

struct CollOp;

struct UserRedOp {
  bool live = false;
  snclDataType_t dtype = snclFloat32;
  double scalar = 1.0;               // snclScalarHostImmediate
  const void* scalarPtr = nullptr;   // snclScalarDevice: read when a call runs
};

// A fresh tag for a new comm's handles.
uint32_t newUserOpTag();

Result redOpCreatePreMulSum(snclComm* comm, snclRedOp_t* op, const void* scalar, snclDataType_t dtype,
                            snclScalarResidence_t residence);
Result redOpDestroy(snclComm* comm, snclRedOp_t op);

// Sets out's op (and pre-multiplied sum fields) from a call's op on comm with dtype, or
// fails with InvalidArgument naming fn: unknown op, another comm's, destroyed, or made
// for another datatype.
Result resolveRedOp(snclComm* comm, snclRedOp_t op, snclDataType_t dtype, const char* fn, CollOp* out);

// The value of one element of type at p, widened to double (exact).
double scalarValue(snclDataType_t type, const void* p);

}  // namespace sncl
