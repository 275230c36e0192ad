#include "tools/randtest/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tests/util/data.h"  // storeElement/loadElement (the type conversions, tested there), mix64

namespace randtest {

namespace {

// Inputs repeat with this prime period, so that a large call costs O(period * nranks) to
// prepare instead of O(count * nranks). A result misplaced by a multiple of it would pass;
// no chunk or block size of the library is a multiple of a prime this large.
constexpr size_t kPeriod = 65521;

bool isInteger(snclDataType_t t) { return t <= snclUint64; }
bool isSigned(snclDataType_t t) { return t == snclInt8 || t == snclInt32 || t == snclInt64; }
int bitsOf(snclDataType_t t) { return static_cast<int>(elemSize(t)) * 8; }
uint64_t maskOf(snclDataType_t t) { return bitsOf(t) == 64 ? ~0ull : (1ull << bitsOf(t)) - 1; }

// Two's complement value of bits (masked to the type) as int64.
int64_t signedOf(snclDataType_t t, uint64_t bits) {
  const int b = bitsOf(t);
  if (b < 64 && (bits >> (b - 1) & 1)) bits |= ~maskOf(t);
  return static_cast<int64_t>(bits);
}

int mantBits(snclDataType_t t) {
  switch (t) {
    case snclFloat16: return 10;
    case snclBfloat16: return 7;
    case snclFloat8e4m3: return 3;
    case snclFloat8e5m2: return 2;
    case snclFloat32: return 23;
    default: return 52;
  }
}
// Largest K with 2^K and 2^-K both exact (finite, not below the smallest subnormal).
int expBudget(snclDataType_t t) {
  switch (t) {
    case snclFloat16: return 14;
    case snclFloat8e4m3: return 8;
    case snclFloat8e5m2: return 15;
    default: return 60;
  }
}
// Smallest exponent of a normal number.
int minNormalExp(snclDataType_t t) {
  switch (t) {
    case snclFloat16: return -14;
    case snclFloat8e4m3: return -6;
    case snclFloat8e5m2: return -14;
    case snclFloat32:
    case snclBfloat16: return -126;
    default: return -1022;
  }
}

double ulpOf(snclDataType_t t, double x) {
  const int e = x == 0 ? minNormalExp(t) : std::max(std::ilogb(std::fabs(x)), minNormalExp(t));
  return std::ldexp(1.0, e - mantBits(t));
}

// Exact equality of results: any NaN matches any NaN; zeros keep their sign.
bool sameFloat(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// IEEE 754-2019 maximumNumber/minimumNumber with -0 below +0 (lib/exec/reduce.h's max/min).
double maxNum(double a, double b, bool max) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b && a == 0) return (std::signbit(a) == max) ? b : a;
  return (max ? b > a : b < a) ? b : a;
}

// A share of an integer budget per rank at element i: together at most budget.
int64_t shareOf(int64_t budget, int nranks, int rank, size_t i) {
  if (budget >= nranks) return budget / nranks;
  return (static_cast<size_t>(rank) + i) % static_cast<size_t>(nranks) < static_cast<size_t>(budget) ? 1 : 0;
}

uint64_t hash(uint64_t x) { return sncl::test::mix64(x); }

}  // namespace

Reference::Reference(const Call& call, uint64_t salt, int nranks, size_t elements)
    : call_(call), nranks_(nranks), elem_(elemSize(call.type)) {
  const snclDataType_t t = call.type;
  const int op = call.op;
  period_ = std::max<size_t>(1, std::min(kPeriod, elements));
  Rng rng(salt);
  // The quantum of float sums: 1/4, 1 or 4, so fractions and larger magnitudes both occur.
  const double q = std::ldexp(1.0, 2 * static_cast<int>(rng.below(3)) - 2);
  // Pre-multiplied sums: scalars +-{1/2, 1, 2} (floats) or small integers; their largest
  // magnitude (2, and the quantum halved by 1/2) costs a factor 4 of the sum's budget.
  scalars_.resize(nranks);
  std::vector<double> scalar(nranks, 1.0);
  for (int r = 0; r < nranks; ++r) {
    Rng s(mix(salt, 1000 + r));
    if (isInteger(t)) {
      const int64_t lim = elem_ == 1 ? (isSigned(t) ? 127 : 255) : 1000;
      scalar[r] = static_cast<double>(isSigned(t) ? s.range(static_cast<int>(-std::min<int64_t>(lim, 128)), static_cast<int>(lim))
                                                  : s.range(0, static_cast<int>(lim)));
    } else {
      static const double kScalars[] = {1, 2, 0.5, -1, -2, -0.5};
      scalar[r] = kScalars[s.below(6)];
    }
    sncl::test::storeElement(t, scalars_[r].bytes, 0, scalar[r]);
  }
  const int64_t sumBudget = std::min<int64_t>(int64_t(1) << 50, int64_t(1) << (mantBits(t) + 1));
  in_.assign(nranks, std::vector<unsigned char>(period_ * elem_));
  std::vector<double> v(nranks);
  std::vector<uint64_t> bits(nranks);
  if (isInteger(t)) outInt_.resize(period_);
  else outFloat_.resize(period_);
  outBytes_.resize(period_ * elem_);
  for (size_t i = 0; i < period_; ++i) {
    for (int r = 0; r < nranks; ++r) {
      const uint64_t h = hash(salt ^ hash(static_cast<uint64_t>(r) << 48 ^ i));
      unsigned char* dst = in_[r].data() + i * elem_;
      if (isInteger(t)) {
        uint64_t x = h & maskOf(t);
        if (op == snclProd) {  // small factors (they still overflow and wrap over 8 ranks)
          x = static_cast<uint64_t>(isSigned(t) ? static_cast<int64_t>(h % 9) - 4 : static_cast<int64_t>(h % 5)) & maskOf(t);
        } else if (op == snclBand || op == snclBor) {
          // Denser or sparser bits, so that and/or over 8 ranks are not all zeros or ones.
          const uint64_t g = hash(h + 2);
          x = (op == snclBand ? h | g : h & g) & maskOf(t);
        } else if (op == snclLand || op == snclLor || op == snclLxor) {
          // Zeros at a density the element draws (the same on every rank: 1/16, 1/2 or
          // 15/16), so that every outcome occurs on any number of ranks; a nonzero value is
          // often a single high bit, which a test of the low byte alone misses.
          const uint64_t density = hash(salt ^ i ^ 0x10ca1) % 3, z = h >> 8 & 15;
          const bool zero = density == 0 ? z == 0 : density == 1 ? z < 8 : z != 15;
          x = zero ? 0 : (h & 1) ? (1ull << (h >> 16) % static_cast<uint64_t>(bitsOf(t))) : (x ? x : 1);
        }
        memcpy(dst, &x, elem_);  // little-endian: the low bytes are the value
        bits[r] = x;
        continue;
      }
      double x;
      if (op == snclMax || op == snclMin) {
        // Any encoding; signed zeros now and then, since random bits rarely give them.
        const uint64_t b = hash(h + 1);
        memcpy(dst, &b, elem_);
        if (h % 16 == 0) sncl::test::storeElement(t, dst, 0, (h >> 4 & 1) ? -0.0 : 0.0);
        x = sncl::test::loadElement(t, dst, 0);
      } else if (op == snclProd) {
        const int64_t m = shareOf(expBudget(t), nranks, r, i);
        const int k = static_cast<int>(static_cast<int64_t>(h % static_cast<uint64_t>(2 * m + 1)) - m);
        x = h % 32 == 7 ? 0.0 : std::ldexp((h >> 40 & 1) ? -1.0 : 1.0, k);
        sncl::test::storeElement(t, dst, 0, x);
      } else {
        const int64_t m = shareOf(op == kPreMulSum ? sumBudget / 4 : sumBudget, nranks, r, i);
        const int64_t a = static_cast<int64_t>((h >> 8) % static_cast<uint64_t>(2 * m + 1)) - m;
        x = static_cast<double>(a) * q;
        sncl::test::storeElement(t, dst, 0, x);
      }
      v[r] = x;
    }
    unsigned char* out = outBytes_.data() + i * elem_;
    if (isInteger(t)) {
      const uint64_t mask = maskOf(t);
      uint64_t acc = 0;
      for (int r = 0; r < nranks; ++r) {
        uint64_t x = bits[r];
        if (op == kPreMulSum) x = x * static_cast<uint64_t>(static_cast<int64_t>(scalar[r])) & mask;
        if (r == 0) acc = x;
        else if (op == snclProd) acc = acc * x & mask;
        else if (op == snclBand) acc &= x;
        else if (op == snclBor) acc |= x;
        else if (op == snclBxor) acc ^= x;
        else if (op == snclLand) acc = acc != 0 && x != 0;
        else if (op == snclLor) acc = acc != 0 || x != 0;
        else if (op == snclLxor) acc = (acc != 0) != (x != 0);
        else if (op == snclMax || op == snclMin) {
          const bool greater = isSigned(t) ? signedOf(t, x) > signedOf(t, acc) : x > acc;
          const bool less = isSigned(t) ? signedOf(t, x) < signedOf(t, acc) : x < acc;
          if (op == snclMax ? greater : less) acc = x;
        } else acc = (acc + x) & mask;
      }
      if (op == snclAvg)
        acc = (isSigned(t) ? static_cast<uint64_t>(signedOf(t, acc) / nranks) : acc / static_cast<uint64_t>(nranks)) & mask;
      outInt_[i] = acc;
      memcpy(out, &acc, elem_);
    } else {
      double acc = 0;
      for (int r = 0; r < nranks; ++r) {
        const double x = op == kPreMulSum ? v[r] * scalar[r] : v[r];
        if (r == 0) acc = x;
        else if (op == snclProd) acc *= x;
        else if (op == snclMax || op == snclMin) acc = maxNum(acc, x, op == snclMax);
        else acc += x;
      }
      if (op == snclAvg) acc /= nranks;
      outFloat_[i] = acc;
      sncl::test::storeElement(t, out, 0, acc);
    }
  }
}

void Reference::fillInput(int rank, void* dst, size_t count, size_t first) const {
  auto* d = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < count) {
    const size_t at = (first + done) % period_, n = std::min(count - done, period_ - at);
    memcpy(d + done * elem_, in_[rank].data() + at * elem_, n * elem_);
    done += n;
  }
}

bool Reference::elementOk(const void* got, size_t i, size_t at, int rank) const {
  const snclDataType_t t = call_.type;
  const auto* g = static_cast<const unsigned char*>(got) + i * elem_;
  if (rank >= 0) return memcmp(g, in_[rank].data() + at * elem_, elem_) == 0;
  if (isInteger(t)) {
    uint64_t bits = 0;
    memcpy(&bits, g, elem_);
    return bits == outInt_[at];
  }
  const double x = sncl::test::loadElement(t, g, 0), e = outFloat_[at];
  if (call_.op != snclAvg) return sameFloat(x, e);
  return std::fabs(x - e) <= ulpOf(t, e) + std::fabs(e) * 0x1p-23;
}

std::string Reference::describe(const void* got, size_t i, size_t at, int rank) const {
  const snclDataType_t t = call_.type;
  const auto* g = static_cast<const unsigned char*>(got) + i * elem_;
  char buf[200];
  if (rank >= 0 || isInteger(t)) {
    uint64_t gb = 0, eb = 0;
    memcpy(&gb, g, elem_);
    memcpy(&eb, rank >= 0 ? in_[rank].data() + at * elem_ : outBytes_.data() + at * elem_, elem_);
    snprintf(buf, sizeof buf, "got 0x%llx, expected 0x%llx%s", static_cast<unsigned long long>(gb),
             static_cast<unsigned long long>(eb), rank >= 0 ? " (input must stay)" : "");
  } else {
    snprintf(buf, sizeof buf, "got %.17g, expected %.17g", sncl::test::loadElement(t, g, 0), outFloat_[at]);
  }
  return buf;
}

size_t Reference::checkResult(const void* got, size_t count, size_t first, std::string* note, int rank) const {
  const auto* g = static_cast<const unsigned char*>(got);
  const unsigned char* expect = rank >= 0 ? nullptr : outBytes_.data();
  size_t wrong = 0, done = 0;
  while (done < count) {
    const size_t at = (first + done) % period_, n = std::min(count - done, period_ - at);
    const unsigned char* e = rank >= 0 ? in_[rank].data() + at * elem_ : expect + at * elem_;
    // Fast path: identical bytes (avg compares every element against its bound).
    const bool exactOp = rank >= 0 || isInteger(call_.type) || call_.op != snclAvg;
    if (!exactOp || memcmp(g + done * elem_, e, n * elem_) != 0) {
      for (size_t k = 0; k < n; ++k) {
        if (elementOk(g, done + k, at + k, rank)) continue;
        if (wrong++ == 0 && note)
          *note = "element " + std::to_string(first + done + k) + ": " + describe(g, done + k, at + k, rank);
      }
    }
    done += n;
  }
  return wrong;
}

void fillPattern(uint64_t stream, size_t elem, void* dst, size_t count, size_t first) {
  auto* d = static_cast<unsigned char*>(dst);
  const uint64_t s = hash(stream * 0x9e3779b97f4a7c15ull + 1);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = hash(s ^ (first + i));
    memcpy(d + i * elem, &h, elem);
  }
}

size_t checkPattern(uint64_t stream, size_t elem, const void* got, size_t count, size_t first, std::string* note) {
  const auto* g = static_cast<const unsigned char*>(got);
  const uint64_t s = hash(stream * 0x9e3779b97f4a7c15ull + 1);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = hash(s ^ (first + i));
    if (memcmp(g + i * elem, &h, elem) == 0) continue;
    if (wrong++ == 0 && note) {
      uint64_t gb = 0;
      memcpy(&gb, g + i * elem, elem);
      char buf[120];
      snprintf(buf, sizeof buf, "element %zu: got 0x%llx, expected 0x%llx", first + i,
               static_cast<unsigned long long>(gb), static_cast<unsigned long long>(h & (elem == 8 ? ~0ull : (1ull << (8 * elem)) - 1)));
      *note = buf;
    }
  }
  return wrong;
}

}  // namespace randtest
