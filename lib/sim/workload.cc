#include "lib/sim/workload.h"

#include <fmt/format.h>

#include "algorithms/halving_doubling.h"
#include "algorithms/tree.h"
#include "lib/topo/route.h"

namespace sncl::sim {

bool parseColl(const std::string& name, CollType* out) {
  for (size_t c = 0; c < size_t(CollType::Send); ++c)
    if (name == collName(CollType(c))) {
      *out = CollType(c);
      return true;
    }
  return false;
}

Result linkCostOf(Network& net, int nranks, double memGBs, LinkCost* out) {
  *out = LinkCost{};
  out->memGBs = memGBs > 0 ? memGBs : 1e9;
  if (nranks < 2) return snclSuccess;
  const Path* far = nullptr;
  SNCL_CHECK(net.path(0, nranks / 2, &far));
  out->alphaUs = far->latencyUs;
  topo::Route r;
  SNCL_CHECK(net.graph().routeRanks(0, 1, &r));
  if (r.reachable) out->betaGBs = r.bandwidthGBps;
  return snclSuccess;
}

Result makeWorkload(const WorkloadSpec& spec, int nranks, Planned* out) {
  *out = Planned{};
  const CollType coll = spec.coll;
  const size_t n = size_t(nranks), elem = spec.elemSize;
  if (elem == 0 || spec.bytes % elem)
    return fail(snclInvalidArgument, "simulator: size {} is not a whole number of {}-byte elements", spec.bytes, elem);
  // CollShape's count (lib/planner.h): per rank for All-Gather and Reduce-Scatter, per
  // peer for All-to-All, Gather and Scatter; nccl-tests' size is the whole buffer.
  const bool perRank = coll == CollType::AllGather || coll == CollType::ReduceScatter || coll == CollType::AlltoAll ||
                       coll == CollType::Gather || coll == CollType::Scatter;
  const size_t count = perRank ? spec.bytes / elem / n : spec.bytes / elem;
  if (count == 0) return fail(snclInvalidArgument, "simulator: size {} leaves no element per rank", spec.bytes);
  out->busFactor = coll == CollType::AllReduce             ? 2.0 * double(n - 1) / double(n)
                   : coll == CollType::Broadcast || coll == CollType::Reduce ? 1.0
                                                                              : double(n - 1) / double(n);
  CollShape shape;
  shape.count = count;
  shape.elemSize = elem;
  Planner chooser(0, nranks, spec.link, "", spec.chunkBytes);
  const Plan& chosen = chooser.choose(coll, count * elem);
  out->plannerChoice = fmt::format("{} (estimate {:.1f} us)", algorithmName(chosen.algorithm), chosen.estimateUs);
  out->workload.nranks = nranks;
  out->workload.elemSize = elem;

  const std::string& a = spec.algorithm;
  if (a == "tree" || a == "hd") {
    if (coll != CollType::AllReduce) return fail(snclInvalidArgument, "simulator: {} is an All-Reduce algorithm", a);
    const size_t chunkCount = std::max<size_t>(1, spec.chunkBytes / elem);
    if (a == "tree")
      out->workload.build = [=](int r, algo::Schedule* s) { algo::TreeAllReduce::build(r, nranks, count, chunkCount, s); };
    else
      out->workload.build = [=](int r, algo::Schedule* s) { algo::HalvingDoublingAllReduce::build(r, nranks, count, s); };
    out->algorithm = a == "tree" ? "tree" : "halving-doubling";
    return snclSuccess;
  }
  Plan plan = chosen;
  if (a != "auto") {
    bool found = false;
    for (size_t k = 0; k < size_t(Algorithm::kCount); ++k)
      if (a == algorithmName(Algorithm(k))) plan.algorithm = Algorithm(k), found = true;
    if (!found) return fail(snclInvalidArgument, "simulator: unknown algorithm '{}' (auto, ring, direct, chain, tree, hd)", a);
    if (!Planner::supports(coll, plan.algorithm))
      return fail(snclInvalidArgument, "simulator: {} has no {} schedule", collName(coll), a);
  }
  out->algorithm = algorithmName(plan.algorithm);
  const LinkCost link = spec.link;
  const size_t chunk = spec.chunkBytes;
  // A planner per rank, as every rank of a comm has its own; built when the engine asks.
  out->workload.build = [=](int r, algo::Schedule* s) { Planner(r, nranks, link, "", chunk).build(plan, shape, s); };
  // Ring schedules: every rank sends to rank+1 and receives from rank-1 (algorithms/ring.h).
  out->workload.rotationSymmetric = plan.algorithm == Algorithm::Ring;
  return snclSuccess;
}

}  // namespace sncl::sim
