// What the simulator runs: a collective of a given size on n ranks, as the library's own
// schedules. "auto" asks the planner (Planner::choose) exactly as a comm does; ring,
// direct and chain are built by Planner::build; tree and halving-doubling (All-Reduce only,
// not yet chosen by the planner) by their generators in algorithms/.
#pragma once

#include <string>

#include "lib/planner.h"
#include "lib/sim/network.h"
#include "lib/sim/sim.h"

namespace sncl::sim {

struct WorkloadSpec {
  CollType coll = CollType::AllReduce;
  std::string algorithm = "auto";  // auto, ring, direct, chain, tree, hd
  size_t bytes = 0;                // nccl-tests' size: the buffer (All-Gather: the output)
  size_t elemSize = 4;
  size_t chunkBytes = size_t(1) << 20;  // SNCL_CHUNK_SIZE's default
  LinkCost link;                   // the planner's α-β figures
};

struct Planned {
  Workload workload;
  std::string algorithm;     // what runs
  std::string plannerChoice; // what Planner::choose picked (and its estimate)
  double busFactor = 1.0;    // nccl-tests: busbw = algbw x busFactor
};

Result makeWorkload(const WorkloadSpec& spec, int nranks, Planned* out);
// Parses allreduce, broadcast, ... (lib/planner.h collName).
bool parseColl(const std::string& name, CollType* out);

// The planner's α-β from the topology: α the route latency from rank 0 to rank n/2, β the
// route bandwidth from rank 0 to rank 1 (one rank's injection towards its neighbour).
Result linkCostOf(Network& net, int nranks, double memGBs, LinkCost* out);

}  // namespace sncl::sim
