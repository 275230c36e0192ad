// One training step on a topology, modeled: compute from the seed's resource model
// (6 x N x D FLOP on X accelerators), communication from the simulator (the gradient
// All-Reduce, run as the library's own schedules on the topology, lib/sim/workload.h), and
// their overlap on a bucketed timeline. U = 6 N D / (X x peak x step).
//
// Assumptions (docs/simulator.md, "Training step time and utilization"):
// - pure data parallelism over every mapped rank: each step all-reduces every gradient
//   across all X accelerators (tensor and pipeline parallelism are not modeled);
// - compute runs at peak x computeEfficiency; forward is 1/3 of it, backward 2/3;
// - gradients are bucketed (bucketBytes, as DDP does); bucket k is ready after k+1 of the
//   backward's buckets' share of compute, in order; bucket All-Reduces run one after
//   another on one stream and do not slow compute; the optimizer step is not counted.
//   exposed = step end - compute end, step = max(compute end, last bucket's All-Reduce end).
#pragma once

#include <string>

#include "lib/sim/sim.h"
#include "lib/topo/graph.h"

namespace sncl::sim {

struct TrainingSpec {
  double params = 7e9;                 // N
  double tokens = 4e6;                 // D, tokens per step (the global batch)
  double peakTflops = 400;             // per accelerator, dense bf16
  double computeEfficiency = 0.5;      // what the compute alone reaches of peak
  size_t gradBytesPerParam = 2;        // bf16 gradients
  size_t bucketBytes = size_t(25) << 20;  // DDP's default bucket
  std::string algorithm = "auto";      // the All-Reduce (sim::WorkloadSpec::algorithm)
  double memGBs = 400;                 // reduction bandwidth (SimOptions::memGBs)
};

struct TrainingResult {
  int accelerators = 0;
  double flopPerStep = 0;
  double computeUs = 0;       // forward + backward
  uint64_t buckets = 0;
  double bucketUs = 0;        // one full bucket's All-Reduce, simulated
  double lastBucketUs = 0;    // the partial last bucket's (or a full one's)
  double commUs = 0;          // all buckets' All-Reduces back to back
  double exposedUs = 0;       // communication not hidden behind the backward pass
  double stepUs = 0;
  double utilization = 0;     // U
  std::string algorithm;      // what the All-Reduce ran (Planner::describe)
};

// "params=7e9,tokens=4M,peak=400,eff=0.5,grad-bytes=2,bucket=25M,algo=ring" (any subset, in any
// order; numbers as strtod reads them, tokens and bucket also with K/M/G: powers of 1000 for
// tokens, of 1024 for bucket bytes) over the defaults in *out.
Result parseTrainingSpec(const std::string& text, TrainingSpec* out);

// g finalized with nranks mapped (faults already applied); nranks = X.
Result modelTrainingStep(const topo::Graph& g, int nranks, const TrainingSpec& spec, TrainingResult* out);

// The bucketed timeline alone (for tests): compute split 1/3 forward, 2/3 backward.
double bucketedStepUs(double computeUs, uint64_t buckets, double bucketUs, double lastBucketUs);

}  // namespace sncl::sim
