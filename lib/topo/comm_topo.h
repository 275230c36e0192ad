// The topology of one communicator: the graph (from SNCL_TOPO_FILE, else a default
// supernode sized to the comm) and where each rank sits in it. Built once at comm init,
// then shared read-only by the planner and the transports; the one change after init is
// link health (a link going down or degrading), which bumps the graph's epoch.
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "lib/base/error.h"
#include "lib/topo/graph.h"
#include "lib/topo/route.h"

namespace sncl {

class CommTopology {
 public:
  // SNCL_TOPO_FILE if set, else defaultGraph(nranks); ranks mapped in the file's
  // rank_map order or endpoint order. More ranks than endpoints: InvalidArgument.
  static Result build(int nranks, std::shared_ptr<CommTopology>* out);
  // SNCL_TOPO_FILE with rank r on endpoints[r] of it (a split, shrunk or grown comm's
  // processes where they were in the parent's). A rank given -1 (a process new to the job,
  // snclCommGrow) takes the first endpoint no other rank holds, in the file's rank order:
  // a spare takes a lost rank's place.
  static Result buildOnEndpoints(const std::vector<int64_t>& endpoints, std::shared_ptr<CommTopology>* out);
  // The embedded default: nodes of 4 endpoints on a two-level bus Clos (one plane, one
  // spine, non-blocking), ceil(nranks / 4) nodes.
  static Result defaultGraph(int nranks, topo::Graph* out);
  // From a built graph (finalized); maps nranks ranks.
  static Result fromGraph(topo::Graph graph, int nranks, bool fromFile, std::shared_ptr<CommTopology>* out,
                          const std::vector<topo::EndpointId>* endpoints = nullptr);

  const topo::Graph& graph() const { return graph_; }
  int nranks() const { return int(rankVertex_.size()); }
  topo::VertexId rankVertex(int rank) const { return rankVertex_[rank]; }
  // True when the graph came from SNCL_TOPO_FILE (the comm then follows it when choosing
  // transports), false for the embedded default.
  bool fromFile() const { return fromFile_; }
  // Both ranks' endpoints lie in one supernode that the topology defines.
  bool sameSupernode(int a, int b) const;

  // Routes between ranks, safe against a concurrent health change.
  Result routeRanks(int src, int dst, topo::Route* out) const;
  uint64_t epoch() const;
  // Link health, the one mutation after init: serialized against routeRanks; bumps the
  // epoch when the state actually changes. Const because the topology is shared as const.
  Result setLinkState(topo::LinkId link, topo::LinkState state, double factor = 1.0) const;

  // One line for logs: source, endpoints, links, rank placement.
  std::string describe() const;

 private:
  CommTopology() = default;

  mutable topo::Graph graph_;
  mutable std::shared_mutex mu_;  // readers of routes vs health changes
  std::vector<topo::VertexId> rankVertex_;
  bool fromFile_ = false;
};

}  // namespace sncl
