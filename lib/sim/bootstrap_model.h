// The comm init's bootstrap at N ranks, modeled: the messages every rank sends in the
// rendezvous and in each all-gather of the init, counted with the bootstrap's own tree
// (lib/base/gather_tree.h, which lib/net/bootstrap_tree.cc runs), and timed on a host
// network of one latency and one bandwidth per rank.
//
// Assumption (the topologies describe the scale-up and scale-out fabrics, not the host
// network the bootstrap's TCP runs on): every message costs latencyUs + bytes / gbs, a rank
// sends one message at a time (the bootstrap's sends are blocking), and a new connection
// costs one more latency (the rendezvous opens the tree's parent -> child connections, the
// first all-gather the child -> parent ones). The root receives the n hellos through one NIC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/base/error.h"

namespace sncl::sim {

struct BootstrapNet {
  double latencyUs = 25;  // one small TCP message, host stack included
  double gbs = 12.5;      // a rank's share of its host's NIC (100 Gb/s)
};

// What commInit exchanges over the bootstrap on a topology-file comm over the bus
// transport (lib/comm/comm.cc, transports/bus): peer info + nonce, the transport masks,
// the bus records, the bus statuses.
std::vector<size_t> initGatherBytes();

struct BootstrapModel {
  int nranks = 0;
  int depth = 0;                      // tree levels below the root (floor(log2 n))
  uint64_t maxMessages = 0;           // per rank, sent + received, rendezvous included
  double meanMessages = 0;
  uint64_t totalMessages = 0;         // sent, all ranks, rendezvous included
  std::vector<uint64_t> sentPerLevel;  // messages sent by the ranks at each tree depth
  double bytes = 0;                   // payload sent, all ranks, rendezvous included
  double rootBytes = 0;               // what the rendezvous root sends (one table, to rank 0)
  double maxRendezvousBytes = 0;      // the most one rank sends in the rendezvous (rank 0)
  double rendezvousUs = 0;
  double gatherUs = 0;                // the all-gathers, one after another
  double timeUs = 0;                  // rendezvous + all-gathers
};

// Per rank, one all-gather of bytesPerRank: messages sent and received, bytes sent.
struct RankTraffic {
  uint64_t sent = 0, received = 0, bytesSent = 0;
};
RankTraffic allGatherTraffic(int rank, int nranks, size_t bytesPerRank);

// Per rank, the rendezvous: the hello to the root, the table received and passed on to
// each tree child (what Bootstrap::traffic() counts right after connect).
RankTraffic rendezvousTraffic(int rank, int nranks);

// One all-gather's duration on net (the tree's critical path); connectingUp: its
// child -> parent connections are new (the first all-gather).
double allGatherUs(int nranks, size_t bytesPerRank, const BootstrapNet& net, bool connectingUp);

Result modelBootstrap(int nranks, const std::vector<size_t>& gatherBytes, const BootstrapNet& net,
                      BootstrapModel* out);

}  // namespace sncl::sim
