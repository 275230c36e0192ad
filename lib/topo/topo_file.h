// Topology files (SNCL_TOPO_FILE): JSON, parsed by nlohmann-json. A file holds generators
// (common shapes in a few parameters), explicit vertices and links, and an optional rank
// map. docs/topology.md describes every field.
//
// Every problem is an InvalidArgument whose message names the file and the place: line and
// column for a syntax error, the JSON pointer (/links/3/bw) for anything else, then what is
// wrong. No input crashes the parser (tools/run_fuzz.sh checks that).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "lib/topo/graph.h"

namespace sncl::topo {

// Bounds on what a file may build, checked before a generator runs.
struct FileLimits {
  double maxVertices = double(1 << 22);
  double maxLinks = double(1 << 24);
  size_t maxFileBytes = size_t(1) << 30;
};

// Reads and parses path into *out (finalized, ranks mapped onto every endpoint).
Result loadTopologyFile(const std::string& path, Graph* out, const FileLimits& limits = {});
// Parses text; `source` names it in error messages.
Result parseTopology(std::string_view text, const std::string& source, Graph* out,
                     const FileLimits& limits = {});

// JSON text (// and /* */ comments allowed, nesting bounded) into a document; a syntax error
// names source:line:column. Other readers of JSON input files share it (lib/sim/layout_model).
Result parseJsonText(std::string_view text, const std::string& source, nlohmann::json* out);
// A whole file of at most maxBytes.
Result readTextFile(const std::string& path, size_t maxBytes, std::string* out);

// The graph as an explicit topology file (vertices and links, no generators, rank_map when
// the rank order is not the endpoint order, link states). Loading it gives the same graph.
std::string topologyToJson(const Graph& g);

}  // namespace sncl::topo
