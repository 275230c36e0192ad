// Composition: a schedule built for a sub-group (local ranks 0..k-1, buffers from element 0)
// is embedded into a comm-wide schedule as a further phase. This is how hierarchical
// algorithms are put together, e.g. reduce-scatter inside a host, All-Reduce across hosts
// on each rank's segment, all-gather inside the host: three phases, each built by an
// existing algorithm for its group.
//
// Phases run one after the other on every rank; ranks that are not in a phase's group skip
// it. Groups of one phase must be disjoint (a rank runs one part per phase). Messages of
// different phases between a pair of ranks stay in posting order because a rank's phases
// are appended in the same order everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/schedule.h"

namespace sncl::algo {

// Tag ranges: phase i (numbered 0, 1, ... in the order the composition appends them, the
// same on all ranks, whether or not a rank takes part) owns the tags
// [i << kPhaseTagBits, (i + 1) << kPhaseTagBits). A part's tag t becomes
// phaseTagBase(i) + t mod 2^kPhaseTagBits: both ends of a message apply the same map, so
// tags stay equal, and phases never share a tag. (Folding only matters past 2^24 tags in a
// phase; messages are matched in posting order, tags are a check.) Phases 0..255.
constexpr uint32_t kPhaseTagBits = 24;
constexpr uint32_t phaseTagBase(uint32_t phase) { return phase << kPhaseTagBits; }

// Where a part's buffers lie in the comm-wide schedule's buffers.
struct Region {
  Buf buf;
  size_t offset;  // elements
};

struct Placement {
  std::vector<int> members;             // members[localRank] = comm rank
  Region input{Buf::Input, 0};          // the part's Input
  Region output{Buf::Output, 0};        // the part's Output; if it is the input's memory,
                                        // the part must be correct in place
  size_t scratchOffset = 0;             // the part's Scratch starts here in Scratch
  uint32_t phase = 0;                   // tag range, < 256
};

// Index of rank in members, or -1.
int localRankOf(const std::vector<int>& members, int rank);

// Appends part's steps after out's, with peers mapped to comm ranks, buffers and offsets to
// place's regions and tags into place.phase's range. Grows out->scratchCount to hold the
// part's scratch.
void appendPhase(const Schedule& part, const Placement& place, Schedule* out);

// Builds rank's part with build(localRank, localNranks, part) and appends it; appends nothing
// if rank is not a member. Returns whether it is.
using PartBuilder = std::function<void(int localRank, int localNranks, Schedule* part)>;
bool appendGroupPhase(int rank, const Placement& place, const PartBuilder& build, Schedule* out);

}  // namespace sncl::algo
