// The topology a comm plans on when no topology file describes it: one node per (virtual)
// host (PeerInfo.hostId, which SNCL_HOSTID splits), ranks joined by shared memory inside a
// host and by one network switch between hosts. Link figures are the tuning's, so that the
// cost model's α and β are the per-kind defaults (or the calibrated ones).
#pragma once

#include <memory>
#include <vector>

#include "lib/plan/cost_model.h"
#include "lib/topo/graph.h"
#include "lib/transport/transport.h"

namespace sncl {

Result defaultTopology(const std::vector<PeerInfo>& peers, const Tuning& tuning, std::shared_ptr<topo::Graph>* graph,
                       std::vector<topo::VertexId>* rankVertex);

}  // namespace sncl
