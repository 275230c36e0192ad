// The topology graph: the one source of truth for where ranks are, how they are grouped
// (NUMA node, node, rack, supernode, cluster), which links join what, and how healthy each
// link is. Routes (route.h), generators (generators.h), files (topo_file.h) and discovery
// (discovery.h, merge.h) all build on this storage.
//
// Storage is structure-of-arrays so that a 16k-endpoint supernode with its switches and a
// quarter of a million links stays a few tens of MiB. A graph is built (addVertex/addLink),
// then finalized (adjacency and level tables are computed); after that only link state and
// the rank mapping change. Link state changes bump the epoch; anything derived from link
// health (routes, plans) is keyed by it.
//
// Threads: route() may be called from several threads at once. setLinkState and mapRanks
// must not run concurrently with readers (callers agree on a new epoch first).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lib/base/error.h"

namespace sncl::topo {

using VertexId = uint32_t;
using LinkId = uint32_t;
using EndpointId = uint32_t;  // index into the endpoints, in vertex order
inline constexpr uint32_t kNone = UINT32_MAX;

enum class VertexKind : uint8_t {
  Endpoint,   // where a rank runs (an NPU, a GPU, a CPU rank)
  Switch,     // forwards traffic; bus leaf/spine switches, network switches
  Core,
  Numa,
  Package,
  Node,       // a host, server or board: the unit that shares memory
  Rack,       // a cabinet, or a pod of a fat tree
  Supernode,  // a scale-up domain (one bus)
  Cluster,    // supernodes joined by a scale-out network
  Nic,
  Pci,
};
inline constexpr int kNumVertexKinds = 11;

enum class LinkKind : uint8_t {
  Bus,   // scale-up bus inside a supernode (UB-, NVLink-like)
  Shm,   // memory inside a host
  Pcie,
  Net,   // scale-out network (RDMA/RoCE/InfiniBand/Ethernet)
};
inline constexpr int kNumLinkKinds = 4;

enum class LinkState : uint8_t { Up, Down, Degraded };

// Grouping levels of endpoints, finest first. A level the topology does not define takes
// the groups of the level below it (no racks: every node is its own rack).
enum class Level : uint8_t { Endpoint, Numa, Node, Rack, Supernode, Cluster };
inline constexpr int kNumLevels = 6;

const char* kindName(VertexKind k);
const char* kindName(LinkKind k);
const char* stateName(LinkState s);
const char* levelName(Level l);
bool parseVertexKind(std::string_view s, VertexKind* out);
bool parseLinkKind(std::string_view s, LinkKind* out);
bool parseLevel(std::string_view s, Level* out);

struct VertexAttrs {
  VertexKind kind = VertexKind::Switch;
  VertexId parent = kNone;  // containing vertex (node of an endpoint, rack of a switch...)
  int forwards = -1;        // carries transit traffic; -1: every kind but Endpoint does
  uint8_t tier = 0;         // 0 endpoints, 1 leaf, 2 spine, 3 core: for drawing and summaries
  int16_t plane = -1;       // bus or network plane of a switch, -1 for none
};

struct LinkAttrs {
  double bwGBps = 0;    // per direction (links are full duplex)
  double latUs = 0;     // one hop
  LinkKind kind = LinkKind::Bus;
};

// Validity limits shared by the graph and the file parser.
inline constexpr double kMinLatencyUs = 1e-3;  // > 0 keeps equal-cost routes acyclic
inline constexpr double kMaxLatencyUs = 1e9;
inline constexpr double kMinBandwidthGBps = 1e-6;  // kept exact as a float, never 0
inline constexpr double kMaxBandwidthGBps = 1e9;
inline constexpr double kMinDegradeFactor = 1e-6;

struct RouteCache;
struct RouteCacheDeleter {
  void operator()(RouteCache* c) const;
};
struct Route;

class Graph {
 public:
  Graph() = default;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;
  // A deep copy with its own route cache: each comm mutates its own link health, so a
  // graph shared by a cache (topo_cache.h) hands out clones, never itself.
  Graph clone() const;

  // ---- building (before finalize) ----
  // Names are unique and contain no '-' (tools name a link "a-b"); a parent must exist.
  Result addVertex(std::string name, const VertexAttrs& attrs, VertexId* out = nullptr);
  // A pair of vertices is joined by at most one link (model parallel cables as one link).
  Result addLink(VertexId a, VertexId b, const LinkAttrs& attrs, LinkId* out = nullptr);
  // Ranks map onto these endpoints in this order (instead of endpoint order).
  Result setRankOrder(std::vector<VertexId> endpointVertices);
  const std::vector<VertexId>& rankOrder() const { return rankOrder_; }  // empty: endpoint order
  void setName(std::string name) { name_ = std::move(name); }
  // Builds adjacency, endpoint and level tables. The graph becomes read-only except for
  // link state and the rank mapping.
  Result finalize();
  bool finalized() const { return finalized_; }

  // ---- vertices ----
  const std::string& name() const { return name_; }
  size_t vertexCount() const { return vname_.size(); }
  const std::string& vertexName(VertexId v) const { return vname_[v]; }
  VertexKind vertexKind(VertexId v) const { return static_cast<VertexKind>(vkind_[v]); }
  VertexId parent(VertexId v) const { return vparent_[v]; }
  bool forwards(VertexId v) const { return vforwards_[v] != 0; }
  uint8_t tier(VertexId v) const { return vtier_[v]; }
  int16_t plane(VertexId v) const { return vplane_[v]; }
  VertexId findVertex(std::string_view name) const;
  // Links incident to v (after finalize).
  std::span<const LinkId> linksOf(VertexId v) const {
    return {adjLink_.data() + adjOffset_[v], adjLink_.data() + adjOffset_[v + 1]};
  }
  std::span<const VertexId> neighborsOf(VertexId v) const {
    return {adjPeer_.data() + adjOffset_[v], adjPeer_.data() + adjOffset_[v + 1]};
  }

  // ---- links ----
  size_t linkCount() const { return la_.size(); }
  VertexId linkA(LinkId l) const { return la_[l]; }
  VertexId linkB(LinkId l) const { return lb_[l]; }
  VertexId linkPeer(LinkId l, VertexId from) const { return la_[l] == from ? lb_[l] : la_[l]; }
  LinkKind linkKind(LinkId l) const { return static_cast<LinkKind>(lkind_[l]); }
  double linkLatencyUs(LinkId l) const { return llat_[l]; }
  double linkNominalGBps(LinkId l) const { return lbw_[l]; }
  // Bandwidth after health: 0 when down, nominal x factor when degraded.
  double linkBandwidthGBps(LinkId l) const {
    return lstate_[l] == uint8_t(LinkState::Down) ? 0.0 : double(lbw_[l]) * lfactor_[l];
  }
  LinkState linkState(LinkId l) const { return static_cast<LinkState>(lstate_[l]); }
  double linkFactor(LinkId l) const { return lfactor_[l]; }
  bool linkUsable(LinkId l) const { return lstate_[l] != uint8_t(LinkState::Down); }
  LinkId findLink(VertexId a, VertexId b) const;
  std::string linkName(LinkId l) const { return vname_[la_[l]] + "-" + vname_[lb_[l]]; }

  // ---- health ----
  // Down, Up, or Degraded with kMinDegradeFactor <= factor < 1 (bandwidth x factor). Bumps the epoch when
  // the link actually changes.
  Result setLinkState(LinkId l, LinkState s, double factor = 1.0);
  uint64_t epoch() const { return epoch_; }

  // ---- endpoints and levels ----
  size_t endpointCount() const { return endpoints_.size(); }
  VertexId endpointVertex(EndpointId e) const { return endpoints_[e]; }
  EndpointId endpointOf(VertexId v) const { return vendpoint_[v]; }  // kNone if not one
  int groupOf(EndpointId e, Level l) const { return int(levels_[int(l)].groupOf[e]); }
  int groupCount(Level l) const { return int(levels_[int(l)].vertex.size()); }
  std::span<const uint32_t> groupMembers(Level l, int g) const;
  // The container vertex of a group (kNone for Endpoint groups that have none).
  VertexId groupVertex(Level l, int g) const { return levels_[int(l)].vertex[g]; }
  // True when the topology places a container of this level (rather than inheriting it).
  bool levelDefined(Level l) const { return levels_[int(l)].defined; }

  // ---- ranks ----
  // Ranks 0..nranks-1 onto endpoints: in the rank order set by setRankOrder (the file's
  // rank_map), else in endpoint order. More ranks than endpoints: InvalidArgument.
  Result mapRanks(int nranks);
  // Rank r onto endpoints[r] (a comm split or shrunk from another keeps each process on its
  // endpoint): every one a distinct endpoint of this graph, else InvalidArgument.
  Result mapRanks(const std::vector<EndpointId>& endpoints);
  int rankCount() const { return int(rankEndpoint_.size()); }
  EndpointId rankEndpoint(int rank) const { return rankEndpoint_[rank]; }
  VertexId rankVertex(int rank) const { return endpoints_[rankEndpoint_[rank]]; }
  int endpointRank(EndpointId e) const { return endpointRank_[e]; }  // -1 if unmapped
  // Groups restricted to mapped ranks, numbered by their lowest rank.
  int rankGroupOf(int rank, Level l) const { return int(rankLevels_[int(l)].groupOf[rank]); }
  int rankGroupCount(Level l) const { return int(rankLevels_[int(l)].vertex.size()); }
  std::span<const uint32_t> rankGroupMembers(Level l, int g) const;
  // The levels above Endpoint whose rank grouping differs from the level below: the
  // levels a hierarchical algorithm has to deal with, finest first.
  std::vector<Level> rankLevels() const;

  // ---- routes (route.cc) ----
  // Equal-cost routes from src to dst with bottleneck bandwidth, latency and per-link
  // shares of the flow. Cached per source; valid for the epoch it was computed in.
  Result route(VertexId src, VertexId dst, Route* out) const;
  Result routeRanks(int src, int dst, Route* out) const;

 private:
  struct LevelTable {
    std::vector<uint32_t> groupOf;   // per member (endpoint or rank)
    std::vector<uint32_t> offsets;   // CSR over members, per group
    std::vector<uint32_t> members;
    std::vector<VertexId> vertex;    // container vertex per group
    bool defined = false;
  };
  static void buildLevel(LevelTable* t, const std::vector<std::array<VertexId, kNumLevels>>& keys,
                         int level);
  void buildRankLevels();

  // clone() copies every member below (a new one must be added there too);
  // tests/test_topo_cache.cc compares clones field by field.
  std::string name_;
  bool finalized_ = false;
  uint64_t epoch_ = 0;

  std::vector<std::string> vname_;
  std::vector<uint8_t> vkind_, vforwards_, vtier_;
  std::vector<int16_t> vplane_;
  std::vector<VertexId> vparent_;
  std::unordered_map<std::string, VertexId> byName_;

  std::vector<VertexId> la_, lb_;
  std::vector<float> lbw_, llat_, lfactor_;
  std::vector<uint8_t> lkind_, lstate_;
  std::unordered_map<uint64_t, LinkId> pairs_;  // duplicate check while building

  std::vector<uint32_t> adjOffset_;
  std::vector<LinkId> adjLink_;
  std::vector<VertexId> adjPeer_;

  std::vector<VertexId> endpoints_;
  std::vector<EndpointId> vendpoint_;
  std::vector<VertexId> rankOrder_;
  std::array<LevelTable, kNumLevels> levels_;

  std::vector<EndpointId> rankEndpoint_;
  std::vector<int> endpointRank_;
  std::array<LevelTable, kNumLevels> rankLevels_;

  std::unique_ptr<RouteCache, RouteCacheDeleter> routeCache_;

  // graph_binary.cc fills the arrays directly (a cache load skips the per-link hash checks
  // of addLink) and validates what it fills.
  friend struct GraphBinary;
};

}  // namespace sncl::topo
