#include "lib/exec/quantize.h"

#include <array>
#include <cmath>
#include <cstring>

namespace sncl {
namespace {

constexpr float kInt8Max = 127.0f;
constexpr float kE4m3Max = 448.0f;

float maxCode(QuantKind kind) { return kind == QuantKind::Int8 ? kInt8Max : kE4m3Max; }

uint32_t bitsOf(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}
float floatOf(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

// Element i of a caller's buffer, which may sit at any byte address (a float at an odd
// one): through memcpy, one plain move, where a typed access would be undefined.
template <class T>
T loadAt(const void* base, size_t i) {
  T v;
  memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void storeAt(void* base, size_t i, T v) {
  memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof(T));
}

float bf16ToFloat(uint16_t h) { return floatOf(uint32_t(h) << 16); }
uint16_t floatToBf16(float f) {
  const uint32_t b = bitsOf(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN: canonical, never rounded into inf
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// The decode table of e4m3 (0x7f and 0xff are NaN), built once.
const std::array<float, 256>& e4m3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
      if ((c & 0x7f) == 0x7f) v = NAN;
      t[c] = (c & 0x80) ? -v : v;
    }
    return t;
  }();
  return table;
}

// Where a block lives inside a slice.
struct Block {
  size_t begin, valid;  // first value of the block, values of it below `valid`
};
Block blockAt(size_t b, size_t blockElems, size_t valid) {
  const size_t begin = b * blockElems;
  const size_t end = begin + blockElems < valid ? begin + blockElems : valid;
  return {begin, end > begin ? end - begin : 0};
}

// max|x| of a block, and whether it holds a NaN or an infinity (x * 0 is NaN exactly then).
float blockMax(const float* x, size_t n, bool* finite) {
  float m = 0, probe = 0;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    m = a > m ? a : m;
    probe += x[i] * 0.0f;
  }
  *finite = probe == 0.0f;
  return m;
}

}  // namespace

float e4m3Decode(uint8_t code) { return e4m3Table()[code]; }

uint8_t e4m3Encode(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  float a = std::fabs(v);
  if (!(a <= kE4m3Max)) a = kE4m3Max;  // callers scale into range; saturate as NCCL's conversions do
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9; code 8 is 2^-6, the first normal
    const float m = (a * 512.0f + 8388608.0f) - 8388608.0f;  // round to nearest even
    return sign | static_cast<uint8_t>(m);
  }
  uint32_t b = bitsOf(a);
  b += 0x7ffffu + ((b >> 20) & 1u);  // round the mantissa to 3 bits, ties to even
  const uint32_t exp = (b >> 23) - 127 + 7, mant = (b >> 20) & 7u;
  uint32_t code = exp << 3 | mant;
  if (code > 0x7e) code = 0x7e;  // 448; 0x7f is NaN
  return sign | static_cast<uint8_t>(code);
}

void quantWiden(snclDataType_t type, const void* src, const void* add, size_t n, float* out) {
  if (type == snclBfloat16) {
    if (add)
      for (size_t i = 0; i < n; ++i)
        out[i] = bf16ToFloat(loadAt<uint16_t>(src, i)) + bf16ToFloat(loadAt<uint16_t>(add, i));
    else
      for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(loadAt<uint16_t>(src, i));
    return;
  }
  if (add)
    for (size_t i = 0; i < n; ++i) out[i] = loadAt<float>(src, i) + loadAt<float>(add, i);
  else
    memcpy(out, src, n * sizeof(float));
}

void quantNarrow(snclDataType_t type, const float* src, size_t n, void* dst, bool accumulate) {
  if (type == snclBfloat16) {
    for (size_t i = 0; i < n; ++i)
      storeAt(dst, i, floatToBf16(accumulate ? bf16ToFloat(loadAt<uint16_t>(dst, i)) + src[i] : src[i]));
    return;
  }
  if (accumulate)
    for (size_t i = 0; i < n; ++i) storeAt(dst, i, loadAt<float>(dst, i) + src[i]);
  else
    memcpy(dst, src, n * sizeof(float));
}

void quantEncode(QuantKind kind, const float* x, size_t valid, size_t sliceElems, size_t blockElems, void* slice,
                 float* err) {
  const size_t nblocks = quantBlocks(sliceElems, blockElems);
  auto* scales = static_cast<float*>(slice);
  auto* codes = static_cast<uint8_t*>(slice) + nblocks * sizeof(float);
  const auto& table = e4m3Table();
  const float top = maxCode(kind);
  for (size_t b = 0; b < nblocks; ++b) {
    const Block blk = blockAt(b, blockElems, valid);
    const float* xb = x + blk.begin;
    uint8_t* cb = codes + blk.begin;
    bool finite = true;
    const float m = blockMax(xb, blk.valid, &finite);
    const float scale = finite ? m / top : NAN;
    scales[b] = scale;
    const size_t blockEnd = b + 1 == nblocks ? sliceElems - blk.begin : blockElems;
    memset(cb + blk.valid, 0, blockEnd - blk.valid);  // padding past valid
    if (!finite || scale == 0.0f) {
      // No information to keep: codes 0. A block of zeros decodes exactly; a non-finite
      // one decodes as NaN, and its error is not carried into the residual (which would
      // poison every later call).
      memset(cb, 0, blk.valid);
      if (err)
        for (size_t i = 0; i < blk.valid; ++i) err[blk.begin + i] = finite ? xb[i] : 0.0f;
      continue;
    }
    // A tiny block's 1/scale overflows: divide there, multiply elsewhere.
    const bool divide = m < 1e-30f;
    const float inv = divide ? 0.0f : top / m;
    if (kind == QuantKind::Int8) {
      for (size_t i = 0; i < blk.valid; ++i) {
        const float q = divide ? xb[i] / scale : xb[i] * inv;
        // Half away from zero, and |q| <= 127 (+ a rounding step) truncates into [-127, 127].
        const float r = q + (q < 0 ? -0.5f : 0.5f);
        const int c = static_cast<int>(r > top ? top : (r < -top ? -top : r));
        cb[i] = static_cast<uint8_t>(static_cast<int8_t>(c));
        if (err) err[blk.begin + i] = xb[i] - float(c) * scale;
      }
    } else {
      for (size_t i = 0; i < blk.valid; ++i) {
        const float q = divide ? xb[i] / scale : xb[i] * inv;
        const uint8_t c = e4m3Encode(q);
        cb[i] = c;
        if (err) err[blk.begin + i] = xb[i] - table[c] * scale;
      }
    }
  }
}

void quantDecodeAdd(QuantKind kind, const void* slice, size_t valid, size_t sliceElems, size_t blockElems, float* acc,
                    bool first) {
  const size_t nblocks = quantBlocks(sliceElems, blockElems);
  const auto* scales = static_cast<const float*>(slice);
  const auto* codes = static_cast<const uint8_t*>(slice) + nblocks * sizeof(float);
  const auto& table = e4m3Table();
  for (size_t b = 0; b < nblocks; ++b) {
    const Block blk = blockAt(b, blockElems, valid);
    const float scale = scales[b];
    const uint8_t* cb = codes + blk.begin;
    float* ab = acc + blk.begin;
    if (kind == QuantKind::Int8) {
      const auto* ib = reinterpret_cast<const int8_t*>(cb);
      if (first)
        for (size_t i = 0; i < blk.valid; ++i) ab[i] = float(ib[i]) * scale;
      else
        for (size_t i = 0; i < blk.valid; ++i) ab[i] += float(ib[i]) * scale;
    } else {
      if (first)
        for (size_t i = 0; i < blk.valid; ++i) ab[i] = table[cb[i]] * scale;
      else
        for (size_t i = 0; i < blk.valid; ++i) ab[i] += table[cb[i]] * scale;
    }
  }
}

void quantDecodeTo(QuantKind kind, snclDataType_t type, const void* slice, size_t valid, size_t sliceElems,
                   size_t blockElems, float factor, void* dst) {
  const size_t nblocks = quantBlocks(sliceElems, blockElems);
  const auto* scales = static_cast<const float*>(slice);
  const auto* codes = static_cast<const uint8_t*>(slice) + nblocks * sizeof(float);
  const auto& table = e4m3Table();
  // dst may sit at any byte address: float32 values are stored through storeAt, and
  // bfloat16 ones decoded in pieces through tmp, then narrowed by quantNarrow.
  float tmp[256];
  const size_t elem = type == snclBfloat16 ? sizeof(uint16_t) : sizeof(float);
  for (size_t b = 0; b < nblocks; ++b) {
    const Block blk = blockAt(b, blockElems, valid);
    const float scale = scales[b] * factor;
    const uint8_t* cb = codes + blk.begin;
    if (type != snclBfloat16) {
      void* out = static_cast<char*>(dst) + blk.begin * elem;
      if (kind == QuantKind::Int8) {
        const auto* ib = reinterpret_cast<const int8_t*>(cb);
        for (size_t i = 0; i < blk.valid; ++i) storeAt(out, i, float(ib[i]) * scale);
      } else {
        for (size_t i = 0; i < blk.valid; ++i) storeAt(out, i, table[cb[i]] * scale);
      }
      continue;
    }
    for (size_t done = 0; done < blk.valid;) {
      const size_t n = blk.valid - done < 256 ? blk.valid - done : 256;
      if (kind == QuantKind::Int8) {
        const auto* ib = reinterpret_cast<const int8_t*>(cb + done);
        for (size_t i = 0; i < n; ++i) tmp[i] = float(ib[i]) * scale;
      } else {
        for (size_t i = 0; i < n; ++i) tmp[i] = table[cb[done + i]] * scale;
      }
      quantNarrow(type, tmp, n, static_cast<char*>(dst) + (blk.begin + done) * elem, false);
      done += n;
    }
  }
}

}  // namespace sncl
