#include "lib/exec/cells.h"

#include <sched.h>

#include <cstring>

#include "lib/base/clock.h"

namespace sncl {
namespace {

// With a core per rank a peer usually publishes within a few microseconds: spinning that
// long is cheaper than a futex sleep and wake-up (the shm transport spins as long).
constexpr int64_t kSpinMicros = 20;
// Oversubscribed: yield this many times (the peer may be waiting for this core) before sleeping.
constexpr int kYields = 4;
// Longest sleep between looks at the peer's liveness and the fault side channel.
constexpr int64_t kSliceMicros = 20000;
constexpr int64_t kHookSliceMicros = 200;  // the executor's sleep, so a wait hook runs as often

inline void cpuRelax() {
  __builtin_ia32_pause();
}

uint64_t describe(const CellsCall& c) {
  return uint64_t(c.coll) | uint64_t(c.typeOp & 0xffff) << 8 | uint64_t(uint32_t(c.root) & 0xffff) << 24 |
         uint64_t(c.bytes) << 40;
}

std::string describeText(uint64_t d) {
  return fmt::format("{} of {} bytes, dtype/op {:#x}, root {}", cellsCollName(CellsColl(d & 0xff)), d >> 40,
                     (d >> 8) & 0xffff, (d >> 24) & 0xffff);
}

class Waiter {
 public:
  Waiter(LocalCells& cells, int rank, const CellsWait& w, bool* interrupted)
      : cells_(cells), rank_(rank), w_(w), interrupted_(interrupted) {}

  // Until peer published call (or a later one).
  Result waitFor(int peer, uint64_t call) {
    if (cells_.published(peer, call)) return snclSuccess;
    const auto start = Clock::now();
    if (cells_.spin()) {
      const auto spinUntil = start + std::chrono::microseconds(kSpinMicros);
      do {
        for (int i = 0; i < 64; ++i) {
          if (cells_.published(peer, call)) return snclSuccess;
          cpuRelax();
        }
      } while (Clock::now() < spinUntil);
    } else {
      for (int i = 0; i < kYields; ++i) {
        sched_yield();
        if (cells_.published(peer, call)) return snclSuccess;
      }
    }
    const Deadline deadline = Deadline::afterMs(w_.timeoutMs);
    for (;;) {
      if (w_.hook) w_.hook(w_.hookUser);
      if (w_.interrupt && w_.interrupt(w_.ctx)) {
        *interrupted_ = true;
        return snclRemoteError;
      }
      const Result state = cells_.peerState(peer);
      // Published before it left (a peer that finished its calls and closed): the cell stands.
      if (cells_.published(peer, call)) return snclSuccess;
      if (state != snclSuccess) return state;
      if (deadline.expired())
        return fail(snclTimeout, "cells: rank {} waited {} ms for rank {} to reach call {} (timeout {} ms)", rank_,
                    w_.timeoutMs, peer, call, w_.timeoutMs);
      cells_.wait(peer, call, w_.hook ? kHookSliceMicros : kSliceMicros);
      if (cells_.published(peer, call)) return snclSuccess;
    }
  }

 private:
  LocalCells& cells_;
  int rank_;
  const CellsWait& w_;
  bool* interrupted_;
};

}  // namespace

const char* cellsCollName(CellsColl c) {
  switch (c) {
    case CellsColl::AllReduce: return "AllReduce";
    case CellsColl::AllGather: return "AllGather";
    case CellsColl::Broadcast: return "Broadcast";
    case CellsColl::Reduce: return "Reduce";
  }
  return "?";
}

Result runCells(LocalCells& cells, int rank, int nranks, const CellsCall& c, const CellsWait& wait,
                bool* interrupted) {
  *interrupted = false;
  if (c.bytes > cells.cellBytes() || nranks < 2)
    return fail(snclInternalError, "cells: {} bytes do not fit cells of {} bytes ({} ranks)", c.bytes,
                cells.cellBytes(), nranks);
  Waiter waiter(cells, rank, wait, interrupted);
  const uint64_t call = cells.beginCall();
  // The cell about to be written held call-2: free once every peer published call-1.
  if (call > 1)
    for (int k = 0; k < nranks; ++k)
      if (k != rank) SNCL_CHECK(waiter.waitFor(k, call - 1));

  const uint64_t desc = describe(c);
  const bool writes = c.coll != CellsColl::Broadcast || rank == c.root;
  if (writes && c.bytes) std::memcpy(cells.cell(rank, call), c.input, c.bytes);
  cells.publish(call, desc);

  // Which cells this rank reads: all (All-Reduce, All-Gather, Reduce at its root), the
  // root's (Broadcast off the root), or none.
  const bool readsAll = c.coll == CellsColl::AllReduce || c.coll == CellsColl::AllGather ||
                        (c.coll == CellsColl::Reduce && rank == c.root);
  auto arrived = [&](int k) -> Result {
    if (k == rank) return snclSuccess;
    SNCL_CHECK(waiter.waitFor(k, call));
    const uint64_t theirs = cells.cellDesc(k, call);
    if (theirs != desc)
      return fail(snclInvalidArgument, "cells: rank {} ran {} but rank {} ran {}: calls or counts differ across ranks?",
                  k, describeText(theirs), rank, describeText(desc));
    return snclSuccess;
  };
  const size_t count = c.elemSize ? c.bytes / c.elemSize : 0;
  auto* out = static_cast<char*>(c.output);
  if (c.coll == CellsColl::Broadcast) {
    if (rank == c.root) {
      if (c.bytes && out != c.input) std::memcpy(out, c.input, c.bytes);
    } else {
      SNCL_CHECK(arrived(c.root));
      if (c.bytes) std::memcpy(out, cells.cell(c.root, call), c.bytes);
    }
    return snclSuccess;
  }
  if (!readsAll) return snclSuccess;
  if (c.coll == CellsColl::AllGather) {
    for (int k = 0; k < nranks; ++k) {
      SNCL_CHECK(arrived(k));
      char* dst = out + size_t(k) * c.bytes;
      if (c.bytes && dst != c.input) std::memcpy(dst, cells.cell(k, call), c.bytes);
    }
    return snclSuccess;
  }
  // All-Reduce, Reduce at the root: ((r0 op r1) op r2) ..., in rank order on every rank.
  SNCL_CHECK(arrived(0));
  for (int k = 1; k < nranks; ++k) {
    SNCL_CHECK(arrived(k));
    if (count) c.reduce(out, k == 1 ? cells.cell(0, call) : out, cells.cell(k, call), count);
  }
  return snclSuccess;
}

}  // namespace sncl
