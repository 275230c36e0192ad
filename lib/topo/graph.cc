#include "lib/topo/graph.h"

#include <algorithm>
#include <cmath>

#include "lib/topo/route.h"

namespace sncl::topo {
namespace {

constexpr const char* kVertexKindNames[kNumVertexKinds] = {
    "endpoint", "switch", "core", "numa", "package", "node",
    "rack",     "supernode", "cluster", "nic", "pci"};
constexpr const char* kLinkKindNames[kNumLinkKinds] = {"bus", "shm", "pcie", "net"};
constexpr const char* kLevelNames[kNumLevels] = {"endpoint", "numa", "node",
                                                 "rack",     "supernode", "cluster"};

// The level a container kind defines, or -1.
int levelOfKind(VertexKind k) {
  switch (k) {
    case VertexKind::Numa: return int(Level::Numa);
    case VertexKind::Node: return int(Level::Node);
    case VertexKind::Rack: return int(Level::Rack);
    case VertexKind::Supernode: return int(Level::Supernode);
    case VertexKind::Cluster: return int(Level::Cluster);
    default: return -1;
  }
}

uint64_t pairKey(VertexId a, VertexId b) {
  if (a > b) std::swap(a, b);
  return (uint64_t(a) << 32) | b;
}

}  // namespace

const char* kindName(VertexKind k) { return kVertexKindNames[int(k)]; }
const char* kindName(LinkKind k) { return kLinkKindNames[int(k)]; }
const char* stateName(LinkState s) {
  return s == LinkState::Up ? "up" : s == LinkState::Down ? "down" : "degraded";
}
const char* levelName(Level l) { return kLevelNames[int(l)]; }

bool parseVertexKind(std::string_view s, VertexKind* out) {
  for (int i = 0; i < kNumVertexKinds; ++i)
    if (s == kVertexKindNames[i]) return *out = VertexKind(i), true;
  if (s == "host") return *out = VertexKind::Node, true;  // common synonym
  return false;
}
bool parseLinkKind(std::string_view s, LinkKind* out) {
  for (int i = 0; i < kNumLinkKinds; ++i)
    if (s == kLinkKindNames[i]) return *out = LinkKind(i), true;
  return false;
}
bool parseLevel(std::string_view s, Level* out) {
  for (int i = 0; i < kNumLevels; ++i)
    if (s == kLevelNames[i]) return *out = Level(i), true;
  return false;
}

Graph Graph::clone() const {
  Graph g;
  g.name_ = name_;
  g.finalized_ = finalized_;
  g.epoch_ = epoch_;
  g.vname_ = vname_;
  g.vkind_ = vkind_;
  g.vforwards_ = vforwards_;
  g.vtier_ = vtier_;
  g.vplane_ = vplane_;
  g.vparent_ = vparent_;
  g.byName_ = byName_;
  g.la_ = la_;
  g.lb_ = lb_;
  g.lbw_ = lbw_;
  g.llat_ = llat_;
  g.lfactor_ = lfactor_;
  g.lkind_ = lkind_;
  g.lstate_ = lstate_;
  g.pairs_ = pairs_;
  g.adjOffset_ = adjOffset_;
  g.adjLink_ = adjLink_;
  g.adjPeer_ = adjPeer_;
  g.endpoints_ = endpoints_;
  g.vendpoint_ = vendpoint_;
  g.rankOrder_ = rankOrder_;
  g.levels_ = levels_;
  g.rankEndpoint_ = rankEndpoint_;
  g.endpointRank_ = endpointRank_;
  g.rankLevels_ = rankLevels_;
  if (finalized_) g.routeCache_.reset(newRouteCache(g));  // routes are per graph, not copied
  return g;
}

Result Graph::addVertex(std::string name, const VertexAttrs& a, VertexId* out) {
  if (finalized_) return fail(snclInvalidUsage, "topology: vertex '{}' added after finalize", name);
  if (name.empty()) return fail(snclInvalidArgument, "topology: empty vertex name");
  if (name.find('-') != std::string::npos)
    return fail(snclInvalidArgument, "topology: vertex name '{}' contains '-'", name);
  if (a.parent != kNone && a.parent >= vname_.size())
    return fail(snclInvalidArgument, "topology: vertex '{}' has an unknown parent", name);
  if (vname_.size() >= kNone - 1) return fail(snclInvalidArgument, "topology: too many vertices");
  VertexId id = VertexId(vname_.size());
  auto [it, inserted] = byName_.try_emplace(name, id);
  if (!inserted) return fail(snclInvalidArgument, "topology: duplicate vertex name '{}'", name);
  vname_.push_back(std::move(name));
  vkind_.push_back(uint8_t(a.kind));
  vparent_.push_back(a.parent);
  vforwards_.push_back(a.forwards < 0 ? a.kind != VertexKind::Endpoint : a.forwards != 0);
  vtier_.push_back(a.tier);
  vplane_.push_back(a.plane);
  if (out) *out = id;
  return snclSuccess;
}

Result Graph::addLink(VertexId a, VertexId b, const LinkAttrs& attrs, LinkId* out) {
  if (finalized_) return fail(snclInvalidUsage, "topology: link added after finalize");
  if (a >= vname_.size() || b >= vname_.size())
    return fail(snclInvalidArgument, "topology: link to an unknown vertex");
  if (a == b) return fail(snclInvalidArgument, "topology: link from '{}' to itself", vname_[a]);
  if (!(attrs.bwGBps >= kMinBandwidthGBps && attrs.bwGBps <= kMaxBandwidthGBps))
    return fail(snclInvalidArgument, "topology: link {}-{}: bandwidth {} GB/s is not in [{}, {}]",
                vname_[a], vname_[b], attrs.bwGBps, kMinBandwidthGBps, kMaxBandwidthGBps);
  if (!(attrs.latUs >= kMinLatencyUs && attrs.latUs <= kMaxLatencyUs))
    return fail(snclInvalidArgument, "topology: link {}-{}: latency {} us is not in [{}, {}]",
                vname_[a], vname_[b], attrs.latUs, kMinLatencyUs, kMaxLatencyUs);
  LinkId id = LinkId(la_.size());
  auto [it, inserted] = pairs_.try_emplace(pairKey(a, b), id);
  if (!inserted)
    return fail(snclInvalidArgument, "topology: duplicate link {}-{}", vname_[a], vname_[b]);
  la_.push_back(a);
  lb_.push_back(b);
  lbw_.push_back(float(attrs.bwGBps));
  llat_.push_back(float(attrs.latUs));
  lfactor_.push_back(1.0f);
  lkind_.push_back(uint8_t(attrs.kind));
  lstate_.push_back(uint8_t(LinkState::Up));
  if (out) *out = id;
  return snclSuccess;
}

Result Graph::setRankOrder(std::vector<VertexId> order) {
  std::vector<uint8_t> seen(vname_.size(), 0);
  for (VertexId v : order) {
    if (v >= vname_.size() || vertexKind(v) != VertexKind::Endpoint)
      return fail(snclInvalidArgument, "topology: rank order names a vertex that is not an endpoint");
    if (seen[v]++)
      return fail(snclInvalidArgument, "topology: rank order names endpoint '{}' twice", vname_[v]);
  }
  rankOrder_ = std::move(order);
  return snclSuccess;
}

VertexId Graph::findVertex(std::string_view name) const {
  auto it = byName_.find(std::string(name));
  return it == byName_.end() ? kNone : it->second;
}

LinkId Graph::findLink(VertexId a, VertexId b) const {
  if (a >= vname_.size() || b >= vname_.size()) return kNone;
  if (!finalized_) {
    auto it = pairs_.find(pairKey(a, b));
    return it == pairs_.end() ? kNone : it->second;
  }
  // Scan the smaller adjacency list.
  if (adjOffset_[a + 1] - adjOffset_[a] > adjOffset_[b + 1] - adjOffset_[b]) std::swap(a, b);
  for (uint32_t i = adjOffset_[a]; i < adjOffset_[a + 1]; ++i)
    if (adjPeer_[i] == b) return adjLink_[i];
  return kNone;
}

Result Graph::setLinkState(LinkId l, LinkState s, double factor) {
  if (l >= la_.size()) return fail(snclInvalidArgument, "topology: no link {}", l);
  if (s == LinkState::Degraded && !(factor >= kMinDegradeFactor && factor < 1))
    return fail(snclInvalidArgument, "topology: link {}: degrade factor {} is not in [{}, 1)",
                linkName(l), factor, kMinDegradeFactor);
  // Stored as a float: a factor just below 1 must stay below 1.
  float f = s == LinkState::Degraded ? std::min(float(factor), std::nextafter(1.0f, 0.0f)) : 1.0f;
  if (lstate_[l] == uint8_t(s) && lfactor_[l] == f) return snclSuccess;
  lstate_[l] = uint8_t(s);
  lfactor_[l] = f;
  ++epoch_;
  return snclSuccess;
}

Result Graph::finalize() {
  if (finalized_) return snclSuccess;
  size_t nv = vname_.size(), nl = la_.size();
  // Adjacency in CSR form: links of v are adjLink_[adjOffset_[v] .. adjOffset_[v+1]).
  adjOffset_.assign(nv + 1, 0);
  for (size_t l = 0; l < nl; ++l) {
    ++adjOffset_[la_[l] + 1];
    ++adjOffset_[lb_[l] + 1];
  }
  for (size_t v = 0; v < nv; ++v) adjOffset_[v + 1] += adjOffset_[v];
  adjLink_.resize(2 * nl);
  adjPeer_.resize(2 * nl);
  std::vector<uint32_t> fill(adjOffset_.begin(), adjOffset_.end() - 1);
  for (size_t l = 0; l < nl; ++l) {
    adjLink_[fill[la_[l]]] = LinkId(l);
    adjPeer_[fill[la_[l]]++] = lb_[l];
    adjLink_[fill[lb_[l]]] = LinkId(l);
    adjPeer_[fill[lb_[l]]++] = la_[l];
  }
  pairs_ = {};

  endpoints_.clear();
  vendpoint_.assign(nv, kNone);
  for (size_t v = 0; v < nv; ++v)
    if (vertexKind(VertexId(v)) == VertexKind::Endpoint) {
      vendpoint_[v] = EndpointId(endpoints_.size());
      endpoints_.push_back(VertexId(v));
    }

  // Each endpoint's nearest container at every level; a missing level inherits the key
  // of the level below, so groups nest.
  std::vector<std::array<VertexId, kNumLevels>> keys(endpoints_.size());
  std::array<bool, kNumLevels> defined{};
  defined[0] = true;
  for (size_t e = 0; e < endpoints_.size(); ++e) {
    auto& k = keys[e];
    k.fill(kNone);
    k[0] = endpoints_[e];
    for (VertexId p = vparent_[endpoints_[e]]; p != kNone; p = vparent_[p]) {
      int lvl = levelOfKind(vertexKind(p));
      if (lvl > 0 && k[lvl] == kNone) k[lvl] = p, defined[lvl] = true;
    }
    for (int l = 1; l < kNumLevels; ++l)
      if (k[l] == kNone) k[l] = k[l - 1];
  }
  for (int l = 0; l < kNumLevels; ++l) {
    buildLevel(&levels_[l], keys, l);
    levels_[l].defined = defined[l];
    for (auto& v : levels_[l].vertex)  // inherited groups have no container of their own
      if (v != kNone && levelOfKind(vertexKind(v)) != l && l != 0) v = kNone;
  }
  finalized_ = true;
  routeCache_.reset(newRouteCache(*this));
  return mapRanks(int(rankOrder_.empty() ? endpoints_.size() : rankOrder_.size()));
}

void Graph::buildLevel(LevelTable* t, const std::vector<std::array<VertexId, kNumLevels>>& keys,
                       int level) {
  // Groups are numbered in order of their first member: identical inputs, identical ids.
  std::unordered_map<VertexId, uint32_t> ids;
  t->groupOf.resize(keys.size());
  t->vertex.clear();
  for (size_t m = 0; m < keys.size(); ++m) {
    auto [it, inserted] = ids.try_emplace(keys[m][level], uint32_t(t->vertex.size()));
    if (inserted) t->vertex.push_back(keys[m][level]);
    t->groupOf[m] = it->second;
  }
  t->offsets.assign(t->vertex.size() + 1, 0);
  for (uint32_t g : t->groupOf) ++t->offsets[g + 1];
  for (size_t g = 0; g < t->vertex.size(); ++g) t->offsets[g + 1] += t->offsets[g];
  t->members.resize(keys.size());
  std::vector<uint32_t> fill(t->offsets.begin(), t->offsets.end() - 1);
  for (size_t m = 0; m < keys.size(); ++m) t->members[fill[t->groupOf[m]]++] = uint32_t(m);
}

std::span<const uint32_t> Graph::groupMembers(Level l, int g) const {
  const LevelTable& t = levels_[int(l)];
  return {t.members.data() + t.offsets[g], t.members.data() + t.offsets[g + 1]};
}

std::span<const uint32_t> Graph::rankGroupMembers(Level l, int g) const {
  const LevelTable& t = rankLevels_[int(l)];
  return {t.members.data() + t.offsets[g], t.members.data() + t.offsets[g + 1]};
}

Result Graph::mapRanks(int nranks) {
  if (!finalized_) return fail(snclInvalidUsage, "topology: mapRanks before finalize");
  size_t avail = rankOrder_.empty() ? endpoints_.size() : rankOrder_.size();
  if (nranks < 0 || size_t(nranks) > avail)
    return fail(snclInvalidArgument, "topology '{}': {} ranks but only {} endpoints{}", name_,
                nranks, avail, rankOrder_.empty() ? "" : " in its rank_map");
  rankEndpoint_.resize(nranks);
  endpointRank_.assign(endpoints_.size(), -1);
  for (int r = 0; r < nranks; ++r) {
    EndpointId e = rankOrder_.empty() ? EndpointId(r) : vendpoint_[rankOrder_[r]];
    rankEndpoint_[r] = e;
    endpointRank_[e] = r;
  }
  buildRankLevels();
  return snclSuccess;
}

Result Graph::mapRanks(const std::vector<EndpointId>& endpoints) {
  if (!finalized_) return fail(snclInvalidUsage, "topology: mapRanks before finalize");
  endpointRank_.assign(endpoints_.size(), -1);
  for (size_t r = 0; r < endpoints.size(); ++r) {
    const EndpointId e = endpoints[r];
    if (e >= endpoints_.size() || endpointRank_[e] >= 0) {
      rankEndpoint_.clear();
      endpointRank_.assign(endpoints_.size(), -1);
      return fail(snclInvalidArgument, "topology '{}': rank {} on endpoint {}, {}", name_, r, e,
                  e >= endpoints_.size() ? fmt::format("but it has {} endpoints", endpoints_.size())
                                         : fmt::format("already rank {}'s", endpointRank_[e]));
    }
    endpointRank_[e] = int(r);
  }
  rankEndpoint_ = endpoints;
  buildRankLevels();
  return snclSuccess;
}

void Graph::buildRankLevels() {
  std::vector<std::array<VertexId, kNumLevels>> keys(rankEndpoint_.size());
  for (size_t r = 0; r < keys.size(); ++r)
    for (int l = 0; l < kNumLevels; ++l) keys[r][l] = levels_[l].groupOf[rankEndpoint_[r]];
  for (int l = 0; l < kNumLevels; ++l) {
    buildLevel(&rankLevels_[l], keys, l);
    // Store the container vertex, not the endpoint-level group id used as the key.
    for (auto& v : rankLevels_[l].vertex) v = levels_[l].vertex[v];
    rankLevels_[l].defined = levels_[l].defined;
  }
}

std::vector<Level> Graph::rankLevels() const {
  std::vector<Level> out;
  for (int l = 1; l < kNumLevels; ++l)
    if (rankGroupCount(Level(l)) != rankGroupCount(Level(l - 1))) out.push_back(Level(l));
  return out;
}

}  // namespace sncl::topo
