#include "lib/plan/plan_estimate.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "algorithms/tree.h"

namespace sncl::estimate {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Pipelined pieces: a rank's share of `bytes` cut into rounds of at most chunkBytes.
struct Pieces {
  double rounds;
  double piece;
};
Pieces cut(double bytes, double chunkBytes) {
  const double rounds = std::max(1.0, std::ceil(bytes / std::max(1.0, chunkBytes)));
  return {rounds, bytes / rounds};
}

// Every member sends piece to its ring successor, in every group. Ranks do not step in
// lockstep: a rank waits for its predecessor's message and its own send, so the critical
// path runs around the ring through every edge in turn and a step costs the mean edge,
// unless one edge's transfer is longer than that (its sender cannot go faster).
double ringStep(const CostModel& m, const Groups& groups, double piece) {
  std::vector<Flow> flows;
  for (const auto& g : groups)
    for (size_t i = 0; i < g.size(); ++i) flows.push_back({g[i], g[(i + 1) % g.size()], piece});
  const CostModel::StepCost c = m.stepCost(flows);
  return std::max(c.meanUs, c.transferUs);
}

// Every member sends bytes to every other member, in every group.
double meshStep(const CostModel& m, const Groups& groups, double bytes) {
  std::vector<Flow> flows;
  for (const auto& g : groups)
    for (int a : g)
      for (int b : g)
        if (a != b) flows.push_back({a, b, bytes});
  return m.stepUs(flows);
}

// Direct algorithms keep all of a rank's messages in flight at once: past this many ranks
// the estimate is not worth its n^2 flows (and the algorithm is not either).
constexpr size_t kMeshMaxRanks = 64;

double ring(const CostModel& m, const Groups& groups, double bytes, double chunkBytes) {
  const double n = groups[0].size();
  const Pieces p = cut(bytes / n, chunkBytes);
  // 2(n-1) steps per round; the reduce-scatter half folds what it receives, the
  // all-gather half receives in place. The input is copied to the output first.
  return 2 * (n - 1) * p.rounds * ringStep(m, groups, p.piece) + (n - 1) * p.rounds * p.piece / m.memBytesPerUs() +
         bytes / m.memBytesPerUs();
}

double direct(const CostModel& m, const Groups& groups, double bytes) {
  const double n = groups[0].size();
  if (groups[0].size() > kMeshMaxRanks) return kInf;
  return meshStep(m, groups, bytes) + n * bytes / m.memBytesPerUs();
}

double tree(const CostModel& m, const Groups& groups, double bytes, double chunkBytes) {
  const int n = static_cast<int>(groups[0].size());
  const double c = std::min(std::max(1.0, chunkBytes), std::ceil(bytes / 2));
  // In the steady state every tree edge carries a chunk each way in each tree.
  std::vector<Flow> flows;
  for (const auto& g : groups)
    for (int t = 0; t < 2; ++t)
      for (int r = 0; r < n; ++r) {
        const algo::TreeNode node = algo::DoubleBinaryTree::node(t, r, n);
        if (node.parent < 0) continue;
        flows.push_back({g[r], g[node.parent], c});
        flows.push_back({g[node.parent], g[r], c});
      }
  const double steps = static_cast<double>(
      algo::TreeAllReduce::stepBound(n, static_cast<size_t>(bytes), static_cast<size_t>(std::max(1.0, chunkBytes))));
  return steps * (m.stepUs(flows) + 2 * c / m.memBytesPerUs());
}

double halvingDoubling(const CostModel& m, const Groups& groups, double bytes, double budget) {
  const int n = static_cast<int>(groups[0].size());
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n))), extra = n - p;
  auto rankOf = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  std::vector<Flow> flows;
  double total = 0;
  // The first `extra` pairs fold into their odd rank before, and get the result after.
  if (extra) {
    for (int dir = 0; dir < 2; ++dir) {
      flows.clear();
      for (const auto& g : groups)
        for (int i = 0; i < extra; ++i) flows.push_back(dir == 0 ? Flow{g[2 * i], g[2 * i + 1], bytes} : Flow{g[2 * i + 1], g[2 * i], bytes});
      total += m.stepUs(flows) + (dir == 0 ? bytes / m.memBytesPerUs() : 0.0);
      if (total > budget) return kInf;
    }
  }
  // Halving at distances p/2..1 reduces what arrives; doubling at 1..p/2 only stores it.
  for (int d = p / 2; d >= 1; d /= 2) {
    flows.clear();
    const double msg = bytes * d / p;
    for (const auto& g : groups)
      for (int v = 0; v < p; ++v) flows.push_back({g[rankOf(v)], g[rankOf(v ^ d)], msg});
    total += 2 * m.stepUs(flows) + msg / m.memBytesPerUs();
    if (total > budget) return kInf;
  }
  return total;
}

}  // namespace

double allReduce(const CostModel& m, algo::FlatAllReduce a, const Groups& groups, double bytes, double chunkBytes,
                 double budget) {
  if (groups.empty() || groups[0].size() <= 1) return bytes / m.memBytesPerUs();
  switch (a) {
    case algo::FlatAllReduce::Ring: return ring(m, groups, bytes, chunkBytes);
    case algo::FlatAllReduce::Direct: return direct(m, groups, bytes);
    case algo::FlatAllReduce::Tree: return tree(m, groups, bytes, chunkBytes);
    case algo::FlatAllReduce::HalvingDoubling: return halvingDoubling(m, groups, bytes, budget);
  }
  return kInf;
}

double reduceScatter(const CostModel& m, algo::GroupAlgo a, const Groups& groups, double blockBytes, double chunkBytes) {
  const double n = groups[0].size();
  if (a == algo::GroupAlgo::Direct) {
    if (groups[0].size() > kMeshMaxRanks) return kInf;
    return meshStep(m, groups, blockBytes) + (n - 1) * blockBytes / m.memBytesPerUs();
  }
  const Pieces p = cut(blockBytes, chunkBytes);
  return (n - 1) * p.rounds * (ringStep(m, groups, p.piece) + p.piece / m.memBytesPerUs());
}

double allGather(const CostModel& m, algo::GroupAlgo a, const Groups& groups, double blockBytes, double chunkBytes) {
  const double n = groups[0].size();
  if (a == algo::GroupAlgo::Direct) return groups[0].size() > kMeshMaxRanks ? kInf : meshStep(m, groups, blockBytes);
  const Pieces p = cut(blockBytes, chunkBytes);
  return (n - 1) * p.rounds * ringStep(m, groups, p.piece);
}

double hierarchical(const CostModel& m, const algo::HierarchicalSpec& spec, double bytes, double chunkBytes,
                    double budget) {
  // Phases are cut in elements; a byte count stands for elements of one byte here.
  const size_t count = static_cast<size_t>(bytes);
  double total = 0;
  for (const algo::HierPhase& p : algo::HierarchicalAllReduce::phases(m.nranks(), spec.groupOf, count)) {
    const double b = static_cast<double>(p.count);
    switch (p.kind) {
      case algo::HierPhase::Kind::AllReduce:
        total += allReduce(m, p.tail ? algo::FlatAllReduce::Direct : spec.outer, p.groups, b, chunkBytes);
        break;
      case algo::HierPhase::Kind::ReduceScatter: total += reduceScatter(m, spec.inner, p.groups, b, chunkBytes); break;
      case algo::HierPhase::Kind::AllGather: total += allGather(m, spec.inner, p.groups, b, chunkBytes); break;
    }
    if (total > budget) return kInf;
  }
  return total;
}

double chain(const CostModel& m, int root, double bytes, double chunkBytes, bool reduce) {
  const int n = m.nranks();
  const Pieces p = cut(bytes, chunkBytes);
  std::vector<Flow> flows;
  // Broadcast: root -> root+1 -> ...; Reduce: the same chain toward root.
  for (int i = 0; i + 1 < n; ++i) {
    const int a = (root + i) % n, b = (root + i + 1) % n;
    flows.push_back(reduce ? Flow{b, a, p.piece} : Flow{a, b, p.piece});
  }
  const double steps = p.rounds + n - 2;
  return steps * (m.stepUs(flows) + (reduce ? p.piece / m.memBytesPerUs() : 0.0));
}

double directRooted(const CostModel& m, int root, double bytes, bool toRoot, bool reduce) {
  const int n = m.nranks();
  if (size_t(n) > kMeshMaxRanks * kMeshMaxRanks) return kInf;
  std::vector<Flow> flows;
  for (int r = 0; r < n; ++r)
    if (r != root) flows.push_back(toRoot ? Flow{r, root, bytes} : Flow{root, r, bytes});
  return m.stepUs(flows) + (reduce ? (n - 1) * bytes / m.memBytesPerUs() : 0.0);
}

double recursiveDoublingScan(const CostModel& m, double bytes, bool exclusive) {
  const int n = m.nranks();
  double us = 2 * bytes / m.memBytesPerUs();  // the copies in and out of scratch
  std::vector<Flow> flows;
  for (int d = 1; d < n; d *= 2) {
    flows.clear();
    for (int r = 0; r + d < n; ++r) flows.push_back(Flow{r, r + d, bytes});
    us += m.stepUs(flows) + bytes / m.memBytesPerUs();
  }
  if (exclusive && n > 1) {
    flows.clear();
    for (int r = 0; r + 1 < n; ++r) flows.push_back(Flow{r, r + 1, bytes});
    us += m.stepUs(flows);
  }
  return us;
}

double allToAll(const CostModel& m, double bytes) {
  Groups all(1);
  for (int r = 0; r < m.nranks(); ++r) all[0].push_back(r);
  return meshStep(m, all, bytes);
}

}  // namespace sncl::estimate
