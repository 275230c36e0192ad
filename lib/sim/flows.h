// Bandwidth sharing: max-min fair rates of concurrent flows over the network's channels.
//
// Model (the same one the emulated bus applies): every link direction has its own capacity,
// shared by the flows crossing it. A flow that crosses a channel with fraction f (its ECMP
// share there) uses f x its rate of that channel's capacity. Rates are max-min fair,
// computed by progressive filling: all unfrozen flows grow at one rate until some channel is
// full; the flows crossing it are frozen at that rate (that channel is their bottleneck);
// repeat. O(hops x log channels) per solve. A lone flow gets exactly its route's bandwidth (topo::Route::bandwidthGBps).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lib/sim/network.h"

namespace sncl::sim {

class FairShare {
 public:
  explicit FairShare(const Network& net);

  // rates[i] (bytes/us) and bottleneck[i] (channel) of flows[i]. A flow with no channels
  // (never produced by Network::path) would get an infinite rate.
  void solve(std::span<const Path* const> flows, std::vector<double>* rates, std::vector<uint32_t>* bottleneck);

 private:
  const Network& net_;
  // Per channel, valid where stamp_ == gen_: remaining capacity, summed fractions of the
  // unfrozen flows crossing it, and its index among this solve's channels.
  std::vector<double> weight_;
  std::vector<uint32_t> stamp_, local_;
  uint32_t gen_ = 0;
  std::vector<uint32_t> channels_, offsets_, members_, fill_;
  std::vector<uint8_t> frozen_;
  // Per channel of this solve (by local index): load of frozen flows, and a version that
  // invalidates older heap entries.
  std::vector<double> frozenLoad_;
  std::vector<uint32_t> version_, dirty_;
  struct Fill {
    double level;
    uint32_t channel;  // local index
    uint32_t version;
    bool operator>(const Fill& o) const { return level > o.level; }
  };
  std::vector<Fill> heap_;
};

}  // namespace sncl::sim
