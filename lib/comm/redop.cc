#include "lib/comm/redop.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "lib/comm/comm.h"
#include "lib/exec/reduce.h"

namespace sncl {
namespace {

constexpr uint32_t kIndexSpan = 65536;
// Tags 1..kTags: snclNumOps + kTags * 65536 + 65535 still fits in a positive int, and tag
// 0 never occurs, so small made-up values (snclNumOps..snclNumOps + 65535) are always
// unknown.
constexpr uint32_t kTags = 32765;
static_assert(int64_t{snclNumOps} + int64_t{kTags} * kIndexSpan + (kIndexSpan - 1) <= INT32_MAX);

struct Decoded {
  uint32_t tag;
  uint32_t index;
};
Decoded decode(snclRedOp_t op) {
  const uint32_t v = static_cast<uint32_t>(op) - snclNumOps;
  return {v / kIndexSpan, v % kIndexSpan};
}

// A narrow float (sign, exponent bits, mantissa bits, bias) widened; finiteOnly formats
// (float8 e4m3) have no infinity and one NaN pattern.
double widen(uint32_t bits, int expBits, int mantBits, int bias, bool finiteOnly) {
  const bool negative = bits >> (expBits + mantBits) & 1;
  const uint32_t exp = bits >> mantBits & ((1u << expBits) - 1), mant = bits & ((1u << mantBits) - 1);
  const uint32_t expMax = (1u << expBits) - 1;
  double v;
  if (finiteOnly ? (exp == expMax && mant == (1u << mantBits) - 1) : exp == expMax)
    v = finiteOnly || mant ? NAN : INFINITY;
  else if (exp == 0)
    v = std::ldexp(static_cast<double>(mant), 1 - bias - mantBits);
  else
    v = std::ldexp(static_cast<double>(mant | 1u << mantBits), static_cast<int>(exp) - bias - mantBits);
  return negative ? -v : v;
}

}  // namespace

uint32_t newUserOpTag() {
  static std::atomic<uint32_t> next{0};
  return 1 + next.fetch_add(1) % kTags;
}

// The scalar may sit at any byte address: read through memcpy, never a typed access.
template <class T>
T scalarAt(const void* p) {
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
}

double scalarValue(snclDataType_t type, const void* p) {
  switch (type) {
    case snclInt8: return scalarAt<int8_t>(p);
    case snclUint8: return scalarAt<uint8_t>(p);
    case snclInt32: return scalarAt<int32_t>(p);
    case snclUint32: return scalarAt<uint32_t>(p);
    case snclInt64: return static_cast<double>(scalarAt<int64_t>(p));
    case snclUint64: return static_cast<double>(scalarAt<uint64_t>(p));
    case snclFloat16: return widen(scalarAt<uint16_t>(p), 5, 10, 15, false);
    case snclFloat32: return scalarAt<float>(p);
    case snclFloat64: return scalarAt<double>(p);
    case snclBfloat16: return widen(scalarAt<uint16_t>(p), 8, 7, 127, false);
    case snclFloat8e4m3: return widen(scalarAt<uint8_t>(p), 4, 3, 7, true);
    case snclFloat8e5m2: return widen(scalarAt<uint8_t>(p), 5, 2, 15, false);
    default: return NAN;
  }
}

Result redOpCreatePreMulSum(snclComm* comm, snclRedOp_t* op, const void* scalar, snclDataType_t dtype,
                            snclScalarResidence_t residence) {
  constexpr const char* fn = "snclRedOpCreatePreMulSum";
  if (!op) return fail(snclInvalidArgument, "{}: op is NULL", fn);
  if (!scalar) return fail(snclInvalidArgument, "{}: scalar is NULL", fn);
  if (!dtypeValid(dtype)) return fail(snclInvalidArgument, "{}: unknown datatype {}", fn, static_cast<int>(dtype));
  if (residence != snclScalarDevice && residence != snclScalarHostImmediate)
    return fail(snclInvalidArgument, "{}: unknown scalar residence {}", fn, static_cast<int>(residence));
  UserRedOp entry;
  entry.live = true;
  entry.dtype = dtype;
  if (residence == snclScalarDevice) entry.scalarPtr = scalar;
  else entry.scalar = scalarValue(dtype, scalar);
  std::lock_guard<std::mutex> lock(comm->userOpsMutex);
  size_t index = 0;
  while (index < comm->userOps.size() && comm->userOps[index].live) ++index;
  if (index == kIndexSpan) return fail(snclInvalidUsage, "{}: {} ops are live on this comm; destroy some", fn, kIndexSpan);
  if (index == comm->userOps.size()) comm->userOps.push_back(entry);
  else comm->userOps[index] = entry;
  *op = static_cast<snclRedOp_t>(snclNumOps + comm->userOpTag * kIndexSpan + index);
  return snclSuccess;
}

Result redOpDestroy(snclComm* comm, snclRedOp_t op) {
  constexpr const char* fn = "snclRedOpDestroy";
  if (static_cast<int>(op) >= 0 && op < snclNumOps)
    return fail(snclInvalidArgument, "{}: {} is a built-in op", fn, redOpName(op));
  const Decoded d = decode(op);
  std::lock_guard<std::mutex> lock(comm->userOpsMutex);
  if (static_cast<int>(op) < 0 || d.tag != comm->userOpTag)
    return fail(snclInvalidArgument, "{}: op {} was not created on this comm", fn, static_cast<int>(op));
  if (d.index >= comm->userOps.size() || !comm->userOps[d.index].live)
    return fail(snclInvalidArgument, "{}: op {} was already destroyed", fn, static_cast<int>(op));
  comm->userOps[d.index].live = false;
  return snclSuccess;
}

Result resolveRedOp(snclComm* comm, snclRedOp_t op, snclDataType_t dtype, const char* fn, CollOp* out) {
  if (static_cast<int>(op) >= 0 && op < snclNumOps) {
    // Refused here, at the call, rather than reduced bit by bit into a meaningless float.
    if (redOpIntegerOnly(op) && !dtypeInteger(dtype))
      return fail(snclInvalidArgument,
                  "{}: reduction op {} is not defined for {}: the bitwise and logical ops take integer types "
                  "only (int8, uint8, int32, uint32, int64, uint64)",
                  fn, redOpName(op), dtypeName(dtype));
    out->op = op;
    return snclSuccess;
  }
  const Decoded d = decode(op);
  if (static_cast<int>(op) < 0 || d.tag == 0 || d.tag > kTags)
    return fail(snclInvalidArgument, "{}: unknown reduction op {}", fn, static_cast<int>(op));
  std::lock_guard<std::mutex> lock(comm->userOpsMutex);
  if (d.tag != comm->userOpTag)
    return fail(snclInvalidArgument,
                "{}: reduction op {} was created on another communicator; an op made by "
                "snclRedOpCreatePreMulSum is valid only on its own comm",
                fn, static_cast<int>(op));
  if (d.index >= comm->userOps.size() || !comm->userOps[d.index].live)
    return fail(snclInvalidArgument, "{}: reduction op {} was destroyed", fn, static_cast<int>(op));
  const UserRedOp& entry = comm->userOps[d.index];
  if (entry.dtype != dtype)
    return fail(snclInvalidArgument, "{}: reduction op {} was created for {}, not for {}", fn, static_cast<int>(op),
                dtypeName(entry.dtype), dtypeName(dtype));
  out->op = snclSum;
  out->preMul = true;
  out->scalar = entry.scalar;
  out->scalarPtr = entry.scalarPtr;
  return snclSuccess;
}

}  // namespace sncl
