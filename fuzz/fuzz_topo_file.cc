// libFuzzer target: any bytes as a topology file. Parsing must never crash; a file that
// parses must route, summarize, draw, and round-trip through its explicit JSON unchanged.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "lib/topo/draw.h"
#include "lib/topo/route.h"
#include "lib/topo/summary.h"
#include "lib/topo/topo_file.h"

using namespace sncl::topo;

// Small enough that one input stays in the milliseconds.
static const FileLimits kLimits{1000, 4000, 1 << 20};

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("SNCL_DEBUG", "NONE", 1);  // every rejected input would log a WARN line
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Graph g;
  if (parseTopology(text, "fuzz", &g, kLimits) != snclSuccess) return 0;
  if (g.vertexCount() > 500) return 0;
  Route r;
  if (g.route(g.endpointVertex(0), g.endpointVertex(g.endpointCount() - 1), &r) != snclSuccess) abort();
  explicitPaths(g, r, 4);
  summarize(g);
  toDot(g);
  std::string json = topologyToJson(g);
  Graph h;
  FileLimits roomy = kLimits;
  roomy.maxFileBytes = json.size() + 1;
  if (parseTopology(json, "fuzz", &h, roomy) != snclSuccess) abort();
  if (topologyToJson(h) != json) abort();
  return 0;
}
