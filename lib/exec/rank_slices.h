// What the collectives on shared buffers (shared_colls.cc) and through staging areas
// (staged_colls.cc) both do: cut a buffer into the ranks' slices, and reduce a block of
// every rank's data in rank order.
#pragma once

#include <algorithm>
#include <cstddef>

#include "lib/exec/reduce.h"

namespace sncl {

// [lo, hi): rank's part of total elements, cut at 64-byte boundaries.
inline void sliceOf(size_t total, size_t elemSize, int rank, int nranks, size_t* lo, size_t* hi) {
  const size_t unit = std::max<size_t>(1, 64 / elemSize);
  size_t per = (total + size_t(nranks) - 1) / size_t(nranks);
  per = (per + unit - 1) / unit * unit;
  *lo = std::min(total, per * size_t(rank));
  *hi = std::min(total, *lo + per);
}

// dst = src[0][off..] op src[1][off..] op ... op src[n-1][off..] over m elements, in rank
// order as the cells reduce, so that every path gives the same bits. Partial results go
// through scratch (m elements must fit it), which stays in the first-level cache; dst may
// be one of the sources.
inline void reduceInRankOrder(ReduceFn reduce, char* scratch, char* dst, char* const* src, size_t off, int n,
                              size_t m) {
  char* acc = n == 2 ? dst : scratch;
  reduce(acc, src[0] + off, src[1] + off, m);
  for (int k = 2; k < n; ++k) reduce(k == n - 1 ? dst : acc, acc, src[k] + off, m);
}

}  // namespace sncl
