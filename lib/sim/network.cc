#include "lib/sim/network.h"

#include <algorithm>
#include <map>

#include "lib/topo/route.h"

namespace sncl::sim {

Network::Network(const topo::Graph& g) : g_(g) {
  const size_t links = g.linkCount();
  capacity_.resize(2 * links);
  channelClass_.resize(2 * links);
  std::map<std::string, uint16_t> classes;
  for (topo::LinkId l = 0; l < links; ++l) {
    const double cap = g.linkBandwidthGBps(l) * kBytesPerUsPerGBs;
    int ta = g.tier(g.linkA(l)), tb = g.tier(g.linkB(l));
    const std::string name = fmt::format("{} {}-{}", topo::kindName(g.linkKind(l)), std::min(ta, tb), std::max(ta, tb));
    auto [it, fresh] = classes.emplace(name, uint16_t(classNames_.size()));
    if (fresh) {
      classNames_.push_back(name);
      classCapacity_.push_back(0);
    }
    for (int dir = 0; dir < 2; ++dir) {
      capacity_[2 * l + dir] = cap;
      channelClass_[2 * l + dir] = it->second;
      classCapacity_[it->second] += cap;
    }
  }
}

std::string Network::channelName(uint32_t ch) const {
  const topo::LinkId l = ch / 2;
  const topo::VertexId from = ch % 2 ? g_.linkB(l) : g_.linkA(l), to = g_.linkPeer(l, from);
  return g_.vertexName(from) + "->" + g_.vertexName(to);
}

Result Network::path(int src, int dst, const Path** out) {
  const uint64_t key = uint64_t(uint32_t(src)) << 32 | uint32_t(dst);
  if (auto it = paths_.find(key); it != paths_.end()) {
    *out = it->second.get();
    return snclSuccess;
  }
  topo::Route r;
  SNCL_CHECK(g_.routeRanks(src, dst, &r));
  if (!r.reachable)
    return fail(snclInvalidArgument, "simulator: rank {} ({}) cannot reach rank {} ({}) over usable links", src,
                g_.vertexName(g_.rankVertex(src)), dst, g_.vertexName(g_.rankVertex(dst)));
  auto p = std::make_unique<Path>();
  p->latencyUs = r.latencyUs;
  p->hops.reserve(r.shares.size());
  for (const topo::LinkShare& s : r.shares)
    if (s.fraction > 0) p->hops.emplace_back(uint32_t(s.channel(g_)), float(s.fraction));
  cachedHops_ += p->hops.size();
  *out = p.get();
  paths_.emplace(key, std::move(p));
  return snclSuccess;
}

void Network::trim(size_t maxHops) {
  if (cachedHops_ <= maxHops) return;
  paths_.clear();
  cachedHops_ = 0;
}

}  // namespace sncl::sim
