#include "algorithms/direct.h"

namespace sncl::algo {

void DirectAllReduce::build(int rank, int nranks, size_t count, Schedule* out) {
  out->clear();
  if (count == 0) return;
  out->scratchCount = count;
  // Step 0: input to every peer; the sum starts from rank 0's contribution.
  for (int peer = 0; peer < nranks; ++peer)
    if (peer != rank) out->add({OpKind::Send, Buf::Input, Buf::Input, peer, 0, 0, 0, count});
  if (rank == 0) out->add({OpKind::Copy, Buf::Input, Buf::Scratch, -1, 0, 0, 0, count});
  else out->add({OpKind::Recv, Buf::Scratch, Buf::Scratch, 0, 0, 0, 0, count});
  out->endStep();
  // Then the other contributions in rank order.
  for (int q = 1; q < nranks; ++q) {
    if (q == rank) out->add({OpKind::Reduce, Buf::Input, Buf::Scratch, -1, 0, 0, 0, count});
    else out->add({OpKind::RecvReduce, Buf::Scratch, Buf::Scratch, q, 0, 0, 0, count});
    out->endStep();
  }
  out->add({OpKind::Copy, Buf::Scratch, Buf::Output, -1, 0, 0, 0, count});
  out->endStep();
}

}  // namespace sncl::algo
