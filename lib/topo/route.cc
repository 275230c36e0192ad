#include "lib/topo/route.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <list>
#include <mutex>
#include <queue>
#include <set>
#include <unordered_map>

namespace sncl::topo {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kCacheBytes = 64u << 20;

// Latencies are floats summed in different orders along different paths: equal within
// a relative 1e-9 is equal. The minimum link latency (1 ns) is far above that.
bool sameCost(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, b); }

using Distances = std::vector<double>;

// The shortest-path tree of a source, as seen from where its traffic enters the graph.
// A source that forwards is its own start; one that does not (an endpoint of a Clos) starts
// at its neighbors, so endpoints with the same neighbors and latencies share the tree.
struct Start {
  std::string key;
  std::vector<std::pair<VertexId, double>> seeds;
};

Start startOf(const Graph& g, VertexId src) {
  Start s;
  if (g.forwards(src)) {
    s.key.assign("F");
    s.key.append(reinterpret_cast<const char*>(&src), sizeof(src));
    s.seeds.emplace_back(src, 0.0);
    return s;
  }
  auto links = g.linksOf(src);
  auto peers = g.neighborsOf(src);
  for (size_t i = 0; i < links.size(); ++i)
    if (g.linkUsable(links[i])) s.seeds.emplace_back(peers[i], g.linkLatencyUs(links[i]));
  std::sort(s.seeds.begin(), s.seeds.end());
  s.key.assign("N");
  for (auto& [v, lat] : s.seeds) {
    s.key.append(reinterpret_cast<const char*>(&v), sizeof(v));
    s.key.append(reinterpret_cast<const char*>(&lat), sizeof(lat));
  }
  return s;
}

Distances dijkstra(const Graph& g, const Start& start) {
  Distances dist(g.vertexCount(), kInf);
  using Item = std::pair<double, VertexId>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> pq;
  for (auto& [v, d] : start.seeds)
    if (d < dist[v]) dist[v] = d, pq.emplace(d, v);
  while (!pq.empty()) {
    auto [d, v] = pq.top();
    pq.pop();
    if (d > dist[v] || !g.forwards(v)) continue;  // stale, or a vertex that only receives
    auto links = g.linksOf(v);
    auto peers = g.neighborsOf(v);
    for (size_t i = 0; i < links.size(); ++i) {
      if (!g.linkUsable(links[i])) continue;
      double nd = d + g.linkLatencyUs(links[i]);
      if (nd < dist[peers[i]]) dist[peers[i]] = nd, pq.emplace(nd, peers[i]);
    }
  }
  return dist;
}

}  // namespace

// Bounded LRU of shortest-path trees keyed by Start::key, valid for one epoch.
struct RouteCache {
  struct Entry {
    std::string key;
    std::shared_ptr<const Distances> dist;
  };
  std::mutex mu;
  uint64_t epoch = 0;
  size_t capacity = 2;
  std::list<Entry> lru;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index;

  std::shared_ptr<const Distances> get(const Graph& g, const Start& start) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (epoch != g.epoch()) {
        lru.clear();
        index.clear();
        epoch = g.epoch();
      }
      auto it = index.find(start.key);
      if (it != index.end()) {
        lru.splice(lru.begin(), lru, it->second);
        return it->second->dist;
      }
    }
    auto dist = std::make_shared<const Distances>(dijkstra(g, start));
    std::lock_guard<std::mutex> lock(mu);
    if (index.count(start.key) || epoch != g.epoch()) return dist;
    lru.push_front({start.key, dist});
    index[start.key] = lru.begin();
    if (lru.size() > capacity) {
      index.erase(lru.back().key);
      lru.pop_back();
    }
    return dist;
  }
};

void RouteCacheDeleter::operator()(RouteCache* c) const { delete c; }

RouteCache* newRouteCache(const Graph& g) {
  auto* c = new RouteCache;
  c->capacity = std::max<size_t>(2, kCacheBytes / (sizeof(double) * std::max<size_t>(1, g.vertexCount())));
  c->epoch = g.epoch();
  return c;
}

Result Graph::routeRanks(int src, int dst, Route* out) const {
  if (src < 0 || src >= rankCount() || dst < 0 || dst >= rankCount())
    return fail(snclInvalidArgument, "topology: route between ranks {} and {} of {}", src, dst,
                rankCount());
  return route(rankVertex(src), rankVertex(dst), out);
}

Result Graph::route(VertexId src, VertexId dst, Route* out) const {
  if (!finalized_) return fail(snclInvalidUsage, "topology: route before finalize");
  if (src >= vertexCount() || dst >= vertexCount())
    return fail(snclInvalidArgument, "topology: route between unknown vertices {} and {}", src, dst);
  Route& r = *out;
  r = Route{};
  r.src = src;
  r.dst = dst;
  r.epoch = epoch_;
  if (src == dst) {  // stays in the vertex: no link limits it
    r.reachable = true;
    r.bandwidthGBps = kInf;
    r.pathCount = 1;
    return snclSuccess;
  }
  Start start = startOf(*this, src);
  std::shared_ptr<const Distances> distPtr = routeCache_->get(*this, start);
  const Distances& dist = *distPtr;
  if (dist[dst] == kInf) return snclSuccess;  // unreachable: reachable stays false

  // Walk back from dst over the links that lie on some shortest path; that is the
  // equal-cost DAG. A non-forwarding src is only entered through its own links.
  struct Arc {
    VertexId u, v;
    LinkId l;
  };
  std::vector<Arc> arcs;
  std::unordered_map<VertexId, uint32_t> local;  // DAG vertex -> index in `verts`
  std::vector<VertexId> verts{dst};
  local.emplace(dst, 0);
  for (size_t next = 0; next < verts.size(); ++next) {
    VertexId v = verts[next];
    auto links = linksOf(v);
    auto peers = neighborsOf(v);
    for (size_t i = 0; i < links.size(); ++i) {
      LinkId l = links[i];
      VertexId u = peers[i];
      if (!linkUsable(l)) continue;
      double w = linkLatencyUs(l);
      if (u == src) {
        if (sameCost(w, dist[v])) arcs.push_back({u, v, l});
        continue;
      }
      if (!forwards(u) || dist[u] == kInf || !sameCost(dist[u] + w, dist[v])) continue;
      arcs.push_back({u, v, l});
      if (local.emplace(u, uint32_t(verts.size())).second) verts.push_back(u);
    }
  }
  local.emplace(src, uint32_t(verts.size()));
  verts.push_back(src);

  // Topological order = increasing distance (every link adds latency).
  auto distOf = [&](VertexId v) { return v == src ? 0.0 : dist[v]; };
  std::vector<uint32_t> order(verts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = uint32_t(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    double da = distOf(verts[a]), db = distOf(verts[b]);
    return da != db ? da < db : verts[a] < verts[b];
  });
  std::vector<uint32_t> pos(verts.size());
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = uint32_t(i);
  std::sort(arcs.begin(), arcs.end(), [&](const Arc& a, const Arc& b) {
    uint32_t pa = pos[local[a.u]], pb = pos[local[b.u]];
    if (pa != pb) return pa < pb;
    uint32_t qa = pos[local[a.v]], qb = pos[local[b.v]];
    return qa != qb ? qa < qb : a.l < b.l;
  });

  // Capacity downstream of each vertex (reverse order), then the split (forward order).
  size_t n = verts.size();
  std::vector<double> cap(n, 0.0), frac(n, 0.0), count(n, 0.0);
  std::vector<int> hops(n, INT32_MAX);
  cap[local[dst]] = kInf;
  for (size_t i = arcs.size(); i-- > 0;) {
    const Arc& a = arcs[i];
    cap[local[a.u]] += std::min(linkBandwidthGBps(a.l), cap[local[a.v]]);
  }
  frac[local[src]] = 1.0;
  count[local[src]] = 1.0;
  hops[local[src]] = 0;
  r.shares.reserve(arcs.size());
  r.bandwidthGBps = kInf;
  for (const Arc& a : arcs) {
    uint32_t u = local[a.u], v = local[a.v];
    double bw = linkBandwidthGBps(a.l);
    double f = frac[u] * std::min(bw, cap[v]) / cap[u];
    frac[v] += f;
    count[v] += count[u];
    hops[v] = std::min(hops[v], hops[u] + 1);
    r.shares.push_back({a.l, a.u, a.v, f});
    if (f > 0) r.bandwidthGBps = std::min(r.bandwidthGBps, bw / f);
  }
  r.reachable = true;
  r.latencyUs = dist[dst];
  r.hops = hops[local[dst]];
  r.pathCount = count[local[dst]];
  return snclSuccess;
}

std::vector<Path> explicitPaths(const Graph& g, const Route& r, size_t maxPaths) {
  std::vector<Path> out;
  if (!r.reachable || r.src == r.dst || maxPaths == 0) return out;
  std::unordered_map<VertexId, std::vector<const LinkShare*>> next;
  for (const LinkShare& s : r.shares) next[s.from].push_back(&s);
  std::set<std::vector<LinkId>> seen;
  // Path i picks, at each branching, choice (i mod fan-out) and carries the quotient on:
  // the first branching (the plane) varies fastest.
  double tries = std::min(r.pathCount, double(maxPaths) * 8);
  for (uint64_t i = 0; i < uint64_t(tries) && out.size() < maxPaths; ++i) {
    Path p;
    p.vertices.push_back(r.src);
    p.bottleneckGBps = kInf;
    uint64_t rem = i;
    for (VertexId v = r.src; v != r.dst;) {
      auto& outs = next[v];
      if (outs.empty()) break;  // cannot happen on a well-formed route
      const LinkShare* s = outs[rem % outs.size()];
      rem /= outs.size();
      p.links.push_back(s->link);
      p.vertices.push_back(s->to);
      p.bottleneckGBps = std::min(p.bottleneckGBps, g.linkBandwidthGBps(s->link));
      p.latencyUs += g.linkLatencyUs(s->link);
      v = s->to;
    }
    if (p.vertices.back() == r.dst && seen.insert(p.links).second) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace sncl::topo
