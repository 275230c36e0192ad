// Reduction kernels against an independent scalar reference (double arithmetic, then one
// rounding written from the format definitions), bit for bit, on every instruction set
// this CPU supports: every type and op, counts around the vector widths, misaligned and
// aliased buffers, all fp8 pairs, every 16-bit float against random and tie-making
// partners, the scale kernel behind avg, and the integer types' bitwise and logical ops on
// random lengths.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lib/exec/reduce.h"

extern char** environ;

using namespace sncl;

namespace {

constexpr snclRedOp_t kOps[] = {snclSum, snclProd, snclMax, snclMin};
// Integer types only; the float types have no kernel for them.
constexpr snclRedOp_t kIntOps[] = {snclBand, snclBor, snclBxor, snclLand, snclLor, snclLxor};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 31, 33, 63, 65, 255, 1000, 4099};

std::vector<ReduceIsa> supportedIsas() {
  std::vector<ReduceIsa> isas;
  for (ReduceIsa isa : {ReduceIsa::Portable, ReduceIsa::Avx2, ReduceIsa::Avx512})
    if (reduceIsaSupported(isa)) isas.push_back(isa);
  return isas;
}

template <class T>
uint64_t bitsOf(T v) {
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  return b;
}
template <class T>
T fromBits(uint64_t b) {
  T v;
  memcpy(&v, &b, sizeof v);
  return v;
}

// ---- the reference

// A binary float format by its field widths, bias 2^(expBits-1) - 1. finiteOnly is OCP's
// "FN" variant: no infinities, only the all-ones pattern is NaN, overflow saturates.
struct Format {
  int expBits, mantBits;
  bool finiteOnly;
  int width() const { return 1 + expBits + mantBits; }
  int bias() const { return (1 << (expBits - 1)) - 1; }
  uint32_t expAllOnes() const { return (1u << expBits) - 1; }
  uint32_t mantMask() const { return (1u << mantBits) - 1; }
  double maxFinite() const {
    int emax = int(expAllOnes()) - bias() - (finiteOnly ? 0 : 1);
    return std::ldexp(2 - std::ldexp(finiteOnly ? 2 : 1, -mantBits), emax);
  }
};
constexpr Format kFp16{5, 10, false}, kBf16{8, 7, false}, kE4m3{4, 3, true}, kE5m2{5, 2, false};

double decode(const Format& f, uint32_t bits) {
  uint32_t e = bits >> f.mantBits & f.expAllOnes(), m = bits & f.mantMask();
  double sign = bits >> (f.width() - 1) & 1 ? -1 : 1;
  if (e == f.expAllOnes() && !f.finiteOnly) return m ? NAN : sign * INFINITY;
  if (e == f.expAllOnes() && m == f.mantMask()) return NAN;
  if (e == 0) return sign * std::ldexp(m, 1 - f.bias() - f.mantBits);
  return sign * std::ldexp(m + (1u << f.mantBits), int(e) - f.bias() - f.mantBits);
}

// a >= 0, representable in f.
uint32_t encodeExact(const Format& f, double a) {
  if (a == 0) return 0;
  int emin = 1 - f.bias();
  if (std::ilogb(a) < emin) return uint32_t(std::ldexp(a, f.mantBits - emin));  // subnormal
  int e = std::ilogb(a);
  return uint32_t(e + f.bias()) << f.mantBits | (uint32_t(std::ldexp(a, f.mantBits - e)) & f.mantMask());
}

// Round to nearest, ties to even; NaN becomes the canonical all-ones-but-sign pattern.
uint32_t encode(const Format& f, double v) {
  uint32_t signBit = 1u << (f.width() - 1);
  if (std::isnan(v)) return signBit - 1;
  uint32_t sign = std::signbit(v) ? signBit : 0;
  double a = std::fabs(v);
  if (a != 0 && !std::isinf(a)) {
    double spacing = std::ldexp(1, std::max(std::ilogb(a), 1 - f.bias()) - f.mantBits);
    a = std::nearbyint(a / spacing) * spacing;
  }
  if (a > f.maxFinite()) return sign | (f.finiteOnly ? encodeExact(f, f.maxFinite()) : f.expAllOnes() << f.mantBits);
  return sign | encodeExact(f, a);
}

// max/min: a NaN operand is ignored, -0 < +0.
double refOp(snclRedOp_t op, double a, double b) {
  if (op == snclSum) return a + b;
  if (op == snclProd) return a * b;
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) == (op == snclMin) ? a : b;
  return (a > b) == (op == snclMax) ? a : b;
}

template <class T>
uint64_t intRef(snclRedOp_t op, uint64_t x, uint64_t y) {
  using U = std::make_unsigned_t<T>;
  T a = fromBits<T>(x), b = fromBits<T>(y);
  if (op == snclSum) return bitsOf(T(U(uint64_t(a) + uint64_t(b))));
  if (op == snclProd) return bitsOf(T(U(uint64_t(a) * uint64_t(b))));
  if (op == snclBand) return bitsOf(T(a & b));
  if (op == snclBor) return bitsOf(T(a | b));
  if (op == snclBxor) return bitsOf(T(a ^ b));
  if (op == snclLand) return bitsOf(T(a != 0 && b != 0));
  if (op == snclLor) return bitsOf(T(a != 0 || b != 0));
  if (op == snclLxor) return bitsOf(T((a != 0) != (b != 0)));
  return bitsOf(op == snclMax ? std::max(a, b) : std::min(a, b));
}
template <class T>
uint64_t intScaleRef(uint64_t x, double factor, int64_t divisor) {
  using U = std::make_unsigned_t<T>;
  T a = fromBits<T>(x);
  if (divisor == 0) return bitsOf(T(U(uint64_t(a) * uint64_t(int64_t(factor)))));
  if (std::is_signed_v<T> && divisor == -1) return bitsOf(T(U(0) - U(a)));
  if (std::is_signed_v<T>) return bitsOf(T(int64_t(a) / divisor));
  return bitsOf(T(uint64_t(a) / uint64_t(divisor)));
}

// Sums are exact or rounded once in double, and 53 >= 2 * 24 + 2 bits makes the second
// rounding to float innocuous; products are exact in double.
uint64_t f32Ref(snclRedOp_t op, uint64_t a, uint64_t b) {
  return bitsOf(float(refOp(op, fromBits<float>(a), fromBits<float>(b))));
}
uint64_t f64Ref(snclRedOp_t op, uint64_t a, uint64_t b) {
  return bitsOf(refOp(op, fromBits<double>(a), fromBits<double>(b)));
}
template <const Format& F>
uint64_t narrowRef(snclRedOp_t op, uint64_t a, uint64_t b) {
  return encode(F, refOp(op, decode(F, uint32_t(a)), decode(F, uint32_t(b))));
}
// The factor is rounded to float; the product is exact in double and rounded once.
uint64_t f32ScaleRef(uint64_t x, double factor, int64_t) {
  return bitsOf(float(double(fromBits<float>(x)) * double(float(factor))));
}
uint64_t f64ScaleRef(uint64_t x, double factor, int64_t) { return bitsOf(fromBits<double>(x) * factor); }
template <const Format& F>
uint64_t narrowScaleRef(uint64_t x, double factor, int64_t) {
  return encode(F, decode(F, uint32_t(x)) * double(float(factor)));
}

// ---- test data

// Random bits, often an edge value (0, 1, all ones, the signed minimum and maximum).
uint64_t randomInt(std::mt19937_64& rng, size_t size) {
  uint64_t top = uint64_t(1) << (8 * size - 1);
  const uint64_t edges[] = {0, 1, ~uint64_t(0), top, top - 1};
  return rng() % 4 == 0 ? edges[rng() % 5] : rng();
}

// Mostly values near 1 (so that sums and products round in interesting ways), else any
// bit pattern or a special value (zeros, inf, NaNs, subnormals, extremes).
template <class F, class B>
uint64_t randomFloat(std::mt19937_64& rng) {
  constexpr int kMant = std::numeric_limits<F>::digits - 1, kBias = std::numeric_limits<F>::max_exponent - 1;
  constexpr B kExpMask = B(2 * kBias + 1) << kMant, kSign = B(1) << (8 * sizeof(B) - 1);
  const B specials[] = {0, kSign, kExpMask, kExpMask | kSign, kExpMask | B(1) << (kMant - 1),
                        kExpMask | 1, kSign | kExpMask | 3, 1, (B(1) << kMant) - 1, B(1) << kMant,
                        kExpMask - 1};
  switch (rng() % 8) {
    case 0: return rng();
    case 1: return specials[rng() % std::size(specials)];
    default: return (rng() & kSign) | B(kBias - 12 + rng() % 25) << kMant | (rng() & ((B(1) << kMant) - 1));
  }
}

struct TypeCase {
  snclDataType_t type;
  uint64_t (*ref)(snclRedOp_t, uint64_t, uint64_t);
  uint64_t (*scaleRef)(uint64_t, double, int64_t);
  uint64_t (*random)(std::mt19937_64&);
};

template <class T>
uint64_t randomIntOf(std::mt19937_64& rng) {
  return randomInt(rng, sizeof(T));
}
template <int Bits>
uint64_t randomBits(std::mt19937_64& rng) {
  return rng() & ((1u << Bits) - 1);
}

const TypeCase kTypes[] = {
    {snclInt8, intRef<int8_t>, intScaleRef<int8_t>, randomIntOf<int8_t>},
    {snclUint8, intRef<uint8_t>, intScaleRef<uint8_t>, randomIntOf<uint8_t>},
    {snclInt32, intRef<int32_t>, intScaleRef<int32_t>, randomIntOf<int32_t>},
    {snclUint32, intRef<uint32_t>, intScaleRef<uint32_t>, randomIntOf<uint32_t>},
    {snclInt64, intRef<int64_t>, intScaleRef<int64_t>, randomIntOf<int64_t>},
    {snclUint64, intRef<uint64_t>, intScaleRef<uint64_t>, randomIntOf<uint64_t>},
    {snclFloat16, narrowRef<kFp16>, narrowScaleRef<kFp16>, randomBits<16>},
    {snclFloat32, f32Ref, f32ScaleRef, randomFloat<float, uint32_t>},
    {snclFloat64, f64Ref, f64ScaleRef, randomFloat<double, uint64_t>},
    {snclBfloat16, narrowRef<kBf16>, narrowScaleRef<kBf16>, randomBits<16>},
    {snclFloat8e4m3, narrowRef<kE4m3>, narrowScaleRef<kE4m3>, randomBits<8>},
    {snclFloat8e5m2, narrowRef<kE5m2>, narrowScaleRef<kE5m2>, randomBits<8>},
};

const TypeCase& typeCase(snclDataType_t type) { return kTypes[type]; }

std::vector<uint64_t> randomValues(const TypeCase& tc, std::mt19937_64& rng, size_t count) {
  size_t bits = 8 * dtypeSize(tc.type);
  std::vector<uint64_t> v(count);
  for (uint64_t& x : v) x = tc.random(rng) & (bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1);
  return v;
}

// float32/float64 NaNs may carry any payload; everything else must match bit for bit.
bool sameResult(snclDataType_t type, uint64_t got, uint64_t want) {
  if (type == snclFloat32) return got == want || (std::isnan(fromBits<float>(got)) && std::isnan(fromBits<float>(want)));
  if (type == snclFloat64) return got == want || (std::isnan(fromBits<double>(got)) && std::isnan(fromBits<double>(want)));
  return got == want;
}

// n elements placed `offset` elements past a 64-byte boundary, with guard bytes around
// them that a kernel must not touch.
class Buffer {
 public:
  Buffer(size_t size, const std::vector<uint64_t>& values, size_t offset)
      : size_(size), count_(values.size()), bytes_((count_ + offset) * size + 2 * kGuard + 64, kPattern) {
    uintptr_t base = reinterpret_cast<uintptr_t>(bytes_.data());
    begin_ = (base + kGuard + 63) / 64 * 64 - base + offset * size;
    for (size_t i = 0; i < count_; ++i) memcpy(data() + i * size, &values[i], size);
  }
  unsigned char* data() { return bytes_.data() + begin_; }
  uint64_t at(size_t i) {
    uint64_t v = 0;
    memcpy(&v, data() + i * size_, size_);
    return v;
  }
  bool guardsIntact() const {
    auto intact = [](unsigned char c) { return c == kPattern; };
    return std::all_of(bytes_.begin(), bytes_.begin() + begin_, intact) &&
           std::all_of(bytes_.begin() + begin_ + count_ * size_, bytes_.end(), intact);
  }

 private:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kPattern = 0xa5;
  size_t size_, count_, begin_;
  std::vector<unsigned char> bytes_;
};

std::string hex(uint64_t v) {
  char s[24];
  snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(v));
  return s;
}

// Compares out against want; returns a description of the first difference, or "".
std::string firstMismatch(snclDataType_t type, Buffer& out, const std::vector<uint64_t>& want,
                          const std::vector<uint64_t>& a, const std::vector<uint64_t>* b) {
  if (!out.guardsIntact()) return "wrote outside the output";
  for (size_t i = 0; i < want.size(); ++i) {
    if (sameResult(type, out.at(i), want[i])) continue;
    return "element " + std::to_string(i) + " of " + std::to_string(want.size()) + ": a=" + hex(a[i]) +
           (b ? " b=" + hex((*b)[i]) : "") + " got " + hex(out.at(i)) + " want " + hex(want[i]);
  }
  return "";
}

enum class Alias { None, DstIsA, DstIsB };

// Runs fn with a, b and dst at the given element offsets, dst separate or one of the inputs.
std::string checkReduce(ReduceFn fn, snclDataType_t type, const std::vector<uint64_t>& a,
                        const std::vector<uint64_t>& b, const std::vector<uint64_t>& want, size_t offset,
                        Alias alias) {
  size_t size = dtypeSize(type);
  Buffer ba(size, a, offset), bb(size, b, (offset + 1) % 4), bd(size, std::vector<uint64_t>(a.size()), (offset + 2) % 4);
  Buffer& dst = alias == Alias::DstIsA ? ba : alias == Alias::DstIsB ? bb : bd;
  fn(dst.data(), ba.data(), bb.data(), a.size());
  std::string bad = firstMismatch(type, dst, want, a, &b);
  if (bad.empty() && alias == Alias::None && !(ba.guardsIntact() && bb.guardsIntact())) bad = "inputs damaged";
  for (size_t i = 0; bad.empty() && alias == Alias::None && i < a.size(); ++i)
    if (ba.at(i) != a[i] || bb.at(i) != b[i]) bad = "input " + std::to_string(i) + " changed";
  return bad;
}

std::vector<uint64_t> expected(const TypeCase& tc, snclRedOp_t op, const std::vector<uint64_t>& a,
                               const std::vector<uint64_t>& b) {
  std::vector<uint64_t> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = tc.ref(op, a[i], b[i]);
  return want;
}

// The ops that apply to type.
std::vector<snclRedOp_t> opsOf(snclDataType_t type) {
  std::vector<snclRedOp_t> ops(std::begin(kOps), std::end(kOps));
  if (type <= snclUint64) ops.insert(ops.end(), std::begin(kIntOps), std::end(kIntOps));
  return ops;
}

// Checks every op on every instruction set for these pairs (offset 0, dst separate).
void checkAllOps(snclDataType_t type, const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  for (snclRedOp_t op : kOps) {
    std::vector<uint64_t> want = expected(typeCase(type), op, a, b);
    for (ReduceIsa isa : supportedIsas()) {
      INFO(dtypeName(type) << " " << redOpName(op) << " " << reduceIsaName(isa));
      CHECK(checkReduce(reduceKernel(type, op, isa), type, a, b, want, 0, Alias::None) == "");
    }
  }
}

// One element through every instruction set; all must agree, and the result is returned.
uint64_t reduceOne(snclDataType_t type, snclRedOp_t op, uint64_t a, uint64_t b) {
  std::vector<uint64_t> results;
  for (ReduceIsa isa : supportedIsas()) {
    uint64_t out = 0;
    reduceKernel(type, op, isa)(&out, &a, &b, 1);
    results.push_back(out);
  }
  INFO(dtypeName(type) << " " << redOpName(op) << " " << hex(a) << " " << hex(b));
  CHECK(std::count(results.begin(), results.end(), results[0]) == long(results.size()));
  return results[0];
}

uint64_t scaleOne(snclDataType_t type, uint64_t x, double factor, int64_t divisor) {
  std::vector<uint64_t> results;
  for (ReduceIsa isa : supportedIsas()) {
    uint64_t out = 0;
    scaleKernel(type, isa)(&out, &x, 1, factor, divisor);
    results.push_back(out);
  }
  CHECK(std::count(results.begin(), results.end(), results[0]) == long(results.size()));
  return results[0];
}

}  // namespace

TEST_CASE("data type and op metadata") {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  const char* names[] = {"int8",    "uint8",   "int32",    "uint32",     "int64",     "uint64",
                         "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  for (int t = 0; t < snclNumTypes; ++t) {
    CHECK(kTypes[t].type == t);  // typeCase() indexes by type
    CHECK(dtypeValid(t));
    CHECK(dtypeSize(snclDataType_t(t)) == sizes[t]);
    CHECK(std::string(dtypeName(snclDataType_t(t))) == names[t]);
  }
  CHECK_FALSE(dtypeValid(-1));
  CHECK_FALSE(dtypeValid(snclNumTypes));
  CHECK(dtypeSize(snclNumTypes) == 0);
  CHECK(std::string(redOpName(snclSum)) == "sum");
  CHECK(std::string(redOpName(snclAvg)) == "avg");
  const char* intOpNames[] = {"band", "bor", "bxor", "land", "lor", "lxor"};
  for (size_t k = 0; k < std::size(kIntOps); ++k) {
    CHECK(std::string(redOpName(kIntOps[k])) == intOpNames[k]);
    CHECK(redOpIntegerOnly(kIntOps[k]));
  }
  for (snclRedOp_t op : {snclSum, snclProd, snclMax, snclMin, snclAvg}) CHECK_FALSE(redOpIntegerOnly(op));
  CHECK(std::string(redOpName(snclNumOps)) == "invalid");
  for (int t = 0; t < snclNumTypes; ++t) CHECK(dtypeInteger(snclDataType_t(t)) == (t <= snclUint64));
}

TEST_CASE("every type and op has a kernel on every supported instruction set") {
  REQUIRE(reduceIsaSupported(ReduceIsa::Portable));
  if (!std::getenv("SNCL_REDUCE_ISA")) {  // the dispatcher takes the best
    CHECK(std::string(reduceIsa()) == reduceIsaName(supportedIsas().back()));
    CHECK(reduceKernel(snclFloat32, snclSum) == reduceKernel(snclFloat32, snclSum, supportedIsas().back()));
    CHECK(scaleKernel(snclFloat16) == scaleKernel(snclFloat16, supportedIsas().back()));
  }
  for (ReduceIsa isa : supportedIsas()) {
    for (int t = 0; t < snclNumTypes; ++t) {
      for (snclRedOp_t op : kOps) CHECK(reduceKernel(snclDataType_t(t), op, isa) != nullptr);
      for (snclRedOp_t op : kIntOps) CHECK((reduceKernel(snclDataType_t(t), op, isa) != nullptr) == (t <= snclUint64));
      CHECK(reduceKernel(snclDataType_t(t), snclAvg, isa) == nullptr);
      CHECK(scaleKernel(snclDataType_t(t), isa) != nullptr);
    }
  }
  CHECK(reduceKernel(snclNumTypes, snclSum) == nullptr);
  CHECK(reduceKernel(snclFloat32, snclNumOps) == nullptr);
  CHECK(scaleKernel(snclNumTypes) == nullptr);
}

TEST_CASE("kernels match the reference for every count, alignment and aliasing") {
  std::mt19937_64 rng(1);
  for (const TypeCase& tc : kTypes) {
    for (size_t count : kCounts) {
      std::vector<uint64_t> a = randomValues(tc, rng, count), b = randomValues(tc, rng, count);
      for (snclRedOp_t op : opsOf(tc.type)) {
        std::vector<uint64_t> want = expected(tc, op, a, b);
        for (ReduceIsa isa : supportedIsas()) {
          for (size_t offset = 0; offset < 4; ++offset) {
            for (Alias alias : {Alias::None, Alias::DstIsA, Alias::DstIsB}) {
              INFO(dtypeName(tc.type) << " " << redOpName(op) << " " << reduceIsaName(isa) << " count " << count
                                      << " offset " << offset << " alias " << int(alias));
              CHECK(checkReduce(reduceKernel(tc.type, op, isa), tc.type, a, b, want, offset, alias) == "");
            }
          }
        }
      }
    }
  }
}

TEST_CASE("bitwise and logical ops: every integer type, random values and lengths") {
  // Lengths: zero, odd, prime and random; values: zeros (a third, so that the logical ops
  // see every pairing), single bits anywhere (a nonzero test of the low byte alone fails
  // them) and random bits.
  std::mt19937_64 rng(4);
  const size_t primes[] = {2, 3, 5, 11, 13, 61, 127, 257, 521, 1031, 4093, 8191};
  for (int round = 0; round < 24; ++round) {
    const size_t count = round == 0 ? 0 : round % 3 == 0 ? primes[rng() % std::size(primes)]
                                        : round % 3 == 1 ? (rng() % 5000) | 1
                                                         : rng() % 5000;
    for (const TypeCase& tc : kTypes) {
      if (tc.type > snclUint64) continue;
      const size_t bits = 8 * dtypeSize(tc.type);
      const uint64_t mask = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
      auto draw = [&] {
        std::vector<uint64_t> v(count);
        for (uint64_t& x : v) {
          const uint64_t k = rng() % 3;
          x = k == 0 ? 0 : k == 1 ? uint64_t(1) << (rng() % bits) : rng() & mask;
        }
        return v;
      };
      const std::vector<uint64_t> a = draw(), b = draw();
      const size_t offset = rng() % 4;
      const Alias alias = Alias(rng() % 3);
      for (snclRedOp_t op : kIntOps) {
        const std::vector<uint64_t> want = expected(tc, op, a, b);
        for (ReduceIsa isa : supportedIsas()) {
          INFO(dtypeName(tc.type) << " " << redOpName(op) << " " << reduceIsaName(isa) << " count " << count
                                  << " offset " << offset << " alias " << int(alias));
          CHECK(checkReduce(reduceKernel(tc.type, op, isa), tc.type, a, b, want, offset, alias) == "");
        }
      }
    }
  }
}

TEST_CASE("fp8: every pair of values") {
  std::vector<uint64_t> a, b;
  for (uint64_t x = 0; x < 256; ++x)
    for (uint64_t y = 0; y < 256; ++y) a.push_back(x), b.push_back(y);
  checkAllOps(snclFloat8e4m3, a, b);
  checkAllOps(snclFloat8e5m2, a, b);
}

TEST_CASE("float16 and bfloat16: every value against random partners and rounding ties") {
  std::mt19937_64 rng(2);
  for (snclDataType_t type : {snclFloat16, snclBfloat16}) {
    const Format& f = type == snclFloat16 ? kFp16 : kBf16;
    std::vector<uint64_t> a, b;
    for (uint32_t x = 0; x < 65536; ++x) {
      for (int k = 0; k < 8; ++k) a.push_back(x), b.push_back(rng() & 0xffff);
      // Partners that make x + y exactly halfway between two neighbours: half an ulp of x,
      // with either sign, and three halves.
      double v = decode(f, x);
      if (!std::isfinite(v) || v == 0) continue;
      for (double m : {0.5, -0.5, 1.5}) {
        double half = std::ldexp(m, std::max(std::ilogb(v), 1 - f.bias()) - f.mantBits);
        uint32_t y = encode(f, half);
        if (decode(f, y) == half) a.push_back(x), b.push_back(y);
      }
    }
    checkAllOps(type, a, b);
  }
}

TEST_CASE("scale matches the reference (avg and pre-multiplied sums)") {
  std::mt19937_64 rng(3);
  const double factors[] = {1.0 / 3, 1.0 / 6, 0.1, 0.125, 3.0, 1e-3, -0.5, 1.0 / 24576, 7e30};
  const int64_t divisors[] = {1, 2, 3, 7, 8, 255, -1, -3, 0};
  for (const TypeCase& tc : kTypes) {
    bool integer = tc.type <= snclUint64;
    size_t size = dtypeSize(tc.type);
    // Every bit pattern of narrow types, random values otherwise; and every count.
    std::vector<std::vector<uint64_t>> inputs;
    if (size <= 2 && !integer) {
      inputs.emplace_back(size_t(1) << (8 * size));
      for (size_t i = 0; i < inputs[0].size(); ++i) inputs[0][i] = i;
    }
    for (size_t count : kCounts) inputs.push_back(randomValues(tc, rng, count));
    for (const std::vector<uint64_t>& src : inputs) {
      for (size_t k = 0; k < (integer ? std::size(divisors) : std::size(factors)); ++k) {
        double factor = integer ? -3 : factors[k];
        int64_t divisor = integer ? divisors[k] : 0;
        std::vector<uint64_t> want(src.size());
        for (size_t i = 0; i < src.size(); ++i) want[i] = tc.scaleRef(src[i], factor, divisor);
        for (ReduceIsa isa : supportedIsas()) {
          for (size_t offset = 0; offset < 4; ++offset) {
            for (bool inPlace : {false, true}) {
              INFO(dtypeName(tc.type) << " " << reduceIsaName(isa) << " count " << src.size() << " factor "
                                      << factor << " divisor " << divisor << " offset " << offset
                                      << (inPlace ? " in place" : ""));
              Buffer in(size, src, offset), out(size, std::vector<uint64_t>(src.size()), 3 - offset);
              Buffer& dst = inPlace ? in : out;
              scaleKernel(tc.type, isa)(dst.data(), in.data(), src.size(), factor, divisor);
              CHECK(firstMismatch(tc.type, dst, want, src, nullptr) == "");
            }
          }
        }
      }
    }
  }
}

TEST_CASE("semantics, by example") {
  // Narrow types: overflow and NaN.
  CHECK(reduceOne(snclFloat16, snclSum, 0x7bff, 0x4c00) == 0x7c00);          // 65504 + 16 ties to inf
  CHECK(reduceOne(snclFloat16, snclSum, 0x7e01, 0x3c00) == 0x7fff);          // NaN payloads become canonical
  CHECK(reduceOne(snclBfloat16, snclSum, 0xffc1, 0x3f80) == 0x7fff);
  CHECK(reduceOne(snclBfloat16, snclSum, 0x0001, 0x0001) == 0x0002);          // subnormals are kept
  CHECK(reduceOne(snclFloat8e4m3, snclSum, 0x7e, 0x7e) == 0x7e);              // 448 + 448 saturates
  CHECK(reduceOne(snclFloat8e4m3, snclProd, 0xfe, 0x7e) == 0xfe);
  CHECK(reduceOne(snclFloat8e4m3, snclSum, 0x7f, 0x38) == 0x7f);              // NaN + 1
  CHECK(reduceOne(snclFloat8e5m2, snclSum, 0x7b, 0x7b) == 0x7c);              // 57344 + 57344 is inf
  // max/min ignore one NaN, and order -0 below +0, either way round.
  const uint64_t nan = 0x7fc00000, one = 0x3f800000, pz = 0, nz = 0x80000000;
  for (auto [x, y] : {std::pair{nan, one}, std::pair{one, nan}}) {
    CHECK(reduceOne(snclFloat32, snclMax, x, y) == one);
    CHECK(reduceOne(snclFloat32, snclMin, x, y) == one);
  }
  CHECK(std::isnan(fromBits<float>(reduceOne(snclFloat32, snclMax, nan, nan))));
  for (auto [x, y] : {std::pair{pz, nz}, std::pair{nz, pz}}) {
    CHECK(reduceOne(snclFloat32, snclMax, x, y) == pz);
    CHECK(reduceOne(snclFloat32, snclMin, x, y) == nz);
  }
  CHECK(reduceOne(snclFloat16, snclMax, 0x7e00, 0xbc00) == 0xbc00);           // max(NaN, -1) = -1
  // Integers wrap; avg truncates toward zero.
  CHECK(reduceOne(snclInt8, snclSum, 0x7f, 0x01) == 0x80);
  CHECK(reduceOne(snclInt64, snclProd, uint64_t(INT64_MIN), uint64_t(-1)) == uint64_t(INT64_MIN));
  // Logical ops: any nonzero bit is true (not only the low byte's), results are 1 or 0.
  CHECK(reduceOne(snclInt32, snclLand, 0x100, 0x80000000) == 1);
  CHECK(reduceOne(snclUint64, snclLor, uint64_t(1) << 63, 0) == 1);
  CHECK(reduceOne(snclInt8, snclLxor, 0x80, 0x01) == 0);
  CHECK(reduceOne(snclUint8, snclLand, 0xff, 0) == 0);
  CHECK(reduceOne(snclInt64, snclBxor, 0xf0f0, 0xff00) == 0x0ff0);
  CHECK(scaleOne(snclInt32, uint32_t(-7), 0, 2) == uint32_t(-3));
  CHECK(scaleOne(snclInt64, uint64_t(INT64_MIN), 0, -1) == uint64_t(INT64_MIN));
  CHECK(scaleOne(snclUint8, 255, 2.0, 0) == 254);
  // Scaling rounds the exact product once: 3 * 2^-24 * float(1/6) is just above 2^-25,
  // which a float multiply would round to, and then float16 to 0 (ties to even).
  CHECK(scaleOne(snclFloat16, 0x0003, 1.0 / 6, 0) == 0x0001);
}

// Run in a child process by the next test, with SNCL_REDUCE_ISA set: the choice is made
// once per process.
TEST_CASE("SNCL_REDUCE_ISA child", "[.isa-child]") {
  const char* want = std::getenv("SNCL_EXPECT_ISA");
  REQUIRE(want);
  CHECK(std::string(reduceIsa()) == want);
}

TEST_CASE("SNCL_REDUCE_ISA overrides the choice") {
  auto runChild = [](const std::string& request, const char* expect) {
    std::vector<std::string> vars{"SNCL_REDUCE_ISA=" + request, std::string("SNCL_EXPECT_ISA=") + expect};
    for (char** e = environ; *e; ++e)
      if (strncmp(*e, "SNCL_REDUCE_ISA=", 16) && strncmp(*e, "SNCL_EXPECT_ISA=", 16)) vars.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    char exe[] = "/proc/self/exe", spec[] = "[isa-child]", out[] = "--out", devnull[] = "/dev/null";
    char* argv[] = {exe, spec, out, devnull, nullptr};
    pid_t pid;
    if (posix_spawn(&pid, exe, nullptr, nullptr, argv, envp.data()) != 0) return -1;
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  const char* best = reduceIsaName(supportedIsas().back());
  for (ReduceIsa isa : supportedIsas()) CHECK(runChild(reduceIsaName(isa), reduceIsaName(isa)) == 0);
  CHECK(runChild("AVX2-please", best) == 0);  // unknown: warns, keeps the best
  CHECK(runChild(best, supportedIsas().size() > 1 ? "portable" : "avx2") != 0);  // the child really checks
}
