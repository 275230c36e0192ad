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
  physical_ = capacity_.size();
  owner_.assign(physical_, kFree);
}

void Network::setBundling(bool on) {
  bundling_ = on;
  conflict_ = false;
  paths_.clear();
  cachedHops_ = 0;
  ++generation_;
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

// Groups parallel hops by tail, then the rest by head; groups of one stay single. A
// route lists its hops in topological order with one tail's hops together (route.cc), so
// tails group in one pass; heads through a small table.
void Network::bundle(std::vector<Hop>& hops, Path* out) {
  auto same = [&](const Hop& a, const Hop& b) {
    return a.fraction == b.fraction && capacity_[a.channel] == capacity_[b.channel] &&
           channelClass_[a.channel] == channelClass_[b.channel];
  };
  std::vector<uint32_t> members;
  std::vector<uint8_t> done(hops.size(), 0);
  auto emit = [&](const std::vector<uint32_t>& idx) {
    members.clear();
    for (uint32_t k : idx) members.push_back(hops[k].channel), done[k] = 1;
    const float f = float(double(hops[idx[0]].fraction) * double(idx.size()));
    out->hops.emplace_back(bundleOf(members), f);
  };
  std::vector<uint32_t> group;
  for (size_t a = 0; a < hops.size();) {
    size_t b = a + 1;
    while (b < hops.size() && hops[b].from == hops[a].from && same(hops[b], hops[a])) ++b;
    if (b - a > 1) {
      group.clear();
      for (size_t k = a; k < b; ++k) group.push_back(uint32_t(k));
      emit(group);
    }
    a = b;
  }
  std::unordered_map<topo::VertexId, std::vector<uint32_t>> byHead;
  for (uint32_t k = 0; k < hops.size(); ++k)
    if (!done[k]) byHead[hops[k].to].push_back(k);
  for (auto& [head, idx] : byHead) {
    // Within one head, hops of equal fraction, capacity and class form a bundle.
    while (idx.size() > 1) {
      group.clear();
      std::vector<uint32_t> rest;
      for (uint32_t k : idx) (same(hops[k], hops[idx[0]]) ? group : rest).push_back(k);
      if (group.size() > 1) emit(group);
      idx.swap(rest);
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
  ++generation_;
}

}  // namespace sncl::sim
