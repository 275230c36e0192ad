#include "lib/sim/training.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "lib/sim/network.h"
#include "lib/sim/workload.h"

namespace sncl::sim {
namespace {

// One All-Reduce of bytes on g, as sncl-sim runs it: exact up to 256 ranks, else aggregated.
Result simulateAllReduce(const topo::Graph& g, int nranks, size_t bytes, const TrainingSpec& spec, double* us,
                         std::string* algorithm) {
  WorkloadSpec w;
  w.coll = CollType::AllReduce;
  w.algorithm = spec.algorithm;
  w.bytes = bytes;
  w.elemSize = spec.gradBytesPerParam;
  w.memGBs = spec.memGBs;
  Planned planned;
  SNCL_CHECK(makeWorkload(g, w, nranks, &planned));
  Network net(g);
  SimOptions o;
  o.memGBs = spec.memGBs;
  SimResult r;
  SNCL_CHECK(nranks <= 256 ? simulateExact(net, planned.workload, o, &r)
                           : simulateAggregated(net, planned.workload, o, &r));
  *us = r.timeUs;
  *algorithm = planned.algorithm;
  return snclSuccess;
}

bool parseNumber(const std::string& v, double unit, double* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  double x = strtod(v.c_str(), &end);
  std::string suffix(end);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = unit;
  else if (suffix == "M") scale = unit * unit;
  else if (suffix == "G") scale = unit * unit * unit;
  else if (!suffix.empty()) return false;
  *out = x * scale;
  return std::isfinite(*out);
}

}  // namespace

Result parseTrainingSpec(const std::string& text, TrainingSpec* out) {
  TrainingSpec s = *out;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return fail(snclInvalidArgument, "training spec: '{}' is not key=value", item);
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    double x = 0;
    bool ok = true;
    if (key == "algo") s.algorithm = v;
    else if (key == "params") ok = parseNumber(v, 1000, &s.params);
    else if (key == "tokens") ok = parseNumber(v, 1000, &s.tokens);
    else if (key == "peak") ok = parseNumber(v, 1000, &s.peakTflops);
    else if (key == "eff") ok = parseNumber(v, 1000, &s.computeEfficiency);
    else if (key == "mem-gbs") ok = parseNumber(v, 1000, &s.memGBs);
    else if (key == "grad-bytes" || key == "bucket") {
      ok = parseNumber(v, key == "bucket" ? 1024 : 1000, &x) && x >= 1 && x < 1e15 && x == std::floor(x);
      if (ok) (key == "bucket" ? s.bucketBytes : s.gradBytesPerParam) = size_t(x);
    } else {
      return fail(snclInvalidArgument,
                  "training spec: unknown key '{}' (params, tokens, peak, eff, grad-bytes, bucket, algo, mem-gbs)", key);
    }
    if (!ok) return fail(snclInvalidArgument, "training spec: bad value '{}' for {}", v, key);
    if (comma == text.size()) break;
  }
  *out = s;
  return snclSuccess;
}

double bucketedStepUs(double computeUs, uint64_t buckets, double bucketUs, double lastBucketUs) {
  const double forward = computeUs / 3, backward = computeUs - forward;
  double commEnd = 0;
  for (uint64_t k = 0; k < buckets; ++k) {
    const double ready = forward + backward * double(k + 1) / double(buckets);
    commEnd = std::max(commEnd, ready) + (k + 1 == buckets ? lastBucketUs : bucketUs);
  }
  return std::max(computeUs, commEnd);
}

Result modelTrainingStep(const topo::Graph& g, int nranks, const TrainingSpec& spec, TrainingResult* out) {
  if (!(spec.params >= 1) || !(spec.tokens >= 1) || !(spec.peakTflops > 0) || !(spec.computeEfficiency > 0) ||
      spec.computeEfficiency > 1 || spec.gradBytesPerParam == 0 || spec.bucketBytes == 0 || !(spec.memGBs >= 0))
    return fail(snclInvalidArgument,
                "training model: params {} and tokens {} must be >= 1, peak {} TFLOP/s > 0, efficiency {} in (0, 1], "
                "gradient bytes {} and bucket bytes {} > 0",
                spec.params, spec.tokens, spec.peakTflops, spec.computeEfficiency, spec.gradBytesPerParam,
                spec.bucketBytes);
  if (nranks < 1 || nranks > g.rankCount())
    return fail(snclInvalidArgument, "training model: {} accelerators on a topology of {} mapped ranks", nranks,
                g.rankCount());
  const double gradBytes = spec.params * double(spec.gradBytesPerParam);
  if (gradBytes > 1e15) return fail(snclInvalidArgument, "training model: {} gradient bytes is beyond the model", gradBytes);
  TrainingResult r;
  r.accelerators = nranks;
  r.flopPerStep = 6 * spec.params * spec.tokens;
  const double peakFlopPerUs = spec.peakTflops * 1e6;  // TFLOP/s = 1e6 FLOP/us
  r.computeUs = r.flopPerStep / (double(nranks) * peakFlopPerUs * spec.computeEfficiency);
  // Whole elements per bucket; the last bucket holds what is left.
  const size_t bucket = std::max(spec.bucketBytes / spec.gradBytesPerParam, size_t(1)) * spec.gradBytesPerParam;
  r.buckets = uint64_t(std::ceil(gradBytes / double(bucket)));
  const double lastBytes = gradBytes - double(r.buckets - 1) * double(bucket);
  if (nranks > 1) {
    SNCL_CHECK(simulateAllReduce(g, nranks, std::min(bucket, size_t(gradBytes)), spec, &r.bucketUs, &r.algorithm));
    std::string ignored;
    if (r.buckets == 1 || lastBytes == double(bucket)) r.lastBucketUs = r.bucketUs;
    else SNCL_CHECK(simulateAllReduce(g, nranks, size_t(lastBytes), spec, &r.lastBucketUs, &ignored));
  } else {
    r.algorithm = "none (one accelerator)";
  }
  r.commUs = double(r.buckets - 1) * r.bucketUs + r.lastBucketUs;
  r.stepUs = bucketedStepUs(r.computeUs, r.buckets, r.bucketUs, r.lastBucketUs);
  r.exposedUs = r.stepUs - r.computeUs;
  r.utilization = r.flopPerStep / (double(nranks) * peakFlopPerUs * r.stepUs);
  *out = std::move(r);
  return snclSuccess;
}

}  // namespace sncl::sim
