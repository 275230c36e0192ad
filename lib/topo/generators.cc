#include "lib/topo/generators.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace sncl::topo {
namespace {

// Adds vertices named prefix + local name, and links with a LinkSpec.
class Builder {
 public:
  Builder(Graph& g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {}
  Result vertex(const std::string& local, VertexAttrs a, VertexId* out) {
    return g_.addVertex(prefix_ + local, a, out);
  }
  Result link(VertexId a, VertexId b, const LinkSpec& s) {
    return g_.addLink(a, b, LinkAttrs{s.bwGBps, s.latUs, s.kind});
  }
  Graph& graph() { return g_; }

 private:
  Graph& g_;
  std::string prefix_;
};

VertexAttrs attrs(VertexKind kind, VertexId parent, int tier = 0, int plane = -1,
                  int forwards = -1) {
  VertexAttrs a;
  a.kind = kind;
  a.parent = parent;
  a.tier = uint8_t(tier);
  a.plane = int16_t(plane);
  a.forwards = forwards;
  return a;
}

int ceilDiv(int a, int b) { return (a + b - 1) / b; }

Result genFullMesh(Graph& g, const FullMeshParams& p, VertexId parent, VertexId* container) {
  Builder b(g, p.prefix);
  SNCL_CHECK(g.addVertex(p.name, attrs(VertexKind::Supernode, parent), container));
  int perNode = p.perNode > 0 ? p.perNode : p.endpoints;
  std::vector<VertexId> eps(p.endpoints);
  VertexId node = kNone;
  for (int i = 0; i < p.endpoints; ++i) {
    if (i % perNode == 0)
      SNCL_CHECK(b.vertex(fmt::format("n{}", i / perNode), attrs(VertexKind::Node, *container), &node));
    SNCL_CHECK(b.vertex(fmt::format("n{}.e{}", i / perNode, i % perNode),
                        attrs(VertexKind::Endpoint, node, 0, -1, 1), &eps[i]));
  }
  for (int i = 0; i < p.endpoints; ++i)
    for (int j = i + 1; j < p.endpoints; ++j) SNCL_CHECK(b.link(eps[i], eps[j], p.link));
  return snclSuccess;
}

Result genClos(Graph& g, const ClosParams& p, VertexId parent, VertexId* container) {
  Builder b(g, p.prefix);
  SNCL_CHECK(g.addVertex(p.name, attrs(VertexKind::Supernode, parent), container));
  bool racks = p.nodesPerRack > 1;  // leaves per rack, else per node
  LinkSpec up = p.uplink;
  if (up.bwGBps <= 0 && p.spines > 0)  // non-blocking: a leaf's uplinks match its downlinks
    up.bwGBps = p.link.bwGBps * p.perNode * (racks ? std::min(p.nodes, p.nodesPerRack) : 1) / p.spines;

  std::vector<VertexId> spines(size_t(p.planes) * p.spines);
  for (int pl = 0; pl < p.planes; ++pl)
    for (int s = 0; s < p.spines; ++s)
      SNCL_CHECK(b.vertex(fmt::format("l2p{}.s{}", pl, s),
                          attrs(VertexKind::Switch, *container, 2, pl), &spines[pl * p.spines + s]));
  std::vector<VertexId> leaves(p.planes);
  VertexId rack = kNone;
  for (int n = 0; n < p.nodes; ++n) {
    bool newGroup = !racks || n % p.nodesPerRack == 0;
    if (racks && newGroup)
      SNCL_CHECK(b.vertex(fmt::format("r{}", n / p.nodesPerRack),
                          attrs(VertexKind::Rack, *container), &rack));
    VertexId node;
    SNCL_CHECK(b.vertex(fmt::format("n{}", n), attrs(VertexKind::Node, racks ? rack : *container), &node));
    if (newGroup) {
      std::string owner = racks ? fmt::format("r{}", n / p.nodesPerRack) : fmt::format("n{}", n);
      for (int pl = 0; pl < p.planes; ++pl) {
        SNCL_CHECK(b.vertex(fmt::format("{}.l1p{}", owner, pl),
                            attrs(VertexKind::Switch, racks ? rack : node, 1, pl), &leaves[pl]));
        for (int s = 0; s < p.spines; ++s)
          SNCL_CHECK(b.link(leaves[pl], spines[pl * p.spines + s], up));
      }
    }
    for (int e = 0; e < p.perNode; ++e) {
      VertexId ep;
      SNCL_CHECK(b.vertex(fmt::format("n{}.e{}", n, e), attrs(VertexKind::Endpoint, node), &ep));
      for (int pl = 0; pl < p.planes; ++pl) SNCL_CHECK(b.link(ep, leaves[pl], p.link));
    }
  }
  return snclSuccess;
}

Result genTorus(Graph& g, const TorusParams& p, VertexId parent, VertexId* container) {
  Builder b(g, p.prefix);
  SNCL_CHECK(g.addVertex(p.name, attrs(VertexKind::Supernode, parent), container));
  int dims[3] = {1, 1, 1};
  for (size_t d = 0; d < p.dims.size(); ++d) dims[d] = p.dims[d];
  int total = dims[0] * dims[1] * dims[2];
  std::vector<VertexId> eps(total);
  VertexId node = *container;
  for (int i = 0; i < total; ++i) {
    if (p.perNode > 1 && i % p.perNode == 0)
      SNCL_CHECK(b.vertex(fmt::format("n{}", i / p.perNode), attrs(VertexKind::Node, *container), &node));
    int x = i % dims[0], y = (i / dims[0]) % dims[1], z = i / (dims[0] * dims[1]);
    std::string nm = p.dims.size() == 1   ? fmt::format("e{}", x)
                     : p.dims.size() == 2 ? fmt::format("e{}.{}", x, y)
                                          : fmt::format("e{}.{}.{}", x, y, z);
    SNCL_CHECK(b.vertex(nm, attrs(VertexKind::Endpoint, node, 0, -1, 1), &eps[i]));
  }
  int stride[3] = {1, dims[0], dims[0] * dims[1]};
  for (int i = 0; i < total; ++i) {
    int c[3] = {i % dims[0], (i / dims[0]) % dims[1], i / (dims[0] * dims[1])};
    for (int d = 0; d < 3; ++d) {
      int s = dims[d];
      if (c[d] + 1 < s) SNCL_CHECK(b.link(eps[i], eps[i + stride[d]], p.link));
      // A ring of two already has its only link; wrapping it would duplicate it.
      if (p.wrap && s >= 3 && c[d] == s - 1)
        SNCL_CHECK(b.link(eps[i], eps[i - (s - 1) * stride[d]], p.link));
    }
  }
  return snclSuccess;
}

Result genFatTree(Graph& g, const FatTreeParams& p, VertexId parent, VertexId* container) {
  Builder b(g, p.prefix);
  SNCL_CHECK(g.addVertex(p.name, attrs(VertexKind::Cluster, parent), container));
  int half = p.k / 2;
  std::vector<VertexId> cores(size_t(half) * half);
  for (int c = 0; c < half * half; ++c)
    SNCL_CHECK(b.vertex(fmt::format("core{}", c), attrs(VertexKind::Switch, *container, 3), &cores[c]));
  for (int pod = 0; pod < p.k; ++pod) {
    VertexId podV;
    SNCL_CHECK(b.vertex(fmt::format("pod{}", pod), attrs(VertexKind::Rack, *container), &podV));
    std::vector<VertexId> aggs(half);
    for (int a = 0; a < half; ++a) {
      SNCL_CHECK(b.vertex(fmt::format("pod{}.agg{}", pod, a), attrs(VertexKind::Switch, podV, 2), &aggs[a]));
      for (int c = 0; c < half; ++c) SNCL_CHECK(b.link(aggs[a], cores[a * half + c], p.uplink));
    }
    for (int e = 0; e < half; ++e) {
      VertexId edge;
      SNCL_CHECK(b.vertex(fmt::format("pod{}.edge{}", pod, e), attrs(VertexKind::Switch, podV, 1), &edge));
      for (int a = 0; a < half; ++a) SNCL_CHECK(b.link(edge, aggs[a], p.uplink));
      for (int h = 0; h < half; ++h) {
        VertexId ep;
        SNCL_CHECK(b.vertex(fmt::format("pod{}.e{}.h{}", pod, e, h), attrs(VertexKind::Endpoint, podV), &ep));
        SNCL_CHECK(b.link(ep, edge, p.link));
      }
    }
  }
  return snclSuccess;
}

Result genHosts(Graph& g, const HostsParams& p, VertexId parent, VertexId* container) {
  Builder b(g, p.prefix);
  SNCL_CHECK(g.addVertex(p.name, attrs(VertexKind::Cluster, parent), container));
  VertexId sw = kNone;
  if (p.hosts.size() > 1)
    SNCL_CHECK(b.vertex("switch", attrs(VertexKind::Switch, *container, 1), &sw));
  for (const auto& h : p.hosts) {
    VertexId host;
    SNCL_CHECK(b.vertex(h.name, attrs(VertexKind::Node, *container, 0, -1, 1), &host));
    if (sw != kNone) SNCL_CHECK(b.link(host, sw, p.nic));
    std::vector<VertexId> numa;
    for (int k = 0; h.numaNodes > 1 && k < h.numaNodes; ++k) {
      numa.emplace_back();
      SNCL_CHECK(b.vertex(fmt::format("{}.numa{}", h.name, k), attrs(VertexKind::Numa, host), &numa.back()));
      SNCL_CHECK(b.link(numa.back(), host, p.numa));
    }
    for (const auto& [suffix, numaIndex] : h.endpoints) {
      VertexId at = numa.empty() ? host : numa[std::clamp(numaIndex, 0, int(numa.size()) - 1)];
      VertexId ep;
      SNCL_CHECK(b.vertex(h.name + "." + suffix, attrs(VertexKind::Endpoint, at), &ep));
      SNCL_CHECK(b.link(ep, at, p.shm));
    }
  }
  return snclSuccess;
}

Result genCluster(Graph& g, const ClusterParams& p, VertexId parent, VertexId* container) {
  Builder b(g, p.prefix);
  SNCL_CHECK(g.addVertex(p.name, attrs(VertexKind::Cluster, parent), container));
  size_t firstVertex = g.vertexCount();
  for (int s = 0; s < p.supernodes; ++s) {
    SupernodeParams sp = p.supernode;
    std::visit([&](auto& q) {
      q.name = p.prefix + fmt::format("sn{}", s);
      q.prefix = p.prefix + fmt::format("sn{}/", s);
    }, sp);
    SNCL_CHECK(std::visit([&](const auto& q) { return generate(g, q, *container); }, sp));
  }
  // Rail order: (index within the endpoint's node, then endpoint order).
  struct Rail {
    int local;
    VertexId v;
  };
  std::vector<Rail> rails;
  std::unordered_map<VertexId, int> perParent;
  for (size_t v = firstVertex; v < g.vertexCount(); ++v)
    if (g.vertexKind(VertexId(v)) == VertexKind::Endpoint)
      rails.push_back({perParent[g.parent(VertexId(v))]++, VertexId(v)});
  std::stable_sort(rails.begin(), rails.end(), [](const Rail& a, const Rail& b) { return a.local < b.local; });

  const ScaleOutParams& so = p.scaleout;
  int leaves = ceilDiv(int(rails.size()), so.endpointsPerLeaf);
  LinkSpec up = so.uplink;
  if (up.bwGBps <= 0 && so.spines > 0)  // non-blocking for a full leaf
    up.bwGBps = so.nic.bwGBps * std::min<double>(so.endpointsPerLeaf, rails.size()) / so.spines;
  std::vector<VertexId> spines(so.spines);
  for (int s = 0; s < so.spines; ++s)
    SNCL_CHECK(b.vertex(fmt::format("net.spine{}", s), attrs(VertexKind::Switch, *container, 2), &spines[s]));
  for (int l = 0; l < leaves; ++l) {
    VertexId leaf;
    SNCL_CHECK(b.vertex(fmt::format("net.leaf{}", l), attrs(VertexKind::Switch, *container, 1), &leaf));
    for (VertexId s : spines) SNCL_CHECK(b.link(leaf, s, up));
    size_t lo = size_t(l) * so.endpointsPerLeaf, hi = std::min(rails.size(), lo + so.endpointsPerLeaf);
    for (size_t i = lo; i < hi; ++i) SNCL_CHECK(b.link(rails[i].v, leaf, so.nic));
  }
  return snclSuccess;
}

double supernodeEndpoints(const SupernodeParams& p) {
  return std::visit([](const auto& q) {
    using T = std::decay_t<decltype(q)>;
    if constexpr (std::is_same_v<T, FullMeshParams>) return double(q.endpoints);
    else if constexpr (std::is_same_v<T, ClosParams>) return double(q.nodes) * q.perNode;
    else if constexpr (std::is_same_v<T, TorusParams>) {
      double n = 1;
      for (int d : q.dims) n *= d;
      return n;
    } else return double(q.k) * q.k * q.k / 4;
  }, p);
}

}  // namespace

HostsParams uniformHosts(int hosts, int perHost, int numaNodes) {
  HostsParams p;
  for (int h = 0; h < hosts; ++h) {
    HostsParams::Host host;
    host.name = fmt::format("h{}", h);
    host.numaNodes = numaNodes;
    int block = std::max(1, ceilDiv(perHost, std::max(1, numaNodes)));
    for (int r = 0; r < perHost; ++r) host.endpoints.emplace_back(fmt::format("r{}", r), r / block);
    p.hosts.push_back(std::move(host));
  }
  return p;
}

GenSize sizeOf(const GeneratorParams& gp) {
  return std::visit([](const auto& p) -> GenSize {
    using T = std::decay_t<decltype(p)>;
    if constexpr (std::is_same_v<T, FullMeshParams>) {
      double n = p.endpoints, per = p.perNode > 0 ? p.perNode : std::max(1, p.endpoints);
      return {1 + std::ceil(n / per) + n, n * (n - 1) / 2};
    } else if constexpr (std::is_same_v<T, ClosParams>) {
      double e = double(p.nodes) * p.perNode;
      double groups = p.nodesPerRack > 1 ? std::ceil(double(p.nodes) / p.nodesPerRack) : 0;
      double leafGroups = groups > 0 ? groups : p.nodes;
      return {1 + p.nodes + groups + e + leafGroups * p.planes + double(p.planes) * p.spines,
              e * p.planes + leafGroups * p.planes * p.spines};
    } else if constexpr (std::is_same_v<T, TorusParams>) {
      double n = 1;
      for (int d : p.dims) n *= d;
      return {1 + (p.perNode > 1 ? std::ceil(n / p.perNode) : 0) + n, n * double(p.dims.size())};
    } else if constexpr (std::is_same_v<T, FatTreeParams>) {
      double k = p.k;
      return {1 + k + k * k * k / 4 + 5 * k * k / 4, 3 * k * k * k / 4};
    } else if constexpr (std::is_same_v<T, HostsParams>) {
      GenSize s{2, 0};
      for (const auto& h : p.hosts) {
        double numa = h.numaNodes > 1 ? h.numaNodes : 0;
        s.vertices += 1 + numa + double(h.endpoints.size());
        s.links += 1 + numa + double(h.endpoints.size());
      }
      return s;
    } else {
      GenSize sn = std::visit([](const auto& q) { return sizeOf(GeneratorParams(q)); }, p.supernode);
      double e = supernodeEndpoints(p.supernode) * p.supernodes;
      double leaves = std::ceil(e / std::max(1, p.scaleout.endpointsPerLeaf));
      return {1 + sn.vertices * p.supernodes + leaves + p.scaleout.spines,
              sn.links * p.supernodes + e + leaves * p.scaleout.spines};
    }
  }, gp);
}

std::string checkParams(const GeneratorParams& gp) {
  return std::visit([](const auto& p) -> std::string {
    using T = std::decay_t<decltype(p)>;
    if constexpr (std::is_same_v<T, ClosParams>) {
      int groups = p.nodesPerRack > 1 ? ceilDiv(p.nodes, p.nodesPerRack) : p.nodes;
      if (p.spines == 0 && groups > 1)
        return fmt::format("spines is 0 but there are {} leaf groups: they would not be connected", groups);
    } else if constexpr (std::is_same_v<T, TorusParams>) {
      if (p.dims.empty() || p.dims.size() > 3) return "dims must have 1 to 3 sizes";
    } else if constexpr (std::is_same_v<T, FatTreeParams>) {
      if (p.k < 2 || p.k % 2) return fmt::format("k must be even and >= 2, not {}", p.k);
    } else if constexpr (std::is_same_v<T, ClusterParams>) {
      std::string inner = std::visit([](const auto& q) { return checkParams(GeneratorParams(q)); }, p.supernode);
      if (!inner.empty()) return "supernode: " + inner;
      double e = supernodeEndpoints(p.supernode) * p.supernodes;
      if (p.scaleout.spines == 0 && e > p.scaleout.endpointsPerLeaf)
        return "scaleout spines is 0 but there is more than one leaf";
    }
    return {};
  }, gp);
}

Result generate(Graph& g, const GeneratorParams& gp, VertexId parent, VertexId* container) {
  std::string problem = checkParams(gp);
  if (!problem.empty()) return fail(snclInvalidArgument, "topology generator: {}", problem);
  VertexId c = kNone;
  Result r = std::visit([&](const auto& p) {
    using T = std::decay_t<decltype(p)>;
    if constexpr (std::is_same_v<T, FullMeshParams>) return genFullMesh(g, p, parent, &c);
    else if constexpr (std::is_same_v<T, ClosParams>) return genClos(g, p, parent, &c);
    else if constexpr (std::is_same_v<T, TorusParams>) return genTorus(g, p, parent, &c);
    else if constexpr (std::is_same_v<T, FatTreeParams>) return genFatTree(g, p, parent, &c);
    else if constexpr (std::is_same_v<T, HostsParams>) return genHosts(g, p, parent, &c);
    else return genCluster(g, p, parent, &c);
  }, gp);
  if (container) *container = c;
  return r;
}

}  // namespace sncl::topo
