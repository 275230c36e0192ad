// Routes between two vertices of the topology graph.
//
// Rule: traffic takes the minimum-latency paths over usable (not down) links and through
// vertices that forward (switches; endpoints of a torus or mesh). Every path of that
// minimum latency is used (equal-cost multipath: one per plane, per spine...). A flow is
// split at each vertex in proportion to the capacity downstream of each next hop
// (weighted ECMP), so a degraded link carries a smaller share instead of throttling all.
// The route's bandwidth is the rate at which the first link of that split saturates.
//
// Routes are computed per source on demand (Dijkstra over the vertices that forward) and
// cached by the source's attachment: endpoints that hang off the same switches with the
// same latencies share one shortest-path tree, so a 15k-endpoint Clos needs one per rack,
// not one per endpoint; a tree also keeps the shortest-path predecessors of the vertices
// routes walk through again (the spines). A route between two such endpoints is also kept
// as a template for every pair attached alike (rack to rack). Both caches are bounded LRUs
// (64 MiB of trees, 32 MiB of templates), dropped when the epoch changes. No all-pairs
// table is ever built.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/topo/graph.h"

namespace sncl::topo {

// One link of a route, in the direction the flow crosses it, and the fraction of the flow
// it carries. Reserving `bytes * fraction` on every share is what the flow costs the links.
struct LinkShare {
  LinkId link;
  VertexId from;
  VertexId to;
  double fraction;
  // Per-direction channel id: links are full duplex, each direction has its own capacity.
  uint64_t channel(const Graph& g) const { return 2ull * link + (g.linkA(link) == from ? 0 : 1); }
};

struct Route {
  VertexId src = kNone;
  VertexId dst = kNone;
  bool reachable = false;
  double latencyUs = 0;      // sum of link latencies along any of the equal-cost paths
  double bandwidthGBps = 0;  // one flow spread over all the paths (see the rule above)
  int hops = 0;              // links on the shortest (fewest-hop) of those paths
  double pathCount = 0;      // distinct equal-cost paths (a count, may be large)
  uint64_t epoch = 0;        // graph epoch the route was computed in
  std::vector<LinkShare> shares;  // every link used, ordered from src towards dst
};

// One explicit path of a route: a way to draw or pin a single flow.
struct Path {
  std::vector<VertexId> vertices;  // src .. dst
  std::vector<LinkId> links;
  double bottleneckGBps = 0;
  double latencyUs = 0;
};

// Up to maxPaths distinct paths of the route, chosen so that consecutive paths differ at
// the first branching (first the planes, then the spines).
std::vector<Path> explicitPaths(const Graph& g, const Route& r, size_t maxPaths);

// Where a vertex that does not forward attaches: its usable links' peers, latencies and
// bandwidths, as bytes (empty when it has none). Two pairs of such vertices attached alike
// have one route but for their own links: the key of route templates, and of the cost
// model's classes of pairs (lib/plan/cost_model.h).
std::string attachmentKey(const Graph& g, VertexId v);

// For Graph's construction of its cache.
RouteCache* newRouteCache(const Graph& g);

}  // namespace sncl::topo
