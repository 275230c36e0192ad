#include "algorithms/ring.h"

#include <algorithm>

namespace sncl::algo {
namespace {

// Part k of a round of n elements cut into nranks nearly equal parts.
struct Part {
  size_t offset;
  size_t count;
};

Part partOf(size_t base, size_t n, int nranks, int k) {
  size_t q = n / nranks, r = n % nranks;
  size_t uk = static_cast<size_t>(k);
  return {base + uk * q + std::min(uk, r), q + (uk < r ? 1 : 0)};
}

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

void RingAllReduce::build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out) {
  out->clear();
  if (nranks == 1) {
    if (count) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
    out->endStep();
    return;
  }
  const int next = mod(rank + 1, nranks), prev = mod(rank - 1, nranks);
  const size_t roundCount = static_cast<size_t>(nranks) * std::max<size_t>(chunkCount, 1);
  uint32_t tag = 0;
  for (size_t base = 0; base < count; base += roundCount) {
    const size_t n = std::min(roundCount, count - base);
    // Reduce-scatter: after step s, this rank holds part (rank - s - 1) reduced over s + 2 ranks.
    for (int s = 0; s < nranks - 1; ++s, ++tag) {
      Part send = partOf(base, n, nranks, mod(rank - s, nranks));
      Part recv = partOf(base, n, nranks, mod(rank - s - 1, nranks));
      Buf sendFrom = s == 0 ? Buf::Input : Buf::Output;
      if (send.count) out->add({OpKind::Send, sendFrom, sendFrom, next, tag, send.offset, send.offset, send.count});
      if (recv.count) out->add({OpKind::RecvReduce, Buf::Input, Buf::Output, prev, tag, recv.offset, recv.offset, recv.count});
      out->endStep();
    }
    // All-gather: this rank starts with part (rank + 1) fully reduced.
    for (int s = 0; s < nranks - 1; ++s, ++tag) {
      Part send = partOf(base, n, nranks, mod(rank + 1 - s, nranks));
      Part recv = partOf(base, n, nranks, mod(rank - s, nranks));
      if (send.count) out->add({OpKind::Send, Buf::Output, Buf::Output, next, tag, send.offset, send.offset, send.count});
      if (recv.count) out->add({OpKind::Recv, Buf::Output, Buf::Output, prev, tag, recv.offset, recv.offset, recv.count});
      out->endStep();
    }
  }
}


void RingAllGather::build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out) {
  out->clear();
  const size_t own = static_cast<size_t>(rank) * count;
  if (nranks == 1) {
    if (count) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, own, count});
    out->endStep();
    return;
  }
  const int next = mod(rank + 1, nranks), prev = mod(rank - 1, nranks);
  chunkCount = std::max<size_t>(chunkCount, 1);
  uint32_t tag = 0;
  for (size_t base = 0; base < count; base += chunkCount) {
    const size_t n = std::min(chunkCount, count - base);
    // After step s this rank holds block (rank - s - 1)'s chunk; it forwards it next step.
    for (int s = 0; s < nranks - 1; ++s, ++tag) {
      const size_t sendBlock = static_cast<size_t>(mod(rank - s, nranks)) * count + base;
      const size_t recvBlock = static_cast<size_t>(mod(rank - s - 1, nranks)) * count + base;
      if (s == 0) {
        // The own chunk goes out straight from Input while it is copied into place.
        out->add({OpKind::Send, Buf::Input, Buf::Input, next, tag, base, base, n});
        out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, base, own + base, n});
      } else {
        out->add({OpKind::Send, Buf::Output, Buf::Output, next, tag, sendBlock, sendBlock, n});
      }
      out->add({OpKind::Recv, Buf::Output, Buf::Output, prev, tag, recvBlock, recvBlock, n});
      out->endStep();
    }
  }
}

void RingReduceScatter::build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out) {
  out->clear();
  if (nranks == 1) {
    if (count) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
    out->endStep();
    return;
  }
  const int next = mod(rank + 1, nranks), prev = mod(rank - 1, nranks);
  chunkCount = std::max<size_t>(chunkCount, 1);
  const size_t slot = std::min(chunkCount, count);
  if (nranks > 2) out->scratchCount = 2 * slot;
  uint32_t tag = 0;
  for (size_t base = 0; base < count; base += chunkCount) {
    const size_t n = std::min(chunkCount, count - base);
    // Step s sends the partial sum of block (rank - s - 1) and adds this rank's input to
    // the received partial of block (rank - s - 2); the last step's is block `rank`, done.
    for (int s = 0; s < nranks - 1; ++s, ++tag) {
      const size_t sendInput = static_cast<size_t>(mod(rank - s - 1, nranks)) * count + base;
      const size_t recvInput = static_cast<size_t>(mod(rank - s - 2, nranks)) * count + base;
      if (s == 0) out->add({OpKind::Send, Buf::Input, Buf::Input, next, tag, sendInput, sendInput, n});
      else out->add({OpKind::Send, Buf::Scratch, Buf::Scratch, next, tag, ((s - 1) % 2) * slot, 0, n});
      if (s == nranks - 2)
        out->add({OpKind::RecvReduce, Buf::Input, Buf::Output, prev, tag, recvInput, base, n});
      else
        out->add({OpKind::RecvReduce, Buf::Input, Buf::Scratch, prev, tag, recvInput, (s % 2) * slot, n});
      out->endStep();
    }
  }
}

}  // namespace sncl::algo
