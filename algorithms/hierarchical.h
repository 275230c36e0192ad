// Hierarchical All-Reduce: reduce-scatter inside the groups of a level, All-Reduce across
// groups (each rank on its own block, together with the ranks holding the same block in
// the other groups), all-gather inside the groups. With a second level the across step is
// itself hierarchical: the ranks holding block j reduce-scatter inside their coarser group,
// and so on. The intra-group algorithm (ring or direct) and the top All-Reduce (ring, tree,
// halving-doubling or direct) are chosen independently; everything is built from the flat
// schedules with algorithms/compose.h.
//
// Levels are given finest first as a group id per rank. At each level the groups nest in
// the next level's and, inside every group of the level above, have equal sizes (k), so
// that a buffer cuts into k blocks. count = k*b + t: the t left-over elements (t < k, a
// few) are reduced by a direct All-Reduce inside each group, then by one across the groups
// among the ranks of one place in them.
//
// Phase ids (tag ranges): level l's tail 3l (inside groups) and 3l+2 (across them), its
// reduce-scatter 3l+1; the top All-Reduce 3L; level l's all-gather 3L+1+(L-1-l). Every
// rank takes part in every phase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"

namespace sncl::algo {

enum class FlatAllReduce : uint8_t { Ring, Direct, Tree, HalvingDoubling };
enum class GroupAlgo : uint8_t { Ring, Direct };  // reduce-scatter / all-gather inside groups

struct HierarchicalSpec {
  std::vector<std::vector<int>> groupOf;  // [level][rank], finest level first, >= 1 level
  GroupAlgo inner = GroupAlgo::Ring;
  FlatAllReduce outer = FlatAllReduce::Ring;
};

// One phase of the composition as the cost model and the builder see it.
struct HierPhase {
  enum class Kind : uint8_t { AllReduce, ReduceScatter, AllGather } kind;
  bool tail = false;       // the left-over elements' direct All-Reduce (in groups, then across)
  uint32_t id = 0;         // tag range; phases run in increasing id
  size_t count = 0;        // All-Reduce: elements; reduce-scatter / all-gather: block per member
  bool fromInput = false;  // reads Buf::Input (the first level), else works in Output
  std::vector<std::vector<int>> groups;  // concurrent, disjoint member lists (comm ranks)
  std::vector<size_t> base;              // per group: element offset of its region
};

// The phases for one count with each rank's place in them, computed once for all ranks
// (a simulator builds 16k ranks' schedules; finding the phases again per rank is O(n^2)).
struct HierLayout {
  size_t count = 0;
  std::vector<HierPhase> phases;
  // [phase][rank]: the rank's group in the phase and its index among the group's members;
  // -1 when the rank has no part in it.
  std::vector<std::vector<int32_t>> groupOf, localRank;
};

struct HierarchicalAllReduce {
  // Why groupOf cannot carry the composition over nranks ranks ("" when it can).
  static std::string check(int nranks, const std::vector<std::vector<int>>& groupOf);
  // The phases for count elements, in the order they run (spec checked).
  static std::vector<HierPhase> phases(int nranks, const std::vector<std::vector<int>>& groupOf, size_t count);
  // Fills out (cleared first) with rank's steps. chunkCount >= 1 is the ring's and the
  // tree's pipeline chunk.
  static void build(int rank, int nranks, const HierarchicalSpec& spec, size_t count, size_t chunkCount, Schedule* out);
  // The phases for count elements, with every rank's place in them.
  static HierLayout layout(int nranks, const std::vector<std::vector<int>>& groupOf, size_t count);
  // The same schedule as build(rank, nranks, spec, layout.count, ...), from the layout of
  // spec.groupOf for nranks ranks.
  static void build(int rank, int nranks, const HierarchicalSpec& spec, const HierLayout& layout, size_t chunkCount,
                    Schedule* out);
};

}  // namespace sncl::algo
