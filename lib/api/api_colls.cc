// The C API of collectives, sends and receives, groups and reduction ops: validates every
// argument (never crash on bad input), then hands a CollOp to the open group, to the comm
// (NULL stream: run now on this thread) or to a stream (queued). The variable-count
// collectives and the scans of sncl_ext.h are here too: their arrays are copied into the
// op (CollOp::layout), so that a queued call owns them.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "lib/api/api_checks.h"
#include "lib/comm/comm.h"
#include "lib/comm/compressed.h"
#include "lib/comm/group.h"
#include "lib/comm/stream.h"
#include "lib/exec/reduce.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

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
// cannot be a buffer. (Multiplied with overflow checks, not divided: this runs on every
// call, and a division takes as long as a small call's other checks together.)
Result bytesOf(size_t count, snclDataType_t type, size_t blocks, const char* fn, size_t* bytes) {
  const size_t elem = sncl::dtypeSize(type);
  // Formatted only for a failure.
  auto times = [blocks] { return blocks > 1 ? fmt::format(" x {} ranks", blocks) : std::string(); };
  size_t perBlock = 0;
  if (__builtin_mul_overflow(count, elem, &perBlock) || __builtin_mul_overflow(perBlock, blocks, bytes))
    return fail(snclInvalidArgument, "{}: count {} x {} bytes{} overflows size_t", fn, count, elem, times());
  if (*bytes > kMaxBufferBytes)
    return fail(snclInvalidArgument, "{}: count {} x {} bytes{} is more than a process can address", fn, count, elem,
                times());
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

// grouped: inside snclGroupStart/End (a caller that asked already passes the answer).
Result submit(snclComm* comm, const sncl::CollOp& op, snclStream* stream, bool grouped = sncl::groupDepth() > 0) {
  if (grouped) {
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
  // SNCL_COMPRESS (sncl_ext.h, lib/comm/compressed.h): on the NULL stream outside a group,
  // a large float sum or average may run compressed.
  Result compressed = snclSuccess;
  const bool grouped = sncl::groupDepth() > 0;
  if (!stream && !grouped && !o.preMul && bytes >= comm->compressFromBytes &&
      sncl::allReduceAutoCompressed(sendbuff, recvbuff, count, type, o.op, comm, &compressed))
    return compressed;
  return submit(comm, o, stream, grouped);
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


// ---- Variable-count collectives and scans ----

// The calling thread's v-call, built in place: its arrays' copy reuses the capacity of the
// previous call's. A call that runs now runs from it as it is; a queued one is copied into
// the group or into a stream slot (which keeps its own capacity).
thread_local sncl::GroupTask vTask;

sncl::CollOp& newVOp(sncl::CollType coll, const void* in, void* out, size_t count, snclDataType_t type) {
  std::vector<size_t> layout = std::move(vTask.op.layout);
  vTask.op = makeOp(coll, in, out, count, type);
  layout.clear();
  vTask.op.layout = std::move(layout);
  return vTask.op;
}

Result submitV(snclComm* comm, snclStream* stream) {
  if (sncl::groupDepth() > 0 || stream) return submit(comm, vTask.op, stream);
  vTask.comm = comm;
  vTask.stream = nullptr;
  return sncl::commRunBatch(comm, &vTask, 1);
}

Result checkArray(const size_t* a, const char* name, const char* fn) {
  if (!a) return fail(snclInvalidArgument, "{}: {} is NULL", fn, name);
  return snclSuccess;
}

// Elements a buffer needs for blocks of counts[p] at displs[p]: the largest end of a block
// that has elements. Fails when an end overflows or cannot be a buffer.
Result extentOf(const size_t* counts, const size_t* displs, int nranks, snclDataType_t type, const char* what,
                const char* fn, size_t* extent) {
  size_t end = 0;
  for (int p = 0; p < nranks; ++p) {
    if (!counts[p]) continue;
    if (displs[p] > SIZE_MAX - counts[p])
      return fail(snclInvalidArgument, "{}: {} block of rank {}: displacement {} + count {} overflows size_t", fn, what,
                  p, displs[p], counts[p]);
    end = std::max(end, displs[p] + counts[p]);
  }
  size_t bytes = 0;
  SNCL_CHECK(bytesOf(end, type, 1, fn, &bytes));
  *extent = end;
  return snclSuccess;
}

void appendArray(std::vector<size_t>* layout, const size_t* a, int nranks) { layout->insert(layout->end(), a, a + nranks); }

// In-place only where the block of this rank starts exactly at the other buffer (offset
// elements into base); computed only for blocks validated to lie inside base's extent.
bool sameAt(const void* p, const void* base, size_t offset, size_t elem) {
  return p && base && p == at(base, offset * elem);
}

Result allGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                  const size_t* displs, snclDataType_t type, snclComm* comm, snclStream* stream) {
  constexpr const char* fn = "snclAllGatherV";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkArray(recvcounts, "recvcounts", fn));
  SNCL_CHECK(checkArray(displs, "displs", fn));
  const int n = comm->nranks, me = comm->rank;
  if (sendcount != recvcounts[me])
    return fail(snclInvalidArgument, "{}: sendcount {} differs from recvcounts[{}] = {}", fn, sendcount, me,
                recvcounts[me]);
  size_t extent = 0, inBytes = 0;
  SNCL_CHECK(extentOf(recvcounts, displs, n, type, "recvbuff", fn, &extent));
  SNCL_CHECK(bytesOf(sendcount, type, 1, fn, &inBytes));
  const size_t elem = sncl::dtypeSize(type);
  const bool inPlace = sendcount && sameAt(sendbuff, recvbuff, displs[me], elem);
  SNCL_CHECK(checkBuffers(sendbuff, inBytes, recvbuff, extent * elem, inPlace, fn));
  sncl::CollOp& o = newVOp(sncl::CollType::AllGatherV, sendbuff, recvbuff, sendcount, type);
  appendArray(&o.layout, recvcounts, n);
  appendArray(&o.layout, displs, n);
  o.inputExtent = sendcount;
  o.outputExtent = extent;
  return submitV(comm, stream);
}

Result alltoAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls, void* recvbuff,
                 const size_t* recvcounts, const size_t* rdispls, snclDataType_t type, snclComm* comm,
                 snclStream* stream) {
  constexpr const char* fn = "snclAlltoAllV";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkArray(sendcounts, "sendcounts", fn));
  SNCL_CHECK(checkArray(sdispls, "sdispls", fn));
  SNCL_CHECK(checkArray(recvcounts, "recvcounts", fn));
  SNCL_CHECK(checkArray(rdispls, "rdispls", fn));
  const int n = comm->nranks, me = comm->rank;
  if (sendcounts[me] != recvcounts[me])
    return fail(snclInvalidArgument, "{}: sendcounts[{}] = {} differs from recvcounts[{}] = {} (the block to itself)",
                fn, me, sendcounts[me], me, recvcounts[me]);
  size_t inExtent = 0, outExtent = 0;
  SNCL_CHECK(extentOf(sendcounts, sdispls, n, type, "sendbuff", fn, &inExtent));
  SNCL_CHECK(extentOf(recvcounts, rdispls, n, type, "recvbuff", fn, &outExtent));
  const size_t elem = sncl::dtypeSize(type), arrayBytes = size_t(n) * sizeof(size_t);
  // MPI_IN_PLACE's form: one buffer, one layout.
  const bool sameBuffer = sendbuff && sendbuff == recvbuff;
  const bool inPlace = sameBuffer && !memcmp(sendcounts, recvcounts, arrayBytes) && !memcmp(sdispls, rdispls, arrayBytes);
  if (sameBuffer && !inPlace && inExtent && outExtent)
    return fail(snclInvalidArgument,
                "{}: sendbuff == recvbuff (in place) needs sendcounts == recvcounts and sdispls == rdispls", fn);
  SNCL_CHECK(checkBuffers(sendbuff, inExtent * elem, recvbuff, outExtent * elem, inPlace, fn));
  // Its size for the planner and the logs: all it sends (blocks may overlap, so the sum
  // may exceed the extent; it only saturates).
  size_t sent = 0;
  for (int p = 0; p < n; ++p) sent = sendcounts[p] > SIZE_MAX / elem - sent ? SIZE_MAX / elem : sent + sendcounts[p];
  sncl::CollOp& o = newVOp(sncl::CollType::AlltoAllV, sendbuff, recvbuff, sent, type);
  appendArray(&o.layout, sendcounts, n);
  appendArray(&o.layout, sdispls, n);
  appendArray(&o.layout, recvcounts, n);
  appendArray(&o.layout, rdispls, n);
  o.inputExtent = inExtent;
  o.outputExtent = outExtent;
  return submitV(comm, stream);
}

Result gatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts, const size_t* displs,
               snclDataType_t type, int root, snclComm* comm, snclStream* stream) {
  constexpr const char* fn = "snclGatherV";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkRank(root, comm, "root", fn));
  const int n = comm->nranks;
  const bool isRoot = comm->rank == root;
  size_t extent = 0, inBytes = 0;
  SNCL_CHECK(bytesOf(sendcount, type, 1, fn, &inBytes));
  bool inPlace = false;
  if (isRoot) {
    SNCL_CHECK(checkArray(recvcounts, "recvcounts (at root)", fn));
    SNCL_CHECK(checkArray(displs, "displs (at root)", fn));
    if (sendcount != recvcounts[root])
      return fail(snclInvalidArgument, "{}: root's sendcount {} differs from recvcounts[{}] = {}", fn, sendcount, root,
                  recvcounts[root]);
    SNCL_CHECK(extentOf(recvcounts, displs, n, type, "recvbuff", fn, &extent));
    inPlace = sendcount && sameAt(sendbuff, recvbuff, displs[root], sncl::dtypeSize(type));
  }
  SNCL_CHECK(checkBuffers(sendbuff, inBytes, recvbuff, extent * sncl::dtypeSize(type), inPlace, fn));
  sncl::CollOp& o = newVOp(sncl::CollType::GatherV, sendbuff, isRoot ? recvbuff : nullptr, sendcount, type);
  o.root = root;
  if (isRoot) {
    appendArray(&o.layout, recvcounts, n);
    appendArray(&o.layout, displs, n);
  }
  o.inputExtent = sendcount;
  o.outputExtent = extent;
  return submitV(comm, stream);
}

Result scatterV(const void* sendbuff, const size_t* sendcounts, const size_t* displs, void* recvbuff, size_t recvcount,
                snclDataType_t type, int root, snclComm* comm, snclStream* stream) {
  constexpr const char* fn = "snclScatterV";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkRank(root, comm, "root", fn));
  const int n = comm->nranks;
  const bool isRoot = comm->rank == root;
  size_t extent = 0, outBytes = 0;
  SNCL_CHECK(bytesOf(recvcount, type, 1, fn, &outBytes));
  bool inPlace = false;
  if (isRoot) {
    SNCL_CHECK(checkArray(sendcounts, "sendcounts (at root)", fn));
    SNCL_CHECK(checkArray(displs, "displs (at root)", fn));
    if (recvcount != sendcounts[root])
      return fail(snclInvalidArgument, "{}: root's recvcount {} differs from sendcounts[{}] = {}", fn, recvcount, root,
                  sendcounts[root]);
    SNCL_CHECK(extentOf(sendcounts, displs, n, type, "sendbuff", fn, &extent));
    inPlace = recvcount && sameAt(recvbuff, sendbuff, displs[root], sncl::dtypeSize(type));
  }
  SNCL_CHECK(checkBuffers(sendbuff, extent * sncl::dtypeSize(type), recvbuff, outBytes, inPlace, fn));
  sncl::CollOp& o = newVOp(sncl::CollType::ScatterV, isRoot ? sendbuff : nullptr, recvbuff, recvcount, type);
  o.root = root;
  if (isRoot) {
    appendArray(&o.layout, sendcounts, n);
    appendArray(&o.layout, displs, n);
  }
  o.inputExtent = extent;
  o.outputExtent = recvcount;
  return submitV(comm, stream);
}

Result reduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts, snclDataType_t type,
                      snclRedOp_t op, snclComm* comm, snclStream* stream) {
  constexpr const char* fn = "snclReduceScatterV";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  SNCL_CHECK(checkArray(recvcounts, "recvcounts", fn));
  const int n = comm->nranks, me = comm->rank;
  size_t total = 0;
  for (int p = 0; p < n; ++p) {
    if (recvcounts[p] > SIZE_MAX - total)
      return fail(snclInvalidArgument, "{}: the sum of recvcounts overflows size_t (at rank {})", fn, p);
    total += recvcounts[p];
  }
  size_t inBytes = 0, outBytes = 0;
  SNCL_CHECK(bytesOf(total, type, 1, fn, &inBytes));
  SNCL_CHECK(bytesOf(recvcounts[me], type, 1, fn, &outBytes));
  // In place (MPI_IN_PLACE): recvbuff holds the whole input, so it spans inBytes.
  const bool inPlace = sendbuff && sendbuff == recvbuff;
  SNCL_CHECK(checkBuffers(sendbuff, inBytes, recvbuff, inPlace ? inBytes : outBytes, inPlace, fn));
  sncl::CollOp& o = newVOp(sncl::CollType::ReduceScatterV, sendbuff, recvbuff, recvcounts[me], type);
  SNCL_CHECK(sncl::resolveRedOp(comm, op, type, fn, &o));
  appendArray(&o.layout, recvcounts, n);
  size_t offset = 0;
  for (int p = 0; p < n; ++p) {
    o.layout.push_back(offset);
    offset += recvcounts[p];
  }
  o.inputExtent = total;
  o.outputExtent = recvcounts[me];
  return submitV(comm, stream);
}

Result scan(bool exclusive, const void* sendbuff, void* recvbuff, size_t count, snclDataType_t type, snclRedOp_t op,
            snclComm* comm, snclStream* stream) {
  const char* fn = exclusive ? "snclExscan" : "snclScan";
  SNCL_CHECK(checkCall(comm, stream, type, fn));
  sncl::CollOp& o = newVOp(exclusive ? sncl::CollType::Exscan : sncl::CollType::Scan, sendbuff, recvbuff, count, type);
  SNCL_CHECK(sncl::resolveRedOp(comm, op, type, fn, &o));
  if (o.op == snclAvg)
    return fail(snclInvalidArgument, "{}: snclAvg has no meaning for a prefix (each rank's would divide differently)", fn);
  size_t bytes = 0;
  SNCL_CHECK(bytesOf(count, type, 1, fn, &bytes));
  // Exscan never writes rank 0's recvbuff.
  const bool unused = exclusive && comm->rank == 0;
  SNCL_CHECK(checkBuffers(sendbuff, bytes, recvbuff, unused ? 0 : bytes, sendbuff == recvbuff, fn));
  if (unused) o.output = nullptr;
  return submitV(comm, stream);
}

// The v-calls copy arrays: running out of memory for that is a failed call, not an
// exception through the C API.
template <typename F>
Result guarded(const char* fn, F&& call) {
  try {
    return call();
  } catch (const std::bad_alloc&) {
    return fail(snclSystemError, "{}: out of memory for a copy of the call's arrays", fn);
  }
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

SNCL_API snclResult_t snclAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                                     const size_t* displs, snclDataType_t datatype, snclComm_t comm,
                                     snclStream_t stream) {
  return inGroup(guarded("snclAllGatherV", [&] {
    return allGatherV(sendbuff, sendcount, recvbuff, recvcounts, displs, datatype, comm, stream);
  }));
}

SNCL_API snclResult_t snclAlltoAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                                    void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                                    snclDataType_t datatype, snclComm_t comm, snclStream_t stream) {
  return inGroup(guarded("snclAlltoAllV", [&] {
    return alltoAllV(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, comm, stream);
  }));
}

SNCL_API snclResult_t snclGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                                  const size_t* displs, snclDataType_t datatype, int root, snclComm_t comm,
                                  snclStream_t stream) {
  return inGroup(guarded("snclGatherV", [&] {
    return gatherV(sendbuff, sendcount, recvbuff, recvcounts, displs, datatype, root, comm, stream);
  }));
}

SNCL_API snclResult_t snclScatterV(const void* sendbuff, const size_t* sendcounts, const size_t* displs,
                                   void* recvbuff, size_t recvcount, snclDataType_t datatype, int root,
                                   snclComm_t comm, snclStream_t stream) {
  return inGroup(guarded("snclScatterV", [&] {
    return scatterV(sendbuff, sendcounts, displs, recvbuff, recvcount, datatype, root, comm, stream);
  }));
}

SNCL_API snclResult_t snclReduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                         snclDataType_t datatype, snclRedOp_t op, snclComm_t comm,
                                         snclStream_t stream) {
  return inGroup(guarded("snclReduceScatterV", [&] {
    return reduceScatterV(sendbuff, recvbuff, recvcounts, datatype, op, comm, stream);
  }));
}

SNCL_API snclResult_t snclScan(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                               snclRedOp_t op, snclComm_t comm, snclStream_t stream) {
  return inGroup(guarded("snclScan", [&] { return scan(false, sendbuff, recvbuff, count, datatype, op, comm, stream); }));
}

SNCL_API snclResult_t snclExscan(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                                 snclRedOp_t op, snclComm_t comm, snclStream_t stream) {
  return inGroup(guarded("snclExscan", [&] { return scan(true, sendbuff, recvbuff, count, datatype, op, comm, stream); }));
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
