// AVX2 kernels, 256-bit registers. The build compiles this file with -mavx2 -mfma -mf16c;
// reduce.cc calls into it only when the CPU has all three.
#include <immintrin.h>

#include "lib/exec/reduce_kernels.h"

namespace sncl::reduce_impl {
namespace {

__m256i set1(uint32_t v) { return _mm256_set1_epi32(int(v)); }
__m256 isNan(__m256 x) { return _mm256_cmp_ps(x, x, _CMP_UNORD_Q); }

// ---- float32 and float64

// The ops on a register of floats, and of doubles.
struct F32Ops {
  template <snclRedOp_t Op>
  static __m256 combine(__m256 a, __m256 b) {
    if constexpr (Op == snclSum) {
      return _mm256_add_ps(a, b);
    } else if constexpr (Op == snclProd) {
      return _mm256_mul_ps(a, b);
    } else {
      // vmaxps/vminps return b when either operand is NaN or both are zeros: take a when b
      // is NaN, and settle equal operands (+0 vs -0) bitwise, like maxMinNumber.
      __m256 m = Op == snclMax ? _mm256_max_ps(a, b) : _mm256_min_ps(a, b);
      m = _mm256_blendv_ps(m, a, isNan(b));
      __m256 same = Op == snclMax ? _mm256_and_ps(a, b) : _mm256_or_ps(a, b);
      return _mm256_blendv_ps(m, same, _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    }
  }
};

struct F64Ops {
  template <snclRedOp_t Op>
  static __m256d combine(__m256d a, __m256d b) {
    if constexpr (Op == snclSum) {
      return _mm256_add_pd(a, b);
    } else if constexpr (Op == snclProd) {
      return _mm256_mul_pd(a, b);
    } else {
      __m256d m = Op == snclMax ? _mm256_max_pd(a, b) : _mm256_min_pd(a, b);
      m = _mm256_blendv_pd(m, a, _mm256_cmp_pd(b, b, _CMP_UNORD_Q));
      __m256d same = Op == snclMax ? _mm256_and_pd(a, b) : _mm256_or_pd(a, b);
      return _mm256_blendv_pd(m, same, _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    }
  }
};

struct Float32 : F32Ops {
  using T = float;
  using R = __m256;
  using Factor = __m256;
  static constexpr size_t N = 8;
  static R load(const T* p) { return _mm256_loadu_ps(p); }
  static void store(T* p, R r) { _mm256_storeu_ps(p, r); }
  static Factor scaleFactor(double f) { return _mm256_set1_ps(float(f)); }
  static R scale(R x, Factor f) { return _mm256_mul_ps(x, f); }
};

struct Float64 : F64Ops {
  using T = double;
  using R = __m256d;
  using Factor = __m256d;
  static constexpr size_t N = 4;
  static R load(const T* p) { return _mm256_loadu_pd(p); }
  static void store(T* p, R r) { _mm256_storeu_pd(p, r); }
  static Factor scaleFactor(double f) { return _mm256_set1_pd(f); }
  static R scale(R x, Factor f) { return _mm256_mul_pd(x, f); }
};

// ---- float16 and fp8: 8 elements widened to floats; a Codec loads and stores them.

// F16C converts exactly and rounds to nearest even; a NaN is first made the float whose
// conversion is the canonical 0x7fff.
struct Fp16Codec {
  using T = uint16_t;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(T* p, __m256 x) {
    x = _mm256_blendv_ps(x, _mm256_castsi256_ps(set1(0x7fffe000)), isNan(x));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
};

// narrowScalar<F> on 8 floats at once: both roundings are computed, and blended.
template <class F>
__m256i roundToFormat(__m256 x) {
  __m256i bits = _mm256_castps_si256(x);
  __m256i a = _mm256_and_si256(bits, set1(0x7fffffff));
  __m256i c = _mm256_min_epu32(a, set1(F::kClamp));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(c, F::kShift), set1(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(c, set1(F::kRound)), lsb), F::kShift);
  __m256 magic = _mm256_castsi256_ps(set1(F::kMagic));
  __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(c), magic)), set1(F::kMagic));
  // Signed compares are fine: both sides are below 2^31.
  r = _mm256_blendv_epi8(r, sub, _mm256_cmpgt_epi32(set1(F::kMinNormal), c));
  r = _mm256_or_si256(r, _mm256_slli_epi32(_mm256_srli_epi32(bits, 31), F::kBits - 1));
  return _mm256_blendv_epi8(r, set1(F::kNaN), _mm256_cmpgt_epi32(a, set1(0x7f800000)));
}

// fp8 widens through float16, which holds every fp8 value exactly.
__m128i loadBytesAs16(const uint8_t* p) {
  return _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// 8 results in the low byte of each 32-bit lane.
void storeBytes(uint8_t* p, __m256i r) {
  __m256i w = _mm256_packus_epi32(r, r);
  w = _mm256_packus_epi16(w, w);  // per 128-bit half, its 4 results in bytes 0-3
  __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_unpacklo_epi32(lo, hi));
}

// E5M2 is the top byte of a float16.
struct E5m2Codec {
  using T = uint8_t;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(_mm_slli_epi16(loadBytesAs16(p), 8)); }
  static void store(T* p, __m256 x) { storeBytes(p, roundToFormat<E5m2>(x)); }
};

// E4M3: sign to bit 15, exponent and mantissa to the float16 positions (bias 15 instead of
// 7, so the value is 2^-8 of the true one), the NaN magnitude 0x7f to a float16 NaN.
struct E4m3Codec {
  using T = uint8_t;
  static __m256 load(const T* p) {
    __m128i b = loadBytesAs16(p);
    __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
    __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_xor_si128(b, mag), 8), _mm_slli_epi16(mag, 7));
    h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7c00)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(0x1p8f));
  }
  static void store(T* p, __m256 x) { storeBytes(p, roundToFormat<E4m3>(x)); }
};

// 64-bit lane masks to 32-bit lane masks.
__m128i narrowMask(__m256d m) {
  __m256 f = _mm256_castpd_ps(m);
  __m128 lo = _mm256_castps256_ps128(f), hi = _mm256_extractf128_ps(f, 1);
  return _mm_castps_si128(_mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
}

// mulRoundOdd's rounding of 4 exact products: round to nearest, step back toward zero
// where that rounded away, and set the last bit where it was inexact.
__m128 roundOdd(__m256d d) {
  __m128 r = _mm256_cvtpd_ps(d);
  __m256d back = _mm256_cvtps_pd(r);
  __m256d absMask = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
  __m256d away = _mm256_cmp_pd(_mm256_and_pd(back, absMask), _mm256_and_pd(d, absMask), _CMP_GT_OQ);
  __m128i inexact = _mm_and_si128(narrowMask(_mm256_cmp_pd(back, d, _CMP_NEQ_UQ)), _mm_set1_epi32(1));
  __m128i bits = _mm_add_epi32(_mm_castps_si128(r), narrowMask(away));  // a true mask is -1
  return _mm_castsi128_ps(_mm_or_si128(bits, inexact));
}

// x * f for 8 floats, each rounded once (to odd, ready for the narrow rounding).
__m256 scaleNarrow(__m256 x, __m256d f) {
  __m128 lo = roundOdd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), f));
  __m128 hi = roundOdd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), f));
  return _mm256_set_m128(hi, lo);
}

template <class Codec>
struct Narrow : F32Ops, Codec {
  using T = typename Codec::T;
  using R = __m256;
  using Factor = __m256d;
  static constexpr size_t N = 8;
  static Factor scaleFactor(double f) { return _mm256_set1_pd(float(f)); }
  static R scale(R x, Factor f) { return scaleNarrow(x, f); }
};

// bfloat16 is the top half of a float. A 32-bit lane holds two: the odd element already
// sits where its float's bits go and the even one gets there with a shift, so 16 elements
// widen to two registers of floats (even, odd) without shuffles, and pack back the same
// way. Rounding is integer arithmetic, exact for subnormals too, and overflow carries into
// inf. (AVX512-BF16's vcvtne2ps2bf16 would flush subnormals to zero.)
struct Bf16Lanes {
  using T = uint16_t;
  struct R {
    __m256 even, odd;
  };
  using Factor = __m256d;
  static constexpr size_t N = 16;
  static R load(const T* p) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), _mm256_castsi256_ps(_mm256_and_si256(v, set1(0xffff0000)))};
  }
  static void store(T* p, R r) {
    __m256i v = _mm256_or_si256(_mm256_srli_epi32(round(r.even), 16), _mm256_and_si256(round(r.odd), set1(0xffff0000)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  template <snclRedOp_t Op>
  static R combine(R a, R b) {
    return {F32Ops::combine<Op>(a.even, b.even), F32Ops::combine<Op>(a.odd, b.odd)};
  }
  static Factor scaleFactor(double f) { return _mm256_set1_pd(float(f)); }
  static R scale(R x, Factor f) { return {scaleNarrow(x.even, f), scaleNarrow(x.odd, f)}; }

  // The rounded bfloat16 in the top half of each lane (round to nearest even by adding
  // 0x7fff plus the lowest kept bit); NaN becomes the canonical 0x7fff.
  static __m256i round(__m256 x) {
    __m256i b = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), set1(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, set1(Bf16::kRound)), lsb);
    return _mm256_blendv_epi8(r, set1(Bf16::kNaN << 16), _mm256_castps_si256(isNan(x)));
  }
};

// ---- integers, wrapping; signed and unsigned differ only in max and min

template <class Int>
struct IntLanes {
  using T = Int;
  using R = __m256i;
  static constexpr size_t N = 32 / sizeof(T);
  static constexpr bool kSigned = std::is_signed_v<T>;
  static R load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(T* p, R r) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), r); }

  template <snclRedOp_t Op>
  static R combine(R a, R b) {
    if constexpr (isBitwise(Op)) {
      return bitwiseCombine<Op, T>(a, b);
    } else if constexpr (Op == snclSum) {
      if constexpr (sizeof(T) == 1) return _mm256_add_epi8(a, b);
      if constexpr (sizeof(T) == 4) return _mm256_add_epi32(a, b);
      if constexpr (sizeof(T) == 8) return _mm256_add_epi64(a, b);
    } else if constexpr (Op == snclProd) {
      return mul(a, b);
    } else if constexpr (sizeof(T) == 8) {
      // No 64-bit max/min before AVX-512: compare (unsigned: with the sign bits flipped)
      // and blend.
      __m256i flip = _mm256_set1_epi64x(kSigned ? 0 : INT64_MIN);
      __m256i gt = _mm256_cmpgt_epi64(_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip));
      return Op == snclMax ? _mm256_blendv_epi8(b, a, gt) : _mm256_blendv_epi8(a, b, gt);
    } else if constexpr (Op == snclMax) {
      if constexpr (sizeof(T) == 1) return kSigned ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
      if constexpr (sizeof(T) == 4) return kSigned ? _mm256_max_epi32(a, b) : _mm256_max_epu32(a, b);
    } else {
      if constexpr (sizeof(T) == 1) return kSigned ? _mm256_min_epi8(a, b) : _mm256_min_epu8(a, b);
      if constexpr (sizeof(T) == 4) return kSigned ? _mm256_min_epi32(a, b) : _mm256_min_epu32(a, b);
    }
  }

  static R mul(R a, R b) {
    if constexpr (sizeof(T) == 1) {
      // No 8-bit multiply: even bytes are the low byte of a 16-bit product; odd bytes the
      // high byte of (a >> 8) * (b & 0xff00).
      __m256i lowBytes = _mm256_set1_epi16(0xff);
      __m256i even = _mm256_mullo_epi16(a, b);
      __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_andnot_si256(lowBytes, b));
      return _mm256_or_si256(_mm256_and_si256(even, lowBytes), odd);
    } else if constexpr (sizeof(T) == 4) {
      return _mm256_mullo_epi32(a, b);
    } else {
      // No 64-bit multiply before AVX-512DQ: lo*lo + ((lo*hi + hi*lo) << 32).
      __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                        _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
      return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
    }
  }
};

template <snclDataType_t D>
using CodecOf = std::conditional_t<D == snclFloat16, Fp16Codec, std::conditional_t<D == snclFloat8e4m3, E4m3Codec, E5m2Codec>>;

template <snclDataType_t D>
using Lanes = std::conditional_t<
    kIsInteger<D>, IntLanes<Storage<D>>,
    std::conditional_t<D == snclFloat32, Float32,
                       std::conditional_t<D == snclFloat64, Float64,
                                          std::conditional_t<D == snclBfloat16, Bf16Lanes, Narrow<CodecOf<D>>>>>>;

}  // namespace

const KernelTable& avx2Kernels() {
  static constexpr KernelTable table = makeTable<Lanes>();
  return table;
}

}  // namespace sncl::reduce_impl
