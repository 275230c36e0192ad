#include "lib/plan/default_topo.h"

#include <fmt/format.h>

#include <map>

#include "lib/topo/generators.h"

namespace sncl {

Result defaultTopology(const std::vector<PeerInfo>& peers, const Tuning& tuning, std::shared_ptr<topo::Graph>* graph,
                       std::vector<topo::VertexId>* rankVertex) {
  topo::HostsParams p;
  p.name = "comm";
  // Latency lives in the tuning's α; links only carry bandwidth (and who shares it).
  constexpr double kLinkLatencyUs = 0.01;
  const KindCost& shm = tuning.kind[int(topo::LinkKind::Shm)];
  const KindCost& net = tuning.kind[int(topo::LinkKind::Net)];
  p.shm = {shm.betaGBs, kLinkLatencyUs, topo::LinkKind::Shm};
  p.numa = p.shm;
  p.nic = {net.betaGBs, kLinkLatencyUs, topo::LinkKind::Net};
  std::map<uint64_t, size_t> hostIndex;
  std::vector<std::string> names(peers.size());
  for (size_t r = 0; r < peers.size(); ++r) {
    auto [it, added] = hostIndex.emplace(peers[r].hostId, p.hosts.size());
    if (added) p.hosts.push_back({fmt::format("h{}", p.hosts.size()), 1, {}});
    p.hosts[it->second].endpoints.emplace_back(fmt::format("r{}", r), 0);
    names[r] = fmt::format("h{}.r{}", it->second, r);
  }
  auto g = std::make_shared<topo::Graph>();
  g->setName("comm");
  SNCL_CHECK(topo::generate(*g, p));
  SNCL_CHECK(g->finalize());
  rankVertex->resize(peers.size());
  for (size_t r = 0; r < peers.size(); ++r) {
    (*rankVertex)[r] = g->findVertex(names[r]);
    if ((*rankVertex)[r] == topo::kNone) return fail(snclInternalError, "default topology lacks rank {}", r);
  }
  *graph = std::move(g);
  return snclSuccess;
}

}  // namespace sncl
