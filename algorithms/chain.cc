#include "algorithms/chain.h"

#include <algorithm>

namespace sncl::algo {
namespace {

int rankAt(int position, int root, int nranks) { return (root + position) % nranks; }

}  // namespace

void ChainBroadcast::build(int rank, int nranks, int root, size_t count, size_t chunkCount, Schedule* out) {
  out->clear();
  if (count == 0) return;
  if (nranks == 1) {
    out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
    out->endStep();
    return;
  }
  chunkCount = std::max<size_t>(chunkCount, 1);
  const size_t chunks = (count + chunkCount - 1) / chunkCount;
  const int position = (rank - root + nranks) % nranks;
  const int prev = rankAt(position + nranks - 1, root, nranks), next = rankAt(position + 1, root, nranks);
  const bool last = position == nranks - 1;
  // Position p receives chunk c at step c + p - 1 and sends it on at step c + p.
  const size_t steps = chunks + static_cast<size_t>(nranks) - 2;
  for (size_t t = 0; t < steps; ++t) {
    const size_t p = static_cast<size_t>(position);
    if (!last && t >= p && t - p < chunks) {
      const size_t c = t - p, offset = c * chunkCount, n = std::min(chunkCount, count - offset);
      const Buf from = position == 0 ? Buf::Input : Buf::Output;
      out->add({OpKind::Send, from, from, next, static_cast<uint32_t>(c), offset, offset, n});
      if (position == 0) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, offset, offset, n});
    }
    if (position > 0 && t + 1 >= p && t + 1 - p < chunks) {
      const size_t c = t + 1 - p, offset = c * chunkCount, n = std::min(chunkCount, count - offset);
      out->add({OpKind::Recv, Buf::Output, Buf::Output, prev, static_cast<uint32_t>(c), offset, offset, n});
    }
    out->endStep();
  }
}

void ChainReduce::build(int rank, int nranks, int root, size_t count, size_t chunkCount, Schedule* out) {
  out->clear();
  if (count == 0) return;
  if (nranks == 1) {
    out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
    out->endStep();
    return;
  }
  chunkCount = std::max<size_t>(chunkCount, 1);
  const size_t chunks = (count + chunkCount - 1) / chunkCount;
  const int position = (rank - root + nranks) % nranks;
  const int toward = rankAt(position + nranks - 1, root, nranks), from = rankAt(position + 1, root, nranks);
  // Distance from the chain's tail (position nranks-1), which starts sending at step 0:
  // this rank receives chunk c at step c + q - 1 and sends the sum on at step c + q.
  const size_t q = static_cast<size_t>(nranks - 1 - position);
  const size_t slot = std::min(chunkCount, count);
  const bool middle = position > 0 && q > 0;
  if (middle) out->scratchCount = 2 * slot;
  const size_t steps = chunks + static_cast<size_t>(nranks) - 2;
  for (size_t t = 0; t < steps; ++t) {
    if (position > 0 && t >= q && t - q < chunks) {
      const size_t c = t - q, offset = c * chunkCount, n = std::min(chunkCount, count - offset);
      if (middle) out->add({OpKind::Send, Buf::Scratch, Buf::Scratch, toward, static_cast<uint32_t>(c), (c % 2) * slot, 0, n});
      else out->add({OpKind::Send, Buf::Input, Buf::Input, toward, static_cast<uint32_t>(c), offset, offset, n});
    }
    if (q > 0 && t + 1 >= q && t + 1 - q < chunks) {
      const size_t c = t + 1 - q, offset = c * chunkCount, n = std::min(chunkCount, count - offset);
      if (middle)
        out->add({OpKind::RecvReduce, Buf::Input, Buf::Scratch, from, static_cast<uint32_t>(c), offset, (c % 2) * slot, n});
      else
        out->add({OpKind::RecvReduce, Buf::Input, Buf::Output, from, static_cast<uint32_t>(c), offset, offset, n});
    }
    out->endStep();
  }
}

}  // namespace sncl::algo
