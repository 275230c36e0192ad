// Graphviz drawing of a topology (sncl-topo --dot / --png).
//
// Small graphs are drawn vertex by vertex. Large ones are drawn grouped, so a person can
// read them: containers (cluster, supernode, rack, node) become nested boxes; inside a
// container, vertices of the same kind, tier and plane become one box with a count; of
// more than four sibling containers only the first two and the last are opened, the rest
// fold into one "... N more" box; links between two boxes become one edge labelled with
// their count and bandwidth.
#pragma once

#include <string>

#include "lib/topo/graph.h"

namespace sncl::topo {

struct DrawOptions {
  size_t detailLimit = 64;  // draw every vertex up to this many (non-container) vertices
  bool grouped = false;     // force the grouped drawing
};

std::string toDot(const Graph& g, const DrawOptions& opts = {});

}  // namespace sncl::topo
