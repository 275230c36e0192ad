#include "algorithms/scan.h"

#include <algorithm>

namespace sncl::algo {

void ChainScan::build(int rank, int nranks, size_t count, size_t chunkCount, bool exclusive, Schedule* out) {
  out->clear();
  chunkCount = std::max<size_t>(chunkCount, 1);
  // One (maybe empty) chunk at least: see the header.
  const size_t chunks = count == 0 ? 1 : (count + chunkCount - 1) / chunkCount;
  auto offset = [&](size_t c) { return c * chunkCount; };
  auto length = [&](size_t c) { return std::min(chunkCount, count - std::min(count, offset(c))); };
  auto tag = [](size_t c) { return static_cast<uint32_t>(c); };
  const int prev = rank - 1, next = rank + 1;
  const bool first = rank == 0, last = rank == nranks - 1;
  if (nranks == 1) {
    if (!exclusive && count) {
      out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
      out->endStep();
    }
    return;
  }
  if (first) {
    // The prefix of rank 0 is its input: sent as it is, every chunk at once (rank 1 takes
    // one per step), after the inclusive result is in place.
    if (!exclusive && count) {
      out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
      out->endStep();
    }
    for (size_t c = 0; c < chunks; ++c)
      out->add({OpKind::Send, Buf::Input, Buf::Input, next, tag(c), offset(c), 0, length(c)});
    out->endStep();
    return;
  }
  if (last) {
    // Nothing goes on: every chunk is received (and reduced) at once.
    for (size_t c = 0; c < chunks; ++c) {
      if (exclusive) out->add({OpKind::Recv, Buf::Output, Buf::Output, prev, tag(c), 0, offset(c), length(c)});
      else out->add({OpKind::RecvReduce, Buf::Input, Buf::Output, prev, tag(c), offset(c), offset(c), length(c)});
    }
    out->endStep();
    return;
  }
  if (!exclusive) {
    // Step s: chunk s arrives and is reduced into Output; chunk s-1 goes on from there.
    for (size_t s = 0; s <= chunks; ++s) {
      if (s < chunks)
        out->add({OpKind::RecvReduce, Buf::Input, Buf::Output, prev, tag(s), offset(s), offset(s), length(s)});
      if (s > 0) out->add({OpKind::Send, Buf::Output, Buf::Output, next, tag(s - 1), offset(s - 1), 0, length(s - 1)});
      out->endStep();
    }
    return;
  }
  // Exclusive, a middle rank: slot c%2 holds input chunk c, then input op prefix, which goes on.
  const size_t slotCount = std::min(chunkCount, count);
  auto slot = [&](size_t c) { return (c % 2) * slotCount; };
  out->scratchCount = 2 * slotCount;
  if (length(0)) {
    out->add({OpKind::Copy, Buf::Input, Buf::Scratch, -1, 0, 0, slot(0), length(0)});
    out->endStep();
  }
  for (size_t s = 0; s < chunks; ++s) {
    out->add({OpKind::Recv, Buf::Output, Buf::Output, prev, tag(s), 0, offset(s), length(s)});
    if (s > 0) out->add({OpKind::Send, Buf::Scratch, Buf::Scratch, next, tag(s - 1), slot(s - 1), 0, length(s - 1)});
    out->endStep();
    if (length(s)) out->add({OpKind::Reduce, Buf::Output, Buf::Scratch, -1, 0, offset(s), slot(s), length(s)});
    if (s + 1 < chunks) out->add({OpKind::Copy, Buf::Input, Buf::Scratch, -1, 0, offset(s + 1), slot(s + 1), length(s + 1)});
    out->endStep();
  }
  out->add({OpKind::Send, Buf::Scratch, Buf::Scratch, next, tag(chunks - 1), slot(chunks - 1), 0, length(chunks - 1)});
  out->endStep();
}

void RecursiveDoublingScan::build(int rank, int nranks, size_t count, bool exclusive, Schedule* out) {
  out->clear();
  // Two prefix copies in scratch, at 0 and count; round k reads copy k%2 and writes the other.
  out->scratchCount = 2 * count;
  auto copyAt = [&](int k) { return static_cast<size_t>(k % 2) * count; };
  if (count) {
    out->add({OpKind::Copy, Buf::Input, Buf::Scratch, -1, 0, 0, copyAt(0), count});
    out->endStep();
  }
  // Every pair of a round exchanges a message even of no element (see ChainScan).
  int round = 0;
  for (int d = 1; d < nranks; d *= 2, ++round) {
    const size_t cur = copyAt(round), next = copyAt(round + 1);
    if (rank + d < nranks) out->add({OpKind::Send, Buf::Scratch, Buf::Scratch, rank + d, 0, cur, 0, count});
    if (rank >= d) out->add({OpKind::RecvReduce, Buf::Scratch, Buf::Scratch, rank - d, 0, cur, next, count});
    else if (count) out->add({OpKind::Copy, Buf::Scratch, Buf::Scratch, -1, 0, cur, next, count});
    out->endStep();
  }
  const size_t result = copyAt(round);
  if (exclusive) {
    if (rank + 1 < nranks) out->add({OpKind::Send, Buf::Scratch, Buf::Scratch, rank + 1, 0, result, 0, count});
    if (rank > 0) out->add({OpKind::Recv, Buf::Output, Buf::Output, rank - 1, 0, 0, 0, count});
  } else if (count) {
    out->add({OpKind::Copy, Buf::Scratch, Buf::Output, -1, 0, result, 0, count});
  }
  out->endStep();
}

}  // namespace sncl::algo
