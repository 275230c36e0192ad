// The shape of the bootstrap's all-gather (lib/net/bootstrap_tree.cc) and of the rendezvous's
// address-table broadcast (lib/net/bootstrap_rendezvous.cc): a binomial tree rooted
// at rank 0 whose subtrees are contiguous rank ranges, so a rank's gathered part is one slice
// of the slot array. Gather: each rank receives its children's slices (smallest first), then
// sends its own subtree's slice to its parent once. Broadcast: each rank receives all slots
// from its parent, then sends them to its children (largest subtree first). A rank exchanges
// 2 x (children + 1) messages, at most 2 x ceil(log2 n); the whole exchange 2 x (n - 1).
// Pure arithmetic, in base/ so that the simulator's model (lib/sim/bootstrap_model.h) counts
// exactly what the bootstrap sends.
#pragma once

#include <algorithm>
#include <vector>

namespace sncl::gather_tree {

// Rank 0 is the root; rank r > 0 hangs under r minus its lowest set bit.
inline int parent(int rank) { return rank == 0 ? -1 : rank - (rank & -rank); }

// Ranks in rank's subtree: [rank, rank + subtreeSize).
inline int subtreeSize(int rank, int nranks) {
  return rank == 0 ? nranks : std::min(rank & -rank, nranks - rank);
}

// rank's children, smallest subtree first (the gather's receive order; the broadcast sends
// in reverse so the deepest subtree starts first).
inline std::vector<int> children(int rank, int nranks) {
  std::vector<int> out;
  const long limit = rank == 0 ? long(nranks) : long(rank & -rank);
  for (long k = 1; k < limit && rank + k < nranks; k <<= 1) out.push_back(int(rank + k));
  return out;
}

// Messages rank sends and receives in one all-gather (gather and broadcast together).
inline int messagesSent(int rank, int nranks) {
  return int(children(rank, nranks).size()) + (rank == 0 ? 0 : 1);
}
inline int messagesReceived(int rank, int nranks) { return messagesSent(rank, nranks); }

}  // namespace sncl::gather_tree
