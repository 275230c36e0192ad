#include "tests/util/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lib/exec/reduce.h"

namespace sncl::test {
namespace {

// A float format narrower than float32.
struct Narrow {
  int expBits, mantBits, bias;
  bool finiteOnly;  // float8 e4m3: no infinity, one NaN pattern, saturates instead
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
  const uint32_t signBit = 1u << (f.expBits + f.mantBits);
  const uint32_t expMax = (1u << f.expBits) - 1, mantOne = 1u << f.mantBits;
  if (std::isnan(v)) return signBit - 1;  // every bit but the sign, like the kernels
  const uint32_t sign = std::signbit(v) ? signBit : 0;
  const double a = std::fabs(v);
  const int emax = static_cast<int>(f.finiteOnly ? expMax : expMax - 1) - f.bias;
  const double maxFinite = std::ldexp(f.finiteOnly ? 2.0 - 2.0 / mantOne : 2.0 - 1.0 / mantOne, emax);
  if (std::isinf(a)) return f.finiteOnly ? sign | (expMax << f.mantBits) | (mantOne - 2) : sign | (expMax << f.mantBits);
  const int minExp = 1 - f.bias;
  const int e = a == 0 ? minExp : std::max(std::ilogb(a), minExp);
  const double quantum = std::ldexp(1.0, e - f.mantBits);
  const double r = std::nearbyint(a / quantum) * quantum;  // ties to even (default rounding)
  if (r > maxFinite) return f.finiteOnly ? sign | (expMax << f.mantBits) | (mantOne - 2) : sign | (expMax << f.mantBits);
  if (r == 0) return sign;
  const int re = std::ilogb(r);
  if (re < minExp) return sign | static_cast<uint32_t>(std::ldexp(r, f.mantBits - minExp));
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(r, f.mantBits - re)) - mantOne;
  return sign | (static_cast<uint32_t>(re + f.bias) << f.mantBits) | mant;
}

double decode(const Narrow& f, uint32_t bits) {
  const uint32_t expMax = (1u << f.expBits) - 1, mantOne = 1u << f.mantBits;
  const bool negative = bits >> (f.expBits + f.mantBits) & 1;
  const uint32_t exp = bits >> f.mantBits & expMax, mant = bits & (mantOne - 1);
  double v;
  if (f.finiteOnly ? (exp == expMax && mant == mantOne - 1) : exp == expMax) v = f.finiteOnly || mant ? NAN : INFINITY;
  else if (exp == 0) v = std::ldexp(mant, 1 - f.bias - f.mantBits);
  else v = std::ldexp(mant | mantOne, static_cast<int>(exp) - f.bias - f.mantBits);
  return negative ? -v : v;
}

bool isInteger(snclDataType_t type) { return type <= snclUint64; }
bool isSigned(snclDataType_t type) { return !(type == snclUint8 || type == snclUint32 || type == snclUint64); }

// Every integer in [0, exactLimit] is exact in type (capped: test values stay small).
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

// v rounded to type as the kernels round results.
double roundTo(snclDataType_t type, double v) {
  unsigned char buf[8];
  storeElement(type, buf, 0, v);
  return loadElement(type, buf, 0);
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

double preMulScalar(int rank) { return 1.0 + rank % 2; }

double inputValue(snclDataType_t type, snclRedOp_t op, int rank, int nranks, size_t i) {
  const double limit = exactLimit(type);
  const size_t r = static_cast<size_t>(rank), n = static_cast<size_t>(nranks);
  switch (op) {
    case snclProd: return (i + r) % 3 == 0 ? 2.0 : 1.0;  // at most ceil(8/3) twos: <= 8
    case snclMax:
    case snclMin: {
      const size_t span = static_cast<size_t>(std::min(limit, 100.0)) + 1;
      const double v = static_cast<double>((i + 5 * r) % span);
      return isSigned(type) ? v - static_cast<double>(span / 2) : v;
    }
    default: {  // sum, avg, pre-multiplied sum
      // Values 0..k-1 keep every partial sum within limit; when even 0..1 would not
      // (e5m2, pre-multiplied, 5+ ranks), only every p-th rank contributes a 1.
      const double scale = op == kPreMulSum ? 2.0 : 1.0;
      const size_t k = static_cast<size_t>(limit / (static_cast<double>(n) * scale)) + 1;
      if (k >= 2) return static_cast<double>((i + 3 * r) % std::min<size_t>(k, 64));
      const size_t p = static_cast<size_t>(std::ceil(static_cast<double>(n) * scale / limit));
      return (i + r) % p == 0 ? 1.0 : 0.0;
    }
  }
}

double expectedValue(snclDataType_t type, snclRedOp_t op, int nranks, size_t i) {
  double acc = 0;
  for (int r = 0; r < nranks; ++r) {
    const double v = inputValue(type, op, r, nranks, i) * (op == kPreMulSum ? preMulScalar(r) : 1.0);
    if (r == 0) acc = v;
    else if (op == snclProd) acc *= v;
    else if (op == snclMax) acc = std::max(acc, v);
    else if (op == snclMin) acc = std::min(acc, v);
    else acc += v;
  }
  if (op != snclAvg) return acc;
  if (isInteger(type)) return std::trunc(acc / nranks);
  // The kernels multiply by 1/nranks rounded to float (float64: to double), exactly, and
  // round the product once to the type.
  const double factor = type == snclFloat64 ? 1.0 / nranks : static_cast<double>(static_cast<float>(1.0 / nranks));
  return roundTo(type, acc * factor);
}

void storeElement(snclDataType_t type, void* base, size_t i, double v) {
  if (const Narrow* f = narrowOf(type)) {
    const uint32_t bits = encode(*f, v);
    if (f->expBits + f->mantBits == 15) static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(bits);
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
    case snclFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case snclFloat64: static_cast<double*>(base)[i] = v; break;
    default: break;
  }
}

double loadElement(snclDataType_t type, const void* base, size_t i) {
  if (const Narrow* f = narrowOf(type))
    return decode(*f, f->expBits + f->mantBits == 15 ? static_cast<const uint16_t*>(base)[i]
                                                     : static_cast<const uint8_t*>(base)[i]);
  switch (type) {
    case snclInt8: return static_cast<const int8_t*>(base)[i];
    case snclUint8: return static_cast<const uint8_t*>(base)[i];
    case snclInt32: return static_cast<const int32_t*>(base)[i];
    case snclUint32: return static_cast<const uint32_t*>(base)[i];
    case snclInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case snclUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case snclFloat32: return static_cast<const float*>(base)[i];
    case snclFloat64: return static_cast<const double*>(base)[i];
    default: return NAN;
  }
}

void fillInput(snclDataType_t type, snclRedOp_t op, int rank, int nranks, void* buf, size_t count, size_t first) {
  for (size_t i = 0; i < count; ++i) storeElement(type, buf, i, inputValue(type, op, rank, nranks, first + i));
}

size_t countWrong(snclDataType_t type, snclRedOp_t op, int nranks, const void* buf, size_t count, size_t first) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += loadElement(type, buf, i) != expectedValue(type, op, nranks, first + i);
  return wrong;
}

void fillPattern(size_t elemSize, int rank, void* buf, size_t count, size_t first) {
  auto* bytes = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = mix64((static_cast<uint64_t>(rank) << 40) ^ (first + i));
    for (size_t b = 0; b < elemSize; ++b) bytes[i * elemSize + b] = static_cast<unsigned char>(h >> (8 * (b % 8)));
  }
}

size_t countWrongPattern(size_t elemSize, int rank, const void* buf, size_t count, size_t first) {
  unsigned char expect[8];
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    fillPattern(elemSize, rank, expect, 1, first + i);
    wrong += memcmp(static_cast<const unsigned char*>(buf) + i * elemSize, expect, elemSize) != 0;
  }
  return wrong;
}

void fillSeeded(snclDataType_t type, uint64_t seed, uint64_t call, int rank, void* buf, size_t count, size_t first) {
  const size_t es = dtypeSize(type);
  const uint64_t key = mix64(seed ^ (call * 0x9e3779b97f4a7c15ull) ^ (uint64_t(rank + 1) << 40));
  const double range = es <= 2 ? 2.0 : 100.0;
  auto* dst = static_cast<char*>(buf);
  for (size_t e = 0; e < count; ++e) {
    const uint64_t h = mix64(key + first + e);
    if (dtypeInteger(type)) {
      memcpy(dst + e * es, &h, es);
    } else {
      const double unit = double(h >> 11) * 0x1p-53;  // [0, 1)
      storeElement(type, dst, e, (unit * 2 - 1) * range);
    }
  }
}

}  // namespace sncl::test
