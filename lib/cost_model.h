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

#include "lib/error.h"
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
  std::string source = "defaults";
};

// Figures used when no tuning file is given: shm and bus are memory copies; net is the
// ofi transport (a NIC, or TCP over loopback in a lab).
Tuning defaultTuning();

// Reads a tuning file (JSON, docs/planner.md). A malformed file, an unknown link kind or a
// non-positive figure is InvalidArgument naming the file and the field.
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

class CostModel {
 public:
  // graph is finalized; rankVertex[r] is the vertex rank r runs on.
  CostModel(std::shared_ptr<const topo::Graph> graph, std::vector<topo::VertexId> rankVertex, Tuning tuning);

  int nranks() const { return static_cast<int>(rankVertex_.size()); }
  const topo::Graph& graph() const { return *graph_; }
  const std::vector<topo::VertexId>& rankVertex() const { return rankVertex_; }
  const Tuning& tuning() const { return tuning_; }
  uint64_t epoch() const { return graph_->epoch(); }
  double memBytesPerUs() const { return tuning_.memGBs * 1e3; }

  // α (µs) and lone-flow β (GB/s) between two ranks; infinite α when unreachable.
  struct PairCost {
    double alphaUs;
    double betaGBs;
    topo::LinkKind kind;
  };
  PairCost pair(int src, int dst) const;

  // Time until every flow of a step has arrived (µs).
  double stepUs(std::span<const Flow> flows) const;

 private:
  struct PairRoute {
    double alphaUs = 0;
    double kindBytesPerUs = 0;
    topo::LinkKind kind = topo::LinkKind::Shm;
    bool reachable = false;
    std::vector<std::pair<uint64_t, double>> shares;  // (link direction, fraction of the flow)
  };
  const PairRoute& route(int src, int dst) const;

  std::shared_ptr<const topo::Graph> graph_;
  std::vector<topo::VertexId> rankVertex_;
  Tuning tuning_;
  // Estimates run at plan time, not per call: routes are cached per pair and epoch.
  mutable std::mutex mutex_;
  mutable uint64_t cacheEpoch_ = 0;
  mutable std::unordered_map<uint64_t, PairRoute> routes_;
  mutable std::unordered_map<uint64_t, double> load_;  // bytes per link direction, per step
};

}  // namespace sncl
