// The C API of compressed All-Reduce (include/sncl/sncl_ext.h, docs/compression.md):
// argument checks, then lib/comm/compressed.* runs the call on this thread.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "lib/api/api_checks.h"
#include "lib/comm/comm.h"
#include "lib/comm/compressed.h"
#include "lib/comm/group.h"
#include "lib/comm/stream.h"
#include "lib/exec/reduce.h"
#include "sncl/sncl_ext.h"

using sncl::fail;
using sncl::Result;

namespace {

bool overlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return aBytes && bBytes && x < y + bBytes && y < x + aBytes;
}

sncl::CompressCall callOf(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, snclRedOp_t op,
                          sncl::QuantKind kind) {
  sncl::CompressCall call;
  call.input = sendbuff;
  call.output = recvbuff;
  call.count = count;
  call.dtype = type;
  call.op = op;
  call.kind = kind;
  return call;
}

Result allReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, snclRedOp_t op,
                           snclComm* comm, snclStream* stream, const snclCompressOpts_t* opts) {
  constexpr const char* fn = "snclAllReduceCompressed";
  SNCL_CHECK(sncl::api::checkReady(comm, fn));
  SNCL_CHECK(sncl::api::checkStream(stream, fn));
  if (sncl::groupDepth() > 0)
    return fail(snclInvalidUsage, "{}: not inside a group (it runs two collectives with local work between them)", fn);
  if (!opts) return fail(snclInvalidArgument, "{}: opts is NULL", fn);
  if (opts->size != sizeof(snclCompressOpts_t))
    return fail(snclInvalidArgument, "{}: opts->size is {}, expected sizeof(snclCompressOpts_t) = {}", fn, opts->size,
                sizeof(snclCompressOpts_t));
  // Read as its integer: a C caller may store any int in the enum.
  std::underlying_type_t<snclCompression_t> kind;
  memcpy(&kind, &opts->kind, sizeof kind);
  if (kind != snclCompressNone && kind != snclCompressInt8 && kind != snclCompressFp8e4m3)
    return fail(snclInvalidArgument, "{}: opts->kind {} is not snclCompressNone, snclCompressInt8 or snclCompressFp8e4m3",
                fn, static_cast<long long>(kind));
  if (type != snclFloat32 && type != snclBfloat16)
    return fail(snclInvalidArgument, "{}: datatype {} is not supported (float32 or bfloat16 only)", fn,
                sncl::dtypeValid(type) ? sncl::dtypeName(type) : "unknown");
  if (op != snclSum && op != snclAvg)
    return fail(snclInvalidArgument, "{}: op {} is not supported (snclSum or snclAvg only)", fn,
                op >= 0 && op < snclNumOps ? sncl::redOpName(op) : "custom");
  if (opts->blockElems > sncl::kCompressMaxBlock)
    return fail(snclInvalidArgument, "{}: opts->blockElems {} is above {}", fn, opts->blockElems, sncl::kCompressMaxBlock);
  const size_t elem = sncl::dtypeSize(type);
  if (count > (size_t(1) << 47) / elem)
    return fail(snclInvalidArgument, "{}: count {} x {} bytes is more than a process can address", fn, count, elem);
  const size_t bytes = count * elem;
  if (bytes && (!sendbuff || !recvbuff))
    return fail(snclInvalidArgument, "{}: {} is NULL with a non-zero count", fn, !sendbuff ? "sendbuff" : "recvbuff");
  if (sendbuff != recvbuff && overlap(sendbuff, bytes, recvbuff, bytes))
    return fail(snclInvalidArgument, "{}: sendbuff and recvbuff overlap without being in place", fn);
  if (overlap(opts->residual, bytes, sendbuff, bytes) || overlap(opts->residual, bytes, recvbuff, bytes))
    return fail(snclInvalidArgument, "{}: opts->residual overlaps sendbuff or recvbuff", fn);

  sncl::CollOp plain;
  plain.coll = sncl::CollType::AllReduce;
  plain.input = sendbuff;
  plain.output = recvbuff;
  plain.count = count;
  plain.dtype = type;
  plain.op = op;
  if (opts->kind == snclCompressNone) {  // a plain All-Reduce, queued as any
    if (!stream) return sncl::commRun(comm, plain);
    sncl::GroupTask task;
    task.comm = comm;
    task.stream = stream;
    task.op = plain;
    return stream->enqueue(&task, 1, comm->timeoutMs);
  }
  // The composite runs on this thread, after the stream's earlier calls on the comm.
  if (stream) SNCL_CHECK(stream->eventWait(stream->ticket()));
  sncl::CompressCall call = callOf(sendbuff, recvbuff, count, type, op,
                                   opts->kind == snclCompressInt8 ? sncl::QuantKind::Int8 : sncl::QuantKind::Fp8e4m3);
  call.blockElems = opts->blockElems ? opts->blockElems : sncl::kCompressDefaultBlock;
  call.residual = opts->residual;
  return sncl::compressedAllReduce(comm, call);
}

}  // namespace

namespace sncl {

bool allReduceAutoCompressed(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type,
                             snclRedOp_t op, snclComm* comm, Result* result) {
  sncl::QuantKind kind;
  if (!sncl::compressAutomatically(comm, count, type, op, &kind)) return false;
  *result = sncl::compressedAllReduce(comm, callOf(sendbuff, recvbuff, count, type, op, kind));
  return true;
}

}  // namespace sncl

SNCL_API snclResult_t snclAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                              snclDataType_t datatype, snclRedOp_t op, snclComm_t comm,
                                              snclStream_t stream, const snclCompressOpts_t* opts) {
  return allReduceCompressed(sendbuff, recvbuff, count, datatype, op, comm, stream, opts);
}
