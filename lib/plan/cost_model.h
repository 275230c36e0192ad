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
//
// Bundles (the fast path, CostPath::Bundled): ECMP over a Clos spreads every flow that
// leaves a switch upward evenly over its uplinks (and every flow entering one from above
// over its downlinks), so those links always carry equal bytes and one entry with their
// summed capacity gives the same times as the links one by one, at a fraction of the work
// and memory (a cross-spine route of a 16k-endpoint, 8-plane Clos is 32 entries instead of
// about 1,040 links). A route's run of equal-fraction shares out of one vertex (or into
// one) over links of one bandwidth is a bundle. The model keeps bundles only while every
// route uses each bundle whole and no link is in two bundles or also used alone; the first
// route that breaks this (a failed link, an uneven rank map) turns bundling off for the
// epoch, and the model recomputes with single links: the same estimates either way
// (up to the order of floating-point sums). CostPath::Exact never bundles (tests compare).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "lib/base/error.h"
#include "lib/topo/graph.h"
#include "lib/topo/route.h"

namespace sncl {

struct KindCost {
  double alphaUs = 1.0;  // per message, software startup
  double betaGBs = 8.0;  // what the transport moves per second over one link of this kind
  // CPU a message costs the rank at each end (LogP's o: a send's or a receive's system
  // calls), which its messages of one step take in turn; α already holds one message's.
  double cpuUs = 0.0;
};

// What calibration measures (sncl-tune writes it, SNCL_TUNING_FILE names it).
struct Tuning {
  std::array<KindCost, topo::kNumLinkKinds> kind{};  // indexed by topo::LinkKind
  double memGBs = 10.0;                              // reduction / copy bandwidth per rank
  // Wall time one step of a collective costs beyond its messages' α when n ranks share
  // this machine's cores (waking, polling, the scheduler's turns): (n, µs), n ascending.
  // Empty: none (dedicated cores).
  std::vector<std::pair<int, double>> stepOverheadUs;
  // Calls whose buffers peers cannot map run through the host's staging areas
  // (lib/exec/staged_colls.h) up to this many bytes per rank, else the planner's schedule:
  // (n, bytes), n ascending; the entry of the largest n at or below the comm's rank count
  // applies (below the first, the first). sncl-tune measures where the staged All-Reduce
  // stops beating the schedule; kStagedAnySize: at every size.
  std::vector<std::pair<int, uint64_t>> stagedMaxBytes;
  std::array<bool, topo::kNumLinkKinds> measured{};  // kinds the file gave figures for
  std::string source = "defaults";

  // Linear between measured rank counts; below the first, the first; past the last, grows
  // with n (each added rank adds its turn on the cores).
  double stepOverheadAt(int n) const;
  // stagedMaxBytes for a comm of n ranks; 0 without entries (the path is not taken).
  uint64_t stagedMaxAt(int n) const;
};
constexpr uint64_t kStagedAnySize = UINT64_MAX;

// Figures used when no tuning file is given: shm and bus are memory copies; net is the
// ofi transport (a NIC, or TCP over loopback in a lab); staging as measured on the test
// machine (perf/README.md): two ranks up to 64 KiB per rank, more ranks at every size.
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

// How the model accounts a step's links (see the top of this file): bundled parallel links
// where that is exact, or every link direction on its own.
enum class CostPath { Bundled, Exact };

class CostModel {
 public:
  // graph is finalized; rankVertex[r] is the vertex rank r runs on.
  // cpuShare: ranks per CPU on the comm's busiest machine (Wall clock: a rank's message CPU
  // takes that many times as long when its host's ranks outnumber their cores).
  CostModel(std::shared_ptr<const topo::Graph> graph, std::vector<topo::VertexId> rankVertex, Tuning tuning,
            CostClock clock = CostClock::Wall, CostPath path = CostPath::Bundled, double cpuShare = 1.0);

  int nranks() const { return static_cast<int>(rankVertex_.size()); }
  const topo::Graph& graph() const { return *graph_; }
  const std::vector<topo::VertexId>& rankVertex() const { return rankVertex_; }
  const Tuning& tuning() const { return tuning_; }
  uint64_t epoch() const { return graph_->epoch(); }
  CostClock clock() const { return clock_; }
  CostPath path() const { return path_; }
  // What the model holds for this epoch (tools and tests): pairs routed whole (those outside
  // classes; classed pairs keep nothing of their own), rank classes and routes per pair of
  // classes (0 on the Exact path), bundles, whether bundling holds.
  struct Stats {
    size_t pairRoutes = 0;
    size_t classes = 0;
    size_t classRoutes = 0;
    size_t bundles = 0;
    bool bundling = false;
  };
  Stats stats() const;
  // Whether the routes costed so far in this epoch are bundled (false: single links,
  // because the path is Exact or some route broke a bundle). For tests and tools.
  bool bundling() const {
    std::lock_guard lock(mutex_);
    return bundling_;
  }
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
  // overhead: the slowest one, their mean, and the longest transfer without α; none less
  // than a rank's α and its further messages' CPU (KindCost::cpuUs, Wall clock only).
  struct StepCost {
    double worstUs = 0;
    double meanUs = 0;
    double transferUs = 0;
  };
  StepCost stepCost(std::span<const Flow> flows) const;
  // Time until every flow of a step has arrived (µs).
  double stepUs(std::span<const Flow> flows) const { return stepCost(flows).worstUs; }

 private:
  // Classes of pairs: two endpoints that do not forward and are attached alike (topo's
  // attachmentKey) are in one class, and every pair (src class, dst class) has one route but
  // for the two ends' own links. A ClassRoute is that shared middle, costed once; a pair's
  // PairRoute adds only its end links. Pairs outside classes keep whole routes.
  using Entries = std::vector<std::pair<uint32_t, double>>;  // (entry of load_: link direction or bundle, fraction)
  struct EndShare {
    topo::VertexId peer;  // the vertex at the other end of the end's link; kNone: src-dst link
    double fraction;
    bool fromSrc;
    auto operator<=>(const EndShare&) const = default;
  };
  // One end of a pair's route as entries: a rank's own links by a class route's pattern
  // (peers and fractions), shared by every pair of that rank and pattern.
  struct EndEntries {
    bool ok = false;  // the rank has every link the pattern names
    bool net = false, bus = false;
    Entries entries;
  };
  struct ClassRoute {
    bool reachable = false;
    double latencyUs = 0;
    bool net = false, bus = false;  // link kinds of the middle
    Entries entries;                // the middle's
    std::vector<EndShare> ends;
    bool direct = false;                       // a link from src to dst: ends costed per pair
    uint32_t srcPattern = 0, dstPattern = 0;   // else the ends' patterns (patterns_)
    // stepCost's: the bytes of this step's flows over this middle, and its busiest entry's
    // time (entries loaded once per middle, not once per flow), valid while stepMark is the step's.
    mutable uint64_t stepMark = 0;
    mutable double stepBytes = 0, stepUs = 0;
  };
  // A pair whose ranks have no class: its whole route, kept per pair.
  struct PairRoute {
    double alphaUs = 0;
    double kindBytesPerUs = 0;
    topo::LinkKind kind = topo::LinkKind::Shm;
    bool reachable = false;
    Entries shares;
  };
  // A pair's route as costed: a classed pair's assembled from its shared parts (nothing is
  // kept per pair: 16k ranks' steps name ~300,000 pairs), any other's pointing at its PairRoute.
  struct RouteView {
    double alphaUs = 0;
    double kindBytesPerUs = 0;
    topo::LinkKind kind = topo::LinkKind::Shm;
    bool reachable = false;
    const ClassRoute* middle = nullptr;
    const EndEntries* srcEnd = nullptr;
    const EndEntries* dstEnd = nullptr;
    const Entries* shares = nullptr;
  };
  RouteView route(int src, int dst) const;
  const PairRoute& wholeRoute(int src, int dst) const;
  // Calls fn(entry, fraction) for every share of r but its middle's.
  template <class F>
  static void forEachOwnShare(const RouteView& r, F&& fn) {
    if (r.srcEnd)
      for (const auto& [e, f] : r.srcEnd->entries) fn(e, f);
    if (r.dstEnd)
      for (const auto& [e, f] : r.dstEnd->entries) fn(e, f);
    if (r.shares)
      for (const auto& [e, f] : *r.shares) fn(e, f);
  }
  template <class F>
  static void forEachShare(const RouteView& r, F&& fn) {
    if (r.middle)
      for (const auto& [e, f] : r.middle->entries) fn(e, f);
    forEachOwnShare(r, fn);
  }
  uint32_t patternOf(const std::vector<EndShare>& ends, bool fromSrc) const;
  const EndEntries& endEntries(int rank, uint32_t pattern) const;
  // The links of rank's vertex to the peers of ends (all of one side).
  bool endShares(int rank, std::span<const EndShare> ends, std::vector<topo::LinkShare>* out) const;
  const ClassRoute& classRoute(int src, int dst, uint64_t key) const;
  // shares as entries of load_, bundled where they may be; false when a bundle would
  // overlap another bundle or a link used alone (bundling then stops for the epoch).
  bool entriesOf(std::span<const topo::LinkShare> shares, Entries* out) const;
  // pr's kind, α and transport rate from its route's latency and link kinds.
  template <class R>
  void priceRoute(double latencyUs, bool net, bool bus, R* pr) const;
  void clearCache() const;
  void checkEpoch() const;
  size_t rankChannel(int rank, bool in, topo::LinkKind kind) const {
    return linkChannels_ + (size_t(rank) * 2 + size_t(in)) * topo::kNumLinkKinds + size_t(kind);
  }

  static constexpr double kUnlimited = 1e300;

  std::shared_ptr<const topo::Graph> graph_;
  std::vector<topo::VertexId> rankVertex_;
  Tuning tuning_;
  CostClock clock_;
  CostPath path_;
  double stepOverheadUs_;
  double cpuShare_;                            // Wall: ranks per CPU (constructor); else 0
  // stepCost, per rank: its messages' CPU (times cpuShare_), the largest one's (once), and
  // the largest α among them.
  struct RankCpu {
    double sum = 0, most = 0, alpha = 0;
  };
  mutable std::vector<RankCpu> rankCpu_;
  mutable std::vector<uint32_t> cpuRanks_;  // the ranks of rankCpu_ this step touched
  // Estimates run at plan time, not per call: routes are cached per pair and epoch.
  mutable std::mutex mutex_;
  mutable uint64_t cacheEpoch_ = 0;
  mutable std::unordered_map<uint64_t, PairRoute> routes_;  // pairs outside classes
  mutable std::vector<int32_t> rankClass_;  // by rank: its class, -1 for none (Exact: all -1)
  mutable int32_t classCount_ = 0;
  mutable std::unordered_map<uint64_t, ClassRoute> classRoutes_;  // by (src class, dst class)
  // The same by src class * classCount_ + dst class, while that table is small (a lookup
  // per flow of every step); empty otherwise.
  mutable std::vector<const ClassRoute*> classRouteAt_;
  mutable std::map<std::vector<EndShare>, uint32_t> patternIds_;
  mutable std::vector<std::vector<EndShare>> patterns_;
  mutable std::unordered_map<uint64_t, EndEntries> endEntries_;  // by (rank, pattern)
  // The same per rank: (pattern, entries), a few per rank.
  mutable std::vector<std::vector<std::pair<uint32_t, const EndEntries*>>> rankEnds_;
  const EndEntries noEnd_{};  // what endEntries returns when bundling stops under it
  mutable std::vector<RouteView> stepRoutes_;            // stepCost's flows' routes
  mutable std::vector<const ClassRoute*> stepMiddles_;   // the middles this step's flows use
  mutable uint64_t stepMark_ = 0;
  // Entries of load_ and capacity_: each link direction (2 per link), then each rank's
  // transport (a slot per link kind, rank and direction), then the bundles found so far.
  mutable size_t linkChannels_ = 0;
  mutable size_t firstBundle_ = 0;
  mutable bool bundling_ = false;
  // channelUse_[c]: the bundle entry link direction c is in, kSingle when a route used it
  // alone, or kUnused.
  mutable std::vector<uint32_t> channelUse_;
  mutable std::unordered_map<uint64_t, std::vector<uint32_t>> bundlesByHash_;  // hash of channels -> entries
  mutable std::vector<std::vector<uint32_t>> bundleChannels_;                 // by entry - firstBundle_
  mutable std::vector<double> capacity_;  // bytes per µs of each entry (rank channels: unused)
  mutable uint64_t generation_ = 0;       // of the entries: clearCache renumbers them
  // Bytes per step on each entry; dense, since 8,000+ ranks' steps fill it often.
  mutable std::vector<double> load_;
  mutable std::vector<uint32_t> loaded_;  // the entries of load_ this step touched
};

}  // namespace sncl
