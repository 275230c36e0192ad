#include "lib/topo/merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/topo/discovery.h"
#include "lib/topo/generators.h"
#include "lib/topo/topo_cache.h"

namespace sncl::topo {

std::string topoFileFromEnv() { return env::str("SNCL_TOPO_FILE").value_or(""); }

Result mergeLocalViews(std::span<const uint8_t> gathered, int nranks, const std::string& topoFile,
                       Graph* out) {
  if (nranks < 1 || gathered.size() != size_t(nranks) * kLocalViewBytes)
    return fail(snclInvalidArgument, "topology merge: {} bytes for {} ranks (expected {} per rank)",
                gathered.size(), nranks, kLocalViewBytes);
  std::vector<LocalView> views(nranks);
  for (int r = 0; r < nranks; ++r) {
    SNCL_CHECK(decodeLocalView(gathered.data() + size_t(r) * kLocalViewBytes, kLocalViewBytes, &views[r]));
    if (views[r].rank != r)
      return fail(snclInvalidArgument, "topology merge: slot {} holds the view of rank {}", r, views[r].rank);
  }

  if (!topoFile.empty()) {
    Graph g;
    SNCL_CHECK(loadTopologyCached(topoFile, &g));  // parsed once per host (topo_cache.h)
    SNCL_CHECK(g.mapRanks(nranks));
    *out = std::move(g);
    return snclSuccess;
  }

  // Hosts in order of their lowest rank; ranks on each host in rank order.
  HostsParams p;
  p.name = "machine";
  std::unordered_map<uint64_t, size_t> hostIndex;
  std::vector<VertexId> rankOrder;
  for (int r = 0; r < nranks; ++r) {
    const LocalView& v = views[r];
    auto [it, inserted] = hostIndex.try_emplace(v.hostId, p.hosts.size());
    if (inserted) {
      HostsParams::Host h;
      h.name = fmt::format("h{}", p.hosts.size());
      h.numaNodes = v.numaNodes;
      p.hosts.push_back(std::move(h));
      log::info("topology merge: host h{} is {} (host id {:#x})", it->second, v.hostname, v.hostId);
    }
    HostsParams::Host& h = p.hosts[it->second];
    h.numaNodes = std::max(h.numaNodes, v.numaNodes);
    h.endpoints.emplace_back(fmt::format("rank{}", r), std::max(0, v.numa));
  }
  Graph g;
  g.setName(fmt::format("discovered ({} hosts, {} ranks)", p.hosts.size(), nranks));
  SNCL_CHECK(generate(g, p));
  // Endpoints were made host by host; ranks keep their own numbers.
  for (int r = 0; r < nranks; ++r) {
    const std::string& host = p.hosts[hostIndex[views[r].hostId]].name;
    rankOrder.push_back(g.findVertex(fmt::format("{}.rank{}", host, r)));
  }
  SNCL_CHECK(g.setRankOrder(std::move(rankOrder)));
  SNCL_CHECK(g.finalize());
  *out = std::move(g);
  return snclSuccess;
}

}  // namespace sncl::topo
