// What a topology amounts to: counts per kind and level, per-endpoint injection bandwidth,
// and bisection bandwidth.
//
// Bisection: endpoints are cut in two halves in endpoint order (the first half of the
// nodes, racks, supernodes as the generators lay them out; for a torus, the lower half of
// its last dimension), and the bandwidth is the maximum flow from the first half to the
// second over usable links (degraded ones at their reduced bandwidth), one direction, with
// endpoints that do not forward only sending (first half) or receiving (second half). For
// the generated shapes that order is a minimum bisection, so the figure is the textbook
// one; for an arbitrary file it is the bandwidth across that particular cut.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "lib/topo/graph.h"

namespace sncl::topo {

struct Summary {
  std::array<size_t, kNumVertexKinds> vertices{};
  std::array<size_t, kNumLinkKinds> links{};
  size_t linksDown = 0, linksDegraded = 0;
  struct LevelCount {
    Level level;
    bool defined;
    int groups, minMembers, maxMembers;
  };
  std::vector<LevelCount> levels;  // over endpoints
  // Sum of usable link bandwidth at an endpoint, by link kind and in total: min and max
  // over endpoints.
  std::array<double, kNumLinkKinds> injectionMin{}, injectionMax{};
  double injectionTotalMin = 0, injectionTotalMax = 0;
  double bisectionGBps = -1;       // -1: not computed
  double halfInjectionGBps = 0;    // what the first half can inject, for comparison
};

Summary summarize(const Graph& g, bool withBisection = true);
double bisectionBandwidth(const Graph& g);
// Human-readable text for sncl-topo --summary.
std::string formatSummary(const Graph& g, const Summary& s);

}  // namespace sncl::topo
