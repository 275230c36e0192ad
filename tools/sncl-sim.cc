// sncl-sim: what a collective would take on a topology, in virtual time, with the
// library's own planner and schedules (docs/simulator.md).
//
//   sncl-sim --topo FILE [--ranks N] [--coll allreduce] [--size 1G] [--dtype float32]
//            [--algo auto|ring|direct|chain|tree|hd|hier] [--faults SPEC] [--engine auto|exact|aggregated]
//            [--mem-gbs F] [--chunk BYTES] [--eager-bytes B] [--reps N] [--json]
#include <sys/resource.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "lib/exec/reduce.h"
#include "lib/sim/faults.h"
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

}  // namespace

int main(int argc, char** argv) {
  std::string topoFile, faults, engine = "auto", algo = "auto", coll = "allreduce", dtype = "float32";
  size_t bytes = size_t(1) << 30, chunk = size_t(1) << 20, eager = size_t(4) << 20;
  long ranks = -1, reps = 1;
  double memGBs = 400;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--json") json = true;
    else if (a == "--help" || a == "-h") return fmt::print("{}", kUsage), 0;
    else if (a == "--version") return fmt::print("sncl-sim {}\n", snclGetBuildVersion()), 0;
    else if (!value(&v)) return usage(fmt::format("unknown option or missing value: {}", a));
    else if (a == "--topo") topoFile = v;
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
    } else if (a == "--ranks" || a == "--reps") {
      char* e = nullptr;
      long n = strtol(v.c_str(), &e, 10);
      if (*e || v.empty() || n < 1 || n > (1 << 24)) return usage(fmt::format("bad {} {}", a, v));
      (a == "--ranks" ? ranks : reps) = n;
    } else if (a == "--mem-gbs") {
      char* e = nullptr;
      memGBs = strtod(v.c_str(), &e);
      if (*e || v.empty() || !(memGBs >= 0) || memGBs > 1e9) return usage("bad --mem-gbs " + v);
    } else {
      return usage("unknown option " + a);
    }
  }
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
  std::vector<sim::LinkFault> linkFaults;
  if (sim::parseFaults(faults, &linkFaults) != snclSuccess || sim::applyFaults(g, linkFaults) != snclSuccess)
    return error(lastError());
  const int n = ranks < 0 ? g.rankCount() : int(ranks);
  if (n > g.rankCount()) return error(fmt::format("{} ranks on a topology of {} endpoints", n, g.rankCount()));
  if (n < g.rankCount() && g.mapRanks(n) != snclSuccess) return error(lastError());

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
