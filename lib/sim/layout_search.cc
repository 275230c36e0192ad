#include "lib/sim/layout_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "lib/sim/faults.h"

namespace sncl::sim {
namespace {

using topo::EndpointId;

// Devices node by node, whole groups of `tp` per node.
std::vector<EndpointId> placeRanks(const topo::Graph& g, const std::vector<EndpointId>& healthy, int tp) {
  std::map<int, std::vector<EndpointId>> byNode;  // node group id -> its healthy endpoints
  std::vector<int> nodeOrder;
  for (EndpointId e : healthy) {
    const int node = g.groupOf(e, topo::Level::Node);
    auto [it, inserted] = byNode.try_emplace(node);
    if (inserted) nodeOrder.push_back(node);
    it->second.push_back(e);
  }
  std::vector<EndpointId> placed;
  for (int node : nodeOrder) {
    const auto& members = byNode[node];
    // Groups larger than a node span consecutive nodes: those keep every device.
    const size_t keep = size_t(tp) > members.size() ? members.size() : members.size() / size_t(tp) * size_t(tp);
    placed.insert(placed.end(), members.begin(), members.begin() + long(keep));
  }
  return placed;
}

// Where one group's devices are: how many nodes and supernodes it spans.
std::string whereGroup(const topo::Graph& g, const std::vector<EndpointId>& group) {
  std::set<int> nodes, supernodes;
  for (EndpointId e : group) {
    nodes.insert(g.groupOf(e, topo::Level::Node));
    supernodes.insert(g.groupOf(e, topo::Level::Supernode));
  }
  if (nodes.size() == 1) return fmt::format("node {}", g.vertexName(g.groupVertex(topo::Level::Node, *nodes.begin())));
  if (supernodes.size() == 1) return fmt::format("{} nodes", nodes.size());
  return fmt::format("{} nodes in {} supernodes", nodes.size(), supernodes.size());
}

// The groups of one layout, as ranks; the representative of each kind holds `focusRank`.
struct Groups {
  std::vector<int> tp, dp, ep, expertDp, pp;  // pp: a stage boundary (two ranks)
};

Groups groupsOf(const Layout& l, int focusRank) {
  const int t = l.tp, d = l.dp;
  const int tpIndex = focusRank % t, dpIndex = focusRank / t % d, ppIndex = focusRank / (t * d);
  auto rank = [&](int ti, int di, int pi) { return ti + t * di + t * d * pi; };
  Groups gr;
  for (int i = 0; i < t; ++i) gr.tp.push_back(rank(i, dpIndex, ppIndex));
  for (int j = 0; j < d; ++j) gr.dp.push_back(rank(tpIndex, j, ppIndex));
  const int epBlock = dpIndex / l.ep * l.ep;
  for (int j = 0; j < l.ep; ++j) gr.ep.push_back(rank(tpIndex, epBlock + j, ppIndex));
  for (int j = dpIndex % l.ep; j < d; j += l.ep) gr.expertDp.push_back(rank(tpIndex, j, ppIndex));
  if (l.pp > 1) {
    const int next = ppIndex + 1 < l.pp ? ppIndex + 1 : ppIndex - 1;
    gr.pp = {rank(tpIndex, dpIndex, std::min(ppIndex, next)), rank(tpIndex, dpIndex, std::max(ppIndex, next))};
  }
  return gr;
}

std::vector<EndpointId> endpointsOf(const std::vector<int>& ranks, const std::vector<EndpointId>& placed) {
  std::vector<EndpointId> out;
  out.reserve(ranks.size());
  for (int r : ranks) out.push_back(placed[size_t(r)]);
  return out;
}

// Gradient buckets All-Reduced one after another while a backward pass of backwardUs runs;
// bucket k is ready after (k+1)/n of it. Returns the time past the backward's end.
double exposedAfterBackward(double backwardUs, const std::vector<double>& bucketUs) {
  double end = 0;
  const double n = double(bucketUs.size());
  for (size_t k = 0; k < bucketUs.size(); ++k)
    end = std::max(end, backwardUs * double(k + 1) / n) + bucketUs[k];
  return std::max(0.0, end - backwardUs);
}

// Appends the buckets of `bytes` of gradients over `group`: full ones simulated at the bucket
// size, the last, partial one charged its share of a full one's time.
Result addBuckets(GroupCommPricer& pricer, const std::vector<EndpointId>& group, double bytes, double bucketBytes,
                  std::vector<double>* out) {
  if (group.size() < 2 || !(bytes > 0)) return snclSuccess;
  const double full = std::floor(bytes / bucketBytes), rest = bytes - full * bucketBytes;
  double fullUs = 0;
  SNCL_CHECK(pricer.exactTimeUs(CollType::AllReduce, group, std::min(bytes, bucketBytes), &fullUs));
  const double restUs = full > 0 ? fullUs * rest / bucketBytes : fullUs;
  if (full > 1e6) return fail(snclInvalidArgument, "layout search: {} gradient buckets is beyond the model", full);
  out->insert(out->end(), size_t(full), fullUs);
  if (rest > 0) out->push_back(restUs);
  return snclSuccess;
}

class Evaluator {
 public:
  Evaluator(const topo::Graph& g, GroupCommPricer& pricer, const LayoutModel& m, const AdviceOptions& o)
      : g_(g), pricer_(pricer), m_(m), o_(o) {}

  Result evaluate(const Layout& l, const std::vector<EndpointId>& placed, int focusRank, LayoutResult* out) {
    const ModelSpec& s = m_.spec();
    LayoutResult r;
    r.layout = l;
    r.memory = m_.memory(l);
    r.fits = r.memory.total() <= (1 - kMemoryReserve) * o_.memGiB * double(1 << 30);
    if (!r.fits) {  // no time: it does not run
      *out = std::move(r);
      return snclSuccess;
    }
    const Groups gr = groupsOf(l, focusRank);
    const auto tp = endpointsOf(gr.tp, placed), dp = endpointsOf(gr.dp, placed), ep = endpointsOf(gr.ep, placed),
               expertDp = endpointsOf(gr.expertDp, placed), pp = endpointsOf(gr.pp, placed);
    const double rate = o_.peakTflops * 1e6 * o_.efficiency;  // FLOP per us
    const double elementwise = o_.hbmGBs > 0 ? m_.stageForwardTrafficBytes(l) / (o_.hbmGBs * 1e3) : 0;
    const double forward = m_.stageForwardFlops(l, true) / rate + elementwise, backward = 2 * forward;
    const double recompute = l.recompute ? forward : 0;
    const double layers = double(s.layers) / l.pp, passes = l.recompute ? 6 : 4;
    const double act = m_.activationBytes(), tokens = double(l.microBatch) * s.seq;
    double tpUs = 0, epUs = 0, ppUs = 0;
    SNCL_CHECK(pricer_.timeUs(CollType::AllReduce, tp, tokens * s.hidden * act, &tpUs));
    if (m_.moe()) SNCL_CHECK(pricer_.timeUs(CollType::AlltoAll, ep, tokens * s.hidden * s.topK * act / l.tp, &epUs));
    SNCL_CHECK(pricer_.timeUs(CollType::Broadcast, pp, tokens * s.hidden * act / l.tp, &ppUs));
    const double perMicroComm = layers * passes * (tpUs + epUs) + 2.0 * l.interleave * ppUs;
    const double perMicro = forward + backward + recompute + perMicroComm;
    const double m = l.microBatches(s);
    const double bubble = double(l.pp - 1) / l.interleave * perMicro;
    std::vector<double> buckets;
    const double expertGrads = m_.deviceExpertParams(l) * m_.gradientBytes();
    const double denseGrads = m_.deviceParams(l) * m_.gradientBytes() - expertGrads;
    SNCL_CHECK(addBuckets(pricer_, dp, denseGrads, o_.bucketBytes, &buckets));
    SNCL_CHECK(addBuckets(pricer_, expertDp, expertGrads, o_.bucketBytes, &buckets));
    r.dpExposedUs = exposedAfterBackward(backward + recompute, buckets);
    // The step's parts add up to it: the bubble is idle time, whatever fills the cycles.
    r.computeUs = m * (forward + backward + recompute);
    r.tpUs = m * layers * passes * tpUs;
    r.epUs = m * layers * passes * epUs;
    r.ppUs = m * 2.0 * l.interleave * ppUs;
    r.bubbleUs = bubble;
    r.stepUs = m * perMicro + bubble + r.dpExposedUs;
    const double devices = double(l.gpus()), peak = o_.peakTflops * 1e6;
    r.tflopsPerGpu = m_.stepFlops(l.recompute) / (devices * r.stepUs) / 1e6;
    r.mfu = m_.stepFlops(false) / (devices * peak * r.stepUs);
    r.utilization = 6 * m_.activeParams() * double(s.globalBatch) * s.seq / (devices * peak * r.stepUs);
    r.placement = fmt::format("TP {}", whereGroup(g_, tp));
    if (l.pp > 1) r.placement += fmt::format("; PP {}", whereGroup(g_, pp));
    if (l.dp > 1) r.placement += fmt::format("; DP {}", whereGroup(g_, dp));
    if (l.ep > 1) r.placement += fmt::format("; EP {}", whereGroup(g_, ep));
    *out = std::move(r);
    return snclSuccess;
  }

 private:
  const topo::Graph& g_;
  GroupCommPricer& pricer_;
  const LayoutModel& m_;
  const AdviceOptions& o_;
};

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool better(const LayoutResult& a, const LayoutResult& b) {
  if (a.fits != b.fits) return a.fits;
  return a.fits ? a.stepUs < b.stepUs : a.memory.total() < b.memory.total();
}

}  // namespace

Result adviseLayouts(topo::Graph& g, const std::vector<EndpointId>& healthy, const LayoutModel& model,
                     const AdviceOptions& o, Advice* out, GroupCommPricer* shared) {
  const ModelSpec& s = model.spec();
  if (!(o.peakTflops > 0) || !(o.memGiB > 0) || !(o.efficiency > 0) || o.efficiency > 1 || !(o.bucketBytes >= 1))
    return fail(snclInvalidArgument, "layout search: peak {} TFLOP/s and memory {} GiB must be > 0, efficiency {} in (0, 1]",
                o.peakTflops, o.memGiB, o.efficiency);
  if (o.gpus < 1) return fail(snclInvalidArgument, "layout search: {} devices", o.gpus);
  GroupCommPricer own(&g, o.memGBs);
  GroupCommPricer& pricer = shared ? *shared : own;
  const size_t before = pricer.simulations();
  Evaluator eval(g, pricer, model, o);
  Advice a;
  a.healthyDevices = int(healthy.size());
  for (int tp = 1; tp <= std::min(o.gpus, s.heads); tp *= 2) {
    if (s.heads % tp) continue;
    const std::vector<EndpointId> placed = placeRanks(g, healthy, tp);
    const int devices = std::min<int>(o.gpus, int(placed.size()));
    int focusRank = 0;
    for (size_t r = 0; r < placed.size(); ++r)
      if (placed[r] == o.focus) focusRank = int(r);
    for (int pp : divisors(s.layers)) {
      if (tp * pp > devices) break;
      // The most data-parallel replicas that fit and split the global batch evenly.
      int dp = devices / (tp * pp);
      while (dp > 1 && s.globalBatch % dp) --dp;
      const int used = tp * pp * dp;
      const int rank = focusRank < used ? focusRank : 0;
      for (int ep : divisors(std::max(s.experts, 1))) {
        if (dp % ep) continue;
        bool have = false;
        LayoutResult best;
        for (int mb : {1, 2, 4, 8}) {
          if ((s.globalBatch / dp) % mb) continue;
          const int m = s.globalBatch / (dp * mb);
          for (int v : {1, 2, 4}) {
            if (v > 1 && (pp == 1 || (s.layers / pp) % v || m % pp)) continue;
            for (bool rc : {false, true}) {
              if (rc ? o.recompute == AdviceOptions::Recompute::Never : o.recompute == AdviceOptions::Recompute::Always)
                continue;
              Layout l{tp, pp, dp, ep, mb, v, rc};
              LayoutResult r;
              SNCL_CHECK(eval.evaluate(l, placed, rank, &r));
              if (!have || better(r, best)) {
                best = std::move(r);
                have = true;
              }
            }
          }
        }
        if (have) a.layouts.push_back(std::move(best));
      }
    }
  }
  if (a.layouts.empty())
    return fail(snclInvalidArgument, "layout search: no layout of {} on {} devices (heads {}, layers {}, batch {})",
                s.name, o.gpus, s.heads, s.layers, s.globalBatch);
  std::stable_sort(a.layouts.begin(), a.layouts.end(), better);
  a.simulations = pricer.simulations() - before;
  *out = std::move(a);
  return snclSuccess;
}

const LayoutResult* findLayout(const Advice& a, const Layout& l) {
  for (const LayoutResult& r : a.layouts)
    if (r.layout.tp == l.tp && r.layout.pp == l.pp && r.layout.ep == l.ep) return &r;
  return nullptr;
}

Result parseAdviceFaults(const std::string& spec, AdviceFaults* out) {
  AdviceFaults f;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string::npos) end = spec.size();
    std::string clause = spec.substr(pos, end - pos);
    pos = end + 1;
    while (!clause.empty() && clause.front() == ' ') clause.erase(0, 1);
    while (!clause.empty() && clause.back() == ' ') clause.pop_back();
    if (clause.empty()) continue;
    if (clause.rfind("lose=", 0) == 0) {
      const std::string v = clause.substr(5);
      char* e = nullptr;
      const double p = strtod(v.c_str(), &e);
      if (v.empty() || std::string(e) != "%" || !(p > 0) || p >= 100)
        return fail(snclInvalidArgument, "faults: '{}': expected lose=P% with 0 < P < 100", clause);
      f.losePercent = p;
    } else if (clause.rfind("endpoint=", 0) == 0) {
      const size_t colon = clause.rfind(':');
      if (colon == std::string::npos || colon < 10 || clause.substr(colon + 1) != "down")
        return fail(snclInvalidArgument, "faults: '{}': expected endpoint=NAME:down", clause);
      f.endpoints.push_back(clause.substr(9, colon - 9));
    } else {
      f.links += (f.links.empty() ? "" : ";") + clause;
    }
  }
  std::vector<LinkFault> check;
  SNCL_CHECK(parseFaults(f.links, &check));
  *out = std::move(f);
  return snclSuccess;
}

Result healthyEndpoints(const topo::Graph& g, int devices, const AdviceFaults& f, std::vector<EndpointId>* out,
                        EndpointId* focus) {
  if (devices < 1 || size_t(devices) > g.endpointCount())
    return fail(snclInvalidArgument, "layout search: {} devices on a topology of {} endpoints", devices, g.endpointCount());
  std::vector<uint8_t> lost(size_t(devices), 0);
  for (const std::string& name : f.endpoints) {
    const topo::VertexId v = g.findVertex(name);
    const EndpointId e = v == topo::kNone ? topo::kNone : g.endpointOf(v);
    if (e == topo::kNone || e >= EndpointId(devices))
      return fail(snclInvalidArgument, "faults: endpoint={}: not one of the {} devices", name, devices);
    lost[e] = 1;
  }
  const int lose = int(std::ceil(f.losePercent / 100 * devices));
  for (int i = 0; i < lose; ++i) lost[size_t((i + 0.5) * devices / lose)] = 1;
  *focus = topo::kNone;
  std::vector<LinkFault> links;
  SNCL_CHECK(parseFaults(f.links, &links));
  for (const LinkFault& lf : links)
    for (const std::string* name : {&lf.a, &lf.b}) {
      const topo::VertexId v = g.findVertex(*name);
      if (*focus == topo::kNone && v != topo::kNone && g.endpointOf(v) != topo::kNone) *focus = g.endpointOf(v);
    }
  out->clear();
  for (int e = 0; e < devices; ++e)
    if (!lost[size_t(e)]) out->push_back(EndpointId(e));
  if (out->empty()) return fail(snclInvalidArgument, "faults: every device is lost");
  return snclSuccess;
}

Result replanLayouts(topo::Graph& g, const LayoutModel& model, const AdviceOptions& options, const std::string& faults,
                     Replan* out) {
  AdviceFaults f;
  SNCL_CHECK(parseAdviceFaults(faults, &f));
  std::vector<LinkFault> links;
  SNCL_CHECK(parseFaults(f.links, &links));
  AdviceOptions o = options;
  Replan r;
  std::vector<EndpointId> healthy;
  GroupCommPricer pricer(&g, o.memGBs);
  SNCL_CHECK(healthyEndpoints(g, o.gpus, AdviceFaults{}, &healthy, &o.focus));
  r.hasFaults = !faults.empty();
  if (!r.hasFaults || links.empty()) SNCL_CHECK(adviseLayouts(g, healthy, model, o, &r.healthy, &pricer));
  if (r.hasFaults) {
    topo::Graph copy = links.empty() ? topo::Graph() : g.clone();
    topo::Graph& faulted = links.empty() ? g : copy;
    SNCL_CHECK(applyFaults(faulted, links));
    AdviceOptions fo = o;
    std::vector<EndpointId> survivors;
    SNCL_CHECK(healthyEndpoints(faulted, o.gpus, f, &survivors, &fo.focus));
    if (links.empty()) {
      SNCL_CHECK(adviseLayouts(g, survivors, model, fo, &r.faulted, &pricer));
    } else {
      // The faulted search shares no graph or simulation with the healthy one: it runs on a
      // second thread beside it, each making the calls it would make alone (the same answer).
      Result faultedResult = snclSuccess;
      std::string faultedError;
      std::thread search([&] {
        ExpectedErrors once;  // logged at INFO here: the caller's thread records it, at WARN
        GroupCommPricer faultedPricer(&faulted, o.memGBs);
        faultedResult = adviseLayouts(faulted, survivors, model, fo, &r.faulted, &faultedPricer);
        if (faultedResult != snclSuccess) faultedError = lastError();
      });
      const Result healthyResult = adviseLayouts(g, healthy, model, o, &r.healthy, &pricer);
      search.join();
      SNCL_CHECK(healthyResult);
      if (faultedResult != snclSuccess) return fail(faultedResult, "{}", faultedError);
    }
    const LayoutResult& before = r.healthy.layouts.front();
    const LayoutResult* same = findLayout(r.faulted, before.layout);
    if (same) r.sameIndex = int(same - r.faulted.layouts.data());
    if (same && same->fits && before.fits) r.slowdown = same->stepUs / before.stepUs - 1;
    const LayoutResult& now = r.faulted.layouts.front();
    r.anotherBetter = now.fits && (!same || !same->fits || now.layout.tp != before.layout.tp ||
                                   now.layout.pp != before.layout.pp || now.layout.ep != before.layout.ep);
  }
  *out = std::move(r);
  return snclSuccess;
}

double trainSeconds(const LayoutModel& model, const AdviceOptions& o, const LayoutResult& r, double tokens) {
  if (!r.fits || !(r.utilization > 0)) return 0;
  return 6 * model.activeParams() * tokens / (double(r.layout.gpus()) * o.peakTflops * 1e12 * r.utilization);
}

}  // namespace sncl::sim
