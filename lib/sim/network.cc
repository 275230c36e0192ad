#include "lib/sim/network.h"

#include <algorithm>
#include <map>

#include "lib/base/hash.h"
#include "lib/sim/flows.h"
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

Network::~Network() = default;

FairShare& Network::fairShare() {
  if (!fairShare_) fairShare_ = std::make_unique<FairShare>(*this);
  return *fairShare_;
}

void Network::setBundling(bool on) {
  bundling_ = on;
  refined_ = false;
  usage_.assign(physical_, 1);  // 1: not used yet (kAlone is 0)
  forgetRoutes();
}

void Network::refineBundles() {
  bundling_ = true;
  refined_ = true;
  forgetRoutes();
}

void Network::forgetRoutes() {
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
  for (uint32_t m : members) {
    if (owner_[m] != kFree) conflict_ = true;
    owner_[m] = kBundled + index;
  }
  // One member's capacity (all are equal): with the member's fraction on the route, the
  // bundle's fill level is each member's, computed as without bundles to the last bit.
  capacity_.push_back(capacity_[members[0]]);
  channelClass_.push_back(channelClass_[members[0]]);
  firstMember_.push_back(members[0]);
  bundleSize_.push_back(uint32_t(members.size()));
  bundles_.emplace(members, id);
  return id;
}

// Groups parallel hops by tail, then the rest by head; groups of one stay single. A
// route lists its hops in topological order with one tail's hops together (route.cc), so
// tails group in one pass; heads through a small table. Unrefined, every channel of a group
// records the (route, group); refined, a group is split into channels of equal records.
void Network::bundle(uint64_t key, std::vector<Hop>& hops, Path* out) {
  auto same = [&](const Hop& a, const Hop& b) {
    return a.fraction == b.fraction && capacity_[a.channel] == capacity_[b.channel] &&
           channelClass_[a.channel] == channelClass_[b.channel];
  };
  std::vector<uint32_t> members;
  // Per hop: 0 not grouped yet, 1 in a bundle, 2 single (a refined group's lone part).
  std::vector<uint8_t> done(hops.size(), 0);
  auto emitBundle = [&](const uint32_t* idx, size_t count) {
    members.clear();
    for (size_t k = 0; k < count; ++k) members.push_back(hops[idx[k]].channel), done[idx[k]] = 1;
    out->hops.emplace_back(bundleOf(members), hops[idx[0]].fraction);
  };
  uint64_t groups = 0;
  auto emit = [&](std::vector<uint32_t>& idx) {
    if (!refined_) {
      // splitmix64's finalizer over (route, group): fnvMix alone is weak on small words.
      uint64_t v = fnvMix(fnvMix(kFnvBasis, key), groups++);
      v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
      v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
      v ^= v >> 31;
      for (uint32_t k : idx) {
        uint64_t& u = usage_[hops[k].channel];
        if (u != kAlone) u = fnvMix(u, v) | 1;  // never kAlone
      }
      emitBundle(idx.data(), idx.size());
      return;
    }
    std::stable_sort(idx.begin(), idx.end(),
                     [&](uint32_t a, uint32_t b) { return usage_[hops[a].channel] < usage_[hops[b].channel]; });
    for (size_t a = 0; a < idx.size();) {
      const uint64_t u = usage_[hops[idx[a]].channel];
      size_t b = a + 1;
      while (b < idx.size() && u != kAlone && usage_[hops[idx[b]].channel] == u) ++b;
      if (b - a > 1) emitBundle(&idx[a], b - a);
      else done[idx[a]] = 2;
      a = b;
    }
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
    if (done[i] == 1) continue;
    const uint32_t ch = hops[i].channel;
    if (owner_[ch] != kFree && owner_[ch] != kSingle) conflict_ = true;
    owner_[ch] = kSingle;
    if (!refined_) usage_[ch] = kAlone;
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
    bundle(key, hops, p.get());
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

Result runBundled(Network& net, bool bundle, const std::function<Result()>& once, uint32_t* runs) {
  *runs = 1;
  net.setBundling(bundle);
  SNCL_CHECK(once());
  if (!net.bundlingConflict()) return snclSuccess;
  // Some channel was used both in a bundle and on its own, or in two bundles: split the
  // bundles by what this run saw, which is exact for the same routes.
  *runs = 2;
  net.refineBundles();
  SNCL_CHECK(once());
  if (!net.bundlingConflict()) return snclSuccess;
  // Routes the first run did not see overlapped (not expected: the runs are the same).
  *runs = 3;
  net.setBundling(false);
  return once();
}

}  // namespace sncl::sim
