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
  t.kind[int(topo::LinkKind::Net)] = {10.0, 2.0};
  return t;
}

CostModel::CostModel(std::shared_ptr<const topo::Graph> graph, std::vector<topo::VertexId> rankVertex, Tuning tuning,
                     CostClock clock)
    : graph_(std::move(graph)), rankVertex_(std::move(rankVertex)), tuning_(std::move(tuning)), clock_(clock) {
  // All of the comm's ranks share this machine's cores, whichever of them a step involves.
  stepOverheadUs_ = clock_ == CostClock::Wall ? tuning_.stepOverheadAt(nranks()) : 0.0;
  cacheEpoch_ = graph_->epoch();
}

const CostModel::PairRoute& CostModel::route(int src, int dst) const {
  if (graph_->epoch() != cacheEpoch_) {
    routes_.clear();
    cacheEpoch_ = graph_->epoch();
  }
  const uint64_t key = (uint64_t(uint32_t(src)) << 32) | uint32_t(dst);
  auto it = routes_.find(key);
  if (it != routes_.end()) return it->second;
  PairRoute pr;
  topo::Route r;
  if (graph_->route(rankVertex_[src], rankVertex_[dst], &r) == snclSuccess && r.reachable) {
    pr.reachable = true;
    // The transport a route implies: the network when it crosses one, else the bus, else
    // shared memory (PCIe inside a host is a memory copy too).
    bool net = false, bus = false;
    for (const topo::LinkShare& s : r.shares) {
      const topo::LinkKind k = graph_->linkKind(s.link);
      net |= k == topo::LinkKind::Net;
      bus |= k == topo::LinkKind::Bus;
      pr.shares.emplace_back(s.channel(*graph_), s.fraction);
    }
    pr.kind = net ? topo::LinkKind::Net : bus ? topo::LinkKind::Bus : topo::LinkKind::Shm;
    const KindCost& kc = tuning_.kind[int(pr.kind)];
    const bool emulatedBus = clock_ == CostClock::BusModeled && pr.kind == topo::LinkKind::Bus;
    const bool simulated = clock_ == CostClock::Simulated;
    // The default bus α is a real bus's software; the emulator has none unless measured,
    // and a simulated machine has only its topology.
    pr.alphaUs = (simulated || (emulatedBus && !tuning_.measured[int(pr.kind)]) ? 0.0 : kc.alphaUs) + r.latencyUs;
    pr.kindBytesPerUs = emulatedBus || simulated ? kUnlimited : kc.betaGBs * 1e3;
  }
  return routes_.emplace(key, std::move(pr)).first->second;
}

CostModel::PairCost CostModel::pair(int src, int dst) const {
  std::lock_guard lock(mutex_);
  if (src == dst) return {0.0, tuning_.memGBs, topo::LinkKind::Shm};
  const PairRoute& r = route(src, dst);
  if (!r.reachable) return {std::numeric_limits<double>::infinity(), 0.0, r.kind};
  double bw = r.kindBytesPerUs / 1e3;
  for (const auto& [channel, fraction] : r.shares)
    bw = std::min(bw, graph_->linkBandwidthGBps(topo::LinkId(channel / 2)) / fraction);
  return {r.alphaUs, bw, r.kind};
}

// A rank's transport moves at most β(kind) bytes per µs in each direction, whatever the
// number of its flows (shm copies on the rank's core; ofi streams through one endpoint):
// rank channels carry that limit, beside the link directions of the routes.
CostModel::StepCost CostModel::stepCost(std::span<const Flow> flows) const {
  std::lock_guard lock(mutex_);
  const size_t linkChannels = 2 * graph_->linkCount();
  const size_t entries = linkChannels + size_t(nranks()) * 2 * topo::kNumLinkKinds;
  if (load_.size() != entries) load_.assign(entries, 0.0);
  for (uint32_t i : loaded_) load_[i] = 0.0;
  loaded_.clear();
  auto rankChannel = [&](int rank, bool in, topo::LinkKind kind) {
    return linkChannels + (size_t(rank) * 2 + size_t(in)) * topo::kNumLinkKinds + size_t(kind);
  };
  auto add = [&](size_t i, double bytes) {
    if (load_[i] == 0.0) loaded_.push_back(uint32_t(i));
    load_[i] += bytes;
  };
  for (const Flow& f : flows) {
    if (f.src == f.dst || f.bytes <= 0) continue;
    const PairRoute& r = route(f.src, f.dst);
    if (!r.reachable) {
      constexpr double kInf = std::numeric_limits<double>::infinity();
      return {kInf, kInf, kInf};
    }
    for (const auto& [channel, fraction] : r.shares) add(channel, f.bytes * fraction);
    add(rankChannel(f.src, false, r.kind), f.bytes);
    add(rankChannel(f.dst, true, r.kind), f.bytes);
  }
  StepCost c;
  double sum = 0;
  int messages = 0;
  for (const Flow& f : flows) {
    if (f.src == f.dst) {
      c.worstUs = std::max(c.worstUs, f.bytes / memBytesPerUs());
      continue;
    }
    if (f.bytes <= 0) continue;
    ++messages;
    const PairRoute& r = route(f.src, f.dst);
    double transfer = std::max(load_[rankChannel(f.src, false, r.kind)], load_[rankChannel(f.dst, true, r.kind)]) / r.kindBytesPerUs;
    for (const auto& [channel, fraction] : r.shares) {
      const double bytesPerUs = graph_->linkBandwidthGBps(topo::LinkId(channel / 2)) * 1e3;
      transfer = std::max(transfer, load_[channel] / bytesPerUs);
    }
    c.worstUs = std::max(c.worstUs, r.alphaUs + transfer);
    c.transferUs = std::max(c.transferUs, transfer);
    sum += r.alphaUs + transfer;
  }
  if (messages) {
    c.meanUs = sum / messages + stepOverheadUs_;
    c.worstUs += stepOverheadUs_;
    c.transferUs += stepOverheadUs_;
  }
  return c;
}

}  // namespace sncl
