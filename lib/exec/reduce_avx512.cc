// AVX-512 kernels, 512-bit registers. The build compiles this file with -mavx512f
// -mavx512bw -mavx512vl -mavx512dq (and F16C, FMA); reduce.cc calls into it only when the
// CPU has them all. The structure follows reduce_avx2.cc; comments there explain the tricks.
// AVX512-BF16 is not used: vcvtneps2bf16 flushes subnormals to zero.
// GCC 12 warns about its own _mm512_undefined_* helpers (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "lib/exec/reduce_kernels.h"

namespace sncl::reduce_impl {
namespace {

__m512i set1(uint32_t v) { return _mm512_set1_epi32(int(v)); }
__mmask16 isNan(__m512 x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); }

// ---- float32 and float64

struct F32Ops {
  template <snclRedOp_t Op>
  static __m512 combine(__m512 a, __m512 b) {
    if constexpr (Op == snclSum) {
      return _mm512_add_ps(a, b);
    } else if constexpr (Op == snclProd) {
      return _mm512_mul_ps(a, b);
    } else {
      __m512 m = Op == snclMax ? _mm512_max_ps(a, b) : _mm512_min_ps(a, b);
      m = _mm512_mask_mov_ps(m, isNan(b), a);
      __m512 same = Op == snclMax ? _mm512_and_ps(a, b) : _mm512_or_ps(a, b);
      return _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), same);
    }
  }
};

struct F64Ops {
  template <snclRedOp_t Op>
  static __m512d combine(__m512d a, __m512d b) {
    if constexpr (Op == snclSum) {
      return _mm512_add_pd(a, b);
    } else if constexpr (Op == snclProd) {
      return _mm512_mul_pd(a, b);
    } else {
      __m512d m = Op == snclMax ? _mm512_max_pd(a, b) : _mm512_min_pd(a, b);
      m = _mm512_mask_mov_pd(m, _mm512_cmp_pd_mask(b, b, _CMP_UNORD_Q), a);
      __m512d same = Op == snclMax ? _mm512_and_pd(a, b) : _mm512_or_pd(a, b);
      return _mm512_mask_mov_pd(m, _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), same);
    }
  }
};

struct Float32 : F32Ops {
  using T = float;
  using R = __m512;
  using Factor = __m512;
  static constexpr size_t N = 16;
  static R load(const T* p) { return _mm512_loadu_ps(p); }
  static void store(T* p, R r) { _mm512_storeu_ps(p, r); }
  static Factor scaleFactor(double f) { return _mm512_set1_ps(float(f)); }
  static R scale(R x, Factor f) { return _mm512_mul_ps(x, f); }
};

struct Float64 : F64Ops {
  using T = double;
  using R = __m512d;
  using Factor = __m512d;
  static constexpr size_t N = 8;
  static R load(const T* p) { return _mm512_loadu_pd(p); }
  static void store(T* p, R r) { _mm512_storeu_pd(p, r); }
  static Factor scaleFactor(double f) { return _mm512_set1_pd(f); }
  static R scale(R x, Factor f) { return _mm512_mul_pd(x, f); }
};

// ---- float16 and fp8: 16 elements widened to floats

struct Fp16Codec {
  using T = uint16_t;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(T* p, __m512 x) {
    x = _mm512_mask_mov_ps(x, isNan(x), _mm512_castsi512_ps(set1(0x7fffe000)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
};

template <class F>
__m512i roundToFormat(__m512 x) {
  __m512i bits = _mm512_castps_si512(x);
  __m512i a = _mm512_and_si512(bits, set1(0x7fffffff));
  __m512i c = _mm512_min_epu32(a, set1(F::kClamp));
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(c, F::kShift), set1(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(c, set1(F::kRound)), lsb), F::kShift);
  __m512 sum = _mm512_add_ps(_mm512_castsi512_ps(c), _mm512_castsi512_ps(set1(F::kMagic)));
  r = _mm512_mask_sub_epi32(r, _mm512_cmplt_epu32_mask(c, set1(F::kMinNormal)), _mm512_castps_si512(sum),
                            set1(F::kMagic));
  r = _mm512_or_si512(r, _mm512_slli_epi32(_mm512_srli_epi32(bits, 31), F::kBits - 1));
  return _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a, set1(0x7f800000)), set1(F::kNaN));
}

__m256i loadBytesAs16(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
void storeBytes(uint8_t* p, __m512i r) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(r)); }

struct E5m2Codec {
  using T = uint8_t;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_slli_epi16(loadBytesAs16(p), 8)); }
  static void store(T* p, __m512 x) { storeBytes(p, roundToFormat<E5m2>(x)); }
};

struct E4m3Codec {
  using T = uint8_t;
  static __m512 load(const T* p) {
    __m256i b = loadBytesAs16(p);
    __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_xor_si256(b, mag), 8), _mm256_slli_epi16(mag, 7));
    __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
    h = _mm256_mask_mov_epi16(h, nan, _mm256_or_si256(h, _mm256_set1_epi16(0x7c00)));
    return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(0x1p8f));
  }
  static void store(T* p, __m512 x) { storeBytes(p, roundToFormat<E4m3>(x)); }
};

// Round-to-odd has a direct form here: convert truncating, then set the last bit where
// the conversion was inexact.
__m256 roundOdd(__m512d d) {
  __m256i t = _mm256_castps_si256(_mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
  __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(_mm256_castsi256_ps(t)), d, _CMP_NEQ_UQ);
  return _mm256_castsi256_ps(_mm256_mask_or_epi32(t, inexact, t, _mm256_set1_epi32(1)));
}

// x * f for 16 floats, each rounded once (to odd, ready for the narrow rounding).
__m512 scaleNarrow(__m512 x, __m512d f) {
  __m256 lo = roundOdd(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), f));
  __m256 hi = roundOdd(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)), f));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

template <class Codec>
struct Narrow : F32Ops, Codec {
  using T = typename Codec::T;
  using R = __m512;
  using Factor = __m512d;
  static constexpr size_t N = 16;
  static Factor scaleFactor(double f) { return _mm512_set1_pd(float(f)); }
  static R scale(R x, Factor f) { return scaleNarrow(x, f); }
};

// bfloat16, 32 at a time as two registers of floats: the even and the odd elements. See
// reduce_avx2.cc.
struct Bf16Lanes {
  using T = uint16_t;
  struct R {
    __m512 even, odd;
  };
  using Factor = __m512d;
  static constexpr size_t N = 32;
  static R load(const T* p) {
    __m512i v = _mm512_loadu_si512(p);
    return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), _mm512_castsi512_ps(_mm512_and_si512(v, set1(0xffff0000)))};
  }
  static void store(T* p, R r) {
    __m512i v = _mm512_or_si512(_mm512_srli_epi32(round(r.even), 16), _mm512_and_si512(round(r.odd), set1(0xffff0000)));
    _mm512_storeu_si512(p, v);
  }
  template <snclRedOp_t Op>
  static R combine(R a, R b) {
    return {F32Ops::combine<Op>(a.even, b.even), F32Ops::combine<Op>(a.odd, b.odd)};
  }
  static Factor scaleFactor(double f) { return _mm512_set1_pd(float(f)); }
  static R scale(R x, Factor f) { return {scaleNarrow(x.even, f), scaleNarrow(x.odd, f)}; }

  // The rounded bfloat16 in the top half of each lane.
  static __m512i round(__m512 x) {
    __m512i b = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), set1(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, set1(Bf16::kRound)), lsb);
    return _mm512_mask_mov_epi32(r, isNan(x), set1(Bf16::kNaN << 16));
  }
};

// ---- integers

template <class Int>
struct IntLanes {
  using T = Int;
  using R = __m512i;
  static constexpr size_t N = 64 / sizeof(T);
  static constexpr bool kSigned = std::is_signed_v<T>;
  static R load(const T* p) { return _mm512_loadu_si512(p); }
  static void store(T* p, R r) { _mm512_storeu_si512(p, r); }

  template <snclRedOp_t Op>
  static R combine(R a, R b) {
    if constexpr (isBitwise(Op)) {
      return bitwiseCombine<Op, T>(a, b);
    } else if constexpr (Op == snclSum) {
      if constexpr (sizeof(T) == 1) return _mm512_add_epi8(a, b);
      if constexpr (sizeof(T) == 4) return _mm512_add_epi32(a, b);
      if constexpr (sizeof(T) == 8) return _mm512_add_epi64(a, b);
    } else if constexpr (Op == snclProd) {
      if constexpr (sizeof(T) == 1) {
        __m512i lowBytes = _mm512_set1_epi16(0xff);
        __m512i even = _mm512_mullo_epi16(a, b);
        __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_andnot_si512(lowBytes, b));
        return _mm512_or_si512(_mm512_and_si512(even, lowBytes), odd);
      }
      if constexpr (sizeof(T) == 4) return _mm512_mullo_epi32(a, b);
      if constexpr (sizeof(T) == 8) return _mm512_mullo_epi64(a, b);
    } else if constexpr (Op == snclMax) {
      if constexpr (sizeof(T) == 1) return kSigned ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
      if constexpr (sizeof(T) == 4) return kSigned ? _mm512_max_epi32(a, b) : _mm512_max_epu32(a, b);
      if constexpr (sizeof(T) == 8) return kSigned ? _mm512_max_epi64(a, b) : _mm512_max_epu64(a, b);
    } else {
      if constexpr (sizeof(T) == 1) return kSigned ? _mm512_min_epi8(a, b) : _mm512_min_epu8(a, b);
      if constexpr (sizeof(T) == 4) return kSigned ? _mm512_min_epi32(a, b) : _mm512_min_epu32(a, b);
      if constexpr (sizeof(T) == 8) return kSigned ? _mm512_min_epi64(a, b) : _mm512_min_epu64(a, b);
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

const KernelTable& avx512Kernels() {
  static constexpr KernelTable table = makeTable<Lanes>();
  return table;
}

}  // namespace sncl::reduce_impl
