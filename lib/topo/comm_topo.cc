#include "lib/topo/comm_topo.h"

#include <fmt/format.h>

#include "lib/base/env.h"
#include "lib/topo/generators.h"
#include "lib/topo/topo_cache.h"

namespace sncl {

Result CommTopology::defaultGraph(int nranks, topo::Graph* out) {
  if (nranks < 1) return fail(snclInvalidArgument, "a topology needs at least one rank, not {}", nranks);
  constexpr int kPerNode = 4;
  topo::ClosParams p;
  p.perNode = std::min(nranks, kPerNode);
  p.nodes = (nranks + kPerNode - 1) / kPerNode;
  p.planes = 1;
  p.spines = 1;
  topo::Graph g;
  g.setName(fmt::format("default-{}x{}", p.nodes, p.perNode));
  SNCL_CHECK(topo::generate(g, p));
  SNCL_CHECK(g.finalize());
  *out = std::move(g);
  return snclSuccess;
}

Result CommTopology::fromGraph(topo::Graph graph, int nranks, bool fromFile, std::shared_ptr<CommTopology>* out,
                               const std::vector<topo::EndpointId>* endpoints) {
  if (nranks > int(graph.endpointCount()))
    return fail(snclInvalidArgument, "topology {} has {} endpoints, too few for {} ranks", graph.name(),
                graph.endpointCount(), nranks);
  SNCL_CHECK(endpoints ? graph.mapRanks(*endpoints) : graph.mapRanks(nranks));
  std::shared_ptr<CommTopology> t(new CommTopology());
  t->graph_ = std::move(graph);
  t->fromFile_ = fromFile;
  t->rankVertex_.resize(nranks);
  for (int r = 0; r < nranks; ++r) t->rankVertex_[r] = t->graph_.rankVertex(r);
  *out = std::move(t);
  return snclSuccess;
}

Result CommTopology::build(int nranks, std::shared_ptr<CommTopology>* out) {
  topo::Graph g;
  auto file = env::str("SNCL_TOPO_FILE");
  if (file && !file->empty()) {
    SNCL_CHECK(topo::loadTopologyCached(*file, &g));  // parsed once per host (topo_cache.h)
    return fromGraph(std::move(g), nranks, true, out);
  }
  SNCL_CHECK(defaultGraph(nranks, &g));
  return fromGraph(std::move(g), nranks, false, out);
}

Result CommTopology::buildOnEndpoints(const std::vector<int64_t>& endpoints, std::shared_ptr<CommTopology>* out) {
  auto file = env::str("SNCL_TOPO_FILE");
  if (!file || file->empty()) return fail(snclInvalidUsage, "ranks on given endpoints need SNCL_TOPO_FILE");
  topo::Graph g;
  SNCL_CHECK(topo::loadTopologyCached(*file, &g));
  const size_t avail = g.rankOrder().empty() ? g.endpointCount() : g.rankOrder().size();
  std::vector<bool> taken(g.endpointCount(), false);
  for (int64_t e : endpoints)
    if (e >= 0 && size_t(e) < taken.size()) taken[size_t(e)] = true;
  // The i-th endpoint in the file's rank order, for ranks new to the job.
  auto nth = [&](size_t i) { return g.rankOrder().empty() ? topo::EndpointId(i) : g.endpointOf(g.rankOrder()[i]); };
  std::vector<topo::EndpointId> mapped;
  size_t next = 0;
  for (size_t r = 0; r < endpoints.size(); ++r) {
    if (endpoints[r] >= 0) {
      mapped.push_back(topo::EndpointId(endpoints[r]));
      continue;
    }
    while (next < avail && taken[nth(next)]) ++next;
    if (next == avail)
      return fail(snclInvalidArgument, "topology '{}': no free endpoint for new rank {} ({} endpoints in its rank order)",
                  g.name(), r, avail);
    taken[nth(next)] = true;
    mapped.push_back(nth(next++));
  }
  return fromGraph(std::move(g), int(mapped.size()), true, out, &mapped);
}

bool CommTopology::sameSupernode(int a, int b) const {
  if (!graph_.levelDefined(topo::Level::Supernode)) return false;
  return graph_.rankGroupOf(a, topo::Level::Supernode) == graph_.rankGroupOf(b, topo::Level::Supernode);
}

Result CommTopology::routeRanks(int src, int dst, topo::Route* out) const {
  std::shared_lock lock(mu_);
  return graph_.route(rankVertex_[src], rankVertex_[dst], out);
}

uint64_t CommTopology::epoch() const {
  std::shared_lock lock(mu_);
  return graph_.epoch();
}

Result CommTopology::setLinkState(topo::LinkId link, topo::LinkState state, double factor) const {
  std::unique_lock lock(mu_);
  if (link >= graph_.linkCount()) return fail(snclInvalidArgument, "no link {} in topology {}", link, graph_.name());
  return graph_.setLinkState(link, state, factor);
}

std::string CommTopology::describe() const {
  std::string where;
  for (int r = 0; r < nranks() && r < 8; ++r)
    where += fmt::format("{}{}->{}", r ? " " : "", r, graph_.vertexName(rankVertex_[r]));
  if (nranks() > 8) where += " ...";
  return fmt::format("{} ({}): {} endpoints, {} links; ranks {}", graph_.name(), fromFile_ ? "SNCL_TOPO_FILE" : "default",
                     graph_.endpointCount(), graph_.linkCount(), where);
}

}  // namespace sncl
