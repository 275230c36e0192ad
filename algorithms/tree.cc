#include "algorithms/tree.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <utility>

namespace sncl::algo {
namespace {

int lowBit(int v) { return v & -v; }

// NCCL's btree over virtual ranks 0..n-1. Node v's subtree spans (v - lowBit(v), v + lowBit(v))
// where that lies inside [0, n); v = 0 is the root, with one child.
class Btree {
 public:
  explicit Btree(int n) : n_(n) {}

  int parent(int v) const {
    if (v == 0) return -1;
    const int b = lowBit(v);
    // v's parent in the complete tree; if that lies past n, v is the right child of v ^ b.
    const int up = (v ^ b) | (b << 1);
    return up < n_ ? up : v ^ b;
  }

  // Ascending virtual ranks; -1 for none.
  std::pair<int, int> children(int v) const {
    if (v == 0) return {-1, n_ > 1 ? static_cast<int>(std::bit_floor(static_cast<unsigned>(n_ - 1))) : -1};
    const int b = lowBit(v);
    if (b == 1) return {-1, -1};
    // The right child is the highest level below v that still fits in [0, n).
    int right = -1;
    for (int d = b / 2; d >= 1 && right < 0; d /= 2)
      if (v + d < n_) right = v + d;
    return {v - b / 2, right};
  }

  // First step at which v's chunk 0 holds the reduction over v's subtree.
  int readyTime(int v) const {
    const int b = lowBit(v);
    // A full subtree of height h takes 2 steps per level (see upTime).
    if (v != 0 && v + b - 1 < n_) return 2 * std::countr_zero(static_cast<unsigned>(b));
    auto [left, right] = children(v);
    int ready = 0;
    for (int child : {left, right})
      if (child >= 0) ready = std::max(ready, upTime(child) + 1);
    return ready;
  }

  // Step at which v (not the root) sends chunk 0 up. Siblings must reach their parent in
  // different steps (it can fold only one fragment into a chunk per step): on a tie the
  // right one waits a step.
  int upTime(int v) const {
    const int ready = readyTime(v);
    auto [left, right] = children(parent(v));
    return v == right && left >= 0 && readyTime(left) == ready ? ready + 1 : ready;
  }

  // Step at which v sends chunk 0 down: the root as soon as it is ready, then one level a step.
  int downTime(int v) const { return v == 0 ? readyTime(0) : downTime(parent(v)) + 1; }

 private:
  int n_;
};

// Tree 1 relabels tree 0 so that tree 0's leaves (odd ranks) become interior nodes.
int toVirtual(int tree, int rank, int n) {
  if (tree == 0) return rank;
  return n % 2 == 0 ? n - 1 - rank : (rank - 1 + n) % n;
}

int toRank(int tree, int v, int n) {
  if (tree == 0 || v < 0) return v;
  return n % 2 == 0 ? n - 1 - v : (v + 1) % n;
}

size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// One tree's share of a rank's schedule: which ops it posts at which step.
class TreePart {
 public:
  TreePart(int tree, int rank, int nranks, size_t offset, size_t count, size_t chunkCount)
      : tree_(tree),
        node_(DoubleBinaryTree::node(tree, rank, nranks)),
        offset_(offset),
        count_(count),
        chunkCount_(chunkCount),
        numChunks_(ceilDiv(count, chunkCount)) {}

  // One past the last step at which this part may post anything.
  int64_t endTime() const { return numChunks_ == 0 ? 0 : node_.downTime + static_cast<int64_t>(numChunks_); }

  // Appends this part's ops of step t. Between two ranks there is at most one message per
  // direction, tree and step, so posting trees in order keeps both ends in the same order.
  void addStep(int64_t t, Schedule* out) const {
    // Way up: the first fold adds the child's partial sum to the own input, the second to that.
    for (int i = 0; i < 2 && node_.children[i] >= 0; ++i)
      addOp(t, node_.foldTime[i], OpKind::RecvReduce, i == 0 ? Buf::Input : Buf::Output, node_.children[i], out);
    const bool leaf = node_.children[0] < 0;
    if (node_.parent >= 0) {
      addOp(t, node_.upTime, OpKind::Send, leaf ? Buf::Input : Buf::Output, node_.parent, out);
      // Way down: the root's result replaces the partial sum, then goes on to the children.
      addOp(t, node_.downTime - 1, OpKind::Recv, Buf::Output, node_.parent, out);
    }
    for (int child : node_.children)
      if (child >= 0) addOp(t, node_.downTime, OpKind::Send, Buf::Output, child, out);
  }

 private:
  // Adds the op of a stream that moves chunk 0 at step start and chunk c at step start + c.
  void addOp(int64_t t, int start, OpKind kind, Buf src, int peer, Schedule* out) const {
    if (t < start || static_cast<size_t>(t - start) >= numChunks_) return;
    const size_t begin = offset_ + static_cast<size_t>(t - start) * chunkCount_;
    const size_t n = std::min(chunkCount_, offset_ + count_ - begin);
    const uint32_t tag = 2 * static_cast<uint32_t>(t) + static_cast<uint32_t>(tree_);
    out->add({kind, src, Buf::Output, peer, tag, begin, begin, n});
  }

  int tree_;
  TreeNode node_;
  size_t offset_, count_, chunkCount_, numChunks_;
};

}  // namespace

TreeNode DoubleBinaryTree::node(int tree, int rank, int nranks) {
  const Btree btree(nranks);
  const int v = toVirtual(tree, rank, nranks);
  TreeNode node;
  node.parent = toRank(tree, btree.parent(v), nranks);
  node.upTime = v == 0 ? btree.readyTime(0) : btree.upTime(v);
  node.downTime = btree.downTime(v);
  auto [left, right] = btree.children(v);
  int i = 0;
  for (int child : {left, right}) {
    if (child < 0) continue;
    node.children[i] = toRank(tree, child, nranks);
    node.foldTime[i++] = btree.upTime(child);
  }
  if (i == 2 && node.foldTime[1] < node.foldTime[0]) {
    std::swap(node.children[0], node.children[1]);
    std::swap(node.foldTime[0], node.foldTime[1]);
  }
  return node;
}

void TreeAllReduce::build(int rank, int nranks, size_t count, size_t chunkCount, Schedule* out) {
  out->clear();
  if (nranks == 1) {
    if (count) out->add({OpKind::Copy, Buf::Input, Buf::Output, -1, 0, 0, 0, count});
    out->endStep();
    return;
  }
  chunkCount = std::max<size_t>(chunkCount, 1);
  const size_t half = count - count / 2;
  const TreePart parts[2] = {TreePart(0, rank, nranks, 0, half, chunkCount),
                             TreePart(1, rank, nranks, half, count - half, chunkCount)};
  const int64_t end = std::max(parts[0].endTime(), parts[1].endTime());
  for (int64_t t = 0; t < end; ++t) {
    for (const TreePart& part : parts) part.addStep(t, out);
    out->endStep();
  }
}

size_t TreeAllReduce::stepBound(int nranks, size_t count, size_t chunkCount) {
  if (count == 0) return 0;
  if (nranks == 1) return 1;
  const size_t chunks = ceilDiv(count - count / 2, std::max<size_t>(chunkCount, 1));
  const size_t depth = std::bit_width(static_cast<unsigned>(nranks - 1));  // ceil(log2 nranks)
  return chunks + 3 * depth - 2;
}

double TreeAllReduce::estimateUs(int nranks, size_t bytes, double alphaUs, double betaGBs, double memGBs,
                                 size_t chunkBytes) {
  const double memBytesPerUs = memGBs * 1e3, linkBytesPerUs = betaGBs * 1e3;
  if (nranks == 1) return bytes / memBytesPerUs;
  const double chunk = static_cast<double>(std::min(std::max<size_t>(chunkBytes, 1), bytes - bytes / 2));
  const double steps = static_cast<double>(stepBound(nranks, bytes, chunkBytes));
  return steps * (alphaUs + 4 * chunk / linkBytesPerUs + 2 * chunk / memBytesPerUs);
}

}  // namespace sncl::algo
