// What a layout's collectives take, simulated: each is the library's own schedule (the
// planner's choice, lib/sim/workload.h) run by the simulator on one group of endpoints of the
// topology, in the group's rank order. The layout search asks for thousands of (collective,
// group, size) triples; every group of a kind is alike on a healthy machine, so it asks for
// one representative group, and sizes are simulated on a grid of powers of 4 and interpolated
// linearly between the two neighbours (time is close to affine in size between them), each
// grid point simulated once.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "lib/plan/planner.h"
#include "lib/sim/network.h"
#include "lib/topo/graph.h"

namespace sncl::sim {

class GroupCommPricer {
 public:
  // g is finalized and outlives the pricer, its link health fixed while the pricer lives
  // (simulations are kept); its rank mapping is changed by each simulation.
  GroupCommPricer(topo::Graph* g, double memGBs) : g_(g), memGBs_(memGBs) {}

  // Time of coll over the group (endpoints in rank order) for a buffer of bytes (All-to-All:
  // each rank's whole send buffer); a group of one, or no bytes, takes 0.
  Result timeUs(CollType coll, const std::vector<topo::EndpointId>& group, double bytes, double* us);
  // The same at exactly bytes (rounded down to whole elements per rank), simulated once per
  // size: for a size asked for again and again, such as the gradient bucket.
  Result exactTimeUs(CollType coll, const std::vector<topo::EndpointId>& group, double bytes, double* us);
  size_t simulations() const { return simulated_.size(); }

  static constexpr double kMinGridBytes = 4096;

 private:
  Result simulate(CollType coll, const std::vector<topo::EndpointId>& group, size_t bytes, double* us);
  topo::Graph* g_;
  double memGBs_;
  // One network for every simulation: building one is O(links) (a 16k-endpoint Clos has
  // 524,288 channels), and each run starts by forgetting the last one's routes and bundles.
  std::unique_ptr<Network> net_;
  std::map<std::tuple<int, std::vector<topo::EndpointId>, size_t>, double> simulated_;
};

}  // namespace sncl::sim
