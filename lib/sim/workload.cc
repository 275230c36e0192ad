#include "lib/sim/workload.h"

#include <fmt/format.h>

#include <memory>

#include "algorithms/direct.h"
#include "algorithms/halving_doubling.h"
#include "algorithms/hierarchical.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"
#include "lib/plan/cost_model.h"

namespace sncl::sim {

namespace {

bool matches(const Planner& p, const Plan& plan, const std::string& name) {
  if (name == "hd") return plan.algorithm == Algorithm::HalvingDoubling;
  if (name == "hier") return plan.algorithm == Algorithm::Hierarchical;
  return name == algorithmName(plan.algorithm) || name == p.describe(plan);
}

// Rings inside blocks of consecutive ranks are the same on every member turned by its
// index; with one level and a ring across, the blocks are a ring too. Other shapes claim
// nothing (the engine builds every rank).
Workload::Symmetry hierSymmetry(const algo::HierarchicalSpec& hs, int nranks) {
  const std::vector<int>& finest = hs.groupOf[0];
  int block = 1;
  while (block < nranks && finest[block] == finest[0]) ++block;
  if (nranks % block) return {};
  for (int r = 0; r < nranks; ++r)
    if (finest[r] != finest[r - r % block]) return {};
  for (int r = block; r < nranks; r += block)
    if (finest[r] == finest[r - block]) return {};
  const bool rotate = hs.inner == algo::GroupAlgo::Ring;
  const bool translate = hs.groupOf.size() == 1 && hs.outer == algo::FlatAllReduce::Ring;
  if (!rotate && !translate) return {};
  return {block, rotate, translate};
}

}  // namespace

Result makeWorkload(const topo::Graph& g, const WorkloadSpec& spec, int nranks, Planned* out) {
  *out = Planned{};
  const CollType coll = spec.coll;
  const size_t n = size_t(nranks), elem = spec.elemSize;
  if (nranks < 1 || nranks > g.rankCount())
    return fail(snclInvalidArgument, "simulator: {} ranks on a topology with {} mapped", nranks, g.rankCount());
  if (elem == 0 || spec.bytes % elem)
    return fail(snclInvalidArgument, "simulator: size {} is not a whole number of {}-byte elements", spec.bytes, elem);
  const size_t count = planBytesOfSize(coll, spec.bytes / elem, nranks);  // CollShape's count
  if (count == 0) return fail(snclInvalidArgument, "simulator: size {} leaves no element per rank", spec.bytes);
  out->busFactor = coll == CollType::AllReduce                               ? 2.0 * double(n - 1) / double(n)
                   : coll == CollType::Broadcast || coll == CollType::Reduce ? 1.0
                                                                              : double(n - 1) / double(n);

  // The planner on the simulated machine: the graph is the caller's (not owned here).
  std::vector<topo::VertexId> rankVertex(n);
  for (int r = 0; r < nranks; ++r) rankVertex[r] = g.rankVertex(r);
  // Priced as the simulated machine: its links and latencies, reductions at memGBs.
  Tuning tuning = defaultTuning();
  tuning.memGBs = spec.memGBs;
  auto model = std::make_shared<const CostModel>(std::shared_ptr<const topo::Graph>(&g, [](const topo::Graph*) {}),
                                                 rankVertex, tuning, CostClock::Simulated);
  const PlannerOptions options{"", spec.chunkBytes};
  Planner chooser(0, model, options);
  const size_t bytes = count * elem;
  Plan plan;
  if (spec.algorithm == "auto") {
    // The planner's estimates (lib/plan/cost_model.h) are its own cost: at 10,000+ ranks they
    // take longer than the simulation; a named algorithm skips them.
    plan = chooser.choose(coll, bytes);
    for (const Plan& p : chooser.candidates(coll, bytes))
      out->candidates += fmt::format("{}{}={:.1f}us", out->candidates.empty() ? "" : " ", chooser.describe(p), p.estimateUs);
    out->plannerChoice = fmt::format("{} (estimate {:.1f} us)", chooser.describe(plan), plan.estimateUs);
    out->estimateUs = plan.estimateUs;
  } else {
    // Every variant the planner could run, without estimates; "hier" is the first
    // hierarchy with rings inside and across.
    std::vector<Plan> all;
    for (size_t k = 0; k < size_t(Algorithm::kCount); ++k) {
      const Algorithm a = Algorithm(k);
      if (!Planner::supports(coll, a)) continue;
      if (a != Algorithm::Hierarchical) {
        all.push_back({.coll = coll, .algorithm = a, .chunkBytes = spec.chunkBytes});
        continue;
      }
      for (size_t h = 0; h < chooser.hierarchies().size(); ++h)
        for (auto inner : {algo::GroupAlgo::Ring, algo::GroupAlgo::Direct})
          for (auto outer : {algo::FlatAllReduce::Ring, algo::FlatAllReduce::Tree, algo::FlatAllReduce::HalvingDoubling,
                             algo::FlatAllReduce::Direct})
            all.push_back({.coll = coll, .algorithm = a, .chunkBytes = spec.chunkBytes, .hierarchy = int(h), .inner = inner,
                           .outer = outer});
    }
    auto it = std::find_if(all.begin(), all.end(), [&](const Plan& p) { return matches(chooser, p, spec.algorithm); });
    if (it == all.end()) {
      std::string names;
      for (const Plan& p : all) names.append(" ").append(chooser.describe(p));
      return fail(snclInvalidArgument, "simulator: no {} schedule '{}' on this topology (there are:{})", collName(coll),
                  spec.algorithm, names);
    }
    plan = *it;
    out->plannerChoice = "not asked (--algo auto asks)";
  }
  out->algorithm = chooser.describe(plan);
  out->workload.nranks = nranks;
  out->workload.elemSize = elem;
  // Ring schedules: every rank sends to rank+1 and receives from rank-1 (algorithms/ring.h).
  if (plan.algorithm == Algorithm::Ring) out->workload.symmetry = {1, false, true};
  const size_t chunkCount = std::max<size_t>(1, plan.chunkBytes / elem);
  if (coll == CollType::AllReduce) {
    // The builders Planner::build calls, with the plan's parameters: a Planner per rank
    // would find the topology's hierarchies again on each of 16k ranks.
    switch (plan.algorithm) {
      case Algorithm::Direct:
        out->workload.build = [=](int r, algo::Schedule* s) { algo::DirectAllReduce::build(r, nranks, count, s); };
        break;
      case Algorithm::Tree:
        out->workload.build = [=](int r, algo::Schedule* s) { algo::TreeAllReduce::build(r, nranks, count, chunkCount, s); };
        break;
      case Algorithm::HalvingDoubling:
        out->workload.build = [=](int r, algo::Schedule* s) { algo::HalvingDoublingAllReduce::build(r, nranks, count, s); };
        break;
      case Algorithm::Hierarchical: {
        const algo::HierarchicalSpec hs{chooser.hierarchies()[plan.hierarchy].groupOf, plan.inner, plan.outer};
        out->workload.symmetry = hierSymmetry(hs, nranks);
        // The phases once for all ranks (per rank they cost O(nranks) each).
        auto layout = std::make_shared<const algo::HierLayout>(algo::HierarchicalAllReduce::layout(nranks, hs.groupOf, count));
        out->workload.build = [=](int r, algo::Schedule* s) {
          algo::HierarchicalAllReduce::build(r, nranks, hs, *layout, chunkCount, s);
        };
        break;
      }
      default:
        out->workload.build = [=](int r, algo::Schedule* s) { algo::RingAllReduce::build(r, nranks, count, chunkCount, s); };
        break;
    }
    return snclSuccess;
  }
  CollShape shape;
  shape.count = count;
  shape.elemSize = elem;
  out->workload.build = [=](int r, algo::Schedule* s) { Planner(r, model, options).build(plan, shape, s); };
  return snclSuccess;
}

}  // namespace sncl::sim
