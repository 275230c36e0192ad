// The network as the simulator sees it: every link direction of the topology graph is a
// channel with its own capacity (links are full duplex), and a route between two ranks is
// the list of channels it crosses with the fraction of the flow each carries (the graph's
// weighted ECMP split, lib/topo/route.h) plus the latency summed along it. Channels are
// grouped into classes (link kind and the tiers it joins, e.g. "bus 0-1" for NPU to leaf)
// for utilization reports.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lib/error.h"
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

  int classCount() const { return int(classNames_.size()); }
  int classOf(uint32_t ch) const { return channelClass_[ch]; }
  const std::string& className(int c) const { return classNames_[c]; }
  // Sum of the capacities of the class's channels (bytes/us).
  double classCapacity(int c) const { return classCapacity_[c]; }

 private:
  const topo::Graph& g_;
  std::vector<double> capacity_;
  std::vector<uint16_t> channelClass_;
  std::vector<std::string> classNames_;
  std::vector<double> classCapacity_;
  std::unordered_map<uint64_t, std::unique_ptr<Path>> paths_;
  size_t cachedHops_ = 0;
};

}  // namespace sncl::sim
