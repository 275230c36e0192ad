// The bootstrap's all-gather as a binomial tree (shape: lib/base/gather_tree.h): each rank's
// slot travels up once and the gathered array comes back down, O(log n) messages per rank
// instead of a ring's n - 1, and depth log2 n instead of n - 1 sequential steps.
#pragma once

#include <cstddef>
#include <functional>

#include "lib/base/error.h"

namespace sncl {

// One framed message to or from a peer, with the caller's tag and deadline bound in.
using TreeSend = std::function<Result(int peer, const void* data, size_t bytes)>;
using TreeRecv = std::function<Result(int peer, void* data, size_t bytes)>;

// In-place all-gather of nranks slots of bytesPerRank (this rank's slot filled on entry).
Result treeAllGather(int rank, int nranks, void* data, size_t bytesPerRank, const TreeSend& send,
                     const TreeRecv& recv);

}  // namespace sncl
