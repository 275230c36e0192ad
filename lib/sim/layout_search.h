// Parallel layout advice (`sncl-sim --advise`, docs/simulator.md): every tensor x pipeline x
// data (x expert) layout of a model on the healthy devices of a topology, with its best
// micro-batch, pipeline interleaving and recomputation choice, ranked by predicted step time
// among those that fit in device memory.
//
// Placement: devices are taken node by node in endpoint order, only whole tensor-parallel
// groups per node (a node that lost a device leaves its remainder idle), so a TP group of up
// to a node's size sits inside the node, the fastest domain. Ranks are tensor-fastest, then
// data, then pipeline (layout_model.h).
//
// Step time of one layout (per pipeline stage, the last one, which also computes the logits):
//   t_f  = forward FLOPs per micro-batch / (peak x efficiency); backward 2 t_f; recompute t_f
//   comm = TP All-Reduces (4 per layer, 6 with recomputation, of b s h activations) +
//          EP All-to-Alls (as many, of b s h k / t) + PP sends (2 per micro-batch and model
//          chunk, b s h / t), each simulated on its group and not overlapped with compute
//   pipeline = (m + (p - 1) / v) x (t_f + t_b + comm)   (1F1B; interleaved with v chunks)
//   DP: the gradients of the stage's device in buckets, All-Reduced one after another while
//       the last micro-batch's backward runs (bucket k ready after (k+1)/buckets of it); what
//       runs past its end is exposed. Expert gradients go over the dp/ep devices holding the
//       same experts.
//   step = pipeline + exposed DP
#pragma once

#include <string>
#include <vector>

#include "lib/sim/layout_comm.h"
#include "lib/sim/layout_model.h"
#include "lib/topo/graph.h"

namespace sncl::sim {

// What a device computes at: the share of peak dense FLOP/s its matrix products reach, the
// same for every layout and model (docs/advise_validation.md says how 0.70 was chosen).
inline constexpr double kComputeEfficiency = 0.70;
// What the runtime (context, communication buffers, allocator fragmentation) keeps of a
// device's memory.
inline constexpr double kMemoryReserve = 0.10;

struct AdviceOptions {
  double peakTflops = 0;  // per device, at the model's precision
  double memGiB = 0;      // per device; a layout fits in (1 - kMemoryReserve) of it
  double hbmGBs = 0;      // device memory bandwidth for element-wise work (0: not counted)
  double efficiency = kComputeEfficiency;
  int gpus = 0;           // devices to use (at most the topology's healthy ones)
  double bucketBytes = 25.0 * (1 << 20);  // DP gradient bucket (DDP's default)
  double memGBs = 400;    // reduction bandwidth in the simulated collectives
  // The representative group of each kind is the one holding this endpoint (a fault's
  // endpoint: its groups are the slowest), else group 0.
  topo::EndpointId focus = topo::kNone;
  // Full activation recomputation: tried both ways (auto), or always as the published runs
  // the validation compares with did, or never.
  enum class Recompute { Auto, Always, Never } recompute = Recompute::Auto;
};

// Times and rates are 0 for a layout that does not fit: it is not simulated.
struct LayoutResult {
  Layout layout;
  double stepUs = 0;
  double computeUs = 0, tpUs = 0, epUs = 0, ppUs = 0, bubbleUs = 0, dpExposedUs = 0;  // per step
  double tflopsPerGpu = 0;  // hardware FLOPs (recomputation counted) per device
  double mfu = 0;           // model FLOPs / (devices x peak x step)
  double utilization = 0;   // U = 6 N D / (X x peak x step), N the active parameters
  MemoryUse memory;
  bool fits = false;
  std::string placement;    // where one group of each kind runs
};

struct Advice {
  std::vector<LayoutResult> layouts;  // best first: fitting ones by step time, then the rest
  int healthyDevices = 0;
  size_t simulations = 0;             // distinct collectives simulated
};

// healthy: the endpoints that may run a rank, in endpoint order. pricer: simulated
// collectives kept from an earlier search on the same graph (null: a pricer of its own).
Result adviseLayouts(topo::Graph& g, const std::vector<topo::EndpointId>& healthy, const LayoutModel& model,
                     const AdviceOptions& o, Advice* out, GroupCommPricer* pricer = nullptr);

// The same layout (tp, pp, ep) in another advice, else null.
const LayoutResult* findLayout(const Advice& a, const Layout& l);

// Faults for --advise: the link clauses of lib/sim/faults.h, plus lost devices:
//   endpoint=NAME:down   that endpoint runs nothing
//   lose=P%              P percent of the devices (rounded up), evenly spread over them
struct AdviceFaults {
  std::string links;                   // the link clauses, for parseFaults
  std::vector<std::string> endpoints;  // named lost endpoints
  double losePercent = 0;
};
Result parseAdviceFaults(const std::string& spec, AdviceFaults* out);
// The endpoints left healthy among the first `devices` of g, in endpoint order, and the
// first lost or link-faulted endpoint (kNone if none) as the focus of the search.
Result healthyEndpoints(const topo::Graph& g, int devices, const AdviceFaults& f, std::vector<topo::EndpointId>* out,
                        topo::EndpointId* focus);

// The healthy machine ranked, then (with faults) the faulted one, and what the faults did to
// the healthy best layout. Link faults are applied to a copy of g, priced afresh on a second
// thread beside the healthy search; lost devices alone reuse the healthy search's simulated
// collectives.
struct Replan {
  Advice healthy, faulted;
  bool hasFaults = false;
  int sameIndex = -1;        // the healthy best (tp, pp, ep) in faulted.layouts; -1: gone
  double slowdown = 0;       // its step time with the faults over without, minus 1 (when it fits)
  bool anotherBetter = false;  // the faulted best is another layout, and fits
};
Result replanLayouts(topo::Graph& g, const LayoutModel& model, const AdviceOptions& o, const std::string& faults,
                     Replan* out);
// The seed's resource model at a layout: 6 N T / (X x peak x U) seconds for T tokens.
double trainSeconds(const LayoutModel& model, const AdviceOptions& o, const LayoutResult& r, double tokens);

}  // namespace sncl::sim
