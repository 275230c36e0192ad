#include "lib/exec/staged_colls.h"

#include <algorithm>
#include <cstring>

#include "lib/base/copy.h"
#include "lib/exec/rank_slices.h"

namespace sncl {
namespace {

// A barrier's descriptor: "STAG", the step (two per chunk) in bits 1-31, and bit 0 set when
// this rank could not map a peer's staging area.
constexpr uint64_t kBarrier = 0x47415453'00000000ull;
constexpr uint64_t kMapFailed = 1;

class StagedWork {
 public:
  StagedWork(LocalCells& cells, CellsWaiter& waiter, int rank, int nranks, const SharedCall& c, const StagedAreas& a,
             SharedMoved* moved)
      : cells_(cells), waiter_(waiter), rank_(rank), n_(nranks), c_(c), a_(a), moved_(moved), es_(c.elemSize),
        block_(std::max<size_t>(1, c.scratchBytes / c.elemSize)), chunk_(stagedChunk(c, nranks, a.partBytes)),
        in_(static_cast<const char*>(c.input)), out_(static_cast<char*>(c.output)) {
    const bool blocks = c.coll == CellsColl::ReduceScatter || c.coll == CellsColl::AllGather;
    const size_t perRank = c.count * es_ * (blocks ? 1 + size_t(nranks) : 2);
    // Outputs nobody finds in the cache anyway are streamed past it.
    stream_ = pastTheCache(perRank * size_t(nranks), c.cacheBytes);
  }

  Result run(bool mapFailed, bool* declined) {
    mapFailed_ = mapFailed;
    for (size_t i = 0, at = 0; at < c_.count; ++i, at += chunk_) {
      const size_t m = std::min(chunk_, c_.count - at);
      switch (c_.coll) {
        case CellsColl::AllReduce:
        case CellsColl::Reduce: SNCL_CHECK(reduceChunk(i, at, m)); break;
        case CellsColl::ReduceScatter: SNCL_CHECK(reduceScatterChunk(i, at, m)); break;
        case CellsColl::AllGather: SNCL_CHECK(allGatherChunk(i, at, m)); break;
        case CellsColl::Broadcast: SNCL_CHECK(broadcastChunk(i, at, m)); break;
      }
      if (anyFailed_) {  // learnt at the first barrier, before anyone read a peer's area
        *declined = true;
        return snclSuccess;
      }
    }
    return snclSuccess;
  }

 private:
  // Rank k's input (which 0) or output (1) part for chunk i.
  char* part(int k, int which, size_t i) const {
    return a_.base[k] + (size_t(which) * 2 + (i & 1)) * a_.partBytes;
  }
  void inputsOf(size_t i, char** in) const {
    for (int k = 0; k < n_; ++k) in[k] = part(k, 0, i);
  }

  // Every rank staged (or reduced) what the step needs. Step 0 also tells whether every
  // rank mapped every area; after it a rank that learnt otherwise stops.
  Result barrier(uint64_t step) {
    const uint64_t call = cells_.beginCall();
    const uint64_t desc = kBarrier | (step & 0x7fffffff) << 1;
    cells_.publish(call, desc | (step == 0 && mapFailed_ ? kMapFailed : 0));
    for (int k = 0; k < n_; ++k) {
      if (k == rank_) continue;
      SNCL_CHECK(waiter_.waitFor(k, call));
      const uint64_t theirs = cells_.cellDesc(k, call);
      if ((theirs & ~kMapFailed) != desc)
        return fail(snclInternalError, "staged {}: rank {} is at another step ({:#x}) than rank {} ({:#x})",
                    cellsCollName(c_.coll), k, theirs, rank_, desc);
      anyFailed_ |= (theirs & kMapFailed) != 0;
    }
    anyFailed_ |= step == 0 && mapFailed_;
    return snclSuccess;
  }

  // All-Reduce and Reduce: stage the chunk, reduce this rank's slice of every rank's
  // staged chunk into this rank's output part, then copy the slices out (Reduce: the root).
  Result reduceChunk(size_t i, size_t at, size_t m) {
    copy(part(rank_, 0, i), in_ + at * es_, m * es_, false);
    SNCL_CHECK(barrier(2 * i));
    if (anyFailed_) return snclSuccess;
    char* in[kSharedMaxRanks];
    inputsOf(i, in);
    size_t lo, hi;
    sliceOf(m, es_, rank_, n_, &lo, &hi);
    for (size_t b = lo; b < hi; b += block_) reduce(part(rank_, 1, i) + b * es_, in, b * es_, std::min(block_, hi - b));
    SNCL_CHECK(barrier(2 * i + 1));
    if (c_.coll == CellsColl::Reduce && rank_ != c_.root) return snclSuccess;
    for (int k = 0; k < n_; ++k) {
      sliceOf(m, es_, k, n_, &lo, &hi);
      copy(out_ + (at + lo) * es_, part(k, 1, i) + lo * es_, (hi - lo) * es_, stream_);
    }
    return snclSuccess;
  }
  // Each rank stages its n blocks' pieces of the chunk side by side, then reduces its own
  // block's pieces straight into its output.
  Result reduceScatterChunk(size_t i, size_t at, size_t m) {
    for (int k = 0; k < n_; ++k)
      copy(part(rank_, 0, i) + size_t(k) * m * es_, in_ + (size_t(k) * c_.count + at) * es_, m * es_, false);
    SNCL_CHECK(barrier(2 * i));
    if (anyFailed_) return snclSuccess;
    char* in[kSharedMaxRanks];
    inputsOf(i, in);
    for (size_t b = 0; b < m; b += block_)
      reduce(out_ + (at + b) * es_, in, (size_t(rank_) * m + b) * es_, std::min(block_, m - b));
    return snclSuccess;
  }
  Result allGatherChunk(size_t i, size_t at, size_t m) {
    copy(part(rank_, 0, i), in_ + at * es_, m * es_, false);
    SNCL_CHECK(barrier(2 * i));
    if (anyFailed_) return snclSuccess;
    for (int k = 0; k < n_; ++k) copy(out_ + (size_t(k) * c_.count + at) * es_, part(k, 0, i), m * es_, stream_);
    return snclSuccess;
  }
  Result broadcastChunk(size_t i, size_t at, size_t m) {
    if (rank_ == c_.root) {
      copy(part(rank_, 0, i), in_ + at * es_, m * es_, false);
      if (out_ != in_) copy(out_ + at * es_, in_ + at * es_, m * es_, stream_);
    }
    SNCL_CHECK(barrier(2 * i));
    if (anyFailed_ || rank_ == c_.root) return snclSuccess;
    copy(out_ + at * es_, part(c_.root, 0, i), m * es_, stream_);
    return snclSuccess;
  }

  void reduce(char* dst, char* const* in, size_t off, size_t m) {
    reduceInRankOrder(c_.reduce, c_.scratch, dst, in, off, n_, m);
    moved_->reduced += uint64_t(n_ - 1) * m * es_;
  }
  void copy(char* dst, const char* src, size_t bytes, bool stream) {
    if (bytes == 0) return;
    if (stream) copyNonTemporal(dst, src, bytes);
    else copyCached(dst, src, bytes);
    moved_->copied += bytes;
  }

  LocalCells& cells_;
  CellsWaiter& waiter_;
  int rank_, n_;
  const SharedCall& c_;
  const StagedAreas& a_;
  SharedMoved* moved_;
  size_t es_, block_, chunk_;
  const char* in_;
  char* out_;
  bool stream_ = false;
  bool mapFailed_ = false;
  bool anyFailed_ = false;
};

}  // namespace

size_t stagedChunk(const SharedCall& c, int nranks, size_t partBytes) {
  const size_t perElement = c.elemSize * (c.coll == CellsColl::ReduceScatter ? size_t(nranks) : 1);
  return std::max<size_t>(1, partBytes / perElement);
}

Result runStaged(LocalCells& cells, CellsWaiter& waiter, int rank, int nranks, const SharedCall& call,
                 const StagedAreas& areas, bool mapFailed, bool* declined, SharedMoved* moved) {
  *declined = false;
  if (nranks < 2 || nranks > kSharedMaxRanks || areas.partBytes < call.elemSize * size_t(nranks))
    return fail(snclInternalError, "staged {}: {} ranks, staging parts of {} bytes", cellsCollName(call.coll), nranks,
                areas.partBytes);
  return StagedWork(cells, waiter, rank, nranks, call, areas, moved).run(mapFailed, declined);
}

}  // namespace sncl
