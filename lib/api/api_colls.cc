// The C API of collectives, sends and receives, groups and reduction ops: validates every
// argument (never crash on bad input), then hands a CollOp to the open group, to the comm
// (NULL stream: run now on this thread) or to a stream (queued).
#include <cstdint>
#include <string>

#include "lib/api/api_checks.h"
#include "lib/comm/comm.h"
#include "lib/comm/group.h"
#include "lib/comm/stream.h"
#include "lib/exec/reduce.h"
#include "sncl/sncl.h"

using sncl::fail;
using sncl::Result;
using sncl::api::checkReady;
using sncl::api::checkStream;

namespace {

// A call that fails inside a group also fails the group (snclGroupEnd reports it).
Result inGroup(Result r) {
  if (r != snclSuccess && sncl::groupDepth() > 0) sncl::groupFail(r);
  return r;
}

Result checkCall(snclComm* comm, snclStream* stream, snclDataType_t type, const char* fn) {
  SNCL_CHECK(checkReady(comm, fn));
  SNCL_CHECK(checkStream(stream, fn));
  if (!sncl::dtypeValid(type)) return fail(snclInvalidArgument, "{}: unknown datatype {}", fn, static_cast<int>(type));
  return snclSuccess;
}

Result checkRank(int value, const snclComm* comm, const char* what, const char* fn) {
  if (value < 0 || value >= comm->nranks)
    return fail(snclInvalidArgument, "{}: {} {} out of range [0, {})", fn, what, value, comm->nranks);
  return snclSuccess;
}

// User space on x86-64 and AArch64 spans 2^47 bytes: no buffer is larger, so a count
// that asks for more is wrong (and would make schedules and scratch absurdly large).
constexpr size_t kMaxBufferBytes = size_t(1) << 47;

// count elements of type, times blocks, in bytes; fails when that overflows size_t or
// cannot be a buffer.
Result bytesOf(size_t count, snclDataType_t type, size_t blocks, const char* fn, size_t* bytes) {
  const size_t elem = sncl::dtypeSize(type);
  const std::string times = blocks > 1 ? fmt::format(" x {} ranks", blocks) : std::string();
  if (count > SIZE_MAX / elem / blocks)
    return fail(snclInvalidArgument, "{}: count {} x {} bytes{} overflows size_t", fn, count, elem, times);
  *bytes = count * elem * blocks;
  if (*bytes > kMaxBufferBytes)
    return fail(snclInvalidArgument, "{}: count {} x {} bytes{} is more than a process can address", fn, count, elem,
                times);
  return snclSuccess;
}

const char* at(const void* p, size_t offset) { return static_cast<const char*>(p) + offset; }

// The buffers a rank uses (a size of 0 means unused, and the pointer may be NULL) must
// not overlap, except as the collective's in-place arrangement (inPlace, checked by the
// caller).
Result checkBuffers(const void* in, size_t inBytes, const void* out, size_t outBytes, bool inPlace, const char* fn) {
  if ((inBytes && !in) || (outBytes && !out))
    return fail(snclInvalidArgument, "{}: {} is NULL with a non-zero count", fn, (inBytes && !in) ? "sendbuff" : "recvbuff");
  if (!inBytes || !outBytes || inPlace) return snclSuccess;
  auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  if (a < b + outBytes && b < a + inBytes)
    return fail(snclInvalidArgument, "{}: sendbuff and recvbuff overlap without being in place", fn);
  return snclSuccess;
}

Result submit(snclComm* comm, const sncl::CollOp& op, snclStream* stream) {
  if (sncl::groupDepth() > 0) {
    sncl::groupAdd(comm, stream, op);
    return snclSuccess;
  }
  if (!stream) return sncl::commRun(comm, op);
  sncl::GroupTask task;
  task.comm = comm;
  task.stream = stream;
  task.op = op;
  return stream->enqueue(&task, 1, comm->timeoutMs);
}

sncl::CollOp makeOp(sncl::CollType coll, const void* in, void* out, size_t count, snclDataType_t type) {
  sncl::CollOp o;
  o.coll = coll;
  o.input = in;
  o.output = out;
  o.count = count;
  o.dtype = type;
  return o;
}

Result allReduce(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, snclRedOp_t op,
                 snclComm* comm, snclStream* stream) {
  constexpr const char* fn = "snclAllReduce";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  sncl::CollOp o = makeOp(sncl::CollType::AllReduce, sendbuff, recvbuff, count, type);
  SNCL_CHECK(sncl::resolveRedOp(comm, op, type, fn, &o));
  size_t bytes = 0;
  SNCL_CHECK(bytesOf(count, type, 1, fn, &bytes));
  SNCL_CHECK(checkBuffers(sendbuff, bytes, recvbuff, bytes, sendbuff == recvbuff, fn));
  return submit(comm, o, stream);
}

Result broadcast(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, int root, snclComm* comm,
                 snclStream* stream) {
  constexpr const char* fn = "snclBroadcast";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkRank(root, comm, "root", fn));
  size_t bytes = 0;
  SNCL_CHECK(bytesOf(count, type, 1, fn, &bytes));
  const bool isRoot = comm->rank == root;
  SNCL_CHECK(checkBuffers(sendbuff, isRoot ? bytes : 0, recvbuff, bytes, sendbuff == recvbuff, fn));
  sncl::CollOp o = makeOp(sncl::CollType::Broadcast, isRoot ? sendbuff : nullptr, recvbuff, count, type);
  o.root = root;
  return submit(comm, o, stream);
}

Result reduce(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, snclRedOp_t op, int root,
              snclComm* comm, snclStream* stream) {
  constexpr const char* fn = "snclReduce";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkRank(root, comm, "root", fn));
  sncl::CollOp o = makeOp(sncl::CollType::Reduce, sendbuff, nullptr, count, type);
  SNCL_CHECK(sncl::resolveRedOp(comm, op, type, fn, &o));
  size_t bytes = 0;
  SNCL_CHECK(bytesOf(count, type, 1, fn, &bytes));
  const bool isRoot = comm->rank == root;
  SNCL_CHECK(checkBuffers(sendbuff, bytes, recvbuff, isRoot ? bytes : 0, sendbuff == recvbuff, fn));
  if (isRoot) o.output = recvbuff;
  o.root = root;
  return submit(comm, o, stream);
}

Result allGather(const void* sendbuff, void* recvbuff, size_t sendcount, snclDataType_t type, snclComm* comm,
                 snclStream* stream) {
  constexpr const char* fn = "snclAllGather";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  size_t inBytes = 0, outBytes = 0;
  SNCL_CHECK(bytesOf(sendcount, type, static_cast<size_t>(comm->nranks), fn, &outBytes));
  SNCL_CHECK(bytesOf(sendcount, type, 1, fn, &inBytes));
  const bool inPlace = recvbuff && sendbuff == at(recvbuff, static_cast<size_t>(comm->rank) * inBytes);
  SNCL_CHECK(checkBuffers(sendbuff, inBytes, recvbuff, outBytes, inPlace, fn));
  return submit(comm, makeOp(sncl::CollType::AllGather, sendbuff, recvbuff, sendcount, type), stream);
}

Result reduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, snclDataType_t type, snclRedOp_t op,
                     snclComm* comm, snclStream* stream) {
  constexpr const char* fn = "snclReduceScatter";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  sncl::CollOp o = makeOp(sncl::CollType::ReduceScatter, sendbuff, recvbuff, recvcount, type);
  SNCL_CHECK(sncl::resolveRedOp(comm, op, type, fn, &o));
  size_t inBytes = 0, outBytes = 0;
  SNCL_CHECK(bytesOf(recvcount, type, static_cast<size_t>(comm->nranks), fn, &inBytes));
  SNCL_CHECK(bytesOf(recvcount, type, 1, fn, &outBytes));
  const bool inPlace = sendbuff && recvbuff == at(sendbuff, static_cast<size_t>(comm->rank) * outBytes);
  SNCL_CHECK(checkBuffers(sendbuff, inBytes, recvbuff, outBytes, inPlace, fn));
  return submit(comm, o, stream);
}

Result alltoAll(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, snclComm* comm,
                snclStream* stream) {
  constexpr const char* fn = "snclAlltoAll";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  size_t bytes = 0;
  SNCL_CHECK(bytesOf(count, type, static_cast<size_t>(comm->nranks), fn, &bytes));
  SNCL_CHECK(checkBuffers(sendbuff, bytes, recvbuff, bytes, sendbuff == recvbuff, fn));
  return submit(comm, makeOp(sncl::CollType::AlltoAll, sendbuff, recvbuff, count, type), stream);
}

Result gather(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, int root, snclComm* comm,
              snclStream* stream) {
  constexpr const char* fn = "snclGather";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkRank(root, comm, "root", fn));
  size_t inBytes = 0, outBytes = 0;
  SNCL_CHECK(bytesOf(count, type, static_cast<size_t>(comm->nranks), fn, &outBytes));
  SNCL_CHECK(bytesOf(count, type, 1, fn, &inBytes));
  const bool isRoot = comm->rank == root;
  const bool inPlace = isRoot && recvbuff && sendbuff == at(recvbuff, static_cast<size_t>(root) * inBytes);
  SNCL_CHECK(checkBuffers(sendbuff, inBytes, recvbuff, isRoot ? outBytes : 0, inPlace, fn));
  sncl::CollOp o = makeOp(sncl::CollType::Gather, sendbuff, isRoot ? recvbuff : nullptr, count, type);
  o.root = root;
  return submit(comm, o, stream);
}

Result scatter(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, int root, snclComm* comm,
               snclStream* stream) {
  constexpr const char* fn = "snclScatter";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkRank(root, comm, "root", fn));
  size_t inBytes = 0, outBytes = 0;
  SNCL_CHECK(bytesOf(count, type, static_cast<size_t>(comm->nranks), fn, &inBytes));
  SNCL_CHECK(bytesOf(count, type, 1, fn, &outBytes));
  const bool isRoot = comm->rank == root;
  const bool inPlace = isRoot && sendbuff && recvbuff == at(sendbuff, static_cast<size_t>(root) * outBytes);
  SNCL_CHECK(checkBuffers(sendbuff, isRoot ? inBytes : 0, recvbuff, outBytes, inPlace, fn));
  sncl::CollOp o = makeOp(sncl::CollType::Scatter, isRoot ? sendbuff : nullptr, recvbuff, count, type);
  o.root = root;
  return submit(comm, o, stream);
}

Result pointToPoint(sncl::CollType coll, const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type,
                    int peer, snclComm* comm, snclStream* stream) {
  const char* fn = coll == sncl::CollType::Send ? "snclSend" : "snclRecv";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkRank(peer, comm, "peer", fn));
  size_t bytes = 0;
  SNCL_CHECK(bytesOf(count, type, 1, fn, &bytes));
  if (bytes && !(sendbuff || recvbuff))
    return fail(snclInvalidArgument, "{}: {} is NULL with a non-zero count", fn,
                coll == sncl::CollType::Send ? "sendbuff" : "recvbuff");
  sncl::CollOp o = makeOp(coll, sendbuff, recvbuff, count, type);
  o.peer = peer;
  return submit(comm, o, stream);
}

}  // namespace

SNCL_API snclResult_t snclAllReduce(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                                    snclRedOp_t op, snclComm_t comm, snclStream_t stream) {
  return inGroup(allReduce(sendbuff, recvbuff, count, datatype, op, comm, stream));
}

SNCL_API snclResult_t snclBroadcast(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                                    int root, snclComm_t comm, snclStream_t stream) {
  return inGroup(broadcast(sendbuff, recvbuff, count, datatype, root, comm, stream));
}

SNCL_API snclResult_t snclBcast(void* buff, size_t count, snclDataType_t datatype, int root, snclComm_t comm,
                                snclStream_t stream) {
  return inGroup(broadcast(buff, buff, count, datatype, root, comm, stream));
}

SNCL_API snclResult_t snclReduce(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                                 snclRedOp_t op, int root, snclComm_t comm, snclStream_t stream) {
  return inGroup(reduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream));
}

SNCL_API snclResult_t snclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, snclDataType_t datatype,
                                    snclComm_t comm, snclStream_t stream) {
  return inGroup(allGather(sendbuff, recvbuff, sendcount, datatype, comm, stream));
}

SNCL_API snclResult_t snclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        snclDataType_t datatype, snclRedOp_t op, snclComm_t comm,
                                        snclStream_t stream) {
  return inGroup(reduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
}

SNCL_API snclResult_t snclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                                   snclComm_t comm, snclStream_t stream) {
  return inGroup(alltoAll(sendbuff, recvbuff, count, datatype, comm, stream));
}

SNCL_API snclResult_t snclGather(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype, int root,
                                 snclComm_t comm, snclStream_t stream) {
  return inGroup(gather(sendbuff, recvbuff, count, datatype, root, comm, stream));
}

SNCL_API snclResult_t snclScatter(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                                  int root, snclComm_t comm, snclStream_t stream) {
  return inGroup(scatter(sendbuff, recvbuff, count, datatype, root, comm, stream));
}

SNCL_API snclResult_t snclSend(const void* sendbuff, size_t count, snclDataType_t datatype, int peer,
                               snclComm_t comm, snclStream_t stream) {
  return inGroup(pointToPoint(sncl::CollType::Send, sendbuff, nullptr, count, datatype, peer, comm, stream));
}

SNCL_API snclResult_t snclRecv(void* recvbuff, size_t count, snclDataType_t datatype, int peer, snclComm_t comm,
                               snclStream_t stream) {
  return inGroup(pointToPoint(sncl::CollType::Recv, nullptr, recvbuff, count, datatype, peer, comm, stream));
}

SNCL_API snclResult_t snclGroupStart(void) {
  sncl::groupStart();
  return snclSuccess;
}

SNCL_API snclResult_t snclGroupEnd(void) { return sncl::groupEnd(checkReady); }

SNCL_API snclResult_t snclRedOpCreatePreMulSum(snclRedOp_t* op, void* scalar, snclDataType_t datatype,
                                               snclScalarResidence_t residence, snclComm_t comm) {
  SNCL_CHECK(checkReady(comm, "snclRedOpCreatePreMulSum"));
  return sncl::redOpCreatePreMulSum(comm, op, scalar, datatype, residence);
}

SNCL_API snclResult_t snclRedOpDestroy(snclRedOp_t op, snclComm_t comm) {
  SNCL_CHECK(checkReady(comm, "snclRedOpDestroy"));
  return sncl::redOpDestroy(comm, op);
}
