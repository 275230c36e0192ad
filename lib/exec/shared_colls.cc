#include "lib/exec/shared_colls.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "lib/base/copy.h"
#include "lib/exec/rank_slices.h"
#include "lib/exec/staged_colls.h"

namespace sncl {
namespace {

// Where a rank's buffer is: its address in the rank's process, and the allocation a peer
// process maps (fd -1: none).
struct BufferDesc {
  uint64_t addr = 0;
  SharedRef ref;
};

// What a rank publishes in its cell for the first of the call's two cell calls.
struct CallDesc {
  uint64_t magic = 0;
  uint64_t count = 0;
  int32_t pid = 0;
  int32_t pad = 0;
  BufferDesc in, out;
  BufferDesc stage;        // the rank's staging area (fd -1: none)
  uint64_t stagePart = 0;  // bytes of one of its four parts
};
constexpr uint64_t kMagic = 0x52414853'4c434e53ull;  // "SNCLSHAR"
// The second cell call's descriptor; kFailed: this rank could not map a peer's buffer.
constexpr uint64_t kDone = 0x454e4f44'00000000ull;
constexpr uint64_t kFailed = 1;

uint64_t describe(const SharedCall& c) {
  const uint64_t countBits = (c.count ^ (c.count >> 24) ^ (c.count >> 48)) & 0xffffff;
  return uint64_t(0x80 | uint8_t(c.coll)) | uint64_t(c.typeOp & 0xffff) << 8 | uint64_t(uint32_t(c.root) & 0xffff) << 24 |
         countBits << 40;
}

// Which ranks' input and output buffers the call touches.
bool needsInput(const SharedCall& c, int k) {
  return c.coll != CellsColl::Broadcast || k == c.root;
}
bool needsOutput(const SharedCall& c, int k) {
  return c.coll == CellsColl::AllReduce || (c.coll == CellsColl::Reduce && k == c.root);
}
size_t inputBytes(const SharedCall& c, int nranks) {
  return c.count * c.elemSize * (c.coll == CellsColl::ReduceScatter ? size_t(nranks) : 1);
}
size_t outputBytes(const SharedCall& c, int nranks) {
  return c.count * c.elemSize * (c.coll == CellsColl::AllGather ? size_t(nranks) : 1);
}

BufferDesc describeBuffer(const void* p, size_t bytes, bool needed) {
  BufferDesc d;
  d.addr = reinterpret_cast<uintptr_t>(p);
  if (!needed || !sharedFind(p, bytes, &d.ref)) d.ref.fd = -1;
  return d;
}

// The call's work on this rank once every buffer is an address here. Per block of the
// scratch's size, all inputs are read before the block's result is written, so in-place
// buffers (an output that is its rank's input) are safe: a slice is read and written by
// one rank only, and the last reduction may write the element it reads.
class Work {
 public:
  Work(const SharedCall& c, int rank, int nranks, char* const* in, char* const* out, SharedMoved* moved)
      : c_(c), rank_(rank), n_(nranks), in_(in), out_(out), moved_(moved), es_(c.elemSize),
        block_(std::max<size_t>(1, c.scratchBytes / c.elemSize)),
        // Outputs nobody finds in the cache anyway are streamed past it.
        stream_(pastTheCache((inputBytes(c, nranks) + outputBytes(c, nranks)) * size_t(nranks), c.cacheBytes)) {}

  void run() {
    switch (c_.coll) {
      case CellsColl::AllReduce: reduceSlice(0, out_[rank_], true); break;
      case CellsColl::Reduce: reduceSlice(0, out_[c_.root], false); break;
      case CellsColl::ReduceScatter: reduceScatter(); break;
      case CellsColl::AllGather: allGather(); break;
      case CellsColl::Broadcast: copy(out_[rank_], in_[c_.root], c_.count * es_); break;
    }
  }

 private:
  // dst = in_0[at..] op in_1[at..] op ... op in_{n-1}[at..].
  void reduceBlock(size_t base, size_t at, size_t m, char* dst) {
    reduceInRankOrder(c_.reduce, c_.scratch, dst, in_, (base + at) * es_, n_, m);
    moved_->reduced += uint64_t(n_ - 1) * m * es_;
  }
  // Reduces this rank's slice block by block into dst; toPeers: then copies each block from
  // there into every other rank's output.
  void reduceSlice(size_t base, char* dst, bool toPeers) {
    size_t lo, hi;
    sliceOf(c_.count, es_, rank_, n_, &lo, &hi);
    for (size_t at = lo; at < hi; at += block_) {
      const size_t m = std::min(block_, hi - at);
      char* result = dst + at * es_;
      reduceBlock(base, at, m, result);
      if (!toPeers) continue;
      for (int k = 0; k < n_; ++k)
        if (k != rank_) copy(out_[k] + at * es_, result, m * es_);
    }
  }
  void reduceScatter() {
    const size_t base = size_t(rank_) * c_.count;
    for (size_t at = 0; at < c_.count; at += block_) {
      const size_t m = std::min(block_, c_.count - at);
      reduceBlock(base, at, m, out_[rank_] + at * es_);
    }
  }
  void allGather() {
    const size_t bytes = c_.count * es_;
    for (int k = 0; k < n_; ++k) copy(out_[rank_] + size_t(k) * bytes, in_[k], bytes);
  }
  void copy(char* dst, const char* src, size_t bytes) {
    if (dst == src || bytes == 0) return;
    if (stream_) copyNonTemporal(dst, src, bytes);
    else copyCached(dst, src, bytes);
    moved_->copied += bytes;
  }

  const SharedCall& c_;
  int rank_, n_;
  char* const* in_;
  char* const* out_;
  SharedMoved* moved_;
  size_t es_, block_;
  bool stream_;
};

// Maps every rank's staging area and runs the call through them (staged_colls.h).
Result stageAll(LocalCells& cells, CellsWaiter& waiter, int rank, int nranks, const SharedCall& c, const CallDesc* all,
                size_t partBytes, bool* declined, SharedMoved* moved) {
  char* base[kSharedMaxRanks] = {};
  bool mapFailed = false;
  for (int k = 0; k < nranks; ++k) {
    if (k == rank) base[k] = c.stage;
    else if (!mapFailed) mapFailed = cells.mapShared(all[k].stage.ref, 4 * partBytes, &base[k]) != snclSuccess;
  }
  return runStaged(cells, waiter, rank, nranks, c, StagedAreas{base, partBytes}, mapFailed, declined, moved);
}

}  // namespace

size_t sharedDescBytes() {
  return sizeof(CallDesc);
}

Result runShared(LocalCells& cells, int rank, int nranks, const SharedCall& c, const CellsWait& wait,
                 bool* interrupted, bool* declined, bool* staged, SharedMoved* moved) {
  *interrupted = false;
  *declined = false;
  *staged = false;
  if (nranks < 2 || nranks > kSharedMaxRanks || cells.cellBytes() < sizeof(CallDesc) || c.scratchBytes < 64 ||
      c.scratchBytes < c.elemSize || !c.elemSize)
    return fail(snclInternalError, "shared buffers: cannot run {} ranks with cells of {} bytes", nranks,
                cells.cellBytes());
  CellsWaiter waiter(cells, rank, wait, interrupted);
  const uint64_t call = cells.beginCall();
  if (call > 1)
    for (int k = 0; k < nranks; ++k)
      if (k != rank) SNCL_CHECK(waiter.waitFor(k, call - 1));

  CallDesc mine;
  mine.magic = kMagic;
  mine.count = c.count;
  mine.pid = static_cast<int32_t>(getpid());
  mine.in = describeBuffer(c.input, inputBytes(c, nranks), needsInput(c, rank));
  mine.out = describeBuffer(c.output, outputBytes(c, nranks), needsOutput(c, rank));
  mine.stage = describeBuffer(c.stage, 4 * c.stagePartBytes, c.stage != nullptr);
  mine.stagePart = c.stage ? c.stagePartBytes : 0;
  const uint64_t desc = describe(c);
  std::memcpy(cells.cell(rank, call), &mine, sizeof(mine));
  cells.publish(call, desc);

  // Every rank reads every descriptor, so every rank decides alike.
  CallDesc all[kSharedMaxRanks];
  bool onePid = true, shared = true, stageable = true;
  size_t stagePart = SIZE_MAX;
  for (int k = 0; k < nranks; ++k) {
    if (k != rank) SNCL_CHECK(waiter.waitFor(k, call));
    std::memcpy(&all[k], cells.cell(k, call), sizeof(CallDesc));
    const uint64_t theirs = cells.cellDesc(k, call);
    if (theirs != desc || all[k].magic != kMagic || all[k].count != c.count)
      return fail(snclInvalidArgument,
                  "shared buffers: rank {} ran another call than rank {}'s {} of {} elements (descriptor {:#x}, "
                  "rank {}'s {:#x}): calls or counts differ across ranks?",
                  k, rank, cellsCollName(c.coll), c.count, theirs, rank, desc);
    onePid &= all[k].pid == all[0].pid;
    if (needsInput(c, k)) shared &= all[k].in.ref.fd >= 0;
    if (needsOutput(c, k)) shared &= all[k].out.ref.fd >= 0;
    stageable &= all[k].stage.ref.fd >= 0;
    stagePart = std::min<size_t>(stagePart, all[k].stagePart);
  }
  if (!shared && !onePid && stageable && stagePart >= c.elemSize * size_t(nranks)) {
    *staged = true;
    return stageAll(cells, waiter, rank, nranks, c, all, stagePart, declined, moved);
  }
  if (!shared && !onePid) {
    *declined = true;
    return snclSuccess;
  }

  // This rank's view of every buffer it touches.
  char* in[kSharedMaxRanks] = {};
  char* out[kSharedMaxRanks] = {};
  Result mapped = snclSuccess;
  auto resolve = [&](const BufferDesc& d, int k, bool own, const void* ownPtr, size_t bytes, char** to) {
    if (own) {
      *to = const_cast<char*>(static_cast<const char*>(ownPtr));
    } else if (all[k].pid == mine.pid) {
      *to = reinterpret_cast<char*>(d.addr);
    } else if (mapped == snclSuccess) {
      mapped = cells.mapShared(d.ref, bytes, to);
    }
  };
  for (int k = 0; k < nranks; ++k) {
    const bool own = k == rank;
    if (needsInput(c, k)) resolve(all[k].in, k, own, c.input, inputBytes(c, nranks), &in[k]);
    if (needsOutput(c, k)) resolve(all[k].out, k, own, c.output, outputBytes(c, nranks), &out[k]);
  }
  if (c.coll == CellsColl::AllGather || c.coll == CellsColl::Broadcast || c.coll == CellsColl::ReduceScatter)
    out[rank] = static_cast<char*>(c.output);
  if (mapped == snclSuccess) Work(c, rank, nranks, in, out, moved).run();

  // The barrier: no rank returns while another may still read its input or write its output.
  const uint64_t done = cells.beginCall();
  cells.publish(done, kDone | (mapped == snclSuccess ? 0 : kFailed));
  for (int k = 0; k < nranks; ++k) {
    if (k == rank) continue;
    SNCL_CHECK(waiter.waitFor(k, done));
    if (mapped == snclSuccess && cells.cellDesc(k, done) != kDone)
      return fail(snclRemoteError, "shared buffers: rank {} could not map its peers' buffers for {} (its log says why)",
                  k, cellsCollName(c.coll));
  }
  return mapped;
}

}  // namespace sncl
