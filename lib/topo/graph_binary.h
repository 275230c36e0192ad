// A finalized graph in a compact binary form, for the per-host topology cache
// (topo_cache.h): what a file builds (names, vertex attributes, links with their health,
// the rank order, the epoch) as flat arrays behind a fixed header. Decoding copies the
// arrays in bulk and recomputes the derived tables with Graph::finalize, so a cache file
// can never carry adjacency or level tables that disagree with its links.
//
// The bytes are not trusted: decodeGraph checks the header (magic, version, byte order,
// sizes of the stored types, key, length), a checksum over the payload, and every value
// (kinds, index ranges, names, bandwidths, states, rank order, no duplicate link), and
// returns InvalidArgument saying what is wrong. No input crashes it (fuzz/fuzz_graph_binary).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lib/topo/graph.h"

namespace sncl::topo {

inline constexpr uint32_t kGraphBinaryVersion = 1;
inline constexpr size_t kGraphBinaryHeaderBytes = 48;

// Appends g (finalized) to *out; key is stored in the header and checked on decode (the
// cache stores the key of the file the graph came from).
Result encodeGraph(const Graph& g, uint64_t key, std::vector<uint8_t>* out);

// Decodes bytes made by encodeGraph with the same key into *out (finalized, ranks mapped
// onto every endpoint or the rank order, exactly as the parser leaves a graph).
// verifyChecksum=false is for the fuzzer only (which must get past the checksum to reach
// the value checks).
Result decodeGraph(std::span<const uint8_t> bytes, uint64_t key, Graph* out, bool verifyChecksum = true);

// The payload checksum: 64-bit words in four lanes (a checksum of several MiB must cost
// well under the parse it replaces; it guards against torn and corrupted files, not
// against an adversary, who could write any graph to a file of the user's own anyway).
uint64_t graphBinaryChecksum(std::span<const uint8_t> bytes);

}  // namespace sncl::topo
