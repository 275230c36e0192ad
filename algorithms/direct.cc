#include "algorithms/direct.h"

namespace sncl::algo {

void DirectAllReduce::build(int rank, int nranks, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  // Scratch: the sum at [0, count), then one slot per peer whose input waits there.
  // Contributions join in rank order; the first two meet in step 0 (rank 0: its input
  // and rank 1's; the others: rank 0's arrives straight into the sum).
  const int first = rank == 0 ? 2 : 1;  // the first contribution that goes through a slot
  auto slot = [&](int q) {
    const int index = rank == 0 ? q - 2 : (q < rank ? q - 1 : q - 2);
    return static_cast<size_t>(1 + index) * count;
  };
  out->scratchCount = static_cast<size_t>(nranks > 1 ? nranks - 1 : 1) * count;
  // Step 0: every message at once, each receive posted with its send, so that no send
  // waits for a receive its peer posts only in a later step.
  for (int peer = 0; peer < nranks; ++peer)
    if (peer != rank) out->add({OpKind::Send, Buf::Input, Buf::Input, peer, 0, 0, 0, count});
  if (rank == 0 && nranks > 1) out->add({OpKind::RecvReduce, Buf::Input, Buf::Scratch, 1, 0, 0, 0, count});
  else if (rank == 0) out->add({OpKind::Copy, Buf::Input, Buf::Scratch, -1, 0, 0, 0, count});
  else out->add({OpKind::Recv, Buf::Scratch, Buf::Scratch, 0, 0, 0, 0, count});
  for (int q = first; q < nranks; ++q)
    if (q != rank) out->add({OpKind::Recv, Buf::Scratch, Buf::Scratch, q, 0, 0, slot(q), count});
  out->endStep();
  for (int q = first; q < nranks; ++q) {
    if (q == rank) out->add({OpKind::Reduce, Buf::Input, Buf::Scratch, -1, 0, 0, 0, count});
    else out->add({OpKind::Reduce, Buf::Scratch, Buf::Scratch, -1, 0, slot(q), 0, count});
    out->endStep();
  }
  out->add({OpKind::Copy, Buf::Scratch, Buf::Output, -1, 0, 0, 0, count});
  out->endStep();
}

void DirectBroadcast::build(int rank, int nranks, int root, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  if (rank == root) {
    for (int peer = 0; peer < nranks; ++peer)
      if (peer != root) out->add({OpKind::Send, Buf::Input, Buf::Input, peer, 0, 0, 0, count});
    out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
  } else {
    out->add({OpKind::Recv, Buf::Output, Buf::Output, root, 0, 0, 0, count});
  }
  out->endStep();
}

void DirectReduce::build(int rank, int nranks, int root, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  if (rank != root) {
    out->add({OpKind::Send, Buf::Input, Buf::Input, root, 0, 0, 0, count});
    out->endStep();
    return;
  }
  out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
  out->endStep();
  for (int q = 0; q < nranks; ++q) {
    if (q == root) continue;
    out->add({OpKind::RecvReduce, Buf::Output, Buf::Output, q, 0, 0, 0, count});
    out->endStep();
  }
}

void DirectAllGather::build(int rank, int nranks, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  for (int peer = 0; peer < nranks; ++peer) {
    const size_t block = static_cast<size_t>(peer) * count;
    if (peer == rank) {
      out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, block, count});
    } else {
      out->add({OpKind::Send, Buf::Input, Buf::Input, peer, 0, 0, 0, count});
      out->add({OpKind::Recv, Buf::Output, Buf::Output, peer, 0, block, block, count});
    }
  }
  out->endStep();
}

void DirectReduceScatter::build(int rank, int nranks, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  const size_t own = static_cast<size_t>(rank) * count;
  // Step 0 posts every send with every receive (no send waits for a receive posted in a
  // later step): the first peer's block is reduced on arrival, the others wait in scratch
  // and are added in rank order after.
  const int firstPeer = rank == 0 ? 1 : 0;
  auto slot = [&](int q) {
    const int index = q - (firstPeer + 1) - (q > rank && rank > firstPeer ? 1 : 0);
    return static_cast<size_t>(index) * count;
  };
  if (nranks > 2) out->scratchCount = static_cast<size_t>(nranks - 2) * count;
  for (int peer = 0; peer < nranks; ++peer) {
    const size_t block = static_cast<size_t>(peer) * count;
    if (peer != rank) out->add({OpKind::Send, Buf::Input, Buf::Input, peer, 0, block, block, count});
  }
  if (nranks == 1) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, own, 0, count});
  else out->add({OpKind::RecvReduce, Buf::Input, Buf::Output, firstPeer, 0, own, 0, count});
  for (int q = firstPeer + 1; q < nranks; ++q)
    if (q != rank) out->add({OpKind::Recv, Buf::Scratch, Buf::Scratch, q, 0, 0, slot(q), count});
  out->endStep();
  for (int q = firstPeer + 1; q < nranks; ++q) {
    if (q == rank) continue;
    out->add({OpKind::Reduce, Buf::Scratch, Buf::Output, -1, 0, slot(q), 0, count});
    out->endStep();
  }
}

void DirectAlltoAll::build(int rank, int nranks, size_t count, bool inPlace, Schedule* out) {
  out->clear();
  if (count == 0) return;
  if (inPlace) out->scratchCount = static_cast<size_t>(nranks - 1) * count;
  // In-place, the block from peer p waits in scratch slot p (or p-1 past this rank).
  auto slot = [&](int peer) { return static_cast<size_t>(peer < rank ? peer : peer - 1) * count; };
  for (int peer = 0; peer < nranks; ++peer) {
    const size_t block = static_cast<size_t>(peer) * count;
    if (peer == rank) {
      out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, block, block, count});
      continue;
    }
    out->add({OpKind::Send, Buf::Input, Buf::Input, peer, 0, block, block, count});
    if (inPlace) out->add({OpKind::Recv, Buf::Scratch, Buf::Scratch, peer, 0, slot(peer), slot(peer), count});
    else out->add({OpKind::Recv, Buf::Output, Buf::Output, peer, 0, block, block, count});
  }
  out->endStep();
  if (!inPlace) return;
  for (int peer = 0; peer < nranks; ++peer)
    if (peer != rank)
      out->add({OpKind::Copy, Buf::Scratch, Buf::Output, -1, 0, slot(peer), static_cast<size_t>(peer) * count, count});
  out->endStep();
}

void DirectGather::build(int rank, int nranks, int root, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  if (rank != root) {
    out->add({OpKind::Send, Buf::Input, Buf::Input, root, 0, 0, 0, count});
  } else {
    for (int peer = 0; peer < nranks; ++peer) {
      const size_t block = static_cast<size_t>(peer) * count;
      if (peer == root) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, block, count});
      else out->add({OpKind::Recv, Buf::Output, Buf::Output, peer, 0, block, block, count});
    }
  }
  out->endStep();
}

void DirectScatter::build(int rank, int nranks, int root, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  if (rank != root) {
    out->add({OpKind::Recv, Buf::Output, Buf::Output, root, 0, 0, 0, count});
  } else {
    for (int peer = 0; peer < nranks; ++peer) {
      const size_t block = static_cast<size_t>(peer) * count;
      if (peer == root) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, block, 0, count});
      else out->add({OpKind::Send, Buf::Input, Buf::Input, peer, 0, block, block, count});
    }
  }
  out->endStep();
}

}  // namespace sncl::algo
