// sncl-sim: what a collective would take on a topology, in virtual time, with the
// library's own planner and schedules (docs/simulator.md).
//
//   sncl-sim --topo FILE [--ranks N] [--coll allreduce] [--size 1G] [--dtype float32]
//            [--algo auto|ring|direct|chain|tree|hd|hier] [--faults SPEC] [--engine auto|exact|aggregated]
//            [--mem-gbs F] [--chunk BYTES] [--eager-bytes B] [--reps N] [--json]
//   sncl-sim --init (--topo FILE | --ranks N) [--init-latency-us L] [--init-gbs B]
//   sncl-sim --topo FILE --train params=7e9,tokens=4M,... [--algo A] [--faults SPEC]
//   sncl-sim --topo FILE --advise MODEL.json --gpus N --device peak=TFLOPS,mem=GiB [--faults SPEC]
//            [--tokens T] [--top K] [--json]
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "lib/exec/reduce.h"
#include "lib/sim/bootstrap_model.h"
#include "lib/sim/faults.h"
#include "lib/sim/layout_search.h"
#include "lib/sim/training.h"
#include "lib/sim/workload.h"
#include "lib/topo/topo_file.h"
#include "sncl/sncl_ext.h"

using namespace sncl;

namespace {

constexpr const char* kUsage = R"(usage: sncl-sim --topo FILE [options]
  --topo FILE        topology file (topologies/*.json)
  --ranks N          ranks, mapped onto the first N endpoints (default: every endpoint)
  --coll C           allreduce (default), allgather, reducescatter, broadcast, reduce,
                     alltoall, gather, scatter
  --size S           nccl-tests' size (the whole buffer), e.g. 8, 64K, 1.5M, 1G (powers
                     of 1024); default 1G
  --dtype T          float32 (default), float16, bfloat16, float64, int8, uint8, int32,
                     uint32, int64, uint64, float8e4m3, float8e5m2; nccl-tests' names too
                     (half, float, double, f8e4m3, f8e5m2)
  --algo A           auto (the planner's choice, default), ring, direct, chain, tree, hd,
                     hier (the best hierarchical variant) or one the planner describes,
                     e.g. 'hier[node](ring/tree)'
  --faults SPEC      link=A-B:down;link=C-D:degrade=0.5 (applied before simulating)
  --engine E         auto (default: exact up to 256 ranks, else aggregated), exact, aggregated
  --mem-gbs F        reduction and copy bandwidth per rank, GB/s (default 400; 0: free)
  --chunk BYTES      pipeline chunk (SNCL_CHUNK_SIZE; default 1M)
  --eager-bytes B    messages the transport buffers (default 4M); longer ones wait for
                     the receive to be posted
  --reps N           run the simulation N times (wall time is the mean; default 1)
  --json             one JSON object on stdout instead of the table
  --version          the library's version and git revision
  --init             instead of a collective: the comm init's bootstrap at --ranks N (or
                     the topology's endpoints), modeled: messages per rank, bytes, time
  --init-latency-us L, --init-gbs B
                     the host network the bootstrap's TCP runs on (default 25 us, 12.5 GB/s)
  --train SPEC       instead of a collective: one data-parallel training step, e.g.
                     params=7e9,tokens=4M,peak=400,eff=0.5,grad-bytes=2,bucket=25M (defaults
                     as shown); the gradient All-Reduce uses --algo, --faults, --mem-gbs
  --advise MODEL     instead of a collective: rank the parallel layouts (TP x PP x DP x EP,
                     micro-batch) of the model file's transformer on --gpus devices of the
                     topology by predicted step time (docs/simulator.md)
  --gpus N           devices for --advise (default: every endpoint)
  --device SPEC      peak=TFLOPS,mem=GiB[,hbm=GB/s][,eff=F] per device (hbm: memory
                     bandwidth for element-wise work, not counted without it; eff: share of
                     peak the matrix products reach, default 0.70)
  --tokens T         with --advise: time to train T tokens (e.g. 300e9) at the best layout
  --top K            with --advise: table rows (default 10)
  --recompute R      with --advise: activation recomputation auto (default: the faster of
                     with and without that fits), always, never
  with --advise, --faults also takes endpoint=NAME:down and lose=P% (devices lost) and
  re-ranks: how much slower the best layout became and whether another is now better
)";

int usage(const std::string& why) {
  fmt::print(stderr, "sncl-sim: {}\n{}", why, kUsage);
  return 2;
}

int error(const std::string& what) {
  fmt::print(stderr, "sncl-sim: {}\n", what);
  return 1;
}

double peakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

// User + system CPU seconds of this process: on a shared machine the figure that does not
// depend on other load.
double cpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

std::string rankName(const topo::Graph& g, int r) { return fmt::format("{} ({})", r, g.vertexName(g.rankVertex(r))); }

int printInit(int n, const sim::BootstrapNet& net, bool json) {
  sim::BootstrapModel m;
  if (sim::modelBootstrap(n, sim::initGatherBytes(), net, &m) != snclSuccess) return error(lastError());
  if (json) {
    nlohmann::json j;
    j["ranks"] = n;
    j["tree_depth"] = m.depth;
    j["messages_per_rank_max"] = m.maxMessages;
    j["messages_per_rank_mean"] = m.meanMessages;
    j["messages_total"] = m.totalMessages;
    j["messages_sent_per_level"] = m.sentPerLevel;
    j["bytes"] = m.bytes;
    j["root_bytes"] = m.rootBytes;
    j["rendezvous_max_rank_bytes"] = m.maxRendezvousBytes;
    j["rendezvous_us"] = m.rendezvousUs;
    j["allgathers_us"] = m.gatherUs;
    j["init_us"] = m.timeUs;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("init       {} ranks, bootstrap tree depth {}, host network {} us + bytes / {} GB/s\n", n, m.depth,
             net.latencyUs, net.gbs);
  fmt::print("messages   per rank (sent + received): max {}, mean {:.2f}; total sent {}\n", m.maxMessages,
             m.meanMessages, m.totalMessages);
  fmt::print("per level  sent by the ranks at tree depth 0..{}: {}\n", m.depth, fmt::join(m.sentPerLevel, " "));
  fmt::print("bytes      {:.4g} sent in all; rendezvous: the root {:.4g} (one address table), rank 0 {:.4g} "
             "(one per tree child)\n", m.bytes, m.rootBytes, m.maxRendezvousBytes);
  fmt::print("time       {:.1f} us modeled: rendezvous {:.1f} us, all-gathers {:.1f} us\n", m.timeUs, m.rendezvousUs,
             m.gatherUs);
  return 0;
}

int printTraining(const topo::Graph& g, int n, const std::string& text, const std::string& algo, double memGBs,
                  const std::string& faults, bool json) {
  sim::TrainingSpec spec;
  spec.algorithm = algo;
  spec.memGBs = memGBs;
  if (sim::parseTrainingSpec(text, &spec) != snclSuccess) return usage(lastError());
  sim::TrainingResult r;
  if (sim::modelTrainingStep(g, n, spec, &r) != snclSuccess) return error(lastError());
  if (json) {
    nlohmann::json j;
    j["topology"] = g.name();
    j["accelerators"] = n;
    j["faults"] = faults;
    j["params"] = spec.params;
    j["tokens"] = spec.tokens;
    j["peak_tflops"] = spec.peakTflops;
    j["compute_efficiency"] = spec.computeEfficiency;
    j["grad_bytes_per_param"] = spec.gradBytesPerParam;
    j["bucket_bytes"] = spec.bucketBytes;
    j["algorithm"] = r.algorithm;
    j["compute_us"] = r.computeUs;
    j["buckets"] = r.buckets;
    j["bucket_allreduce_us"] = r.bucketUs;
    j["comm_us"] = r.commUs;
    j["exposed_us"] = r.exposedUs;
    j["step_us"] = r.stepUs;
    j["utilization"] = r.utilization;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("training   {} on {} accelerators{}: N={:.3g} params, D={:.3g} tokens, peak {} TFLOP/s x {}\n", g.name(), n,
             faults.empty() ? "" : ", faults: " + faults, spec.params, spec.tokens, spec.peakTflops,
             spec.computeEfficiency);
  fmt::print("compute    {:.3f} ms (6ND = {:.4g} FLOP)\n", r.computeUs / 1e3, r.flopPerStep);
  fmt::print("gradients  {} buckets of {} B ({} B/param), All-Reduce {} : {:.3f} ms per bucket, {:.3f} ms in all\n",
             r.buckets, spec.bucketBytes, spec.gradBytesPerParam, r.algorithm, r.bucketUs / 1e3, r.commUs / 1e3);
  fmt::print("step       {:.3f} ms, exposed communication {:.3f} ms, U = {:.3f}\n", r.stepUs / 1e3, r.exposedUs / 1e3,
             r.utilization);
  return 0;
}


struct DeviceArg {
  double peak = 0, memGiB = 0, hbmGBs = 0, eff = sim::kComputeEfficiency;
};

bool parseDevice(const std::string& text, DeviceArg* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    char* e = nullptr;
    const double x = strtod(v.c_str(), &e);
    if (v.empty() || *e || !(x > 0) || x > 1e9) return false;
    if (key == "peak") out->peak = x;
    else if (key == "mem") out->memGiB = x;
    else if (key == "hbm") out->hbmGBs = x;
    else if (key == "eff" && x <= 1) out->eff = x;
    else return false;
  }
  return out->peak > 0 && out->memGiB > 0;
}

nlohmann::json layoutsJson(const sim::Advice& a) {
  nlohmann::json list = nlohmann::json::array();
  for (const sim::LayoutResult& r : a.layouts) {
    const sim::Layout& l = r.layout;
    list.push_back({{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"ep", l.ep}, {"gpus_used", l.gpus()}, {"micro_batch", l.microBatch},
                    {"interleave", l.interleave}, {"recompute", l.recompute}, {"step_s", r.stepUs / 1e6},
                    {"tflops_per_gpu", r.tflopsPerGpu}, {"mfu", r.mfu}, {"u", r.utilization},
                    {"mem_gib", r.memory.total() / double(1 << 30)}, {"fits", r.fits},
                    {"compute_s", r.computeUs / 1e6}, {"tp_comm_s", r.tpUs / 1e6}, {"ep_comm_s", r.epUs / 1e6},
                    {"pp_comm_s", r.ppUs / 1e6}, {"bubble_s", r.bubbleUs / 1e6},
                    {"dp_exposed_s", r.dpExposedUs / 1e6}, {"placement", r.placement}});
  }
  return list;
}

void printLayouts(const sim::Advice& a, int top) {
  fmt::print("{:>4} {:>3} {:>3} {:>5} {:>3} {:>6} {:>3} {:>2} {:>2} {:>9} {:>8} {:>6} {:>6} {:>8} {:>4}  {}\n", "rank", "tp",
             "pp", "dp", "ep", "used", "mb", "v", "rc", "step s", "TFLOP/s", "MFU", "U", "mem GiB", "fits", "placement");
  for (size_t i = 0; i < a.layouts.size() && int(i) < top; ++i) {
    const sim::LayoutResult& r = a.layouts[i];
    const sim::Layout& l = r.layout;
    auto num = [&](double x, const char* f) { return r.fits ? fmt::format(fmt::runtime(f), x) : std::string("-"); };
    fmt::print("{:>4} {:>3} {:>3} {:>5} {:>3} {:>6} {:>3} {:>2} {:>2} {:>9} {:>8} {:>6} {:>6} {:>8.1f} {:>4}  {}\n", i + 1,
               l.tp, l.pp, l.dp, l.ep, l.gpus(), l.microBatch, l.interleave, l.recompute ? "y" : "n", num(r.stepUs / 1e6, "{:.3f}"),
               num(r.tflopsPerGpu, "{:.1f}"), num(r.mfu, "{:.3f}"), num(r.utilization, "{:.3f}"),
               r.memory.total() / double(1 << 30), r.fits ? "yes" : "no", r.placement);
  }
}

std::string layoutName(const sim::Layout& l) {
  return fmt::format("TP {} x PP {} x DP {}{}, micro-batch {}", l.tp, l.pp, l.dp,
                     l.ep > 1 ? fmt::format(" x EP {}", l.ep) : std::string(), l.microBatch);
}

struct AdviseArgs {
  std::string model, faults;
  long gpus = -1;
  DeviceArg device;
  double tokens = 0, memGBs = 400;
  int top = 10;
  bool json = false;
  sim::AdviceOptions::Recompute recompute = sim::AdviceOptions::Recompute::Auto;
};

int printAdvice(topo::Graph& g, const AdviseArgs& args) {
#ifdef __GLIBC__
  // Each of the search's simulations plans on the whole topology, allocating and freeing
  // arrays of O(links) (tens of MiB at 16k endpoints). glibc would hand them back to the
  // kernel every time and fault them in again (a third of the search's CPU): keep them.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  sim::ModelSpec spec;
  if (sim::loadModelFile(args.model, &spec) != snclSuccess) return error(lastError());
  const sim::LayoutModel model(spec);
  const int gpus = args.gpus < 0 ? int(g.endpointCount()) : int(args.gpus);
  sim::AdviceOptions o;
  o.peakTflops = args.device.peak;
  o.memGiB = args.device.memGiB;
  o.efficiency = args.device.eff;
  o.hbmGBs = args.device.hbmGBs;
  o.gpus = gpus;
  o.memGBs = args.memGBs;
  o.recompute = args.recompute;
  const auto t0 = std::chrono::steady_clock::now();
  sim::Replan plan;
  if (sim::replanLayouts(g, model, o, args.faults, &plan) != snclSuccess) return error(lastError());
  const double wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const sim::Advice &best = plan.healthy, &after = plan.faulted;
  const bool faulted = plan.hasFaults;
  const sim::LayoutResult& top = best.layouts.front();
  const sim::LayoutResult* same = plan.sameIndex >= 0 ? &after.layouts[size_t(plan.sameIndex)] : nullptr;
  const double tokensPerStep = double(spec.globalBatch) * spec.seq;
  const sim::LayoutResult& run = faulted ? after.layouts.front() : top;
  const double trainS = args.tokens > 0 ? sim::trainSeconds(model, o, run, args.tokens) : 0;
  if (args.json) {
    nlohmann::json j;
    j["model"] = spec.name;
    j["topology"] = g.name();
    j["gpus"] = gpus;
    j["params"] = model.totalParams();
    j["active_params"] = model.activeParams();
    j["layouts"] = layoutsJson(best);
    if (faulted) {
      j["faults"] = args.faults;
      j["faulted"] = {{"healthy_devices", after.healthyDevices}, {"layouts", layoutsJson(after)}};
      j["faulted"]["best_layout_slowdown"] =
          same && same->fits && top.fits ? nlohmann::json(plan.slowdown) : nlohmann::json(nullptr);
      j["faulted"]["another_layout_better"] = plan.anotherBetter;
    }
    if (args.tokens > 0) j["tokens"] = args.tokens, j["train_days"] = trainS / 86400;
    j["simulations"] = best.simulations + after.simulations;
    j["wall_s"] = wallS;
    j["peak_rss_mib"] = peakRssMiB();
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("model      {}: {:.4g} parameters ({:.4g} active), {} layers, hidden {}, {} heads, seq {}, batch {}, {}\n",
             spec.name, model.totalParams(), model.activeParams(), spec.layers, spec.hidden, spec.heads, spec.seq,
             spec.globalBatch, sim::precisionName(spec.precision));
  fmt::print("machine    {}: {} devices, peak {} TFLOP/s x efficiency {}, {} GiB each\n", g.name(), gpus, o.peakTflops,
             o.efficiency, o.memGiB);
  printLayouts(best, args.top);
  if (!top.fits) fmt::print("fits       none: the least memory any layout needs is {:.1f} GiB\n", top.memory.total() / double(1 << 30));
  if (faulted) {
    fmt::print("\nfaults     {}: {} healthy devices\n", args.faults, after.healthyDevices);
    printLayouts(after, args.top);
    if (same && same->fits && top.fits)
      fmt::print("best       {}: {:.3f} s -> {:.3f} s per step with the faults ({:+.1f}%)\n", layoutName(top.layout),
                 top.stepUs / 1e6, same->stepUs / 1e6, 100 * plan.slowdown);
    else if (top.fits)
      fmt::print("best       {}: no longer runs with the faults\n", layoutName(top.layout));
    if (!after.layouts.front().fits) fmt::print("now best   none: no layout fits with the faults\n");
    else
      fmt::print("now best   {}{}\n", layoutName(after.layouts.front().layout),
                 plan.anotherBetter ? " (another layout)" : " (the same layout)");
  }
  if (args.tokens > 0 && trainS > 0)
    fmt::print("train      {:.4g} tokens = {:.4g} steps of {:.4g} tokens: {:.2f} days (6ND / (X peak U), U = {:.3f})\n",
               args.tokens, args.tokens / tokensPerStep, tokensPerStep, trainS / 86400, run.utilization);
  fmt::print("wall       {:.2f} s, {} collectives simulated, peak RSS {:.0f} MiB\n", wallS,
             best.simulations + after.simulations, peakRssMiB());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  std::string topoFile, faults, engine = "auto", algo = "auto", coll = "allreduce", dtype = "float32";
  size_t bytes = size_t(1) << 30, chunk = size_t(1) << 20, eager = size_t(4) << 20;
  long ranks = -1, reps = 1;
  double memGBs = 400;
  bool json = false, init = false;
  std::string train;
  sim::BootstrapNet hostNet;
  AdviseArgs advise;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--json") json = true;
    else if (a == "--init") init = true;
    else if (a == "--help" || a == "-h") return fmt::print("{}", kUsage), 0;
    else if (a == "--version") return fmt::print("sncl-sim {}\n", snclGetBuildVersion()), 0;
    else if (!value(&v)) return usage(fmt::format("unknown option or missing value: {}", a));
    else if (a == "--topo") topoFile = v;
    else if (a == "--train") train = v;
    else if (a == "--advise") advise.model = v;
    else if (a == "--recompute") {
      using R = sim::AdviceOptions::Recompute;
      if (v != "auto" && v != "always" && v != "never") return usage("bad --recompute " + v + " (auto, always, never)");
      advise.recompute = v == "auto" ? R::Auto : v == "always" ? R::Always : R::Never;
    }
    else if (a == "--device") {
      if (!parseDevice(v, &advise.device)) return usage("bad --device " + v + " (peak=TFLOPS,mem=GiB[,hbm=GB/s][,eff=F])");
    } else if (a == "--tokens") {
      char* e = nullptr;
      advise.tokens = strtod(v.c_str(), &e);
      if (*e || v.empty() || !(advise.tokens > 0) || advise.tokens > 1e18) return usage("bad --tokens " + v);
    }
    else if (a == "--init-latency-us" || a == "--init-gbs") {
      char* e = nullptr;
      double x = strtod(v.c_str(), &e);
      if (*e || v.empty() || !(x >= 0) || x > 1e9 || (a == "--init-gbs" && x == 0)) return usage(fmt::format("bad {} {}", a, v));
      (a == "--init-gbs" ? hostNet.gbs : hostNet.latencyUs) = x;
    }
    else if (a == "--faults") faults = v;
    else if (a == "--engine") engine = v;
    else if (a == "--algo") algo = v;
    else if (a == "--coll") coll = v;
    else if (a == "--dtype") dtype = v;
    else if (a == "--size") {
      if (snclParseSize(v.c_str(), &bytes) != snclSuccess) return usage(std::string("--size: ") + snclGetLastError(nullptr));
    } else if (a == "--eager-bytes") {
      if (snclParseSize(v.c_str(), &eager) != snclSuccess) return usage(std::string("--eager-bytes: ") + snclGetLastError(nullptr));
    } else if (a == "--chunk") {
      if (snclParseSize(v.c_str(), &chunk) != snclSuccess) return usage(std::string("--chunk: ") + snclGetLastError(nullptr));
      if (chunk == 0) return usage("--chunk must be at least 1 byte");
    } else if (a == "--ranks" || a == "--reps" || a == "--gpus" || a == "--top") {
      char* e = nullptr;
      long n = strtol(v.c_str(), &e, 10);
      if (*e || v.empty() || n < 1 || n > (1 << 24)) return usage(fmt::format("bad {} {}", a, v));
      if (a == "--gpus") advise.gpus = n;
      else if (a == "--top") advise.top = int(n);
      else (a == "--ranks" ? ranks : reps) = n;
    } else if (a == "--mem-gbs") {
      char* e = nullptr;
      memGBs = strtod(v.c_str(), &e);
      if (*e || v.empty() || !(memGBs >= 0) || memGBs > 1e9) return usage("bad --mem-gbs " + v);
    } else {
      return usage("unknown option " + a);
    }
  }
  if (int(init) + int(!train.empty()) + int(!advise.model.empty()) > 1)
    return usage("--init, --train and --advise are separate runs");
  if (!advise.model.empty() && !(advise.device.peak > 0)) return usage("--advise needs --device peak=TFLOPS,mem=GiB");
  if (init && topoFile.empty() && ranks > 0) return printInit(int(ranks), hostNet, json);
  if (topoFile.empty()) return usage("--topo is required");
  if (engine != "auto" && engine != "exact" && engine != "aggregated") return usage("bad --engine " + engine);
  sim::WorkloadSpec spec;
  if (!parseCollName(coll, &spec.coll)) return usage("unknown --coll " + coll);
  snclDataType_t type;
  if (snclDataTypeFromName(dtype.c_str(), &type) != snclSuccess) return usage(snclGetLastError(nullptr));
  spec.elemSize = dtypeSize(type);
  spec.algorithm = algo;
  spec.bytes = bytes;
  spec.chunkBytes = chunk;

  const auto t0 = std::chrono::steady_clock::now();
  topo::Graph g;
  if (loadTopologyFile(topoFile, &g) != snclSuccess) return error(lastError());
  if (!advise.model.empty()) {
    if (ranks > 0) return usage("--advise takes --gpus, not --ranks");
    advise.faults = faults;
    advise.memGBs = memGBs;
    advise.json = json;
    return printAdvice(g, advise);
  }
  std::vector<sim::LinkFault> linkFaults;
  if (sim::parseFaults(faults, &linkFaults) != snclSuccess || sim::applyFaults(g, linkFaults) != snclSuccess)
    return error(lastError());
  const int n = ranks < 0 ? g.rankCount() : int(ranks);
  if (n > g.rankCount()) return error(fmt::format("{} ranks on a topology of {} endpoints", n, g.rankCount()));
  if (n < g.rankCount() && g.mapRanks(n) != snclSuccess) return error(lastError());

  if (init) return printInit(n, hostNet, json);
  if (!train.empty()) return printTraining(g, n, train, algo, memGBs, faults, json);

  sim::Network net(g);
  spec.memGBs = memGBs;
  sim::Planned planned;
  if (sim::makeWorkload(g, spec, n, &planned) != snclSuccess) return error(lastError());
  sim::SimOptions opts;
  opts.memGBs = memGBs;
  opts.eagerBytes = eager;
  const bool exact = engine == "exact" || (engine == "auto" && n <= 256);
  sim::SimResult res;
  for (long rep = 0; rep < reps; ++rep) {
    Result r = exact ? sim::simulateExact(net, planned.workload, opts, &res)
                     : sim::simulateAggregated(net, planned.workload, opts, &res);
    if (r != snclSuccess) return error(lastError());
  }
  const double wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double algbw = double(bytes) / (res.timeUs * 1e3);  // GB/s
  const double busbw = algbw * planned.busFactor;
  const sim::Critical& c = res.critical;

  if (json) {
    nlohmann::json j;
    j["topology"] = g.name();
    j["ranks"] = n;
    j["faults"] = faults;
    j["coll"] = coll;
    j["bytes"] = bytes;
    j["dtype"] = snclDataTypeName(type);
    j["algorithm"] = planned.algorithm;
    j["planner_choice"] = planned.plannerChoice;
    j["planner_candidates"] = planned.candidates;
    j["engine"] = exact ? "exact" : "aggregated";
    j["time_us"] = res.timeUs;
    j["algbw_gbs"] = algbw;
    j["busbw_gbs"] = busbw;
    j["messages"] = res.messages;
    j["steps"] = res.steps;
    j["segments"] = res.segments;
    j["schedules_built"] = res.built;
    j["critical"] = {{"rank", c.rank},         {"step", c.step},         {"repeats", c.repeats},
                     {"step_us", c.stepUs},    {"peer", c.peer},         {"sending", c.sending},
                     {"latency_us", c.latencyUs}, {"rate_gbs", c.rateGBs}, {"bottleneck", c.bottleneck}};
    nlohmann::json util = nlohmann::json::array();
    for (int k = 0; k < net.classCount(); ++k)
      util.push_back({{"class", net.className(k)},
                      {"bytes", res.classBytes[k]},
                      {"capacity_gbs", net.classCapacity(k) / sim::kBytesPerUsPerGBs},
                      {"utilization", res.classBytes[k] / (net.classCapacity(k) * res.timeUs)}});
    j["links"] = util;
    j["wall_s"] = wallS / double(reps);
    j["cpu_s"] = cpuSeconds() / double(reps);
    j["peak_rss_mib"] = peakRssMiB();
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("topology   {} ({} ranks){}\n", g.name(), n, faults.empty() ? "" : ", faults: " + faults);
  fmt::print("collective {} {} B {}, algorithm {} (planner: {}), {} engine\n", coll, bytes, snclDataTypeName(type), planned.algorithm,
             planned.plannerChoice, exact ? "exact" : "aggregated");
  fmt::print("candidates {}\n", planned.candidates);
  fmt::print("time       {:.2f} us   algbw {:.2f} GB/s   busbw {:.2f} GB/s\n", res.timeUs, algbw, busbw);
  fmt::print("simulated  {} messages, {} steps, {} segments, {} schedules built\n", res.messages, res.steps, res.segments,
             res.built);
  if (c.rank >= 0) {
    fmt::print("critical   step {}{}: {:.3f} us per step, rank {}", c.step,
               c.repeats > 1 ? fmt::format(" (x{})", c.repeats) : std::string(), c.stepUs, rankName(g, c.rank));
    if (c.peer < 0) fmt::print(", local reduction/copy\n");
    else
      fmt::print(", {} rank {}: latency {:.3f} us, rate {:.1f} GB/s, bottleneck {}\n", c.sending ? "send to" : "receive from",
                 rankName(g, c.peer), c.latencyUs, c.rateGBs, c.bottleneck.empty() ? "-" : c.bottleneck);
  }
  fmt::print("{:<14} {:>16} {:>16} {:>12}\n", "link class", "bytes", "capacity GB/s", "utilization");
  for (int k = 0; k < net.classCount(); ++k)
    fmt::print("{:<14} {:>16.4g} {:>16.6g} {:>11.2f}%\n", net.className(k), res.classBytes[k],
               net.classCapacity(k) / sim::kBytesPerUsPerGBs, 100.0 * res.classBytes[k] / (net.classCapacity(k) * res.timeUs));
  fmt::print("wall       {:.3f} s per run (cpu {:.3f} s), peak RSS {:.0f} MiB\n", wallS / double(reps),
             cpuSeconds() / double(reps), peakRssMiB());
  return 0;
}
