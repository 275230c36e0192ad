#include "algorithms/direct_v.h"

namespace sncl::algo {
namespace {

// The offset of a message of count elements at displ: 0 when it has none (see the header).
size_t at(size_t displ, size_t count) { return count ? displ : 0; }

void send(Schedule* out, Buf buf, int peer, size_t displ, size_t count) {
  out->add({OpKind::Send, buf, buf, peer, 0, at(displ, count), 0, count});
}

void recv(Schedule* out, Buf buf, int peer, size_t displ, size_t count) {
  out->add({OpKind::Recv, buf, buf, peer, 0, 0, at(displ, count), count});
}

void copy(Schedule* out, Buf from, size_t src, Buf to, size_t dst, size_t count) {
  if (count) out->add({OpKind::Copy, from, to, -1, 0, src, dst, count});
}

}  // namespace

void DirectAllGatherV::build(int rank, int nranks, size_t sendCount, const size_t* counts, const size_t* displs,
                             Schedule* out) {
  out->clear();
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer == rank) {
      copy(out, Buf::Input, 0, Buf::Output, displs[rank], sendCount);
      continue;
    }
    send(out, Buf::Input, peer, 0, sendCount);
    recv(out, Buf::Output, peer, displs[peer], counts[peer]);
  }
  out->endStep();
}

void DirectAlltoAllV::build(int rank, int nranks, const size_t* sendCounts, const size_t* sdispls,
                            const size_t* recvCounts, const size_t* rdispls, bool inPlace, Schedule* out) {
  out->clear();
  // In place, the block from peer p waits in scratch at the sum of the earlier peers' blocks.
  size_t slot = 0;
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer == rank) {
      if (!inPlace) copy(out, Buf::Input, sdispls[rank], Buf::Output, rdispls[rank], sendCounts[rank]);
      continue;
    }
    send(out, Buf::Input, peer, sdispls[peer], sendCounts[peer]);
    if (inPlace) {
      recv(out, Buf::Scratch, peer, slot, recvCounts[peer]);
      slot += recvCounts[peer];
    } else {
      recv(out, Buf::Output, peer, rdispls[peer], recvCounts[peer]);
    }
  }
  out->endStep();
  if (!inPlace) return;
  out->scratchCount = slot;
  slot = 0;
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer == rank) continue;
    copy(out, Buf::Scratch, slot, Buf::Output, rdispls[peer], recvCounts[peer]);
    slot += recvCounts[peer];
  }
  out->endStep();
}

void DirectGatherV::build(int rank, int nranks, int root, size_t sendCount, const size_t* counts,
                          const size_t* displs, Schedule* out) {
  out->clear();
  if (rank != root) {
    send(out, Buf::Input, root, 0, sendCount);
  } else {
    for (int peer = 0; peer < nranks; ++peer) {
      if (peer == root) copy(out, Buf::Input, 0, Buf::Output, displs[root], sendCount);
      else recv(out, Buf::Output, peer, displs[peer], counts[peer]);
    }
  }
  out->endStep();
}

void DirectScatterV::build(int rank, int nranks, int root, size_t recvCount, const size_t* counts,
                           const size_t* displs, Schedule* out) {
  out->clear();
  if (rank != root) {
    recv(out, Buf::Output, root, 0, recvCount);
  } else {
    for (int peer = 0; peer < nranks; ++peer) {
      if (peer == root) copy(out, Buf::Input, displs[root], Buf::Output, 0, recvCount);
      else send(out, Buf::Input, peer, displs[peer], counts[peer]);
    }
  }
  out->endStep();
}

}  // namespace sncl::algo
