#include "algorithms/hierarchical.h"

#include <algorithm>
#include <map>
#include <string>

#include "algorithms/compose.h"
#include "algorithms/direct.h"
#include "algorithms/halving_doubling.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"

namespace sncl::algo {
namespace {

// members split by their group at level, in order of first appearance (members keep order).
std::vector<std::vector<int>> splitByGroup(const std::vector<int>& members, const std::vector<int>& groupOf) {
  std::vector<std::vector<int>> out;
  std::map<int, size_t> index;
  for (int m : members) {
    auto [it, added] = index.emplace(groupOf[m], out.size());
    if (added) out.emplace_back();
    out[it->second].push_back(m);
  }
  return out;
}

class PhaseList {
 public:
  PhaseList(const std::vector<std::vector<int>>& groupOf) : groupOf_(groupOf), levels_(uint32_t(groupOf.size())) {}

  void add(const std::vector<int>& members, uint32_t level, size_t count, size_t base, bool fromInput) {
    if (count == 0) return;
    if (level == levels_) {
      push(3 * levels_, HierPhase::Kind::AllReduce, false, count, fromInput, members, base);
      return;
    }
    const auto groups = splitByGroup(members, groupOf_[level]);
    const size_t k = groups[0].size(), b = count / k, t = count % k;
    // The t < k left-over elements: an All-Reduce inside each group, then one across the
    // groups among the members of one place, which hold equal sums. A rank sends them as
    // many messages across groups as the rest of the call, not one to every member (8 ranks
    // of 2 hosts over TCP on 2 cores, 8 B: 490-590 -> 240-350 us, MPI 330-440).
    if (t) {
      for (const auto& g : groups) push(3 * level, HierPhase::Kind::AllReduce, true, t, fromInput, g, base + k * b);
      for (size_t j = 0; j < k; ++j) {
        std::vector<int> across;
        for (const auto& g : groups) across.push_back(g[j]);
        push(3 * level + 2, HierPhase::Kind::AllReduce, true, t, false, across, base + k * b);
      }
    }
    if (!b) return;
    for (const auto& g : groups) push(3 * level + 1, HierPhase::Kind::ReduceScatter, false, b, fromInput, g, base);
    for (size_t j = 0; j < k; ++j) {
      std::vector<int> across;
      for (const auto& g : groups) across.push_back(g[j]);
      add(across, level + 1, b, base + j * b, false);
    }
    for (const auto& g : groups)
      push(3 * levels_ + 1 + (levels_ - 1 - level), HierPhase::Kind::AllGather, false, b, false, g, base);
  }

  std::vector<HierPhase> take() {
    std::vector<HierPhase> out;
    for (auto& [id, p] : byId_) out.push_back(std::move(p));
    return out;
  }

 private:
  void push(uint32_t id, HierPhase::Kind kind, bool tail, size_t count, bool fromInput, const std::vector<int>& g,
            size_t base) {
    HierPhase& p = byId_[id];
    p.id = id;
    p.kind = kind;
    p.tail = tail;
    p.count = count;
    p.fromInput = fromInput;
    p.groups.push_back(g);
    p.base.push_back(base);
  }

  const std::vector<std::vector<int>>& groupOf_;
  uint32_t levels_;
  std::map<uint32_t, HierPhase> byId_;
};

void buildFlat(FlatAllReduce a, int rank, int n, size_t count, size_t chunkCount, Schedule* part) {
  switch (a) {
    case FlatAllReduce::Ring: RingAllReduce::build(rank, n, count, chunkCount, part); break;
    case FlatAllReduce::Direct: DirectAllReduce::build(rank, n, count, part); break;
    case FlatAllReduce::Tree: TreeAllReduce::build(rank, n, count, chunkCount, part); break;
    case FlatAllReduce::HalvingDoubling: HalvingDoublingAllReduce::build(rank, n, count, part); break;
  }
}

}  // namespace

std::string HierarchicalAllReduce::check(int nranks, const std::vector<std::vector<int>>& groupOf) {
  if (groupOf.empty()) return "no levels";
  if (groupOf.size() > 16) return "more than 16 levels";
  for (size_t l = 0; l < groupOf.size(); ++l) {
    if (groupOf[l].size() != size_t(nranks)) return "a level does not give every rank a group";
    // Nested: ranks of one group at l share their group at l+1.
    std::map<int, int> parentOf, size;
    for (int r = 0; r < nranks; ++r) {
      ++size[groupOf[l][r]];
      if (l + 1 < groupOf.size()) {
        auto [it, added] = parentOf.emplace(groupOf[l][r], groupOf[l + 1][r]);
        if (!added && it->second != groupOf[l + 1][r]) return "groups of a level are not nested in the next level's";
      }
    }
    if (size.size() < 2) return "a level with a single group";
    for (auto& [g, s] : size)
      if (s != size.begin()->second) return "groups of a level differ in size";
    if (size.begin()->second < 2) return "a level whose groups are single ranks";
  }
  return "";
}

std::vector<HierPhase> HierarchicalAllReduce::phases(int nranks, const std::vector<std::vector<int>>& groupOf, size_t count) {
  std::vector<int> all(nranks);
  for (int r = 0; r < nranks; ++r) all[r] = r;
  PhaseList list(groupOf);
  list.add(all, 0, count, 0, true);
  return list.take();
}

HierLayout HierarchicalAllReduce::layout(int nranks, const std::vector<std::vector<int>>& groupOf, size_t count) {
  HierLayout out;
  out.count = count;
  out.phases = phases(nranks, groupOf, count);
  out.groupOf.assign(out.phases.size(), std::vector<int32_t>(size_t(nranks), -1));
  out.localRank = out.groupOf;
  for (size_t p = 0; p < out.phases.size(); ++p)
    for (size_t g = 0; g < out.phases[p].groups.size(); ++g) {
      const std::vector<int>& members = out.phases[p].groups[g];
      for (size_t j = 0; j < members.size(); ++j) {
        out.groupOf[p][members[j]] = int32_t(g);
        out.localRank[p][members[j]] = int32_t(j);
      }
    }
  return out;
}

void HierarchicalAllReduce::build(int rank, int nranks, const HierarchicalSpec& spec, size_t count, size_t chunkCount,
                                  Schedule* out) {
  if (nranks == 1 || count == 0) {
    out->clear();
    DirectAllReduce::build(rank, nranks, count, out);
    return;
  }
  build(rank, nranks, spec, layout(nranks, spec.groupOf, count), chunkCount, out);
}

void HierarchicalAllReduce::build(int rank, int nranks, const HierarchicalSpec& spec, const HierLayout& layout,
                                  size_t chunkCount, Schedule* out) {
  out->clear();
  if (nranks == 1 || layout.count == 0) {
    DirectAllReduce::build(rank, nranks, layout.count, out);
    return;
  }
  Schedule part;
  Placement place;
  for (size_t p = 0; p < layout.phases.size(); ++p) {
    const HierPhase& phase = layout.phases[p];
    const int32_t g = layout.groupOf[p][rank], j = layout.localRank[p][rank];
    if (g < 0) continue;  // a rank is in at most one group per phase
    const std::vector<int>& members = phase.groups[g];
    place.members = members;
    place.phase = phase.id;
    const Region region{phase.fromInput ? Buf::Input : Buf::Output, phase.base[g]};
    const Region block{Buf::Output, phase.base[g] + j * phase.count};
    const int k = static_cast<int>(members.size());
    switch (phase.kind) {
      case HierPhase::Kind::AllReduce:
        place.input = region;
        place.output = {Buf::Output, phase.base[g]};
        buildFlat(phase.tail ? FlatAllReduce::Direct : spec.outer, j, k, phase.count, chunkCount, &part);
        break;
      case HierPhase::Kind::ReduceScatter:
        place.input = region;
        place.output = block;
        if (spec.inner == GroupAlgo::Ring) RingReduceScatter::build(j, k, phase.count, chunkCount, &part);
        else DirectReduceScatter::build(j, k, phase.count, &part);
        break;
      case HierPhase::Kind::AllGather:
        place.input = block;
        place.output = {Buf::Output, phase.base[g]};
        if (spec.inner == GroupAlgo::Ring) RingAllGather::build(j, k, phase.count, chunkCount, &part);
        else DirectAllGather::build(j, k, phase.count, &part);
        break;
    }
    appendPhase(part, place, out);
  }
}

}  // namespace sncl::algo
