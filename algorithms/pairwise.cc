#include "algorithms/pairwise.h"

namespace sncl::algo {

void PairwiseReduceScatterV::build(int rank, int nranks, const size_t* counts, const size_t* offsets, bool inPlace,
                                   Schedule* out) {
  out->clear();
  const size_t own = counts[rank];
  const size_t ownAt = own ? offsets[rank] : 0;  // a block of no element has offset 0 (no offset NULL)
  if (nranks == 1) {
    if (own) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, ownAt, 0, own});
    out->endStep();
    return;
  }
  const Buf acc = inPlace ? Buf::Scratch : Buf::Output;
  if (inPlace) out->scratchCount = own;
  for (int k = 1; k < nranks; ++k) {
    const int to = (rank + k) % nranks, from = (rank + nranks - k) % nranks;
    const size_t n = counts[to];
    out->add({OpKind::Send, Buf::Input, Buf::Input, to, 0, n ? offsets[to] : 0, 0, n});
    // The first contribution meets this rank's own block; later ones the running result.
    if (k == 1) out->add({OpKind::RecvReduce, Buf::Input, acc, from, 0, ownAt, 0, own});
    else out->add({OpKind::RecvReduce, acc, acc, from, 0, 0, 0, own});
    out->endStep();
  }
  if (inPlace && own) {
    out->add({OpKind::Copy, Buf::Scratch, Buf::Output, -1, 0, 0, 0, own});
    out->endStep();
  }
}

}  // namespace sncl::algo
