#include "lib/sim/network.h"

#include <algorithm>
#include <map>
#include <tuple>

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
  physical_ = capacity_.size();
  owner_.assign(physical_, kFree);
}

void Network::setBundling(bool on) {
  bundling_ = on;
  conflict_ = false;
  paths_.clear();
  cachedHops_ = 0;
  owner_.assign(physical_, kFree);
  bundles_.clear();
  firstMember_.clear();
  bundleSize_.clear();
  capacity_.resize(physical_);
  channelClass_.resize(physical_);
}

uint32_t Network::bundleOf(std::vector<uint32_t>& members) {
  std::sort(members.begin(), members.end());
  auto it = bundles_.find(members);
  if (it != bundles_.end()) return it->second;
  const uint32_t id = uint32_t(capacity_.size()), index = uint32_t(firstMember_.size());
  double cap = 0;
  for (uint32_t m : members) {
    if (owner_[m] != kFree) conflict_ = true;
    owner_[m] = kBundled + index;
    cap += capacity_[m];
  }
  capacity_.push_back(cap);
  channelClass_.push_back(channelClass_[members[0]]);
  firstMember_.push_back(members[0]);
  bundleSize_.push_back(uint32_t(members.size()));
  bundles_.emplace(members, id);
  return id;
}

// Groups parallel hops by tail, then the rest by head; groups of one stay single.
void Network::bundle(std::vector<Hop>& hops, Path* out) {
  std::vector<uint32_t> members;
  std::vector<uint8_t> done(hops.size(), 0);
  for (int byHead = 0; byHead < 2; ++byHead) {
    auto end = [&](const Hop& h) { return byHead ? h.to : h.from; };
    std::vector<uint32_t> order;
    for (uint32_t i = 0; i < hops.size(); ++i)
      if (!done[i]) order.push_back(i);
    auto key = [&](uint32_t i) {
      const Hop& h = hops[i];
      return std::make_tuple(end(h), h.fraction, capacity_[h.channel], channelClass_[h.channel]);
    };
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
    for (size_t a = 0; a < order.size();) {
      size_t b = a + 1;
      while (b < order.size() && key(order[b]) == key(order[a])) ++b;
      if (b - a > 1) {
        members.clear();
        for (size_t k = a; k < b; ++k) members.push_back(hops[order[k]].channel), done[order[k]] = 1;
        const uint32_t id = bundleOf(members);
        out->hops.emplace_back(id, float(double(hops[order[a]].fraction) * double(b - a)));
      }
      a = b;
    }
  }
  for (size_t i = 0; i < hops.size(); ++i) {
    if (done[i]) continue;
    const uint32_t ch = hops[i].channel;
    if (owner_[ch] != kFree && owner_[ch] != kSingle) conflict_ = true;
    owner_[ch] = kSingle;
    out->hops.emplace_back(ch, hops[i].fraction);
  }
}

std::string Network::channelName(uint32_t ch) const {
  if (ch >= physical_)
    return fmt::format("{} (+{} parallel)", channelName(firstMember_[ch - physical_]), bundleSize_[ch - physical_] - 1);
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
  std::vector<Hop> hops;
  hops.reserve(r.shares.size());
  for (const topo::LinkShare& s : r.shares)
    if (s.fraction > 0) hops.push_back({uint32_t(s.channel(g_)), float(s.fraction), s.from, s.to});
  if (bundling_) {
    bundle(hops, p.get());
  } else {
    for (const Hop& h : hops) p->hops.emplace_back(h.channel, h.fraction);
  }
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
