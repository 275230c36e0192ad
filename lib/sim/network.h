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
// bundle channel: 32 hops instead of 1,040 across an 8-plane, 64-spine Clos. A bundle has
// one member's capacity and a route one member's fraction of it (multiplicity() members
// carry bytes), so fair shares are the unbundled ones bit for bit; summed capacities and
// fractions in float were off by up to 6e-8 where a bundle has 3 or 7 members. That is exact as long as no channel is used both inside a bundle
// and outside it (or in two different bundles); the network tracks that (bundlingConflict()).
//
// A link down breaks that: NPU n0.e0's plane-0 link gone, every route into it uses the
// other 7 uplinks of its neighbours as one group, every other route all 8, so each of those
// uplinks sits in two bundles. While bundling, the network therefore records per channel
// which (route, group) held it; refineBundles() then splits every group into the channels
// that all routes used alike ({p0} and {p1..p7} above), which is exact again, with bundles
// kept wherever nothing overlapped. runBundled() is the engines' sequence: bundles, refined
// bundles if they overlapped, none if even those did (a route the first run did not see).
#pragma once

#include <cstdint>
#include <functional>
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

class FairShare;

struct Path {
  double latencyUs = 0;
  std::vector<std::pair<uint32_t, float>> hops;  // (channel, fraction of the flow)
};

class Network {
 public:
  // g is finalized with ranks mapped; its link health at this point is what is simulated.
  explicit Network(const topo::Graph& g);
  ~Network();

  const topo::Graph& graph() const { return g_; }
  int ranks() const { return g_.rankCount(); }
  size_t channelCount() const { return capacity_.size(); }
  double capacity(uint32_t ch) const { return capacity_[ch]; }  // bytes/us, 0 when down
  // Link directions a channel stands for: a bundle's members, else 1.
  double multiplicity(uint32_t ch) const { return ch < physical_ ? 1.0 : double(bundleSize_[ch - physical_]); }
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
  // Turns bundles off (or on) and forgets every route and what refineBundles() learned.
  void setBundling(bool on);
  // Bundles again, split by how the routes since setBundling(true) used their channels
  // (see above); forgets every route.
  void refineBundles();
  // The engines' fair-share solver, kept with the network: its per-channel scratch is
  // O(channels), allocated once for a network simulated many times (the layout search's).
  FairShare& fairShare();

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
  void bundle(uint64_t key, std::vector<Hop>& hops, Path* out);
  uint32_t bundleOf(std::vector<uint32_t>& members);
  void forgetRoutes();

  const topo::Graph& g_;
  size_t physical_ = 0;  // channels that are link directions
  bool bundling_ = true, conflict_ = false;
  bool refined_ = false;  // bundles split by usage_ (refineBundles)
  // Per link direction, while bundling unrefined: a hash of every (route, group) that
  // held it, kAlone where some route used it on its own.
  static constexpr uint64_t kAlone = 0;
  std::vector<uint64_t> usage_;
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
  std::unique_ptr<FairShare> fairShare_;
};

// One run of an engine under opts.bundle: with bundles, then, if they overlapped, refined
// ones, then none (each run starts from a cleared *out). `runs` counts the runs made.
Result runBundled(Network& net, bool bundle, const std::function<Result()>& once, uint32_t* runs);

}  // namespace sncl::sim
