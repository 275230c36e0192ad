#include "lib/sim/layout_comm.h"

#include <cmath>

#include "lib/sim/workload.h"

namespace sncl::sim {

Result GroupCommPricer::simulate(CollType coll, const std::vector<topo::EndpointId>& group, size_t bytes, double* us) {
  auto key = std::make_tuple(int(coll), group, bytes);
  if (auto it = simulated_.find(key); it != simulated_.end()) {
    *us = it->second;
    return snclSuccess;
  }
  std::vector<topo::VertexId> order;
  order.reserve(group.size());
  for (topo::EndpointId e : group) order.push_back(g_->endpointVertex(e));
  const int n = int(group.size());
  SNCL_CHECK(g_->setRankOrder(std::move(order)));
  SNCL_CHECK(g_->mapRanks(n));
  WorkloadSpec w;
  w.coll = coll;
  w.bytes = bytes;
  w.elemSize = 2;  // bf16 activations and gradients; the grid's sizes are multiples of n x 2
  w.memGBs = memGBs_;
  Planned planned;
  SNCL_CHECK(makeWorkload(*g_, w, n, &planned));
  if (!net_) net_ = std::make_unique<Network>(*g_);
  SimOptions o;
  o.memGBs = memGBs_;
  SimResult r;
  // As sncl-sim's auto engine: exact up to 256 ranks, else aggregated.
  SNCL_CHECK(n <= 256 ? simulateExact(*net_, planned.workload, o, &r) : simulateAggregated(*net_, planned.workload, o, &r));
  simulated_[key] = r.timeUs;
  *us = r.timeUs;
  return snclSuccess;
}

Result GroupCommPricer::exactTimeUs(CollType coll, const std::vector<topo::EndpointId>& group, double bytes,
                                    double* us) {
  *us = 0;
  const double unit = 2.0 * double(group.size());
  if (group.size() < 2 || !(bytes >= unit)) return timeUs(coll, group, bytes, us);
  if (!std::isfinite(bytes) || bytes > 1e15)
    return fail(snclInvalidArgument, "layout search: {} bytes in one collective is beyond the model", bytes);
  return simulate(coll, group, size_t(std::floor(bytes / unit) * unit), us);
}

Result GroupCommPricer::timeUs(CollType coll, const std::vector<topo::EndpointId>& group, double bytes, double* us) {
  *us = 0;
  if (group.size() < 2 || !(bytes > 0)) return snclSuccess;
  if (!std::isfinite(bytes) || bytes > 1e15)
    return fail(snclInvalidArgument, "layout search: {} bytes in one collective is beyond the model", bytes);
  // Grid points are powers of 4 times the group size (every rank's share whole).
  const double unit = kMinGridBytes * double(group.size());
  double lo = unit;
  while (lo * 4 <= bytes) lo *= 4;
  double atLo = 0, atHi = 0;
  SNCL_CHECK(simulate(coll, group, size_t(lo), &atLo));
  if (bytes <= lo) {  // below the grid: latency-bound, as its first point
    *us = atLo;
    return snclSuccess;
  }
  SNCL_CHECK(simulate(coll, group, size_t(lo * 4), &atHi));
  *us = atLo + (atHi - atLo) * (bytes - lo) / (3 * lo);
  return snclSuccess;
}

}  // namespace sncl::sim
