#include "lib/topo/route.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace sncl::topo {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kTemplateBytes = 32u << 20;
// Trees: a distance per vertex (and an index per switch), ~180 KiB on a 16k-endpoint Clos,
// whose 256 source classes must all fit, or planning re-grows evicted trees.
constexpr size_t kTreeBytes = 64u << 20;

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

// The seeds as bytes: a forwarding source is keyed by itself, any other by its seeds.
std::string seedKey(char tag, const std::vector<std::pair<VertexId, double>>& seeds) {
  constexpr size_t kItem = sizeof(VertexId) + sizeof(double);
  std::string key(1 + seeds.size() * kItem, '\0');
  key[0] = tag;
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::memcpy(&key[1 + i * kItem], &seeds[i].first, sizeof(VertexId));
    std::memcpy(&key[1 + i * kItem + sizeof(VertexId)], &seeds[i].second, sizeof(double));
  }
  return key;
}

Start startOf(const Graph& g, VertexId src) {
  Start s;
  if (g.forwards(src)) {
    s.seeds.emplace_back(src, 0.0);
    s.key = seedKey('F', s.seeds);
    return s;
  }
  auto links = g.linksOf(src);
  auto peers = g.neighborsOf(src);
  for (size_t i = 0; i < links.size(); ++i)
    if (g.linkUsable(links[i])) s.seeds.emplace_back(peers[i], g.linkLatencyUs(links[i]));
  std::sort(s.seeds.begin(), s.seeds.end());
  s.key = seedKey('N', s.seeds);
  return s;
}

struct Arc {
  VertexId u, v;
  LinkId l;
};

// The graph's vertices that forward, numbered, and their links to one another in adjacency
// order: half of a Clos leaf's links go to endpoints, which no tree expands through.
struct Forwarding {
  std::vector<uint32_t> index;  // by vertex: its number among those that forward, or kNone
  size_t count = 0;
  std::vector<uint32_t> offset;  // by number: its links to forwarding peers, in peer and link
  std::vector<VertexId> peer;
  std::vector<LinkId> link;

  explicit Forwarding(const Graph& g) : index(g.vertexCount(), kNone) {
    for (VertexId v = 0; v < g.vertexCount(); ++v)
      if (g.forwards(v)) index[v] = uint32_t(count++);
    offset.reserve(count + 1);
    for (VertexId v = 0; v < g.vertexCount(); ++v) {
      if (!g.forwards(v)) continue;
      offset.push_back(uint32_t(peer.size()));
      auto links = g.linksOf(v);
      auto peers = g.neighborsOf(v);
      for (size_t i = 0; i < links.size(); ++i)
        if (g.forwards(peers[i])) peer.push_back(peers[i]), link.push_back(links[i]);
    }
    offset.push_back(uint32_t(peer.size()));
  }
};

// A shortest-path tree grown only as far as routes have asked: Dijkstra stops once every
// vertex up to the requested destination's distance is settled, and resumes from its heap
// when a farther destination is asked for. Routes to near destinations (inside a node)
// then cost a handful of steps, however large the graph.
//
// Only vertices that forward enter the heap and have their distances kept as they grow: one
// that does not (an endpoint) is never expanded, so its distance is needed only when it is
// a destination, and is then the best over its own links (16k endpoints of a Clos would
// otherwise be 8 heap entries and 8 relaxations each, in every tree).
struct Tree {
  using Item = std::pair<double, VertexId>;
  std::mutex mu;  // held while growing and while a route reads dist or preds
  Distances dist;
  std::vector<Item> heap;  // min-heap of tentative distances, with stale entries
  std::vector<VertexId> seeds;
  // The shortest-path predecessors of a vertex (arcs into it), found by scanning its links
  // the first time a route walks through it and kept from its second walk on: routes from
  // one source class to every other class all cross the same spines, each with hundreds of
  // links. Not kept for seeds, whose arcs from the source depend on which source it is.
  // Kept for vertices that forward only (an endpoint has a few links), by fwd.index.
  static constexpr uint32_t kUnseen = UINT32_MAX, kSeenOnce = UINT32_MAX - 1;
  const Forwarding& fwd;        // the graph's (its route cache's)
  std::vector<uint32_t> predAt;  // per forwarding vertex: offset in preds, or kUnseen / kSeenOnce
  std::vector<Arc> preds;        // at predAt[i]: a count in .u, then that many arcs

  Tree(const Graph& g, const Start& start, const Forwarding& f)
      : dist(g.vertexCount(), kInf), fwd(f), predAt(f.count, kUnseen) {
    for (auto& [v, d] : start.seeds) {
      seeds.push_back(v);
      if (d < dist[v]) {
        dist[v] = d;
        if (g.forwards(v)) heap.emplace_back(d, v);
      }
    }
    std::make_heap(heap.begin(), heap.end(), std::greater<Item>());
  }
  bool isSeed(VertexId v) const { return std::find(seeds.begin(), seeds.end(), v) != seeds.end(); }

  // The best distance of a vertex that does not forward over its links from settled (or
  // tentative) vertices that forward, and from the source if it is a seed.
  double reach(const Graph& g, VertexId v) const {
    double best = dist[v];
    auto links = g.linksOf(v);
    auto peers = g.neighborsOf(v);
    for (size_t i = 0; i < links.size(); ++i)
      if (dist[peers[i]] < kInf && g.forwards(peers[i]) && g.linkUsable(links[i]))
        best = std::min(best, dist[peers[i]] + g.linkLatencyUs(links[i]));
    return best;
  }

  // Afterwards dist[v] is exact for dst and every forwarding vertex no farther than dst,
  // and every other forwarding vertex's (tentative) distance is larger than dst's.
  void growTo(const Graph& g, VertexId dst) {
    const bool lazy = !g.forwards(dst);
    double target = lazy ? reach(g, dst) : dist[dst];
    while (!heap.empty() && heap.front().first <= target) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<Item>());
      auto [d, v] = heap.back();
      heap.pop_back();
      if (d > dist[v]) continue;  // stale
      const uint32_t fi = fwd.index[v];
      for (uint32_t i = fwd.offset[fi]; i < fwd.offset[fi + 1]; ++i) {
        const VertexId p = fwd.peer[i];
        if (!g.linkUsable(fwd.link[i])) continue;
        double nd = d + g.linkLatencyUs(fwd.link[i]);
        if (nd < dist[p]) {
          dist[p] = nd;
          heap.emplace_back(nd, p);
          std::push_heap(heap.begin(), heap.end(), std::greater<Item>());
        }
      }
      // (An endpoint has a few links: cheaper to look again than to track which changed.)
      target = lazy ? reach(g, dst) : dist[dst];
    }
    // Exact now: every forwarding vertex closer than dst is settled.
    if (lazy) dist[dst] = target;
    if (heap.empty()) heap.shrink_to_fit();  // fully grown
  }
};

// Per-thread working memory of route(): a vertex -> DAG index map that is cleared by
// bumping a generation instead of touching every vertex, and reusable vectors.
struct Scratch {
  std::vector<uint32_t> stamp, idx;
  uint32_t gen = 0;
  std::vector<Arc> arcs, sorted;
  std::vector<VertexId> verts;
  std::vector<uint32_t> order, pos, bucket;
  std::vector<double> cap, frac, count;
  std::vector<int> hops;

  bool marked(VertexId v) const { return stamp[v] == gen; }
  void mark(VertexId v, uint32_t i) {
    stamp[v] = gen;
    idx[v] = i;
  }
  uint32_t index(VertexId v) const { return idx[v]; }
};

Scratch& scratch(size_t vertices) {
  thread_local Scratch sc;
  if (sc.stamp.size() < vertices) {
    sc.stamp.assign(vertices, 0);
    sc.idx.resize(vertices);
    sc.gen = 0;
  }
  if (++sc.gen == 0) {  // wrapped: forget every old mark
    std::fill(sc.stamp.begin(), sc.stamp.end(), 0);
    sc.gen = 1;
  }
  return sc;
}


// Bounded LRU of values keyed by strings, sized in bytes, valid for one epoch.
template <class V>
class Lru {
 public:
  explicit Lru(size_t capacityBytes) : capacity_(capacityBytes) {}
  std::shared_ptr<V> get(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->value;
  }
  void put(const std::string& key, std::shared_ptr<V> value, size_t bytes) {
    if (index_.count(key)) return;
    lru_.push_front({key, std::move(value), bytes});
    index_[key] = lru_.begin();
    used_ += bytes;
    while (used_ > capacity_ && lru_.size() > 1) {
      used_ -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
  }
  void clear() {
    lru_.clear();
    index_.clear();
    used_ = 0;
  }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<V> value;
    size_t bytes;
  };
  size_t capacity_, used_ = 0;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, typename std::list<Entry>::iterator> index_;
};

// A route between two endpoints that do not forward, with their own links left out: it
// serves every pair of endpoints attached exactly like them (same neighbours, latencies,
// bandwidths), e.g. any NPU of one rack to any NPU of another. kEnd marks src or dst.
constexpr VertexId kEnd = kNone;
struct Template {
  Route route;  // shares touching src or dst have link kNone and kEnd in from or to
};

std::shared_ptr<const Template> makeTemplate(const Route& r) {
  auto t = std::make_shared<Template>();
  t->route = r;
  for (LinkShare& s : t->route.shares) {
    bool fromSrc = s.from == r.src, toDst = s.to == r.dst;
    if (fromSrc) s.from = kEnd;
    if (toDst) s.to = kEnd;
    if (fromSrc || toDst) s.link = kNone;
  }
  return t;
}

}  // namespace

// Where a non-forwarding vertex attaches, with bandwidth: the key of route templates.
std::string attachmentKey(const Graph& g, VertexId v) {
  std::vector<std::tuple<VertexId, float, float>> att;
  auto links = g.linksOf(v);
  auto peers = g.neighborsOf(v);
  for (size_t i = 0; i < links.size(); ++i)
    if (g.linkUsable(links[i]))
      att.emplace_back(peers[i], float(g.linkLatencyUs(links[i])), float(g.linkBandwidthGBps(links[i])));
  std::sort(att.begin(), att.end());
  std::string key(reinterpret_cast<const char*>(att.data()), att.size() * sizeof(att[0]));
  return key;
}

namespace {

// The arcs into v that lie on a shortest path from src (in v's link order), appended to arcs.
void arcsInto(const Graph& g, VertexId src, VertexId v, const Distances& dist, std::vector<Arc>& arcs) {
  const double dv = dist[v];
  auto links = g.linksOf(v);
  auto peers = g.neighborsOf(v);
  for (size_t i = 0; i < links.size(); ++i) {
    VertexId u = peers[i];
    LinkId l = links[i];
    if (u == src) {
      if (g.linkUsable(l) && sameCost(g.linkLatencyUs(l), dv)) arcs.push_back({u, v, l});
      continue;
    }
    // Distances first: they are compact and rule out most neighbours of a busy switch
    // before the scattered link arrays are touched.
    double du = dist[u];
    if (!(du < dv) || !g.forwards(u) || !g.linkUsable(l) || !sameCost(du + g.linkLatencyUs(l), dv)) continue;
    arcs.push_back({u, v, l});
  }
}

void buildRoute(const Graph& g, VertexId src, VertexId dst, Tree& tree, Route& r) {
  const Distances& dist = tree.dist;

  // Walk back from dst over the links that lie on some shortest path; that is the
  // equal-cost DAG. A non-forwarding src is only entered through its own links.
  Scratch& sc = scratch(g.vertexCount());
  std::vector<Arc>& arcs = sc.arcs;
  std::vector<VertexId>& verts = sc.verts;
  arcs.clear();
  verts.assign(1, dst);
  sc.mark(dst, 0);
  for (size_t next = 0; next < verts.size(); ++next) {
    VertexId v = verts[next];
    const size_t first = arcs.size();
    const uint32_t fi = tree.fwd.index[v];
    uint32_t unseen = Tree::kUnseen;
    uint32_t& at = fi == kNone ? unseen : tree.predAt[fi];
    if (at < Tree::kSeenOnce) {
      // Settled before (every vertex closer than dst is): the same arcs as a scan.
      const uint32_t count = tree.preds[at].u;
      arcs.insert(arcs.end(), tree.preds.begin() + at + 1, tree.preds.begin() + at + 1 + count);
    } else {
      arcsInto(g, src, v, dist, arcs);
      if (fi != kNone && !tree.isSeed(v)) {
        if (at == Tree::kUnseen) {
          at = Tree::kSeenOnce;
        } else {
          at = uint32_t(tree.preds.size());
          tree.preds.push_back({VertexId(arcs.size() - first), v, kNone});
          tree.preds.insert(tree.preds.end(), arcs.begin() + first, arcs.end());
        }
      }
    }
    for (size_t k = first; k < arcs.size(); ++k) {
      const VertexId u = arcs[k].u;
      if (u != src && !sc.marked(u)) {
        sc.mark(u, uint32_t(verts.size()));
        verts.push_back(u);
      }
    }
  }
  sc.mark(src, uint32_t(verts.size()));
  verts.push_back(src);

  // Topological order = increasing distance (every link adds latency); arcs are bucketed
  // by the position of their tail, keeping the walk's (deterministic) order within one.
  size_t n = verts.size();
  auto distOf = [&](VertexId v) { return v == src ? 0.0 : dist[v]; };
  std::vector<uint32_t>& order = sc.order;
  order.resize(n);
  for (size_t i = 0; i < n; ++i) order[i] = uint32_t(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    double da = distOf(verts[a]), db = distOf(verts[b]);
    return da != db ? da < db : verts[a] < verts[b];
  });
  std::vector<uint32_t>& pos = sc.pos;
  pos.resize(n);
  for (size_t i = 0; i < n; ++i) pos[order[i]] = uint32_t(i);
  std::vector<uint32_t>& bucket = sc.bucket;
  bucket.assign(n + 1, 0);
  for (const Arc& a : arcs) ++bucket[pos[sc.index(a.u)] + 1];
  for (size_t i = 0; i < n; ++i) bucket[i + 1] += bucket[i];
  std::vector<Arc>& sorted = sc.sorted;
  sorted.resize(arcs.size());
  for (const Arc& a : arcs) sorted[bucket[pos[sc.index(a.u)]]++] = a;

  // Capacity downstream of each vertex (reverse order), then the split (forward order).
  std::vector<double>& cap = sc.cap;
  std::vector<double>& frac = sc.frac;
  std::vector<double>& count = sc.count;
  std::vector<int>& hops = sc.hops;
  cap.assign(n, 0.0);
  frac.assign(n, 0.0);
  count.assign(n, 0.0);
  hops.assign(n, INT32_MAX);
  cap[sc.index(dst)] = kInf;
  for (size_t i = sorted.size(); i-- > 0;) {
    const Arc& a = sorted[i];
    cap[sc.index(a.u)] += std::min(g.linkBandwidthGBps(a.l), cap[sc.index(a.v)]);
  }
  uint32_t s = sc.index(src);
  frac[s] = 1.0;
  count[s] = 1.0;
  hops[s] = 0;
  r.shares.reserve(sorted.size());
  r.bandwidthGBps = kInf;
  for (const Arc& a : sorted) {
    uint32_t u = sc.index(a.u), v = sc.index(a.v);
    double bw = g.linkBandwidthGBps(a.l);
    double f = frac[u] * std::min(bw, cap[v]) / cap[u];
    frac[v] += f;
    count[v] += count[u];
    hops[v] = std::min(hops[v], hops[u] + 1);
    r.shares.push_back({a.l, a.u, a.v, f});
    if (f > 0) r.bandwidthGBps = std::min(r.bandwidthGBps, bw / f);
  }
  r.reachable = true;
  r.latencyUs = dist[dst];
  r.hops = hops[sc.index(dst)];
  r.pathCount = count[sc.index(dst)];
}
}  // namespace

// Shortest-path trees by start (sized by their distances) and route templates by the
// attachments of their two ends; both dropped when the epoch changes.
struct RouteCache {
  std::mutex mu;
  uint64_t epoch = 0;
  Lru<Tree> trees{kTreeBytes};
  Lru<const Template> templates{kTemplateBytes};
  std::unordered_set<size_t> pairsSeen;  // template keys asked for once (hashes)
  std::unique_ptr<Forwarding> fwd;        // built with the first tree

  void sync(const Graph& g) {  // with mu held
    if (epoch == g.epoch()) return;
    trees.clear();
    templates.clear();
    pairsSeen.clear();
    epoch = g.epoch();
  }
  std::shared_ptr<Tree> tree(const Graph& g, const Start& start) {
    std::lock_guard<std::mutex> lock(mu);
    sync(g);
    if (auto t = trees.get(start.key)) return t;
    if (!fwd) fwd = std::make_unique<Forwarding>(g);  // which vertices forward is fixed at finalize
    auto t = std::make_shared<Tree>(g, start, *fwd);
    // (its kept predecessors, a few per spine, are not counted)
    trees.put(start.key, t, t->dist.size() * sizeof(double) + t->predAt.size() * sizeof(uint32_t));
    return t;
  }
  std::shared_ptr<const Template> findTemplate(const Graph& g, const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    sync(g);
    return templates.get(key);
  }
  // Keeps a template from the second time its key is asked for: pairs whose ends are
  // attached like no other pair (an NPU with its own rail leaf) never pay for one.
  void offerTemplate(const Graph& g, const std::string& key, const Route& r) {
    std::lock_guard<std::mutex> lock(mu);
    sync(g);
    if (pairsSeen.size() > (1u << 20)) pairsSeen.clear();
    if (pairsSeen.insert(std::hash<std::string>()(key)).second) return;
    auto t = makeTemplate(r);
    templates.put(key, t, sizeof(Template) + t->route.shares.size() * sizeof(LinkShare) + key.size());
  }
};

void RouteCacheDeleter::operator()(RouteCache* c) const { delete c; }

RouteCache* newRouteCache(const Graph& g) {
  auto* c = new RouteCache;
  c->epoch = g.epoch();
  return c;
}

namespace {

// The link from v to peer (pairs of vertices have at most one), via v's links sorted by peer.
LinkId linkTo(const std::vector<std::pair<VertexId, LinkId>>& byPeer, VertexId peer) {
  auto it = std::lower_bound(byPeer.begin(), byPeer.end(), std::pair<VertexId, LinkId>{peer, 0});
  return it != byPeer.end() && it->first == peer ? it->second : kNone;
}

std::vector<std::pair<VertexId, LinkId>> linksByPeer(const Graph& g, VertexId v) {
  std::vector<std::pair<VertexId, LinkId>> out;
  auto links = g.linksOf(v);
  auto peers = g.neighborsOf(v);
  for (size_t i = 0; i < links.size(); ++i) out.emplace_back(peers[i], links[i]);
  std::sort(out.begin(), out.end());
  return out;
}

void instantiate(const Graph& g, const Template& t, VertexId src, VertexId dst, Route& r) {
  uint64_t epoch = r.epoch;
  r = t.route;
  r.src = src;
  r.dst = dst;
  r.epoch = epoch;
  auto srcLinks = linksByPeer(g, src), dstLinks = linksByPeer(g, dst);
  for (LinkShare& s : r.shares) {
    if (s.from == kEnd && s.to == kEnd) s.from = src, s.to = dst, s.link = linkTo(srcLinks, dst);
    else if (s.from == kEnd) s.from = src, s.link = linkTo(srcLinks, s.to);
    else if (s.to == kEnd) s.to = dst, s.link = linkTo(dstLinks, s.from);
  }
}


}  // namespace

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
  // Two endpoints that only send and receive: a pair attached like them may have been
  // routed already.
  std::string key;
  if (!forwards(src) && !forwards(dst)) {
    // The source's length first: two keys joined by a separator alone could be read apart
    // in two ways (a key's bytes may hold the separator).
    const std::string a = attachmentKey(*this, src);
    key = std::to_string(a.size());
    key.append(1, '|').append(a).append(attachmentKey(*this, dst));
    if (auto t = routeCache_->findTemplate(*this, key)) {
      instantiate(*this, *t, src, dst, r);
      return snclSuccess;
    }
  }
  std::shared_ptr<Tree> tree = routeCache_->tree(*this, startOf(*this, src));
  {
    std::lock_guard<std::mutex> lock(tree->mu);
    tree->growTo(*this, dst);
    if (tree->dist[dst] == kInf) return snclSuccess;  // unreachable: reachable stays false
    buildRoute(*this, src, dst, *tree, r);
  }
  if (!key.empty()) routeCache_->offerTemplate(*this, key, r);
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
