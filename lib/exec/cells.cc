#include "lib/exec/cells.h"

#include <cstring>

#include "lib/base/copy.h"
#include "lib/exec/cells_wait.h"

namespace sncl {
namespace {

uint64_t describe(const CellsCall& c) {
  return uint64_t(c.coll) | uint64_t(c.typeOp & 0xffff) << 8 | uint64_t(uint32_t(c.root) & 0xffff) << 24 |
         uint64_t(c.bytes()) << 40;
}

std::string describeText(uint64_t d) {
  // A peer's first cell call of a collective on shared buffers (shared_colls.cc): a larger count.
  if (d & 0x80)
    return fmt::format("{} of more elements than the cells take, on shared buffers", cellsCollName(CellsColl(d & 0x7f)));
  return fmt::format("{} of {} bytes, dtype/op {:#x}, root {}", cellsCollName(CellsColl(d & 0xff)), d >> 40,
                     (d >> 8) & 0xffff, (d >> 24) & 0xffff);
}

}  // namespace

const char* cellsCollName(CellsColl c) {
  switch (c) {
    case CellsColl::AllReduce: return "AllReduce";
    case CellsColl::AllGather: return "AllGather";
    case CellsColl::Broadcast: return "Broadcast";
    case CellsColl::Reduce: return "Reduce";
    case CellsColl::ReduceScatter: return "ReduceScatter";
  }
  return "?";
}

Result runCells(LocalCells& cells, int rank, int nranks, const CellsCall& c, const CellsWait& wait,
                bool* interrupted) {
  *interrupted = false;
  if (c.bytes() > cells.cellBytes() || nranks < 2)
    return fail(snclInternalError, "cells: {} bytes do not fit cells of {} bytes ({} ranks)", c.bytes(),
                cells.cellBytes(), nranks);
  CellsWaiter waiter(cells, rank, wait, interrupted);
  const uint64_t call = cells.beginCall();
  // The cell about to be written held call-2: free once every peer published call-1.
  if (call > 1)
    for (int k = 0; k < nranks; ++k)
      if (k != rank) SNCL_CHECK(waiter.waitFor(k, call - 1));

  const uint64_t desc = describe(c);
  const bool writes = c.coll != CellsColl::Broadcast || rank == c.root;
  if (writes && c.bytes()) copyCached(cells.cell(rank, call), c.input, c.bytes());
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
  auto* out = static_cast<char*>(c.output);
  if (c.coll == CellsColl::Broadcast) {
    if (rank == c.root) {
      if (c.bytes() && out != c.input) std::memcpy(out, c.input, c.bytes());
    } else {
      SNCL_CHECK(arrived(c.root));
      if (c.bytes()) std::memcpy(out, cells.cell(c.root, call), c.bytes());
    }
    return snclSuccess;
  }
  if (!readsAll) return snclSuccess;
  if (c.coll == CellsColl::AllGather) {
    for (int k = 0; k < nranks; ++k) {
      SNCL_CHECK(arrived(k));
      char* dst = out + size_t(k) * c.bytes();
      if (c.bytes() && dst != c.input) std::memcpy(dst, cells.cell(k, call), c.bytes());
    }
    return snclSuccess;
  }
  // All-Reduce, Reduce at the root: ((r0 op r1) op r2) ..., in rank order on every rank.
  SNCL_CHECK(arrived(0));
  for (int k = 1; k < nranks; ++k) {
    SNCL_CHECK(arrived(k));
    if (c.count) c.reduce(out, k == 1 ? cells.cell(0, call) : out, cells.cell(k, call), c.count);
  }
  return snclSuccess;
}

}  // namespace sncl
