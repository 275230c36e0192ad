// Topology files parsed once per host, not once per rank (sncl issue 19). Every rank of a
// comm with SNCL_TOPO_FILE needs the same finalized graph; parsing a 16k-endpoint file
// costs ~0.1 s of CPU, so N ranks on one host paid it N times.
//
// Two caches, both keyed by the file's content (plus its path, which names the graph when
// the file does not, and the binary format's version and type sizes), so an edited file
// never loads a stale graph:
//  - per host: the graph in its binary form (graph_binary.h) in
//    $SNCL_TOPO_CACHE_DIR (default /dev/shm) as sncl-topo-<uid>-<key>.bin. The first rank
//    to miss takes <file>.lock, parses and writes the file atomically (a temporary, then
//    rename), then drops the lock; ranks that find the lock wait for it (up to
//    SNCL_TIMEOUT_MS, or until its owner process is gone) and read the finished file. A
//    file that fails any check is reported in one WARN naming it, then the rank parses
//    (and replaces it).
//  - per process (threads of snclCommInitAll, several comms): the decoded graph, shared
//    as a const graph; every caller gets its own clone, since comms change link health.
// SNCL_TOPO_CACHE=0 turns both off.
#pragma once

#include <cstdint>
#include <string>

#include "lib/topo/graph.h"

namespace sncl::topo {

enum class TopoSource { Parsed, HostCache, ProcessCache };
const char* sourceName(TopoSource s);

// loadTopologyFile (default limits) through the caches. *how, when given, says where the
// graph came from. Errors are the parser's: a bad file fails the same with or without cache.
Result loadTopologyCached(const std::string& path, Graph* out, TopoSource* how = nullptr);

// The host cache file that path's current content maps to (whether or not it exists yet).
Result topoCacheFileFor(const std::string& path, std::string* cacheFile);

// What this process's loads did so far, for tests and INFO lines.
struct TopoCacheStats {
  uint64_t parsed = 0;        // parsed the JSON
  uint64_t hostHits = 0;      // decoded a host cache file
  uint64_t processHits = 0;   // cloned the process's graph
  uint64_t rejected = 0;      // host cache files that failed a check (each one WARN)
  uint64_t written = 0;       // host cache files this process wrote
};
TopoCacheStats topoCacheStats();

// Forgets the process's graphs (tests; memory). Host cache files stay.
void clearTopoProcessCache();

}  // namespace sncl::topo
