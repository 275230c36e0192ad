// What the simulator runs: a collective of a given size on n ranks, as the library's own
// schedules. The planner is built on the topology being simulated (lib/plan/cost_model.h) and
// "auto" takes Planner::choose's plan, exactly as a comm on that machine would; a named
// algorithm takes the cheapest of the planner's candidates with that algorithm.
#pragma once

#include <string>

#include "lib/plan/planner.h"
#include "lib/sim/sim.h"
#include "lib/topo/graph.h"

namespace sncl::sim {

struct WorkloadSpec {
  CollType coll = CollType::AllReduce;
  // auto, ring, direct, chain, tree, hd, hier (the best hierarchical variant), or a
  // planner description such as hier[node](ring/tree)
  std::string algorithm = "auto";
  size_t bytes = 0;      // nccl-tests' size: the buffer (All-Gather: the output)
  size_t elemSize = 4;
  size_t chunkBytes = size_t(1) << 20;  // SNCL_CHUNK_SIZE's default
  double memGBs = 0;     // the planner's reduction bandwidth (0: free, as in the engines)
};

struct Planned {
  Workload workload;
  std::string algorithm;      // what runs (Planner::describe)
  std::string plannerChoice;  // what Planner::choose picked, with its estimate
  std::string candidates;     // every candidate's estimate, cheapest first
  double estimateUs = 0;      // the planner's estimate of its choice (auto only)
  double busFactor = 1.0;     // nccl-tests: busbw = algbw x busFactor
};

// g is finalized with at least nranks ranks mapped, and must outlive the workload.
Result makeWorkload(const topo::Graph& g, const WorkloadSpec& spec, int nranks, Planned* out);

}  // namespace sncl::sim
