// Merge at init: every rank turns the all-gathered local views (discovery.h) into the same
// graph. The caller (the comm) gathers the bytes over the bootstrap; this file only needs
// them, so tests call it with synthetic views.
//
// Without a topology file the graph is the discovered machine: hosts from the views'
// hostIds (in order of their lowest rank), each with its NUMA nodes and its ranks, hosts
// joined by one network switch (the "hosts" generator's shape, default bandwidths). With
// SNCL_TOPO_FILE the graph is the file's system and ranks map onto its endpoints (in order,
// or by its rank_map). Identical inputs give an identical graph on every rank.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "lib/topo/graph.h"

namespace sncl::topo {

// gathered: nranks x kLocalViewBytes in rank order. topoFile: empty for none (callers pass
// topoFileFromEnv()). The result is finalized with nranks ranks mapped.
Result mergeLocalViews(std::span<const uint8_t> gathered, int nranks, const std::string& topoFile,
                       Graph* out);

// SNCL_TOPO_FILE, or empty.
std::string topoFileFromEnv();

}  // namespace sncl::topo
