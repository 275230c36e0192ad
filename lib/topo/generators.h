// Generators: common system shapes as a few parameters instead of thousands of vertices.
// Each adds its vertices and links to a graph under an optional name prefix, inside one
// container vertex of its own (a supernode or a cluster) that may itself sit in a parent
// (a cluster nesting supernodes). docs/topology.md lists the names they produce.
//
// Bandwidths are GB/s per direction, latencies microseconds per hop.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "lib/topo/graph.h"

namespace sncl::topo {

struct LinkSpec {
  double bwGBps = 0;
  double latUs = 0;
  LinkKind kind = LinkKind::Bus;
};

// Every endpoint linked to every other (an 8-GPU box, a small bus). Endpoints forward,
// so a down link is routed around through a third endpoint.
struct FullMeshParams {
  std::string name = "mesh";
  std::string prefix;
  int endpoints = 0;
  int perNode = 0;  // endpoints per node; 0: all in one node
  LinkSpec link{100, 0.5, LinkKind::Bus};
};

// Two-tier Clos, one per plane (a supernode's bus): every endpoint has one link into each
// plane's leaf switch of its node (or rack), each leaf links to every spine of its plane.
struct ClosParams {
  std::string name = "supernode";
  std::string prefix;
  int nodes = 0;
  int perNode = 0;
  int nodesPerRack = 1;  // > 1: leaves are per rack, and Rack vertices group the nodes
  int planes = 1;
  int spines = 1;        // per plane; 0 only when there is a single leaf group
  LinkSpec link{50, 0.2, LinkKind::Bus};    // endpoint - leaf, per plane
  LinkSpec uplink{0, 0.3, LinkKind::Bus};   // leaf - spine; bw 0: non-blocking
};

// 1-, 2- or 3-D torus of endpoints (x varies fastest). Endpoints forward.
struct TorusParams {
  std::string name = "torus";
  std::string prefix;
  std::vector<int> dims;
  bool wrap = true;
  int perNode = 1;  // consecutive endpoints grouped into nodes when > 1
  LinkSpec link{50, 0.5, LinkKind::Bus};
};

// k-ary fat tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation switches,
// (k/2)^2 core switches, k^3/4 endpoints. Pods are racks.
struct FatTreeParams {
  std::string name = "fattree";
  std::string prefix;
  int k = 0;
  LinkSpec link{12.5, 1.0, LinkKind::Net};    // endpoint - edge
  LinkSpec uplink{12.5, 1.0, LinkKind::Net};  // edge - aggregation - core
};

// Hosts with ranks on NUMA nodes, joined by one network switch: the lab layout, and the
// shape of a machine merged from hwloc views.
struct HostsParams {
  struct Host {
    std::string name;
    int numaNodes = 1;
    std::vector<std::pair<std::string, int>> endpoints;  // name suffix, NUMA index
  };
  std::string name = "lab";
  std::string prefix;
  std::vector<Host> hosts;
  LinkSpec shm{20, 0.5, LinkKind::Shm};    // endpoint - its NUMA node (or host)
  LinkSpec numa{30, 0.3, LinkKind::Shm};   // NUMA node - host (between sockets)
  LinkSpec nic{12.5, 2.0, LinkKind::Net};  // host - switch
};
// `hosts` hosts of `perHost` endpoints named h<j>.r<i>, spread over numaNodes in blocks.
HostsParams uniformHosts(int hosts, int perHost, int numaNodes);

// Supernodes joined by a rail-optimized two-tier scale-out network: endpoints are ordered
// by (index within their node, supernode, node), cut into leaves of endpointsPerLeaf, and
// every leaf links to every spine.
struct ScaleOutParams {
  int endpointsPerLeaf = 32;
  int spines = 1;
  LinkSpec nic{50, 2.0, LinkKind::Net};     // endpoint - leaf
  LinkSpec uplink{0, 1.0, LinkKind::Net};   // leaf - spine; bw 0: non-blocking
};
using SupernodeParams = std::variant<FullMeshParams, ClosParams, TorusParams, FatTreeParams>;
struct ClusterParams {
  std::string name = "cluster";
  std::string prefix;
  int supernodes = 1;
  SupernodeParams supernode;  // each named sn<i> with prefix sn<i>/
  ScaleOutParams scaleout;
};

using GeneratorParams =
    std::variant<FullMeshParams, ClosParams, TorusParams, FatTreeParams, HostsParams, ClusterParams>;

// Vertex and link counts a generator will add, computed without building (in double so
// that absurd parameters cannot overflow): the file parser checks them against its limits.
struct GenSize {
  double vertices = 0;
  double links = 0;
};
GenSize sizeOf(const GeneratorParams& p);

// Checks parameters that do not fit the shape (a spine-less Clos with several leaves, an
// odd fat-tree k...). Returns the problem or an empty string.
std::string checkParams(const GeneratorParams& p);

// Adds the shape to g inside a new container vertex (child of parent, may be kNone).
Result generate(Graph& g, const GeneratorParams& p, VertexId parent = kNone,
                VertexId* container = nullptr);

}  // namespace sncl::topo
