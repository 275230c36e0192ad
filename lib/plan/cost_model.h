// The planner's cost model: α-β figures per pair of ranks from the comm's topology graph,
// and the time of one step of an algorithm (a set of messages in flight at once) with
// shared links dividing their bandwidth among the step's flows.
//
// A message between two ranks pays α = α(kind) + the route's latency, where kind is the
// transport the route implies (net when it crosses a network link, else bus, else shm)
// and α(kind) is that transport's software startup (calibrated by sncl-tune, else a
// default). Its bytes move at the rate of the most loaded link direction on its route
// (capacity / bytes of every flow of the step crossing it, weighted by the route's ECMP
// shares), and a rank's flows of one kind share β(kind) in each direction.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "lib/base/error.h"
#include "lib/topo/graph.h"

namespace sncl {

struct KindCost {
  double alphaUs = 1.0;  // per message, software startup
  double betaGBs = 8.0;  // what the transport moves per second over one link of this kind
};

// What calibration measures (sncl-tune writes it, SNCL_TUNING_FILE names it).
struct Tuning {
  std::array<KindCost, topo::kNumLinkKinds> kind{};  // indexed by topo::LinkKind
  double memGBs = 10.0;                              // reduction / copy bandwidth per rank
  // Wall time one step of a collective costs beyond its messages' α when n ranks share
  // this machine's cores (waking, polling, the scheduler's turns): (n, µs), n ascending.
  // Empty: none (dedicated cores).
  std::vector<std::pair<int, double>> stepOverheadUs;
  std::array<bool, topo::kNumLinkKinds> measured{};  // kinds the file gave figures for
  std::string source = "defaults";

  // Linear between measured rank counts; below the first, the first; past the last, grows
  // with n (each added rank adds its turn on the cores).
  double stepOverheadAt(int n) const;
};

// Figures used when no tuning file is given: shm and bus are memory copies; net is the
// ofi transport (a NIC, or TCP over loopback in a lab).
Tuning defaultTuning();

// Reads a tuning file (JSON, docs/planner.md). A malformed file, an unknown link kind, a
// non-positive bandwidth or a negative time is InvalidArgument naming the file and the field.
Result loadTuning(const std::string& path, Tuning* out);
Result parseTuning(const std::string& text, const std::string& source, Tuning* out);
// The file sncl-tune writes.
std::string tuningJson(const Tuning& t, const std::array<bool, topo::kNumLinkKinds>& measured);

// One message of a step: bytes from rank src to rank dst (src == dst: a local copy).
struct Flow {
  int src;
  int dst;
  double bytes;
};

// The clock estimates predict.
//  - Wall: this machine's: each message pays its kind's α and β (per rank and direction),
//    reductions the memory bandwidth, every step the tuning's overhead for the comm's rank
//    count on these cores.
//  - BusModeled: the emulated bus's modeled clock (docs/bus.md), when every pair of the
//    comm runs on it. The emulator charges each chunk its route's links (shared by
//    reservation) and latency, both scaled by the same timescale the clock divides by, and
//    nothing else: CPU time between steps, reductions and copies do not enter, and a rank
//    has no transport limit beside its links. So a bus message pays the route and, if a
//    tuning file measured it, the bus's α beyond the route (about zero); no β cap,
//    memory cost or step overhead applies. Chunking does not change a lone flow's time
//    (one latency, links held back to back), and flows sharing a link take turns chunk by
//    chunk, which the step's shared-link division is the fluid form of.
//  - Simulated: the simulator's machine (docs/simulator.md), a topology file's and nothing
//    of this one: a message pays its route's latency and links only, reductions and copies
//    the tuning's memory bandwidth (0: free), and there is no step overhead.
enum class CostClock { Wall, BusModeled, Simulated };
const char* clockName(CostClock clock);

class CostModel {
 public:
  // graph is finalized; rankVertex[r] is the vertex rank r runs on.
  CostModel(std::shared_ptr<const topo::Graph> graph, std::vector<topo::VertexId> rankVertex, Tuning tuning,
            CostClock clock = CostClock::Wall);

  int nranks() const { return static_cast<int>(rankVertex_.size()); }
  const topo::Graph& graph() const { return *graph_; }
  const std::vector<topo::VertexId>& rankVertex() const { return rankVertex_; }
  const Tuning& tuning() const { return tuning_; }
  uint64_t epoch() const { return graph_->epoch(); }
  CostClock clock() const { return clock_; }
  // Reductions and copies: free on the bus's modeled clock.
  double memBytesPerUs() const {
    const bool free = clock_ == CostClock::BusModeled || (clock_ == CostClock::Simulated && tuning_.memGBs <= 0);
    return free ? kUnlimited : tuning_.memGBs * 1e3;
  }
  // Wall time a step costs beyond its messages (tuning's step overhead for this many ranks).
  double stepOverheadUs() const { return stepOverheadUs_; }

  // α (µs) and lone-flow β (GB/s) between two ranks; infinite α when unreachable.
  struct PairCost {
    double alphaUs;
    double betaGBs;
    topo::LinkKind kind;
  };
  PairCost pair(int src, int dst) const;

  // A step's messages, each α + its transfer at the shared links' rates, plus the step
  // overhead: the slowest one, their mean, and the longest transfer without α.
  struct StepCost {
    double worstUs = 0;
    double meanUs = 0;
    double transferUs = 0;
  };
  StepCost stepCost(std::span<const Flow> flows) const;
  // Time until every flow of a step has arrived (µs).
  double stepUs(std::span<const Flow> flows) const { return stepCost(flows).worstUs; }

 private:
  struct PairRoute {
    double alphaUs = 0;
    double kindBytesPerUs = 0;
    topo::LinkKind kind = topo::LinkKind::Shm;
    bool reachable = false;
    std::vector<std::pair<uint64_t, double>> shares;  // (link direction, fraction of the flow)
  };
  const PairRoute& route(int src, int dst) const;

  static constexpr double kUnlimited = 1e300;

  std::shared_ptr<const topo::Graph> graph_;
  std::vector<topo::VertexId> rankVertex_;
  Tuning tuning_;
  CostClock clock_;
  double stepOverheadUs_;
  // Estimates run at plan time, not per call: routes are cached per pair and epoch.
  mutable std::mutex mutex_;
  mutable uint64_t cacheEpoch_ = 0;
  mutable std::unordered_map<uint64_t, PairRoute> routes_;
  // Bytes per step on each link direction (2 per link), then on each rank's transport
  // (a slot per link kind, rank and direction); dense, since 8,000+ ranks' steps fill it often.
  mutable std::vector<double> load_;
  mutable std::vector<uint32_t> loaded_;  // the entries of load_ this step touched
};

}  // namespace sncl
