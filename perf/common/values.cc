// The benchmarks' data: reductions exact in every type (nccl-tests' idea), conversions of
// the narrow float types (rounding to nearest even, float8 e4m3 saturating, as sncl's
// kernels do), and byte patterns for data that is only moved.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "perf/common/harness.h"

namespace perf {
namespace {

struct Narrow {
  int expBits, mantBits, bias;
  bool finiteOnly;  // float8 e4m3: no infinity, saturates
};
const Narrow* narrowOf(snclDataType_t type) {
  static const Narrow half{5, 10, 15, false}, bf16{8, 7, 127, false}, e4m3{4, 3, 7, true}, e5m2{5, 2, 15, false};
  switch (type) {
    case snclFloat16: return &half;
    case snclBfloat16: return &bf16;
    case snclFloat8e4m3: return &e4m3;
    case snclFloat8e5m2: return &e5m2;
    default: return nullptr;
  }
}

uint32_t encode(const Narrow& f, double v) {
  const uint32_t signBit = 1u << (f.expBits + f.mantBits), expMax = (1u << f.expBits) - 1, one = 1u << f.mantBits;
  if (std::isnan(v)) return signBit - 1;
  const uint32_t sign = std::signbit(v) ? signBit : 0;
  const uint32_t largest = f.finiteOnly ? sign | expMax << f.mantBits | (one - 2) : sign | expMax << f.mantBits;
  const double a = std::fabs(v);
  const int emax = static_cast<int>(f.finiteOnly ? expMax : expMax - 1) - f.bias, emin = 1 - f.bias;
  const double maxFinite = std::ldexp(f.finiteOnly ? 2.0 - 2.0 / one : 2.0 - 1.0 / one, emax);
  if (std::isinf(a)) return largest;
  const int e = a == 0 ? emin : std::max(std::ilogb(a), emin);
  const double quantum = std::ldexp(1.0, e - f.mantBits), r = std::nearbyint(a / quantum) * quantum;
  if (r > maxFinite) return largest;  // inf, or the largest finite value for e4m3
  if (r == 0) return sign;
  const int re = std::ilogb(r);
  if (re < emin) return sign | static_cast<uint32_t>(std::ldexp(r, f.mantBits - emin));
  return sign | static_cast<uint32_t>(re + f.bias) << f.mantBits | (static_cast<uint32_t>(std::ldexp(r, f.mantBits - re)) - one);
}

double decode(const Narrow& f, uint32_t bits) {
  const uint32_t expMax = (1u << f.expBits) - 1, one = 1u << f.mantBits;
  const uint32_t exp = bits >> f.mantBits & expMax, mant = bits & (one - 1);
  double v;
  if (f.finiteOnly ? (exp == expMax && mant == one - 1) : exp == expMax) v = f.finiteOnly || mant ? NAN : INFINITY;
  else if (exp == 0) v = std::ldexp(mant, 1 - f.bias - f.mantBits);
  else v = std::ldexp(mant | one, static_cast<int>(exp) - f.bias - f.mantBits);
  return bits >> (f.expBits + f.mantBits) & 1 ? -v : v;
}

// Every integer in [0, exactLimit] is exact in type (capped: values stay small).
double exactLimit(snclDataType_t type) {
  switch (type) {
    case snclInt8: return 127;
    case snclUint8: return 255;
    case snclFloat16: return 2048;
    case snclBfloat16: return 256;
    case snclFloat8e4m3: return 16;
    case snclFloat8e5m2: return 8;
    default: return 1 << 20;
  }
}

bool isSigned(snclDataType_t t) { return !(t == snclUint8 || t == snclUint32 || t == snclUint64); }

}  // namespace

size_t typeSize(snclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return t >= 0 && t < snclNumTypes ? sizes[t] : 0;
}

double mulSumScalar(int rank) { return 1.0 + rank % 2; }

double valueOf(snclDataType_t type, snclRedOp_t op, int rank, int nranks, size_t i) {
  const double limit = exactLimit(type);
  const size_t r = static_cast<size_t>(rank), n = static_cast<size_t>(nranks);
  switch (op) {
    case snclProd: return (i + r) % 3 == 0 ? 2.0 : 1.0;  // <= 2^3 for 8 ranks
    case snclBand:
    case snclBor:
    case snclBxor: return static_cast<double>((i * 7 + r * 13 + (i >> 6)) % 64);  // 6 bits: fit int8
    case snclLand:
    case snclLor:
    case snclLxor: return (i + 2 * r) % 5 == 0 ? 0.0 : static_cast<double>(1 + (i + r) % 3);
    case snclMax:
    case snclMin: {
      const size_t span = static_cast<size_t>(std::min(limit, 100.0)) + 1;
      const double v = static_cast<double>((i + 5 * r) % span);
      return isSigned(type) ? v - static_cast<double>(span / 2) : v;
    }
    default: {  // sum, avg, mulsum: every partial sum within limit
      const double scale = op == kMulSum ? 2.0 : 1.0;
      const size_t k = static_cast<size_t>(limit / (static_cast<double>(n) * scale)) + 1;
      if (k >= 2) return static_cast<double>((i + 3 * r) % std::min<size_t>(k, 64));
      const size_t p = static_cast<size_t>(std::ceil(static_cast<double>(n) * scale / limit));
      return (i + r) % p == 0 ? 1.0 : 0.0;
    }
  }
}

double reducedValue(snclDataType_t type, snclRedOp_t op, int nranks, size_t i) {
  double acc = 0;
  for (int r = 0; r < nranks; ++r) {
    const double v = valueOf(type, op, r, nranks, i) * (op == kMulSum ? mulSumScalar(r) : 1.0);
    if (integerOnlyOp(op) && r > 0) {  // on small nonnegative integers, exact in double
      const auto a = static_cast<int64_t>(acc), b = static_cast<int64_t>(v);
      const int64_t x = op == snclBand ? a & b : op == snclBor ? a | b : op == snclBxor ? a ^ b
                      : op == snclLand ? (a && b) : op == snclLor ? (a || b) : ((a != 0) != (b != 0));
      acc = static_cast<double>(x);
      continue;
    }
    acc = r == 0 ? v : op == snclProd ? acc * v : op == snclMax ? std::max(acc, v) : op == snclMin ? std::min(acc, v) : acc + v;
  }
  if (op != snclAvg) return acc;
  if (type <= snclUint64) return std::trunc(acc / nranks);
  // sncl multiplies by 1/nranks rounded to float (float64: to double) and rounds the
  // exact product once to the type.
  const double factor = type == snclFloat64 ? 1.0 / nranks : static_cast<double>(static_cast<float>(1.0 / nranks));
  unsigned char one[8];
  store(type, one, 0, acc * factor);
  return load(type, one, 0);
}

void store(snclDataType_t type, void* base, size_t i, double v) {
  if (const Narrow* f = narrowOf(type)) {
    const uint32_t bits = encode(*f, v);
    if (typeSize(type) == 2) static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(bits);
    else static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(bits);
    return;
  }
  switch (type) {
    case snclInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case snclUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case snclInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case snclUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case snclInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case snclUint64: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case snclFloat64: static_cast<double*>(base)[i] = v; break;
    default: static_cast<float*>(base)[i] = static_cast<float>(v); break;
  }
}

double load(snclDataType_t type, const void* base, size_t i) {
  if (const Narrow* f = narrowOf(type))
    return decode(*f, typeSize(type) == 2 ? static_cast<const uint16_t*>(base)[i] : static_cast<const uint8_t*>(base)[i]);
  switch (type) {
    case snclInt8: return static_cast<const int8_t*>(base)[i];
    case snclUint8: return static_cast<const uint8_t*>(base)[i];
    case snclInt32: return static_cast<const int32_t*>(base)[i];
    case snclUint32: return static_cast<const uint32_t*>(base)[i];
    case snclInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case snclUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case snclFloat64: return static_cast<const double*>(base)[i];
    default: return static_cast<const float*>(base)[i];
  }
}

void fillReduction(const Call& c, size_t count, size_t first) {
  void* send = const_cast<void*>(c.send);
  for (size_t i = 0; i < count; ++i) store(c.type, send, i, valueOf(c.type, c.refOp, c.rank, c.nranks, first + i));
}

size_t checkReduction(const Call& c, const void* buf, size_t count, size_t first) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += load(c.type, buf, i) != reducedValue(c.type, c.refOp, c.nranks, first + i);
  return wrong;
}

namespace {

// Byte b of element j of rank's data: differs between ranks (131 is odd) and between
// elements up to 64 Ki apart.
unsigned char patternByte(int rank, size_t j, size_t b) {
  return static_cast<unsigned char>(static_cast<size_t>(rank) * 131 + j * 7 + (j >> 8) * 29 + b * 13 + 1);
}

}  // namespace

void fillPattern(size_t elemSize, int rank, void* buf, size_t count, size_t first) {
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < count; ++i)
    for (size_t b = 0; b < elemSize; ++b) p[i * elemSize + b] = patternByte(rank, first + i, b);
}

size_t checkPattern(size_t elemSize, int rank, const void* buf, size_t count, size_t first) {
  const auto* p = static_cast<const unsigned char*>(buf);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    bool bad = false;
    for (size_t b = 0; b < elemSize; ++b) bad |= p[i * elemSize + b] != patternByte(rank, first + i, b);
    wrong += bad;
  }
  return wrong;
}

}  // namespace perf
