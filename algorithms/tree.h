// Double binary tree All-Reduce (NCCL's): two binary trees over the ranks, each carrying half
// of the data. Per tree, every chunk is reduced up to the root and the root's result is
// broadcast back down, so all ranks get bit-identical results. Chunks are pipelined: while a
// node folds chunk c+1 from its children, it sends chunk c up and forwards an earlier chunk
// down, so every level of the tree is busy at once.
//
// Tree 0 is NCCL's btree over the ranks in order (a rank's level is its lowest set bit; the
// odd ranks are leaves; rank 0 is the root with one child). Tree 1 is tree 0 mirrored
// (r -> n-1-r, even n) or shifted by one (r -> r+1, odd n), so tree 0's leaves are tree 1's
// interior nodes: each rank forwards data in at most one tree (rank 0 excepted for odd n)
// and only sends and receives its own share in the other.
//
// Steps follow one clock shared by all ranks: a message is sent and received in the same
// step on both sides, so the schedule cannot deadlock whatever a send's completion needs.
// A node sends chunk c up at upTime + c and down at downTime + c. A step's ops are
// independent, so a node folds its two children's chunk c in different steps: when both
// children are ready at once, the right one waits a step. That makes the way up 2 steps per
// level (NCCL folds both children in one pass) and the way down 1 step per level.
#pragma once

#include <cstddef>

#include "algorithms/schedule.h"

namespace sncl::algo {

// A rank's neighbours in one tree and when chunk 0 moves between them.
struct TreeNode {
  int parent = -1;              // -1 at the root
  int children[2] = {-1, -1};   // in the order the node folds them in; -1 for none
  int foldTime[2] = {0, 0};     // step at which children[i] sends chunk 0 up
  int upTime = 0;               // step at which this rank sends chunk 0 up (root: when it is ready)
  int downTime = 0;             // step at which this rank sends chunk 0 down
};

struct DoubleBinaryTree {
  // rank's node in tree 0 or 1 over nranks >= 1 ranks. O(log nranks).
  static TreeNode node(int tree, int rank, int nranks);
};

struct TreeAllReduce {
  // Fills out (cleared first) with rank's steps; elements [0, ceil(count/2)) go through
  // tree 0, the rest through tree 1, each in chunks of chunkCount >= 1 elements. A message
  // at clock step t in tree i has tag 2t + i.
  static void build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out);

  // Steps on the shared clock (no rank's schedule has more), for k = ceil(ceil(count/2) /
  // chunkCount) chunks per tree and d = ceil(log2 nranks): at most k + 3d - 2, exactly that
  // for powers of two: chunk 0 is folded into the root by step 2d - 2 and reaches the
  // deepest leaf at step 3d - 2; each further chunk adds one step.
  static size_t stepBound(int nranks, size_t count, size_t chunkCount);

  // Closed-form α-β estimate (µs) for bytes per rank, alphaUs per message, betaGBs link and
  // memGBs reduction bandwidth. With c = min(chunkBytes, bytes/2) per message and
  // S = stepBound steps, each step costs the busiest rank's steady state: it sends and
  // receives 4 chunks (up and down in the tree where it is interior: 2 folds in, 1 up,
  // 1 in, 2 down; in the other: 1 up, 1 down) and reduces 2:
  //   S * (alphaUs + 4c / beta + 2c / mem),
  // which tends to 2 * bytes / beta + bytes / mem for many chunks. One rank: bytes / mem.
  static double estimateUs(int nranks, size_t bytes, double alphaUs, double betaGBs, double memGBs,
                           size_t chunkBytes);
};

}  // namespace sncl::algo
