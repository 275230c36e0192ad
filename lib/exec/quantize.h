// Block-wise quantization for compressed All-Reduce (lib/comm/compressed.*): float32 or
// bfloat16 values to int8 or fp8 e4m3 codes with one float32 scale per block, and back.
//
// A slice holds sliceElems values as [nblocks float32 scales][sliceElems one-byte codes],
// padded to 4 bytes; values past `valid` are encoded as zeros, so that every rank's slices
// have the same size on the wire.
//   int8:     scale = max|x| / 127, code = x / scale rounded (half away from zero), |code| <= 127
//   e4m3:     scale = max|x| / 448, code = x / scale rounded to nearest e4m3 (ties to even)
// A block with a NaN or an infinity gets a NaN scale: all its values decode as NaN, so a
// non-finite input is never turned into a finite result. A block of zeros has scale 0.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sncl/sncl.h"

namespace sncl {

enum class QuantKind : uint8_t { Int8, Fp8e4m3 };

constexpr size_t quantBlocks(size_t sliceElems, size_t blockElems) { return (sliceElems + blockElems - 1) / blockElems; }
// Bytes of one slice, a multiple of 4 (the next slice's scales stay aligned).
constexpr size_t quantSliceBytes(size_t sliceElems, size_t blockElems) {
  return (quantBlocks(sliceElems, blockElems) * sizeof(float) + sliceElems + 3) / 4 * 4;
}

// out[i] = src[i] (+ add[i] when add is not NULL), widened to float; type float32 or bfloat16.
void quantWiden(snclDataType_t type, const void* src, const void* add, size_t n, float* out);
// dst[i] = src[i] rounded to type (bfloat16: nearest even), or dst[i] += src[i] with accumulate.
void quantNarrow(snclDataType_t type, const float* src, size_t n, void* dst, bool accumulate);

// Encodes x[0..valid) into slice (sliceElems values, the rest zero). With err (which may
// be x itself), err[i] = x[i] - decoded value, the quantization error of each value.
void quantEncode(QuantKind kind, const float* x, size_t valid, size_t sliceElems, size_t blockElems, void* slice,
                 float* err);
// acc[i] (+)= decoded value i of slice for i < valid: assigns when first, else adds.
void quantDecodeAdd(QuantKind kind, const void* slice, size_t valid, size_t sliceElems, size_t blockElems, float* acc,
                    bool first);
// dst[i] = decoded value i * factor, rounded to type (float32 or bfloat16), i < valid.
void quantDecodeTo(QuantKind kind, snclDataType_t type, const void* slice, size_t valid, size_t sliceElems,
                   size_t blockElems, float factor, void* dst);

// The e4m3 conversions the kernels use (exposed for tests): code to value, and the code
// nearest v for |v| <= 448 (ties to even).
float e4m3Decode(uint8_t code);
uint8_t e4m3Encode(float v);

}  // namespace sncl
