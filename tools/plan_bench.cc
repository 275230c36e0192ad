// plan_bench: how long the planner takes to choose on a large topology, and how much memory
// it holds, on the cost model's fast path (classes of pairs, bundled links); with --check,
// whether the exact path (every pair routed, every link on its own) chooses the same.
// Not a test: figures, and a non-zero exit when the two paths disagree. choose() prunes
// candidates (docs/planner.md), as every comm's planner does.
//
//   plan_bench FILE [--coll C] [--size S]... [--clock wall|bus|sim] [--check]
//
// Defaults: allreduce, 1G, the clock sncl-topo --plan uses (bus modeled when every rank is
// in one supernode, else wall). Sizes are nccl-tests' (the whole buffer). Each size is
// planned by a fresh model and planner, so every figure includes routing from cold.
#include <sys/resource.h>
#include <time.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lib/base/error.h"
#include "lib/plan/cost_model.h"
#include "lib/plan/planner.h"
#include "lib/topo/topo_file.h"
#include "sncl/sncl_ext.h"

using namespace sncl;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double peakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

struct Choice {
  std::string name;
  double estimateUs = 0;
  double wallS = 0, cpuS = 0;
  CostModel::Stats stats;
};

Choice plan(const topo::Graph& g, CostClock clock, CostPath path, CollType coll, size_t bytes) {
  std::vector<topo::VertexId> rankVertex;
  for (int r = 0; r < g.rankCount(); ++r) rankVertex.push_back(g.rankVertex(r));
  const auto t0 = Clock::now();
  const double c0 = cpuSeconds();
  auto model = std::make_shared<CostModel>(std::shared_ptr<const topo::Graph>(&g, [](const topo::Graph*) {}), rankVertex,
                                           defaultTuning(), clock, path);
  Planner planner(0, model, PlannerOptions{});
  const Plan& p = planner.choose(coll, bytes);
  Choice c{planner.describe(p), p.estimateUs, since(t0), cpuSeconds() - c0, model->stats()};
  return c;
}

int usage(const std::string& why) {
  fmt::print(stderr, "plan_bench: {}\nusage: plan_bench FILE [--coll C] [--size S]... [--clock wall|bus|sim] [--check]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage("no topology file");
  const std::string file = argv[1];
  std::string collText = "allreduce", clockText;
  std::vector<std::string> sizes;
  bool check = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--coll" && i + 1 < argc) collText = argv[++i];
    else if (a == "--size" && i + 1 < argc) sizes.push_back(argv[++i]);
    else if (a == "--clock" && i + 1 < argc) clockText = argv[++i];
    else if (a == "--check") check = true;
    else return usage(fmt::format("unknown or incomplete option '{}'", a));
  }
  if (sizes.empty()) sizes.push_back("1G");
  CollType coll;
  if (!parseCollName(collText, &coll)) return usage(fmt::format("unknown collective '{}'", collText));

  const auto t0 = Clock::now();
  topo::Graph g;
  if (topo::loadTopologyFile(file, &g) != snclSuccess) {
    fmt::print(stderr, "plan_bench: {}\n", lastError());
    return 1;
  }
  if (g.rankCount() < 1) return usage("the topology maps no ranks");
  CostClock clock = CostClock::Wall;
  if (clockText == "sim") clock = CostClock::Simulated;
  else if (clockText == "bus") clock = CostClock::BusModeled;
  else if (clockText.empty()) {
    // As sncl-topo --plan: ranks all in one supernode run on the emulated bus.
    bool oneSupernode = g.levelDefined(topo::Level::Supernode);
    for (int r = 1; r < g.rankCount() && oneSupernode; ++r)
      oneSupernode = g.rankGroupOf(r, topo::Level::Supernode) == g.rankGroupOf(0, topo::Level::Supernode);
    if (oneSupernode) clock = CostClock::BusModeled;
  } else if (clockText != "wall") {
    return usage(fmt::format("unknown clock '{}'", clockText));
  }
  fmt::print("topology {} ({} ranks, {} links), loaded in {:.3f} s, peak RSS {:.0f} MiB; {} clock\n", g.name(),
             g.rankCount(), g.linkCount(), since(t0), peakRssMiB(), clockName(clock));

  int mismatches = 0;
  for (const std::string& sizeText : sizes) {
    size_t size = 0;
    if (snclParseSize(sizeText.c_str(), &size) != snclSuccess) return usage(fmt::format("size '{}' is not a byte count", sizeText));
    const size_t bytes = planBytesOfSize(coll, size, g.rankCount());
    const Choice fast = plan(g, clock, CostPath::Bundled, coll, bytes);
    fmt::print("{} {} B: {} estimate {:.6f} us; planning {:.3f} s wall, {:.3f} s CPU, peak RSS {:.0f} MiB "
               "({} pairs routed whole, {} classes, {} class routes, {} bundles{})\n",
               collText, size, fast.name, fast.estimateUs, fast.wallS, fast.cpuS, peakRssMiB(), fast.stats.pairRoutes,
               fast.stats.classes, fast.stats.classRoutes, fast.stats.bundles,
               fast.stats.bundling ? "" : ", bundling off");
    if (!check) continue;
    const Choice exact = plan(g, clock, CostPath::Exact, coll, bytes);
    const double rel = std::fabs(fast.estimateUs - exact.estimateUs) / std::max(1e-300, std::fabs(exact.estimateUs));
    const bool same = fast.name == exact.name && rel <= 1e-6;
    mismatches += !same;
    fmt::print("  exact path: {} estimate {:.6f} us (relative difference {:.2e}); {:.3f} s wall, {:.3f} s CPU, peak RSS "
               "{:.0f} MiB: {}\n",
               exact.name, exact.estimateUs, rel, exact.wallS, exact.cpuS, peakRssMiB(), same ? "same" : "DIFFERENT");
  }
  return mismatches ? 1 : 0;
}
