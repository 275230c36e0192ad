#include "lib/comm/compressed.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/comm/comm.h"
#include "lib/exec/reduce.h"

namespace sncl {

// What a comm keeps between compressed calls (snclComm::compress, made at init): the
// SNCL_COMPRESS setting, read once, and scratch that grows to the largest call.
struct CompressState {
  std::mutex mu;  // one compressed call at a time per comm (it spans two collectives)
  std::vector<char> scratch;  // grows to the largest call, then stays: no allocation once warm
  int autoKind = -1;          // SNCL_COMPRESS: -1 off, else a QuantKind
  size_t autoMinBytes = 65536;
  uint64_t logged[2] = {0, 0};  // per kind, the log2 size buckets whose estimate was logged
};

std::shared_ptr<CompressState> makeCompressState() {
  auto s = std::make_shared<CompressState>();
  if (auto v = env::str("SNCL_COMPRESS")) {
    if (*v == "int8") s->autoKind = int(QuantKind::Int8);
    else if (*v == "fp8" || *v == "e4m3" || *v == "fp8e4m3") s->autoKind = int(QuantKind::Fp8e4m3);
    else if (!v->empty() && *v != "none" && *v != "0")
      log::warn("SNCL_COMPRESS={} is not int8, fp8 or none: All-Reduce runs uncompressed", *v);
  }
  s->autoMinBytes = env::bytes("SNCL_COMPRESS_MIN_BYTES", 65536);
  return s;
}

size_t compressFromBytes(const CompressState& s) {
  return s.autoKind < 0 ? SIZE_MAX : s.autoMinBytes;
}

namespace {

const char* kindName(QuantKind k) { return k == QuantKind::Int8 ? "int8" : "fp8e4m3"; }

// How a call of count values splits: n slices of sliceElems (the last ones may be short or
// empty), each sliceBytes on the wire.
struct Layout {
  int n = 1, me = 0;
  size_t sliceElems = 0, sliceBytes = 0, blockElems = 0;
  size_t valid(size_t count, int j) const {
    const size_t begin = std::min(count, size_t(j) * sliceElems);
    return std::min(sliceElems, count - begin);
  }
};

Layout layoutOf(const snclComm* comm, size_t count, size_t blockElems) {
  Layout l;
  l.n = comm->nranks;
  l.me = comm->rank;
  l.blockElems = blockElems;
  l.sliceElems = (count + size_t(l.n) - 1) / size_t(l.n);
  l.sliceBytes = quantSliceBytes(l.sliceElems, blockElems);
  return l;
}

// The planner's estimates of the two phases at their byte counts, and of the plain All-Reduce.
struct Estimate {
  size_t wireBytes = 0, plainWireBytes = 0;  // sent per rank
  double compressedUs = 0, alltoallUs = 0, allgatherUs = 0, plainUs = 0;
};

Estimate estimate(snclComm* comm, const Layout& l, size_t count, size_t elemSize) {
  Estimate e;
  const size_t n = size_t(l.n);
  e.wireBytes = 2 * (n - 1) * l.sliceBytes;
  e.plainWireBytes = n ? 2 * (n - 1) * count * elemSize / n : 0;
  std::lock_guard<std::mutex> lock(comm->runMutex);  // the planner is the comm's: not during a call
  e.alltoallUs = comm->planner->choose(CollType::AlltoAll, l.sliceBytes).estimateUs;
  e.allgatherUs = comm->planner->choose(CollType::AllGather, l.sliceBytes).estimateUs;
  e.plainUs = comm->planner->choose(CollType::AllReduce, count * elemSize).estimateUs;
  e.compressedUs = e.alltoallUs + e.allgatherUs;
  return e;
}

void logEstimate(snclComm* comm, CompressState* s, QuantKind kind, size_t count, snclDataType_t dtype,
                 const Estimate& e, bool automatic, bool used) {
  const size_t bucket = std::min<size_t>(63, 64 - __builtin_clzll(uint64_t(count) | 1));
  uint64_t& logged = s->logged[int(kind)];
  if (logged & (uint64_t(1) << bucket)) return;
  logged |= uint64_t(1) << bucket;
  log::info(log::Subsys::Plan,
            "comm {} rank {}: all-reduce of {} {} values, compressed {}: bytes {} ({} {}), estimate {:.1f} us "
            "(all-to-all {:.1f} + all-gather {:.1f}; plain all-reduce {:.1f} us){}",
            comm->name, comm->rank, count, dtypeName(dtype), kindName(kind), e.wireBytes, dtypeName(dtype),
            e.plainWireBytes, e.compressedUs, e.alltoallUs, e.allgatherUs, e.plainUs,
            !automatic ? "" : used ? "; SNCL_COMPRESS: compressed" : "; SNCL_COMPRESS: plain is cheaper, not compressed");
}

Result runBytes(snclComm* comm, CollType coll, const void* in, void* out, size_t bytes) {
  CollOp op;
  op.coll = coll;
  op.input = in;
  op.output = out;
  op.count = bytes;
  op.dtype = snclUint8;
  return commRun(comm, op);
}

Result run(snclComm* comm, CompressState* s, const CompressCall& c) {
  const Layout l = layoutOf(comm, c.count, c.blockElems);
  const size_t elem = dtypeSize(c.dtype);
  const size_t n = size_t(l.n), me = size_t(l.me);
  const size_t quantBytes = n * l.sliceBytes;  // a multiple of 4 (and of 64 below)
  const size_t floatBytes = (l.sliceElems * sizeof(float) + 63) / 64 * 64;
  const size_t region = (quantBytes + 63) / 64 * 64;
  const size_t need = 3 * region + 2 * floatBytes;
  if (s->scratch.size() < need) {
    try {
      s->scratch.resize(need);  // zero-filled: the pages are touched now, not in the call's loops
    } catch (const std::bad_alloc&) {
      return fail(snclSystemError, "snclAllReduceCompressed: comm {} rank {}: out of memory for {} bytes of scratch",
                  comm->name, comm->rank, need);
    }
  }
  char* sendQ = s->scratch.data();
  char* recvQ = sendQ + region;
  char* gathered = recvQ + region;
  auto* ws = reinterpret_cast<float*>(gathered + region);
  auto* acc = reinterpret_cast<float*>(gathered + region + floatBytes);
  const auto* in = static_cast<const char*>(c.input);
  auto* res = static_cast<char*>(c.residual);

  // 1. Quantize every slice of the input (plus the residual), keeping the error as the
  //    next residual.
  for (size_t j = 0; j < n; ++j) {
    // Slices past the end (count < n * sliceElems) are all padding: no pointer into the
    // caller's buffers is formed for them.
    const size_t valid = l.valid(c.count, int(j)), off = valid ? j * l.sliceElems * elem : 0;
    if (valid) quantWiden(c.dtype, in + off, res ? res + off : nullptr, valid, ws);
    quantEncode(c.kind, ws, valid, l.sliceElems, l.blockElems, sendQ + j * l.sliceBytes, res ? ws : nullptr);
    if (res && valid) quantNarrow(c.dtype, ws, valid, res + off, false);
  }
  // 2. Rank j receives every rank's slice j.
  SNCL_CHECK(runBytes(comm, CollType::AlltoAll, sendQ, recvQ, l.sliceBytes));
  // 3. Decode and sum the slice this rank owns, in rank order (the same bits wherever it
  //    runs), and quantize the sum once, into this rank's place of the gathered slices.
  const size_t mine = l.valid(c.count, int(me));
  for (size_t r = 0; r < n; ++r)
    quantDecodeAdd(c.kind, recvQ + r * l.sliceBytes, mine, l.sliceElems, l.blockElems, acc, r == 0);
  quantEncode(c.kind, acc, mine, l.sliceElems, l.blockElems, gathered + me * l.sliceBytes, res ? ws : nullptr);
  // The sum's quantization error joins this rank's residual: added to its input next time,
  // it is summed into the same slice, so the output's error cancels over calls too.
  if (res && mine) quantNarrow(c.dtype, ws, mine, res + me * l.sliceElems * elem, true);
  // 4. Every rank gets every reduced slice (in place: this rank's is already there).
  SNCL_CHECK(runBytes(comm, CollType::AllGather, gathered + me * l.sliceBytes, gathered, l.sliceBytes));
  // 5. Decode into the output; avg divides here, after the one quantization of the sum.
  const float factor = c.op == snclAvg ? 1.0f / float(n) : 1.0f;
  auto* out = static_cast<char*>(c.output);
  for (size_t j = 0; j < n; ++j)
    if (const size_t valid = l.valid(c.count, int(j)))
      quantDecodeTo(c.kind, c.dtype, gathered + j * l.sliceBytes, valid, l.sliceElems, l.blockElems, factor,
                    out + j * l.sliceElems * elem);
  return snclSuccess;
}

}  // namespace

Result compressedAllReduce(snclComm* comm, const CompressCall& call) {
  if (call.count == 0) return snclSuccess;  // every rank passes the same count: nobody sends
  CompressState* s = comm->compress.get();
  std::lock_guard<std::mutex> lock(s->mu);
  if (log::level() >= log::Level::Info && log::enabled(log::Subsys::Plan)) {
    const Layout l = layoutOf(comm, call.count, call.blockElems);
    logEstimate(comm, s, call.kind, call.count, call.dtype, estimate(comm, l, call.count, dtypeSize(call.dtype)),
                false, true);
  }
  return run(comm, s, call);
}

bool compressAutomatically(snclComm* comm, size_t count, snclDataType_t dtype, snclRedOp_t op, QuantKind* kind) {
  if ((dtype != snclFloat32 && dtype != snclBfloat16) || (op != snclSum && op != snclAvg) || count == 0) return false;
  CompressState* s = comm->compress.get();
  if (s->autoKind < 0 || count * dtypeSize(dtype) < s->autoMinBytes) return false;
  *kind = QuantKind(s->autoKind);
  // Tiny calls cost more as two collectives than as one: the planner decides, alike on
  // every rank (same topology, same estimates).
  const Estimate e = estimate(comm, layoutOf(comm, count, kCompressDefaultBlock), count, dtypeSize(dtype));
  const bool use = e.compressedUs <= e.plainUs;
  std::lock_guard<std::mutex> lock(s->mu);
  if (log::level() >= log::Level::Info && log::enabled(log::Subsys::Plan)) logEstimate(comm, s, *kind, count, dtype, e, true, use);
  return use;
}

}  // namespace sncl
