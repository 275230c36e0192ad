#include "lib/plan/cost_model.h"

#include <algorithm>
#include <limits>

#include "lib/topo/route.h"

namespace sncl {

const char* clockName(CostClock clock) {
  switch (clock) {
    case CostClock::Wall: return "wall";
    case CostClock::BusModeled: return "bus modeled";
    case CostClock::Simulated: return "simulated";
  }
  return "?";
}

Tuning defaultTuning() {
  Tuning t;
  t.kind[int(topo::LinkKind::Bus)] = {1.0, 20.0};
  t.kind[int(topo::LinkKind::Shm)] = {1.0, 8.0};
  t.kind[int(topo::LinkKind::Pcie)] = {1.0, 8.0};
  // Each further message of a step over tcp;ofi_rxm adds 11-15 us (sncl-tune's fan on 2
  // cores, 2026-12-07; by perf a send's sendmsg with the loopback's delivery is 6-8 us, a
  // receive's epoll and recv 3-4 us): what keeps 8 ranks of 2 hosts from sending every
  // byte to every peer of the other host.
  t.kind[int(topo::LinkKind::Net)] = {10.0, 2.0, 12.0};
  // Two ranks never stage: with a CPU each, their schedule (single copies, sends published
  // before receives are read) beat staging at every size (sncl-tune on 2 cores,
  // 2026-12-07: 16 KiB 8.9 against 10.0 us, 1 MiB 202 against 221). Three and more share
  // cores on the machines measured, where staging won at every size.
  t.stagedMaxBytes = {{2, 0}, {3, kStagedAnySize}};
  return t;
}

namespace {

constexpr uint32_t kUnused = UINT32_MAX, kSingle = UINT32_MAX - 1;

uint64_t hashChannels(const std::vector<uint32_t>& channels) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint32_t c : channels) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

CostModel::CostModel(std::shared_ptr<const topo::Graph> graph, std::vector<topo::VertexId> rankVertex, Tuning tuning,
                     CostClock clock, CostPath path, double cpuShare)
    : graph_(std::move(graph)), rankVertex_(std::move(rankVertex)), tuning_(std::move(tuning)), clock_(clock), path_(path),
      cpuShare_(clock == CostClock::Wall ? std::max(1.0, cpuShare) : 0.0) {
  rankCpu_.assign(rankVertex_.size(), RankCpu{});
  // All of the comm's ranks share this machine's cores, whichever of them a step involves.
  stepOverheadUs_ = clock_ == CostClock::Wall ? tuning_.stepOverheadAt(nranks()) : 0.0;
  cacheEpoch_ = graph_->epoch();
  bundling_ = path_ == CostPath::Bundled;
  clearCache();
}

void CostModel::clearCache() const {
  routes_.clear();
  classRoutes_.clear();
  classCount_ = 0;
  patternIds_.clear();
  patterns_.clear();
  endEntries_.clear();
  // Classes by attachment, numbered in rank order; ranks on forwarding vertices (or none)
  // have none. Recomputed per epoch: a lost link changes its ends' attachment.
  rankClass_.assign(rankVertex_.size(), -1);
  if (path_ == CostPath::Bundled) {
    std::unordered_map<std::string, int32_t> ids;
    for (size_t r = 0; r < rankVertex_.size(); ++r) {
      const topo::VertexId v = rankVertex_[r];
      // Directly linked endpoints have classes too: if a of class A links to b of class B,
      // every member of A links to every member of B (each one's attachment names the
      // other's peers), so a pair of classes is direct for all its pairs or none.
      if (v >= graph_->vertexCount() || graph_->forwards(v)) continue;
      std::string key = topo::attachmentKey(*graph_, v);
      if (!key.empty()) rankClass_[r] = ids.emplace(std::move(key), int32_t(ids.size())).first->second;
    }
    classCount_ = int32_t(ids.size());
  }
  classRouteAt_.clear();
  constexpr size_t kMaxTable = size_t(1) << 20;  // 8 MiB of pointers
  if (size_t(classCount_) * size_t(classCount_) <= kMaxTable)
    classRouteAt_.assign(size_t(classCount_) * size_t(classCount_), nullptr);
  rankEnds_.assign(rankVertex_.size(), {});
  bundlesByHash_.clear();
  bundleChannels_.clear();
  ++generation_;
  linkChannels_ = 2 * graph_->linkCount();
  firstBundle_ = linkChannels_ + size_t(nranks()) * 2 * topo::kNumLinkKinds;
  channelUse_.assign(bundling_ ? linkChannels_ : 0, kUnused);
  capacity_.assign(firstBundle_, 0.0);
  for (size_t c = 0; c < linkChannels_; ++c) capacity_[c] = graph_->linkBandwidthGBps(topo::LinkId(c / 2)) * 1e3;
  load_.assign(firstBundle_, 0.0);
  loaded_.clear();
}

void CostModel::checkEpoch() const {
  if (graph_->epoch() == cacheEpoch_) return;
  cacheEpoch_ = graph_->epoch();
  bundling_ = path_ == CostPath::Bundled;  // a new epoch may be even again
  clearCache();
}

bool CostModel::entriesOf(std::span<const topo::LinkShare> s, Entries* out) const {
  out->clear();
  auto channel = [&](size_t i) { return uint32_t(s[i].channel(*graph_)); };
  if (!bundling_) {
    for (size_t i = 0; i < s.size(); ++i) out->emplace_back(channel(i), s[i].fraction);
    return true;
  }
  std::vector<uint32_t> group;
  for (size_t i = 0; i < s.size();) {
    // A run of equal fractions out of one vertex, else into one.
    size_t j = i + 1;
    while (j < s.size() && s[j].from == s[i].from && s[j].fraction == s[i].fraction) ++j;
    if (j == i + 1)
      while (j < s.size() && s[j].to == s[i].to && s[j].fraction == s[i].fraction) ++j;
    group.clear();
    bool sameBandwidth = true;
    for (size_t k = i; k < j; ++k) {
      group.push_back(channel(k));
      sameBandwidth &= capacity_[group.back()] == capacity_[group.front()];
    }
    if (group.size() == 1 || !sameBandwidth) {
      for (size_t k = i; k < j; ++k) {
        const uint32_t c = channel(k);
        if (channelUse_[c] != kUnused && channelUse_[c] != kSingle) return false;
        channelUse_[c] = kSingle;
        out->emplace_back(c, s[k].fraction);
      }
      i = j;
      continue;
    }
    std::sort(group.begin(), group.end());
    std::vector<uint32_t>& known = bundlesByHash_[hashChannels(group)];
    uint32_t entry = kUnused;
    for (uint32_t e : known)
      if (bundleChannels_[e - firstBundle_] == group) entry = e;
    if (entry == kUnused) {
      entry = uint32_t(capacity_.size());
      for (uint32_t c : group) {
        if (channelUse_[c] != kUnused) return false;  // in another bundle, or used alone
        channelUse_[c] = entry;
      }
      known.push_back(entry);
      bundleChannels_.push_back(group);
      capacity_.push_back(capacity_[group.front()] * double(group.size()));
      load_.push_back(0.0);
    }
    out->emplace_back(entry, s[i].fraction * double(j - i));
    i = j;
  }
  return true;
}

template <class R>
void CostModel::priceRoute(double latencyUs, bool net, bool bus, R* pr) const {
  // The transport a route implies: the network when it crosses one, else the bus, else
  // shared memory (PCIe inside a host is a memory copy too).
  pr->kind = net ? topo::LinkKind::Net : bus ? topo::LinkKind::Bus : topo::LinkKind::Shm;
  const KindCost& kc = tuning_.kind[int(pr->kind)];
  const bool emulatedBus = clock_ == CostClock::BusModeled && pr->kind == topo::LinkKind::Bus;
  const bool simulated = clock_ == CostClock::Simulated;
  // The default bus α is a real bus's software; the emulator has none unless measured,
  // and a simulated machine has only its topology.
  pr->alphaUs = (simulated || (emulatedBus && !tuning_.measured[int(pr->kind)]) ? 0.0 : kc.alphaUs) + latencyUs;
  pr->kindBytesPerUs = emulatedBus || simulated ? kUnlimited : kc.betaGBs * 1e3;
}

// The middle of the route of src's and dst's class, from this pair's whole route.
const CostModel::ClassRoute& CostModel::classRoute(int src, int dst, uint64_t key) const {
  const size_t at = size_t(key >> 32) * size_t(classCount_) + size_t(uint32_t(key));
  if (!classRouteAt_.empty() && classRouteAt_[at]) return *classRouteAt_[at];
  auto it = classRoutes_.find(key);
  if (it != classRoutes_.end()) return it->second;
  ClassRoute c;
  topo::Route r;
  const topo::VertexId s = rankVertex_[src], d = rankVertex_[dst];
  if (graph_->route(s, d, &r) == snclSuccess && r.reachable) {
    c.reachable = true;
    c.latencyUs = r.latencyUs;
    std::vector<topo::LinkShare> middle;
    for (const topo::LinkShare& x : r.shares) {
      if (x.from == s || x.to == d) {
        c.ends.push_back({x.from == s && x.to == d ? topo::kNone : x.from == s ? x.to : x.from, x.fraction, x.from == s});
        continue;
      }
      const topo::LinkKind k = graph_->linkKind(x.link);
      c.net |= k == topo::LinkKind::Net;
      c.bus |= k == topo::LinkKind::Bus;
      middle.push_back(x);
    }
    if (!entriesOf(middle, &c.entries)) {
      bundling_ = false;
      clearCache();
      entriesOf(middle, &c.entries);
    }
    c.direct = std::any_of(c.ends.begin(), c.ends.end(), [](const EndShare& e) { return e.peer == topo::kNone; });
    if (!c.direct) {
      c.srcPattern = patternOf(c.ends, true);
      c.dstPattern = patternOf(c.ends, false);
    }
  }
  const ClassRoute& kept = classRoutes_.emplace(key, std::move(c)).first->second;
  if (!classRouteAt_.empty() && at < classRouteAt_.size()) classRouteAt_[at] = &kept;
  return kept;
}

uint32_t CostModel::patternOf(const std::vector<EndShare>& ends, bool fromSrc) const {
  std::vector<EndShare> side;
  for (const EndShare& e : ends)
    if (e.fromSrc == fromSrc) side.push_back(e);
  auto [it, added] = patternIds_.emplace(side, uint32_t(patterns_.size()));
  if (added) patterns_.push_back(std::move(side));
  return it->second;
}

bool CostModel::endShares(int rank, std::span<const EndShare> ends, std::vector<topo::LinkShare>* out) const {
  const topo::VertexId v = rankVertex_[rank];
  auto links = graph_->linksOf(v);
  auto peers = graph_->neighborsOf(v);
  out->clear();
  for (const EndShare& e : ends) {
    topo::LinkId link = topo::kNone;
    for (size_t i = 0; i < links.size() && link == topo::kNone; ++i)
      if (peers[i] == e.peer) link = links[i];
    if (link == topo::kNone) return false;  // not attached as its class says: cannot be
    out->push_back(e.fromSrc ? topo::LinkShare{link, v, e.peer, e.fraction} : topo::LinkShare{link, e.peer, v, e.fraction});
  }
  return true;
}

const CostModel::EndEntries& CostModel::endEntries(int rank, uint32_t pattern) const {
  for (const auto& [p, e] : rankEnds_[rank])
    if (p == pattern) return *e;
  const uint64_t key = (uint64_t(uint32_t(rank)) << 32) | pattern;
  EndEntries e;
  std::vector<topo::LinkShare> shares;
  if (endShares(rank, patterns_[pattern], &shares)) {
    e.ok = true;
    for (const topo::LinkShare& x : shares) {
      const topo::LinkKind k = graph_->linkKind(x.link);
      e.net |= k == topo::LinkKind::Net;
      e.bus |= k == topo::LinkKind::Bus;
    }
    if (!entriesOf(shares, &e.entries)) {
      bundling_ = false;
      clearCache();  // the caller sees the generation change and starts over: keep nothing
      return noEnd_;
    }
  }
  const EndEntries& kept = endEntries_.emplace(key, std::move(e)).first->second;
  rankEnds_[rank].emplace_back(pattern, &kept);
  return kept;
}

CostModel::RouteView CostModel::route(int src, int dst) const {
  checkEpoch();
  const int32_t cs = rankClass_[src], cd = rankClass_[dst];
  if (cs >= 0 && cd >= 0 && rankVertex_[src] != rankVertex_[dst]) {
    const uint64_t generation = generation_;
    const ClassRoute* c = &classRoute(src, dst, (uint64_t(uint32_t(cs)) << 32) | uint32_t(cd));
    if (generation != generation_) return route(src, dst);
    RouteView v;
    if (!c->reachable) return v;
    // A link between the two ends (the classes' links, so every pair of theirs has it):
    // each pair is routed whole, below.
    if (!c->direct) {
      // Bundling stopping here renumbers the entries (and frees c): start over.
      const EndEntries& se = endEntries(src, c->srcPattern);
      if (generation != generation_) return route(src, dst);
      const EndEntries& de = endEntries(dst, c->dstPattern);
      if (generation != generation_) return route(src, dst);
      if (se.ok && de.ok) {
        v.reachable = true;
        v.middle = c;
        v.srcEnd = &se;
        v.dstEnd = &de;
        priceRoute(c->latencyUs, c->net || se.net || de.net, c->bus || se.bus || de.bus, &v);
        return v;
      }
      // not attached as its class says (cannot be): routed whole below
    }
  }
  const PairRoute& pr = wholeRoute(src, dst);
  return {pr.alphaUs, pr.kindBytesPerUs, pr.kind, pr.reachable, nullptr, nullptr, nullptr, &pr.shares};
}

const CostModel::PairRoute& CostModel::wholeRoute(int src, int dst) const {
  const uint64_t key = (uint64_t(uint32_t(src)) << 32) | uint32_t(dst);
  auto it = routes_.find(key);
  if (it != routes_.end()) return it->second;
  PairRoute pr;
  topo::Route r;
  if (graph_->route(rankVertex_[src], rankVertex_[dst], &r) == snclSuccess && r.reachable) {
    pr.reachable = true;
    bool net = false, bus = false;
    for (const topo::LinkShare& s : r.shares) {
      const topo::LinkKind k = graph_->linkKind(s.link);
      net |= k == topo::LinkKind::Net;
      bus |= k == topo::LinkKind::Bus;
    }
    if (!entriesOf(r.shares, &pr.shares)) {  // a bundle this route uses in part: single links from now on
      bundling_ = false;
      clearCache();
      entriesOf(r.shares, &pr.shares);
    }
    priceRoute(r.latencyUs, net, bus, &pr);
  }
  return routes_.emplace(key, std::move(pr)).first->second;
}

CostModel::Stats CostModel::stats() const {
  std::lock_guard lock(mutex_);
  Stats st;
  st.pairRoutes = routes_.size();
  for (int32_t c : rankClass_) st.classes = std::max(st.classes, size_t(c + 1));
  st.classRoutes = classRoutes_.size();
  st.bundles = bundleChannels_.size();
  st.bundling = bundling_;
  return st;
}

CostModel::PairCost CostModel::pair(int src, int dst) const {
  std::lock_guard lock(mutex_);
  if (src == dst) return {0.0, tuning_.memGBs, topo::LinkKind::Shm};
  const RouteView r = route(src, dst);
  if (!r.reachable) return {std::numeric_limits<double>::infinity(), 0.0, r.kind};
  double bw = r.kindBytesPerUs / 1e3;
  forEachShare(r, [&](uint32_t entry, double fraction) { bw = std::min(bw, capacity_[entry] / 1e3 / fraction); });
  return {r.alphaUs, bw, r.kind};
}

// A rank's transport moves at most β(kind) bytes per µs in each direction, whatever the
// number of its flows (shm copies on the rank's core; ofi streams through one endpoint):
// rank channels carry that limit, beside the link directions of the routes.
CostModel::StepCost CostModel::stepCost(std::span<const Flow> flows) const {
  std::lock_guard lock(mutex_);
  checkEpoch();  // a new epoch resets the entries before any is read
  auto add = [&](size_t i, double bytes) {
    if (load_[i] == 0.0) loaded_.push_back(uint32_t(i));
    load_[i] += bytes;
  };
  // Twice at most: a route that ends bundling mid-step renumbers the entries.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i : loaded_) load_[i] = 0.0;
    loaded_.clear();
    for (uint32_t r : cpuRanks_) rankCpu_[r] = RankCpu{};
    cpuRanks_.clear();
    stepMiddles_.clear();
    ++stepMark_;
    stepRoutes_.assign(flows.size(), RouteView{});
    const uint64_t generation = generation_;
    for (size_t k = 0; k < flows.size(); ++k) {
      const Flow& f = flows[k];
      if (f.src == f.dst || f.bytes <= 0) continue;
      const RouteView r = route(f.src, f.dst);
      stepRoutes_[k] = r;
      if (!r.reachable) {
        constexpr double kInf = std::numeric_limits<double>::infinity();
        return {kInf, kInf, kInf};
      }
      // The flows over one middle load its entries alike: once per middle, below.
      if (r.middle) {
        if (r.middle->stepMark != stepMark_) {
          r.middle->stepMark = stepMark_;
          r.middle->stepBytes = 0;
          stepMiddles_.push_back(r.middle);
        }
        r.middle->stepBytes += f.bytes;
      }
      forEachOwnShare(r, [&](uint32_t entry, double fraction) { add(entry, f.bytes * fraction); });
      add(rankChannel(f.src, false, r.kind), f.bytes);
      add(rankChannel(f.dst, true, r.kind), f.bytes);
      if (const double cpu = tuning_.kind[int(r.kind)].cpuUs; cpu > 0 && cpuShare_ > 0)
        for (int end : {f.src, f.dst}) {
          RankCpu& rc = rankCpu_[size_t(end)];
          if (rc.sum == 0.0) cpuRanks_.push_back(uint32_t(end));
          rc.sum += cpu * cpuShare_;
          rc.most = std::max(rc.most, cpu);
          rc.alpha = std::max(rc.alpha, r.alphaUs);
        }
    }
    if (generation != generation_) continue;
    for (const ClassRoute* m : stepMiddles_)
      for (const auto& [e, fraction] : m->entries) add(e, m->stepBytes * fraction);
    break;
  }
  for (const ClassRoute* m : stepMiddles_) {
    m->stepUs = 0;
    for (const auto& [e, fraction] : m->entries) m->stepUs = std::max(m->stepUs, load_[e] / capacity_[e]);
  }
  StepCost c;
  double sum = 0;
  int messages = 0;
  for (size_t k = 0; k < flows.size(); ++k) {
    const Flow& f = flows[k];
    if (f.src == f.dst) {
      c.worstUs = std::max(c.worstUs, f.bytes / memBytesPerUs());
      continue;
    }
    if (f.bytes <= 0) continue;
    ++messages;
    const RouteView& r = stepRoutes_[k];
    double transfer = std::max(load_[rankChannel(f.src, false, r.kind)], load_[rankChannel(f.dst, true, r.kind)]) / r.kindBytesPerUs;
    if (r.middle) transfer = std::max(transfer, r.middle->stepUs);
    forEachOwnShare(r, [&](uint32_t entry, double) { transfer = std::max(transfer, load_[entry] / capacity_[entry]); });
    c.worstUs = std::max(c.worstUs, r.alphaUs + transfer);
    c.transferUs = std::max(c.transferUs, transfer);
    sum += r.alphaUs + transfer;
  }
  double cpuUs = 0;
  // LogP: a rank's first message takes α, which holds its CPU once; each further one, and
  // the first's again for each other rank its CPU serves, take its CPU. A lone message on
  // a CPU of its own is the α-β terms' alone.
  for (uint32_t r : cpuRanks_)
    if (const RankCpu& rc = rankCpu_[r]; rc.sum > rc.most) cpuUs = std::max(cpuUs, rc.alpha + rc.sum - rc.most);
  c.worstUs = std::max(c.worstUs, cpuUs);
  c.transferUs = std::max(c.transferUs, cpuUs);
  if (messages) {
    c.meanUs = sum / messages + stepOverheadUs_;
    c.worstUs += stepOverheadUs_;
    c.transferUs += stepOverheadUs_;
  }
  return c;
}

}  // namespace sncl
