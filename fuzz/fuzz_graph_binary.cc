// libFuzzer target: any bytes as a topology cache file (lib/topo/graph_binary.h). Decoding
// must never crash; the checksum is skipped (and the key taken from the input) so that
// mutations reach the value checks. A graph that decodes must route, summarize, write its
// JSON, and encode back to exactly the input: decoding neither drops nor invents anything.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "lib/topo/graph_binary.h"
#include "lib/topo/route.h"
#include "lib/topo/summary.h"
#include "lib/topo/topo_file.h"

using namespace sncl::topo;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("SNCL_DEBUG", "NONE", 1);  // every rejected input would log a WARN line
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  uint64_t key = 0;
  if (size >= kGraphBinaryHeaderBytes) std::memcpy(&key, data + 24, sizeof(key));
  Graph g;
  if (decodeGraph(in, key, &g, /*verifyChecksum=*/false) != snclSuccess) return 0;
  if (g.vertexCount() > 500) return 0;  // keeps one input in the milliseconds
  Route r;
  if (g.route(g.endpointVertex(0), g.endpointVertex(g.endpointCount() - 1), &r) != snclSuccess) abort();
  summarize(g);
  topologyToJson(g);
  std::vector<uint8_t> again;
  if (encodeGraph(g, key, &again) != snclSuccess) abort();
  // The input's checksum field was not checked; compare everything else.
  if (again.size() != size) abort();
  if (std::memcmp(again.data(), data, 40) != 0) abort();
  if (std::memcmp(again.data() + kGraphBinaryHeaderBytes, data + kGraphBinaryHeaderBytes,
                  size - kGraphBinaryHeaderBytes) != 0)
    abort();
  return 0;
}
