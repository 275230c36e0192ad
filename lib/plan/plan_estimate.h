// Time estimates of every schedule the planner can choose, on the cost model: each
// algorithm's steps as sets of flows (every concurrent group's messages of that step
// together, so that groups crossing the same links share them), summed along the
// critical path. Reductions and copies cost the cost model's memory bandwidth.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/hierarchical.h"
#include "lib/plan/cost_model.h"

namespace sncl::estimate {

// Concurrent, disjoint sub-communicators of equal size: groups[g][local rank] = comm rank.
using Groups = std::vector<std::vector<int>>;

// Estimates that are sums of several steps or phases take a budget: once their partial sum
// exceeds it they stop and return infinity (the planner's pruning: a candidate that already
// costs more than the best one found is no choice). Below the budget, the same sum.
constexpr double kNoBudget = 1e300;

// All-Reduce of bytes per rank over each group at once.
double allReduce(const CostModel& m, algo::FlatAllReduce a, const Groups& groups, double bytes, double chunkBytes,
                 double budget = kNoBudget);
// Reduce-scatter / all-gather with blocks of blockBytes per member, ring or direct.
double reduceScatter(const CostModel& m, algo::GroupAlgo a, const Groups& groups, double blockBytes, double chunkBytes);
double allGather(const CostModel& m, algo::GroupAlgo a, const Groups& groups, double blockBytes, double chunkBytes);
// The hierarchical composition: the sum of its phases.
double hierarchical(const CostModel& m, const algo::HierarchicalSpec& spec, double bytes, double chunkBytes,
                    double budget = kNoBudget);
// Broadcast and Reduce from root: chain (pipelined) or direct.
double chain(const CostModel& m, int root, double bytes, double chunkBytes, bool reduce);
double directRooted(const CostModel& m, int root, double bytes, bool toRoot, bool reduce);
// All-to-All: every rank sends bytes to every other at once.
double allToAll(const CostModel& m, double bytes);
// Scan by recursive doubling (algorithms/scan.h): ceil(log2 n) rounds of bytes from every r
// to r+d, each combined on arrival, plus (exclusive) one shift to r+1.
double recursiveDoublingScan(const CostModel& m, double bytes, bool exclusive);

}  // namespace sncl::estimate
