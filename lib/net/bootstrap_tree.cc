#include "lib/net/bootstrap_tree.h"

#include <vector>

#include "lib/base/gather_tree.h"

namespace sncl {

Result treeAllGather(int rank, int nranks, void* data, size_t bytesPerRank, const TreeSend& send,
                     const TreeRecv& recv) {
  auto* slots = static_cast<char*>(data);
  auto slice = [&](int first) { return slots + size_t(first) * bytesPerRank; };
  const std::vector<int> kids = gather_tree::children(rank, nranks);
  // Gather: a child's subtree is the contiguous range of ranks starting at the child.
  for (int child : kids)
    SNCL_CHECK(recv(child, slice(child), size_t(gather_tree::subtreeSize(child, nranks)) * bytesPerRank));
  const int up = gather_tree::parent(rank);
  const size_t all = size_t(nranks) * bytesPerRank;
  if (up >= 0) {
    SNCL_CHECK(send(up, slice(rank), size_t(gather_tree::subtreeSize(rank, nranks)) * bytesPerRank));
    SNCL_CHECK(recv(up, slots, all));
  }
  // Broadcast: the largest subtree first, since it has the most levels still to go.
  for (auto it = kids.rbegin(); it != kids.rend(); ++it) SNCL_CHECK(send(*it, slots, all));
  return snclSuccess;
}

}  // namespace sncl
