// Compressed All-Reduce (docs/compression.md): float32/bfloat16 values cross the wire as
// int8 or fp8 e4m3 codes with a float32 scale per block (lib/exec/quantize.h). Composed of
// the comm's own collectives on bytes -- an All-to-All of quantized slices, a local
// decode-and-sum of the slice this rank owns, an All-Gather of the re-quantized sums -- so
// each phase is planned, sequence-numbered, kept and re-run after a fault like any call.
#pragma once

#include <cstddef>
#include <memory>

#include "lib/base/error.h"
#include "lib/exec/quantize.h"
#include "sncl/sncl.h"

struct snclComm;

namespace sncl {

// One validated call: op is snclSum or snclAvg, dtype snclFloat32 or snclBfloat16.
struct CompressCall {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  snclDataType_t dtype = snclFloat32;
  snclRedOp_t op = snclSum;
  QuantKind kind = QuantKind::Int8;
  size_t blockElems = 256;
  void* residual = nullptr;  // count values of dtype, or nullptr
};

constexpr size_t kCompressDefaultBlock = 256;
constexpr size_t kCompressMaxBlock = size_t(1) << 20;

// What a comm keeps for compressed calls (snclComm::compress): scratch and SNCL_COMPRESS.
struct CompressState;
std::shared_ptr<CompressState> makeCompressState();
// The smallest All-Reduce that SNCL_COMPRESS may compress (SIZE_MAX: off), for the comm to
// ask before calling in (snclComm::compressFromBytes).
size_t compressFromBytes(const CompressState& s);

// Runs call on comm on the calling thread (every rank of the comm calls it alike).
Result compressedAllReduce(snclComm* comm, const CompressCall& call);

// SNCL_COMPRESS: whether a plain All-Reduce of count values should run compressed, and
// with which kind: SNCL_COMPRESS set (int8 or fp8), dtype float32/bfloat16, op sum/avg,
// at least SNCL_COMPRESS_MIN_BYTES, and the planner's estimate of the compressed phases
// below the plain All-Reduce's.
bool compressAutomatically(snclComm* comm, size_t count, snclDataType_t dtype, snclRedOp_t op, QuantKind* kind);

// The SNCL_COMPRESS hook of snclAllReduce (lib/api/api_colls.cc, defined in
// lib/api/api_compress.cc): true when it ran the call compressed, its result in *result.
bool allReduceAutoCompressed(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type,
                             snclRedOp_t op, snclComm* comm, Result* result);

}  // namespace sncl
