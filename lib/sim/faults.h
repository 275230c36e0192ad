// Faults for the simulator, in the link forms of SNCL_FAULTS: entries separated by ';',
//   link=A-B:down          the link between vertices A and B is down
//   link=A-B:degrade=F     its bandwidth is scaled by F (0 < F < 1)
// Vertex names contain no '-' (lib/topo/graph.h), so "A-B" splits at its one dash.
// Applied to the graph before simulating: routes avoid down links, degraded ones carry
// less (lib/topo/route.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lib/topo/graph.h"

namespace sncl::sim {

struct LinkFault {
  std::string a, b;
  topo::LinkState state = topo::LinkState::Down;
  double factor = 1.0;
};

Result parseFaults(std::string_view spec, std::vector<LinkFault>* out);
Result applyFaults(topo::Graph& g, const std::vector<LinkFault>& faults);

}  // namespace sncl::sim
