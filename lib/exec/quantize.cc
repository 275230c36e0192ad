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
    const auto* s = static_cast<const uint16_t*>(src);
    const auto* r = static_cast<const uint16_t*>(add);
    if (r)
      for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(s[i]) + bf16ToFloat(r[i]);
    else
      for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(s[i]);
    return;
  }
  const auto* s = static_cast<const float*>(src);
  const auto* r = static_cast<const float*>(add);
  if (r)
    for (size_t i = 0; i < n; ++i) out[i] = s[i] + r[i];
  else
    memcpy(out, s, n * sizeof(float));
}

void quantNarrow(snclDataType_t type, const float* src, size_t n, void* dst, bool accumulate) {
  if (type == snclBfloat16) {
    auto* d = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = floatToBf16(accumulate ? bf16ToFloat(d[i]) + src[i] : src[i]);
    return;
  }
  auto* d = static_cast<float*>(dst);
  if (accumulate)
    for (size_t i = 0; i < n; ++i) d[i] += src[i];
  else
    memcpy(d, src, n * sizeof(float));
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
  float tmp[256];  // bfloat16: a block is decoded in pieces through here
  for (size_t b = 0; b < nblocks; ++b) {
    const Block blk = blockAt(b, blockElems, valid);
    const float scale = scales[b] * factor;
    const uint8_t* cb = codes + blk.begin;
    for (size_t done = 0; done < blk.valid;) {
      const size_t n = type == snclBfloat16 ? (blk.valid - done < 256 ? blk.valid - done : 256) : blk.valid - done;
      float* out = type == snclBfloat16 ? tmp : static_cast<float*>(dst) + blk.begin + done;
      if (kind == QuantKind::Int8) {
        const auto* ib = reinterpret_cast<const int8_t*>(cb + done);
        for (size_t i = 0; i < n; ++i) out[i] = float(ib[i]) * scale;
      } else {
        for (size_t i = 0; i < n; ++i) out[i] = table[cb[done + i]] * scale;
      }
      if (type == snclBfloat16) quantNarrow(type, tmp, n, static_cast<uint16_t*>(dst) + blk.begin + done, false);
      done += n;
    }
  }
}

}  // namespace sncl
