#include "lib/topo/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace sncl::topo {
namespace {

// Dinic's maximum flow, iterative so that long chains (a big 1-D torus) need no deep stack.
class MaxFlow {
 public:
  explicit MaxFlow(size_t n) : first_(n, kNil) {}
  void arc(uint32_t u, uint32_t v, double cap) {
    push(u, v, cap);
    push(v, u, 0);
  }
  double run(uint32_t s, uint32_t t) {
    double total = 0;
    while (levels(s, t)) {
      it_ = first_;
      for (double f; (f = augment(s, t)) > 0;) total += f;
    }
    return total;
  }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  static constexpr double kEps = 1e-9;
  struct Arc {
    uint32_t to, next;
    double cap;
  };
  void push(uint32_t u, uint32_t v, double cap) {
    arcs_.push_back({v, first_[u], cap});
    first_[u] = uint32_t(arcs_.size() - 1);
  }
  bool levels(uint32_t s, uint32_t t) {
    level_.assign(first_.size(), -1);
    std::vector<uint32_t> queue{s};
    level_[s] = 0;
    for (size_t i = 0; i < queue.size(); ++i)
      for (uint32_t a = first_[queue[i]]; a != kNil; a = arcs_[a].next)
        if (arcs_[a].cap > kEps && level_[arcs_[a].to] < 0) {
          level_[arcs_[a].to] = level_[queue[i]] + 1;
          queue.push_back(arcs_[a].to);
        }
    return level_[t] >= 0;
  }
  // One augmenting path along the level graph, found depth-first with an explicit stack.
  double augment(uint32_t s, uint32_t t) {
    std::vector<uint32_t> path;  // arcs from s
    uint32_t u = s;
    while (true) {
      if (u == t) {
        double f = std::numeric_limits<double>::infinity();
        for (uint32_t a : path) f = std::min(f, arcs_[a].cap);
        for (uint32_t a : path) {
          arcs_[a].cap -= f;
          arcs_[a ^ 1].cap += f;
        }
        return f;
      }
      uint32_t& a = it_[u];
      while (a != kNil && !(arcs_[a].cap > kEps && level_[arcs_[a].to] == level_[u] + 1)) a = arcs_[a].next;
      if (a != kNil) {
        path.push_back(a);
        u = arcs_[a].to;
        continue;
      }
      level_[u] = -1;  // dead end for the rest of this phase
      if (path.empty()) return 0;
      path.pop_back();
      u = path.empty() ? s : arcs_[path.back()].to;
    }
  }
  std::vector<uint32_t> first_, it_;
  std::vector<Arc> arcs_;
  std::vector<int> level_;
};

}  // namespace

double bisectionBandwidth(const Graph& g) {
  size_t ne = g.endpointCount();
  if (ne < 2) return 0;
  size_t nv = g.vertexCount();
  uint32_t s = uint32_t(nv), t = uint32_t(nv + 1);
  // side: 0 not an endpoint, 1 first half, 2 second half.
  std::vector<uint8_t> side(nv, 0);
  for (size_t e = 0; e < ne; ++e) side[g.endpointVertex(EndpointId(e))] = e < ne / 2 ? 1 : 2;
  auto canSend = [&](VertexId v) { return g.forwards(v) || side[v] == 1; };
  auto canReceive = [&](VertexId v) { return g.forwards(v) || side[v] == 2; };
  MaxFlow f(nv + 2);
  constexpr double kUnbounded = 1e30;
  for (size_t e = 0; e < ne; ++e) {
    VertexId v = g.endpointVertex(EndpointId(e));
    if (side[v] == 1) f.arc(s, v, kUnbounded);
    else f.arc(v, t, kUnbounded);
  }
  for (LinkId l = 0; l < g.linkCount(); ++l) {
    double bw = g.linkBandwidthGBps(l);
    if (bw <= 0) continue;
    VertexId a = g.linkA(l), b = g.linkB(l);
    if (canSend(a) && canReceive(b)) f.arc(a, b, bw);
    if (canSend(b) && canReceive(a)) f.arc(b, a, bw);
  }
  return f.run(s, t);
}

Summary summarize(const Graph& g, bool withBisection) {
  Summary s;
  for (VertexId v = 0; v < g.vertexCount(); ++v) ++s.vertices[int(g.vertexKind(v))];
  for (LinkId l = 0; l < g.linkCount(); ++l) {
    ++s.links[int(g.linkKind(l))];
    s.linksDown += g.linkState(l) == LinkState::Down;
    s.linksDegraded += g.linkState(l) == LinkState::Degraded;
  }
  for (int l = 0; l < kNumLevels; ++l) {
    Summary::LevelCount c{Level(l), g.levelDefined(Level(l)), g.groupCount(Level(l)), INT32_MAX, 0};
    for (int k = 0; k < c.groups; ++k) {
      int m = int(g.groupMembers(Level(l), k).size());
      c.minMembers = std::min(c.minMembers, m);
      c.maxMembers = std::max(c.maxMembers, m);
    }
    if (c.groups == 0) c.minMembers = 0;
    s.levels.push_back(c);
  }
  s.injectionMin.fill(std::numeric_limits<double>::infinity());
  s.injectionTotalMin = std::numeric_limits<double>::infinity();
  for (size_t e = 0; e < g.endpointCount(); ++e) {
    std::array<double, kNumLinkKinds> inj{};
    for (LinkId l : g.linksOf(g.endpointVertex(EndpointId(e)))) inj[int(g.linkKind(l))] += g.linkBandwidthGBps(l);
    double total = 0;
    for (int k = 0; k < kNumLinkKinds; ++k) {
      s.injectionMin[k] = std::min(s.injectionMin[k], inj[k]);
      s.injectionMax[k] = std::max(s.injectionMax[k], inj[k]);
      total += inj[k];
    }
    s.injectionTotalMin = std::min(s.injectionTotalMin, total);
    s.injectionTotalMax = std::max(s.injectionTotalMax, total);
    if (e < g.endpointCount() / 2) s.halfInjectionGBps += total;
  }
  if (g.endpointCount() == 0) {
    s.injectionMin.fill(0);
    s.injectionTotalMin = 0;
  }
  if (withBisection) s.bisectionGBps = bisectionBandwidth(g);
  return s;
}

namespace {
// Whole numbers stay whole (no 8.38861e+06 for a bisection of 8,388,608 GB/s).
std::string num(double x) { return x >= 1e5 ? fmt::format("{:.0f}", x) : fmt::format("{:.6g}", x); }
std::string range(double lo, double hi) { return lo == hi ? num(lo) : num(lo) + ".." + num(hi); }
}  // namespace

std::string formatSummary(const Graph& g, const Summary& s) {
  std::string o = fmt::format("topology   {}\n", g.name());
  o += fmt::format("vertices   {}:", g.vertexCount());
  for (int k = 0; k < kNumVertexKinds; ++k)
    if (s.vertices[k]) o += fmt::format(" {} {}", kindName(VertexKind(k)), s.vertices[k]);
  o += fmt::format("\nendpoints  {}\nlinks      {}:", g.endpointCount(), g.linkCount());
  for (int k = 0; k < kNumLinkKinds; ++k)
    if (s.links[k]) o += fmt::format(" {} {}", kindName(LinkKind(k)), s.links[k]);
  o += fmt::format("; {} down, {} degraded; epoch {}\n", s.linksDown, s.linksDegraded, g.epoch());
  o += "levels     (groups x endpoints per group)\n";
  for (const auto& c : s.levels) {
    if (c.level == Level::Endpoint) continue;
    o += fmt::format("  {:<10} {:>6} x {:<9}{}\n", levelName(c.level), c.groups,
                     range(c.minMembers, c.maxMembers), c.defined ? "" : "  (not defined: as the level below)");
  }
  o += fmt::format("ranks      {} mapped ({}); levels:", g.rankCount(),
                   g.rankOrder().empty() ? "in endpoint order" : "by rank_map");
  std::vector<Level> levels = g.rankLevels();
  for (Level l : levels) {
    int lo = INT32_MAX, hi = 0;
    for (int k = 0; k < g.rankGroupCount(l); ++k) {
      int m = int(g.rankGroupMembers(l, k).size());
      lo = std::min(lo, m);
      hi = std::max(hi, m);
    }
    o += fmt::format(" {} {} x {}", levelName(l), g.rankGroupCount(l), range(lo, hi));
  }
  o += levels.empty() ? " none\n" : "\n";
  o += fmt::format("injection  {} GB/s per endpoint", range(s.injectionTotalMin, s.injectionTotalMax));
  std::string parts;
  for (int k = 0; k < kNumLinkKinds; ++k)
    if (s.injectionMax[k] > 0)
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", kindName(LinkKind(k)),
                           range(s.injectionMin[k], s.injectionMax[k]));
  if (!parts.empty()) o += " (" + parts + ")";
  o += "\n";
  if (s.bisectionGBps >= 0) {
    size_t half = g.endpointCount() / 2;
    o += fmt::format("bisection  {} GB/s one way, endpoints [0,{}) -> [{},{})", num(s.bisectionGBps), half,
                     half, g.endpointCount());
    if (s.halfInjectionGBps > 0)
      o += fmt::format(" = {:.3g}% of the first half's injection", 100.0 * s.bisectionGBps / s.halfInjectionGBps);
    o += "\n";
  }
  return o;
}

}  // namespace sncl::topo
