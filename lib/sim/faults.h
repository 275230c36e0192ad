// Faults for the simulator: the link forms of SNCL_FAULTS (docs/faults.md), clauses
// separated by ';':
//   link=A-B:down          the link between vertices A and B is down
//   link=A-B:degrade=F     transfers over it take F times longer (F > 1: bandwidth / F)
//   link=A-B:up            healthy again (a later clause overrides an earlier one)
// Vertex names contain no '-' (lib/topo/graph.h), so "A-B" splits at its one dash. Faults
// apply before the simulated collective starts; triggers (@op=, @t=), rank and jitter
// faults have no meaning there and are refused. Routes avoid down links, degraded ones
// carry less (lib/topo/route.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lib/topo/graph.h"

namespace sncl::sim {

struct LinkFault {
  std::string a, b;
  topo::LinkState state = topo::LinkState::Down;
  double factor = 1.0;  // bandwidth factor (1 / F of degrade=F)
};

Result parseFaults(std::string_view spec, std::vector<LinkFault>* out);
Result applyFaults(topo::Graph& g, const std::vector<LinkFault>& faults);

}  // namespace sncl::sim
