#include "lib/sim/bootstrap_model.h"

#include <algorithm>

#include "lib/base/gather_tree.h"

namespace sncl::sim {
namespace {

// The rendezvous (lib/net/bootstrap_rendezvous.cc): a hello to the root, the table of every
// rank's listen address from the root to rank 0 and down the tree; the address is a
// sockaddr_in6-sized union.
constexpr size_t kHelloBytes = 4 + 16 + 4 + 4 + 28;
constexpr size_t kAddressBytes = 28;
constexpr size_t kMaxRanks = size_t(1) << 20;  // the bootstrap's limit

int depthOf(int rank) {
  int d = 0;
  for (int r = rank; r > 0; r = gather_tree::parent(r)) ++d;
  return d;
}

}  // namespace

std::vector<size_t> initGatherBytes() {
  // PeerInfo (88) + nonce + CpuSummary (16) + the progress board SharedRef (32) + the
  // inherited endpoint (8); uint64_t transport mask; bus Record {int32, char[92]}; int32 status.
  return {152, 8, 96, 4};
}

RankTraffic allGatherTraffic(int rank, int nranks, size_t bytesPerRank) {
  RankTraffic t;
  t.sent = uint64_t(gather_tree::messagesSent(rank, nranks));
  t.received = uint64_t(gather_tree::messagesReceived(rank, nranks));
  const uint64_t kids = gather_tree::children(rank, nranks).size();
  t.bytesSent = kids * uint64_t(nranks) * bytesPerRank;
  if (rank > 0) t.bytesSent += uint64_t(gather_tree::subtreeSize(rank, nranks)) * bytesPerRank;
  return t;
}

namespace {

// The tree's broadcast of `bytes` from rank 0, which holds it at time `start`: each rank
// sends to its children one after another, the largest subtree first. Returns when the last
// rank has it (and every rank has finished sending).
double broadcastUs(int nranks, double bytes, double perUs, double lat, double start) {
  std::vector<double> arrive(size_t(nranks), 0);
  double done = start;
  for (int r = 0; r < nranks; ++r) {  // a parent's rank is lower than its children's
    double t = r == 0 ? start : arrive[size_t(r)];
    auto kids = gather_tree::children(r, nranks);
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
      t += bytes / perUs;
      arrive[size_t(*it)] = t + lat;
    }
    done = std::max(done, r == 0 ? t : std::max(t, arrive[size_t(r)]));
  }
  return done;
}

}  // namespace

RankTraffic rendezvousTraffic(int rank, int nranks) {
  RankTraffic t;
  const uint64_t kids = gather_tree::children(rank, nranks).size();
  t.sent = 1 + kids;  // the hello, and the table to each child
  t.received = 1;     // the table, from the root (rank 0) or the tree parent
  t.bytesSent = kHelloBytes + kids * uint64_t(nranks) * kAddressBytes;
  return t;
}

double allGatherUs(int nranks, size_t bytesPerRank, const BootstrapNet& net, bool connectingUp) {
  const double perUs = net.gbs * 1e3;  // bytes per microsecond
  const double latUp = net.latencyUs * (connectingUp ? 2 : 1);
  std::vector<double> arriveUp(size_t(nranks), 0), gatherEnd(size_t(nranks), 0);
  // Children have higher ranks than their parent: walk down for the gather...
  for (int r = nranks - 1; r >= 0; --r) {
    double t = 0;
    for (int c : gather_tree::children(r, nranks)) t = std::max(t, arriveUp[size_t(c)]);
    gatherEnd[size_t(r)] = t;
    arriveUp[size_t(r)] = t + latUp + double(gather_tree::subtreeSize(r, nranks)) * double(bytesPerRank) / perUs;
  }
  // ...and up for the broadcast, on the parent -> child connections the rendezvous opened.
  return broadcastUs(nranks, double(nranks) * double(bytesPerRank), perUs, net.latencyUs, gatherEnd[0]);
}

Result modelBootstrap(int nranks, const std::vector<size_t>& gatherBytes, const BootstrapNet& net,
                      BootstrapModel* out) {
  if (nranks < 1 || size_t(nranks) > kMaxRanks)
    return fail(snclInvalidArgument, "bootstrap model: nranks {} is not in 1..{}", nranks, kMaxRanks);
  if (!(net.latencyUs >= 0) || !(net.gbs > 0))
    return fail(snclInvalidArgument, "bootstrap model: latency {} us and bandwidth {} GB/s must be >= 0 and > 0",
                net.latencyUs, net.gbs);
  BootstrapModel m;
  m.nranks = nranks;
  const double perUs = net.gbs * 1e3;
  // Rendezvous: every hello into the root's NIC, the table to rank 0, then down the tree
  // over new connections (a connect costs one more latency).
  const double table = double(nranks) * double(kAddressBytes);
  m.rootBytes = table;
  const double atRank0 = 2 * net.latencyUs + double(nranks) * double(kHelloBytes) / perUs + table / perUs;
  m.rendezvousUs = broadcastUs(nranks, table, perUs, 2 * net.latencyUs, atRank0);
  uint64_t sumMessages = 0;
  for (int r = 0; r < nranks; ++r) {
    const RankTraffic rv = rendezvousTraffic(r, nranks);
    uint64_t mine = rv.sent + rv.received, sent = rv.sent;
    double bytes = double(rv.bytesSent);
    m.maxRendezvousBytes = std::max(m.maxRendezvousBytes, bytes);
    for (size_t b : gatherBytes) {
      RankTraffic t = allGatherTraffic(r, nranks, b);
      mine += t.sent + t.received;
      sent += t.sent;
      bytes += double(t.bytesSent);
    }
    const size_t level = size_t(depthOf(r));
    if (m.sentPerLevel.size() <= level) m.sentPerLevel.resize(level + 1, 0);
    m.sentPerLevel[level] += sent;
    m.depth = std::max(m.depth, int(level));
    m.maxMessages = std::max(m.maxMessages, mine);
    sumMessages += mine;
    m.totalMessages += sent;
    m.bytes += bytes;
  }
  m.bytes += m.rootBytes;
  m.totalMessages += 1;  // the root's table to rank 0
  m.meanMessages = double(sumMessages) / nranks;
  for (size_t i = 0; i < gatherBytes.size(); ++i) m.gatherUs += allGatherUs(nranks, gatherBytes[i], net, /*connectingUp=*/i == 0);
  m.timeUs = m.rendezvousUs + m.gatherUs;
  *out = std::move(m);
  return snclSuccess;
}

}  // namespace sncl::sim
