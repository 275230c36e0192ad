// Shared parts of the reduction kernels: the narrow float formats and their scalar
// conversions, the loop every kernel runs, and the per-instruction-set kernel table.
// Included by reduce.cc (portable kernels, dispatch) and by reduce_avx2.cc and
// reduce_avx512.cc, which the build compiles with their own -m flags.
//
// An instruction set's kernels are "Lanes" classes, one per data type:
//   T                      storage type of one element
//   N                      elements per step (1 for portable code)
//   R                      what one step computes on: a register (narrow types widened to
//                          float), two registers (bfloat16), or a scalar (portable)
//   R load(const T*)       N elements from memory, widened as needed
//   void store(T*, R)      rounded back and written
//                          Both at any byte address (users may pass a float buffer at an
//                          odd one): memcpy or unaligned vector loads and stores (loadu,
//                          storeu), never a typed access, which would be undefined there.
//   R combine<Op>(R, R)    the reduction op (integers: bitwise and logical ops too, through
//                          bitwiseCombine)
//   Factor scaleFactor(double), R scale(R, Factor)   floating types only
#pragma once

#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lib/exec/reduce.h"

namespace sncl::reduce_impl {

struct KernelTable {
  // [type][op]: avg's slot stays empty (it is sum, then scale), and so do the bitwise and
  // logical ops' of the float types.
  ReduceFn reduce[snclNumTypes][snclNumOps];
  ScaleFn scale[snclNumTypes];
};
const KernelTable& portableKernels();
const KernelTable& avx2Kernels();
const KernelTable& avx512Kernels();

// Everything below has internal linkage on purpose: each instruction set's file compiles
// it with its own -m flags, and one shared (inline, external) copy could let the linker
// keep the AVX-512 build of a helper for the portable kernels. For the same reason these
// files use no out-of-line standard library templates.
namespace {

inline float asFloat(uint32_t u) { return __builtin_bit_cast(float, u); }
inline uint32_t asBits(float f) { return __builtin_bit_cast(uint32_t, f); }

// A float format narrower than float32, described by its bit layout. The conversions
// below work on float bit patterns, and the vector kernels reuse these constants.
template <int Bits, int Mant, int Bias, bool FiniteOnly>
struct NarrowFormat {
  static constexpr int kBits = Bits;
  static constexpr int kMant = Mant;
  static constexpr int kShift = 23 - Mant;  // float mantissa bits the format drops
  static constexpr uint32_t kAbsMask = (1u << (Bits - 1)) - 1;
  // Canonical NaN: every bit but the sign (0x7fff, 0x7f), as CUDA's conversions give.
  static constexpr uint32_t kNaN = kAbsMask;
  // Magnitudes (encoded) at or above this are inf or NaN. OCP E4M3FN ("finite") has no
  // inf and a single NaN magnitude.
  static constexpr uint32_t kSpecial = FiniteOnly ? kAbsMask : kAbsMask >> Mant << Mant;
  // Float bits minus this are the format's bits shifted left by kShift (normal numbers).
  static constexpr uint32_t kRebias = uint32_t(127 - Bias) << 23;
  static constexpr uint32_t kMinNormal = uint32_t(1 - Bias + 127) << 23;  // float bits
  // Rounding clamps |x| to this first: 2^(emax+1), which the rounding encodes as inf
  // (as values that round up to it), or for E4M3FN the largest finite value, 448, so that
  // overflow saturates like NCCL's fp8 conversions (__NV_SATFINITE) instead of giving NaN.
  // (Values kept as float bits.)
  static constexpr uint32_t kClamp = ((FiniteOnly ? kNaN - 1 : kSpecial) << kShift) + kRebias;
  // Adding this and the lowest kept bit, then shifting right by kShift, rebiases and
  // rounds to nearest, ties to even (half an ulp - 1, plus 1 for odd: ties go up).
  static constexpr uint32_t kRound = (1u << (kShift - 1)) - 1 - kRebias;
  // Below kMinNormal, adding this float rounds |x| to the format's subnormal spacing in
  // hardware (its ulp is that spacing); the result's low bits are then the encoding.
  static constexpr uint32_t kMagic = uint32_t(127 + 24 - Bias - Mant) << 23;
  // Widening: the format's bits shifted to float position, times this, are the value.
  static constexpr uint32_t kWidenScale = uint32_t(127 + 127 - Bias) << 23;
};
using Fp16 = NarrowFormat<16, 10, 15, false>;
using Bf16 = NarrowFormat<16, 7, 127, false>;
using E4m3 = NarrowFormat<8, 3, 7, true>;
using E5m2 = NarrowFormat<8, 2, 15, false>;

template <snclDataType_t D>
constexpr bool kIsInteger = D <= snclUint64;

template <snclDataType_t D>
using Storage = std::tuple_element_t<
    D, std::tuple<int8_t, uint8_t, int32_t, uint32_t, int64_t, uint64_t, uint16_t, float, double,
                  uint16_t, uint8_t, uint8_t>>;

// The narrow format of D (void for the other types).
template <snclDataType_t D>
using FormatOf = std::conditional_t<
    D == snclFloat16, Fp16,
    std::conditional_t<D == snclBfloat16, Bf16,
                       std::conditional_t<D == snclFloat8e4m3, E4m3,
                                          std::conditional_t<D == snclFloat8e5m2, E5m2, void>>>>;

// The format's bits moved to float position read as the value times 2^(Bias - 127) (its
// subnormals land on float subnormals); the multiply rebiases, exactly.
template <class F>
float widenScalar(uint32_t h) {
  uint32_t a = h & F::kAbsMask;
  uint32_t bits = asBits(asFloat(a << F::kShift) * asFloat(F::kWidenScale));
  bits |= a >= F::kSpecial ? 0x7f800000u : 0;
  return asFloat(bits | (h >> (F::kBits - 1)) << 31);
}

// Round to nearest even; see NarrowFormat for the constants.
template <class F>
uint32_t narrowScalar(float x) {
  uint32_t bits = asBits(x);
  uint32_t a = bits & 0x7fffffffu;
  uint32_t c = a < F::kClamp ? a : F::kClamp;
  uint32_t r = c < F::kMinNormal ? asBits(asFloat(c) + asFloat(F::kMagic)) - F::kMagic
                                 : (c + F::kRound + ((c >> F::kShift) & 1)) >> F::kShift;
  r |= (bits >> 31) << (F::kBits - 1);
  return a > 0x7f800000u ? F::kNaN : r;
}

// x * f rounded to float with round-to-odd (truncate, then set the last bit when inexact).
// Rounding that again to a format at least two bits narrower gives the correctly rounded
// product, which a float multiply followed by rounding would not (double rounding).
inline float mulRoundOdd(float x, float f) {
  double d = double(x) * double(f);  // exact: a narrow value has at most 11 significant bits
  float r = float(d);
  if (double(r) != d) {
    uint32_t b = asBits(r) - (__builtin_fabs(double(r)) > __builtin_fabs(d) ? 1 : 0);
    r = asFloat(b | 1);
  }
  return r;
}

// IEEE 754-2019 maximumNumber/minimumNumber with -0 < +0 (equal operands: the bitwise
// and/or picks +0 for max and -0 for min).
template <snclRedOp_t Op, class F>
F maxMinNumber(F a, F b) {
  using B = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  B x = __builtin_bit_cast(B, a), y = __builtin_bit_cast(B, b);
  F m = Op == snclMax ? (a > b ? a : b) : (a < b ? a : b);
  if (a == b) m = __builtin_bit_cast(F, Op == snclMax ? B(x & y) : B(x | y));
  return b != b ? a : a != a ? b : m;
}

constexpr bool isBitwise(snclRedOp_t op) { return op >= snclBand && op <= snclLxor; }

// Bitwise and logical ops on R, one T or a register of Ts (integer types only). One
// definition in GCC vector extensions serves every instruction set, since each file
// compiles it with its own -m flags. Logical ops give 1 or 0, as MPI's.
template <snclRedOp_t Op, class T, class R>
R bitwiseCombine(R a, R b) {
  static_assert(isBitwise(Op) && std::is_integral_v<T>);
  if constexpr (std::is_same_v<T, R>) {
    if constexpr (Op == snclBand) return T(a & b);
    if constexpr (Op == snclBor) return T(a | b);
    if constexpr (Op == snclBxor) return T(a ^ b);
    if constexpr (Op == snclLand) return T(a != 0 && b != 0);
    if constexpr (Op == snclLor) return T(a != 0 || b != 0);
    if constexpr (Op == snclLxor) return T((a != 0) != (b != 0));
  } else {
    using V [[gnu::vector_size(sizeof(R))]] = T;
    const V x = __builtin_bit_cast(V, a), y = __builtin_bit_cast(V, b), zero = {};
    // A vector comparison gives -1 or 0 per element: negated, 1 or 0.
    if constexpr (Op == snclBand) return __builtin_bit_cast(R, x & y);
    if constexpr (Op == snclBor) return __builtin_bit_cast(R, x | y);
    if constexpr (Op == snclBxor) return __builtin_bit_cast(R, x ^ y);
    if constexpr (Op == snclLand) return __builtin_bit_cast(R, -((x != zero) & (y != zero)));
    if constexpr (Op == snclLor) return __builtin_bit_cast(R, -((x != zero) | (y != zero)));
    if constexpr (Op == snclLxor) return __builtin_bit_cast(R, -((x != zero) ^ (y != zero)));
  }
}

// n < Max bytes from s to d, as two fixed-size copies that may overlap (each one or two
// moves): a memcpy of a variable size is a library call, three of which were most of an
// 8-byte reduction's time. Max: the size of the buffer on either side.
template <size_t Max>
[[gnu::always_inline]] inline void copyBelow(void* d, const void* s, size_t n) {
  static_assert(Max <= 64, "a tail of one vector");
  auto* dc = static_cast<char*>(d);
  const auto* sc = static_cast<const char*>(s);
  auto two = [&]<size_t W>() {
    if constexpr (W < Max) {
      memcpy(dc, sc, W);
      memcpy(dc + n - W, sc + n - W, W);
    }
  };
  if (n >= 32) two.template operator()<32>();
  else if (n >= 16) two.template operator()<16>();
  else if (n >= 8) two.template operator()<8>();
  else if (n >= 4) two.template operator()<4>();
  else if (n >= 2) two.template operator()<2>();
  else if (n) *dc = *sc;
}

// Tails (fewer than N elements) go through a zeroed buffer, so kernels never touch memory
// past the end and one code path serves every count and alignment.
template <class L, class T>
[[gnu::always_inline]] inline typename L::R loadTail(const T* p, size_t k) {
  T buf[L::N] = {};
  copyBelow<sizeof(buf)>(buf, p, k * sizeof(T));
  return L::load(buf);
}
template <class L, class T>
[[gnu::always_inline]] inline void storeTail(T* p, typename L::R r, size_t k) {
  T buf[L::N];
  L::store(buf, r);
  copyBelow<sizeof(buf)>(p, buf, k * sizeof(T));
}

// dst[i] = fn(src[i]...), N elements at a time, unrolled so that cache-resident data keeps
// several independent steps in flight.
template <class L, class Fn, class T, class... Src>
void mapLoop(T* dst, size_t n, Fn fn, const Src*... src) {
  constexpr size_t N = L::N, kUnroll = 4;
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N)
    for (size_t u = 0; u < kUnroll * N; u += N) L::store(dst + i + u, fn(L::load(src + i + u)...));
  for (; i + N <= n; i += N) L::store(dst + i, fn(L::load(src + i)...));
  if constexpr (N > 1) {
    if (i < n) storeTail<L>(dst + i, fn(loadTail<L>(src + i, n - i)...), n - i);
  }
}

template <class L, snclRedOp_t Op>
void reduceFn(void* dst, const void* a, const void* b, size_t n) {
  using T = typename L::T;
  using R = typename L::R;
  mapLoop<L>(static_cast<T*>(dst), n, [](R x, R y) { return L::template combine<Op>(x, y); },
             static_cast<const T*>(a), static_cast<const T*>(b));
}

// factor as an int64, saturating (NaN gives 0): converting an out-of-range double is UB.
inline int64_t saturatingInt64(double f) {
  if (!(f == f)) return 0;
  if (f >= 0x1p63) return INT64_MAX;
  return f < -0x1p63 ? INT64_MIN : int64_t(f);
}

// dst[i] = fn(src[i]) for n elements of T, each read and written through memcpy: user
// buffers may sit at any byte address (a float at an odd one), where a typed access is
// undefined. The compiler makes each memcpy one plain move and still vectorizes the loop.
template <class T, class Fn>
void mapElements(void* dst, const void* src, size_t n, Fn fn) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (size_t i = 0; i < n; ++i) {
    T x;
    memcpy(&x, s + i * sizeof(T), sizeof(T));
    const T y = fn(x);
    memcpy(d + i * sizeof(T), &y, sizeof(T));
  }
}

// Integers, in plain loops the compiler vectorizes where it can (x86 has no vector integer
// division; 64-bit quotients stay scalar). U arithmetic wraps instead of overflowing.
template <class T>
void scaleIntegers(void* dst, const void* src, size_t n, double factor, int64_t divisor) {
  using U = std::make_unsigned_t<T>;
  using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
  if (divisor == 0) {
    Wide m = Wide(U(saturatingInt64(factor)));
    mapElements<T>(dst, src, n, [m](T x) { return T(U(Wide(U(x)) * m)); });
  } else if (std::is_signed_v<T> && divisor == -1) {
    // Negate: the same as dividing, except that INT_MIN / -1 overflows.
    mapElements<T>(dst, src, n, [](T x) { return T(U(0) - U(x)); });
  } else if constexpr (sizeof(T) <= 4) {
    // Through double, which the compiler vectorizes. Exact: |x| < 2^32, so the quotient's
    // rounding error is below 2^-21 / |divisor|, less than its distance to the next integer
    // unless it is one, and truncation gives x / divisor.
    // An int32 quotient (all but uint32's fit) converts in AVX2 too.
    using Q = std::conditional_t<std::is_same_v<T, uint32_t>, int64_t, int32_t>;
    double d = std::is_signed_v<T> ? double(divisor) : double(uint64_t(divisor));
    mapElements<T>(dst, src, n, [d](T x) { return T(Q(double(x) / d)); });
  } else if constexpr (std::is_signed_v<T>) {
    mapElements<T>(dst, src, n, [divisor](T x) { return T(x / divisor); });
  } else {
    mapElements<T>(dst, src, n, [divisor](T x) { return T(uint64_t(x) / uint64_t(divisor)); });
  }
}

template <class L, snclDataType_t D>
void scaleFn(void* dst, const void* src, size_t n, double factor, int64_t divisor) {
  using T = typename L::T;
  if constexpr (kIsInteger<D>) {
    scaleIntegers<T>(dst, src, n, factor, divisor);
  } else {
    auto f = L::scaleFactor(factor);
    mapLoop<L>(static_cast<T*>(dst), n, [f](typename L::R x) { return L::scale(x, f); }, static_cast<const T*>(src));
  }
}

// One type's row of the table: L are its kernels.
template <class L, snclDataType_t D>
constexpr void fillRow(KernelTable& t) {
  t.reduce[D][snclSum] = &reduceFn<L, snclSum>;
  t.reduce[D][snclProd] = &reduceFn<L, snclProd>;
  t.reduce[D][snclMax] = &reduceFn<L, snclMax>;
  t.reduce[D][snclMin] = &reduceFn<L, snclMin>;
  if constexpr (kIsInteger<D>) {
    t.reduce[D][snclBand] = &reduceFn<L, snclBand>;
    t.reduce[D][snclBor] = &reduceFn<L, snclBor>;
    t.reduce[D][snclBxor] = &reduceFn<L, snclBxor>;
    t.reduce[D][snclLand] = &reduceFn<L, snclLand>;
    t.reduce[D][snclLor] = &reduceFn<L, snclLor>;
    t.reduce[D][snclLxor] = &reduceFn<L, snclLxor>;
  }
  t.scale[D] = &scaleFn<L, D>;
}

// The table of one instruction set; Lanes<D> are its kernels for type D.
template <template <snclDataType_t> class Lanes>
constexpr KernelTable makeTable() {
  KernelTable t{};
  [&]<size_t... I>(std::index_sequence<I...>) {
    (fillRow<Lanes<snclDataType_t(I)>, snclDataType_t(I)>(t), ...);
  }(std::make_index_sequence<snclNumTypes>{});
  return t;
}

}  // namespace
}  // namespace sncl::reduce_impl
