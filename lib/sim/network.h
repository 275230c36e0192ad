// The network as the simulator sees it: every link direction of the topology graph is a
// channel with its own capacity (links are full duplex), and a route between two ranks is
// the list of channels it crosses with the fraction of the flow each carries (the graph's
// weighted ECMP split, lib/topo/route.h) plus the latency summed along it. Channels are
// grouped into classes (link kind and the tiers it joins, e.g. "bus 0-1" for NPU to leaf)
// for utilization reports.
//
// Bundles: a route through a Clos crosses, per plane, all 64 links from its leaf up to the
// spines with the same fraction, and every other route that uses one of them uses all of
// them alike. Such parallel channels (same tail or same head, same fraction, capacity and
// class within a route) are one constraint for fair sharing, so a route lists them as one
// bundle channel (capacity the sum, fraction the sum): 32 hops instead of 1,040 across an
// 8-plane, 64-spine Clos. That is exact as long as no channel is used both inside a bundle
// and outside it (or in two different bundles); the network tracks that, and an engine
// that finds bundlingConflict() after a run runs again without bundles.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lib/base/error.h"
#include "lib/topo/graph.h"

namespace sncl::sim {

// GB/s to bytes per microsecond, the simulator's units.
inline constexpr double kBytesPerUsPerGBs = 1e3;

struct Path {
  double latencyUs = 0;
  std::vector<std::pair<uint32_t, float>> hops;  // (channel, fraction of the flow)
};

class Network {
 public:
  // g is finalized with ranks mapped; its link health at this point is what is simulated.
  explicit Network(const topo::Graph& g);

  const topo::Graph& graph() const { return g_; }
  int ranks() const { return g_.rankCount(); }
  size_t channelCount() const { return capacity_.size(); }
  double capacity(uint32_t ch) const { return capacity_[ch]; }  // bytes/us, 0 when down
  std::string channelName(uint32_t ch) const;

  // The route from rank src to rank dst (src != dst). The pointer stays valid until trim().
  // Unreachable pairs are an error naming them.
  Result path(int src, int dst, const Path** out);
  // Drops cached routes when they hold more than maxHops channel entries.
  void trim(size_t maxHops);
  // Changes whenever cached routes are dropped (paths from before are gone).
  uint64_t generation() const { return generation_; }

  // Channels past the graph's link directions are bundles (see above).
  bool bundlingConflict() const { return conflict_; }
  // Turns bundles off (or on) and forgets every route.
  void setBundling(bool on);

  int classCount() const { return int(classNames_.size()); }
  int classOf(uint32_t ch) const { return channelClass_[ch]; }
  const std::string& className(int c) const { return classNames_[c]; }
  // Sum of the capacities of the class's channels (bytes/us).
  double classCapacity(int c) const { return classCapacity_[c]; }

 private:
  struct Hop {
    uint32_t channel;
    float fraction;
    topo::VertexId from, to;
  };
  void bundle(std::vector<Hop>& hops, Path* out);
  uint32_t bundleOf(std::vector<uint32_t>& members);

  const topo::Graph& g_;
  size_t physical_ = 0;  // channels that are link directions
  bool bundling_ = true, conflict_ = false;
  // Per link direction: kFree, kSingle (used on its own) or kBundled + bundle index.
  static constexpr uint32_t kFree = 0, kSingle = 1, kBundled = 2;
  std::vector<uint32_t> owner_;
  std::map<std::vector<uint32_t>, uint32_t> bundles_;  // sorted members -> channel
  std::vector<uint32_t> firstMember_;                  // per bundle, for names
  std::vector<uint32_t> bundleSize_;
  std::vector<double> capacity_;
  std::vector<uint16_t> channelClass_;
  std::vector<std::string> classNames_;
  std::vector<double> classCapacity_;
  std::unordered_map<uint64_t, std::unique_ptr<Path>> paths_;
  size_t cachedHops_ = 0;
  uint64_t generation_ = 1;
};

}  // namespace sncl::sim
