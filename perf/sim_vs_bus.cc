// sim_vs_bus: the simulator (tools/sncl-sim) against the emulated bus on the same
// topology, algorithm and size. Each All-Reduce runs on the bus (ranks as threads of this
// process, SNCL_TRANSPORT=bus, SNCL_ALGO=allreduce:<algo>) and is timed on the bus's
// modeled clock; sncl-sim then simulates the variant the bus's planner ran (sncl-topo
// --plan names it: "hier" is a family) on the topology file. Goal: sim/bus within ±10%.
//
//   sim_vs_bus [--topologies DIR] [--tools DIR] [--only TEXT] [--reps N]
//
// DIR defaults: ./topologies (run from the source tree) and the tools folder of this
// build (found from this executable). --only keeps the topologies whose name contains TEXT.
// SNCL_BUS_TIMESCALE, when set, applies to every cell (else 10000 up to 1 MiB, 1000 above).
// Public headers only; the simulator is reached by running its tool.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

namespace {

struct Topology {
  const char* name;
  const char* busFile;  // SNCL_TOPO_FILE of the bus run; nullptr: the bus's own default
  const char* simFile;  // the same graph as a file, for sncl-sim and sncl-topo
  int nranks;
};

// bus-default-2x4.json is the graph CommTopology::defaultGraph builds for 8 ranks.
const Topology kTopologies[] = {
    {"default bus Clos 2x4", nullptr, "bus-default-2x4.json", 8},
    {"supernode-4x4", "supernode-4x4.json", "supernode-4x4.json", 16},
    {"supernode-2plane-2x4", "supernode-2plane-2x4.json", "supernode-2plane-2x4.json", 8},
};
const char* const kAlgorithms[] = {"ring", "direct", "tree", "hd", "hier"};
const size_t kSizes[] = {size_t(64) << 10, size_t(1) << 20, size_t(16) << 20, size_t(64) << 20};
constexpr double kTolerance = 0.10;
// SNCL_BUS_TIMESCALE unless set. A rank's modeled clock starts at its entry in wall time,
// and ranks book link time in wall-clock order: on a loaded machine, scheduling delays
// divided by the timescale enter the model. At the default 100 repetitions of tree and
// halving-doubling at 16 and 64 MiB differed by up to 40%, at 1000 by under 5%; calls of
// 5-30 us (64 KiB, 1 MiB) still came out up to 16% short at 1000, not at 10000.
const char* timescaleFor(size_t bytes) { return bytes <= (size_t(1) << 20) ? "10000" : "1000"; }
// Every tool run ends within this; a hung one is killed by timeout(1).
constexpr int kToolDeadlineS = 300;

struct Options {
  std::string topologies = "topologies";
  std::string tools;
  const char* only = nullptr;
  int reps = 3;
  bool userTimescale = false;  // SNCL_BUS_TIMESCALE set: every cell runs at it
};

struct Cell {
  const char* topology;
  const char* algorithm;
  std::string variant;  // what the planner ran for that algorithm, or why nothing ran
  size_t bytes = 0;
  double busUs = 0, busWorstUs = 0, simUs = 0;
  bool ran = false;
};

bool ok(snclResult_t r, snclComm_t comm, const char* what) {
  if (r == snclSuccess) return true;
  fprintf(stderr, "sim_vs_bus: %s failed: %s (%s)\n", what, snclGetErrorString(r), snclGetLastError(comm));
  return false;
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command under a deadline, its stdout and stderr in *out; its exit status,
// or -1 when it did not exit (killed at the deadline gives timeout's 124).
int runTool(const std::string& command, std::string* out) {
  out->clear();
  const std::string line = "timeout " + std::to_string(kToolDeadlineS) + " " + command + " 2>&1";
  FILE* pipe = popen(line.c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  for (size_t got; (got = fread(buf, 1, sizeof buf, pipe)) > 0;) out->append(buf, got);
  const int status = pclose(pipe);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The variant the planner of a bus comm on this topology runs when SNCL_ALGO forces algo,
// e.g. "hier[node](ring/tree)"; empty when algo is no candidate at that size (direct above
// its limit). sncl-topo plans on the same graph, clock and tuning as the comm.
bool plannedVariant(const Options& o, const Topology& t, const char* algo, size_t bytes, std::string* variant) {
  std::string out;
  const std::string probe = "env SNCL_ALGO=allreduce:" + std::string(algo) + " " + quoted(o.tools + "/sncl-topo") +
                            " --file " + quoted(o.topologies + "/" + t.simFile) + " --ranks " +
                            std::to_string(t.nranks) + " --plan allreduce " + std::to_string(bytes);
  const int status = runTool(probe, &out);
  variant->clear();
  if (out.find("no algorithm can run") != std::string::npos) return true;
  const size_t at = out.find("chosen: ");
  if (status != 0 || at == std::string::npos) {
    fprintf(stderr, "sim_vs_bus: %s failed:\n%s\n", probe.c_str(), out.c_str());
    return false;
  }
  const size_t from = at + strlen("chosen: ");
  *variant = out.substr(from, out.find(' ', from) - from);
  return true;
}

// The simulated time of the variant. The bus charges no reductions (--mem-gbs 0) and
// starts every chunk's flow when the sender posts it, whether or not the receive is
// posted: every message is eager there.
bool simulateUs(const Options& o, const Topology& t, const std::string& variant, size_t bytes, double* us) {
  std::string out;
  const std::string cmd = quoted(o.tools + "/sncl-sim") + " --topo " + quoted(o.topologies + "/" + t.simFile) +
                          " --ranks " + std::to_string(t.nranks) + " --size " + std::to_string(bytes) + " --algo " +
                          quoted(variant) + " --engine exact --mem-gbs 0 --eager-bytes " + std::to_string(bytes) +
                          " --json";
  const int status = runTool(cmd, &out);
  const size_t at = out.find("\"time_us\":");
  if (status != 0 || at == std::string::npos) {
    fprintf(stderr, "sim_vs_bus: %s failed:\n%s\n", cmd.c_str(), out.c_str());
    return false;
  }
  *us = strtod(out.c_str() + at + strlen("\"time_us\":"), nullptr);
  return *us > 0;
}

void onEveryRank(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// Rank r's input: (r+1)(1 + i mod 251), so that the sum is exact in float32 (at most
// 136 x 251) and a block landing at the wrong offset shows.
float inputOf(int rank, size_t i) { return float((rank + 1) * (1 + int(i % 251))); }

// Modeled All-Reduce time on the bus, best and worst of o.reps: per repetition the span from
// the last rank's entry to the last rank's exit (snclBusLastCallSpanUs), every result checked.
bool busUs(const Options& o, std::vector<snclComm_t>& comms, std::vector<std::vector<float>>& bufs, size_t bytes,
           double* us, double* worstUs) {
  const int n = int(comms.size());
  const size_t count = bytes / sizeof(float);
  const double sumOfRanks = double(n) * double(n + 1) / 2;
  *us = *worstUs = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    std::vector<double> start(n), end(n);
    std::vector<size_t> wrong(n, 0);
    std::vector<int> failed(n, 0);
    // Ranks enter together: a rank's modeled clock starts at its entry, so entry skew
    // would let the early ranks' transfers begin before the span (from the last entry) does.
    std::barrier entry(n);
    onEveryRank(n, [&](int r) {
      float* buf = bufs[r].data();
      for (size_t i = 0; i < count; ++i) buf[i] = inputOf(r, i);
      entry.arrive_and_wait();
      failed[r] = !ok(snclAllReduce(buf, buf, count, snclFloat32, snclSum, comms[r], nullptr), comms[r],
                      "snclAllReduce") ||
                  !ok(snclBusLastCallSpanUs(comms[r], &start[r], &end[r]), comms[r], "snclBusLastCallSpanUs");
      for (size_t i = 0; !failed[r] && i < count; ++i) wrong[r] += double(buf[i]) != sumOfRanks * double(1 + i % 251);
    });
    for (int r = 0; r < n; ++r) {
      if (failed[r]) return false;
      if (wrong[r]) {
        fprintf(stderr, "sim_vs_bus: rank %d: %zu of %zu results wrong at %zu B\n", r, wrong[r], count, bytes);
        return false;
      }
    }
    const double span = *std::max_element(end.begin(), end.end()) - *std::max_element(start.begin(), start.end());
    if (!(span > 0)) {
      fprintf(stderr, "sim_vs_bus: the bus reported no modeled time for %zu B (span %.3f us)\n", bytes, span);
      return false;
    }
    *us = rep == 0 ? span : std::min(*us, span);
    *worstUs = std::max(*worstUs, span);
  }
  return true;
}

bool within(const Cell& c) { return std::fabs(c.simUs / c.busUs - 1) <= kTolerance; }

void printRow(const Cell& c) {
  printf("  %-22s %-7s %-26s %9zu", c.topology, c.algorithm, c.variant.c_str(), c.bytes);
  if (!c.ran) {
    printf(" %11s %7s %11s %8s\n", "-", "-", "-", "-");
    return;
  }
  printf(" %11.2f %6.1f%% %11.2f %8.3f%s\n", c.busUs, 100 * (c.busWorstUs / c.busUs - 1), c.simUs, c.simUs / c.busUs,
         within(c) ? "" : "  <- outside");
}

// One cell on the bus, on a comm of its own (the timescale is read at init).
bool busCell(const Options& o, const Topology& t, std::vector<std::vector<float>>& bufs, Cell* c) {
  if (!o.userTimescale) setenv("SNCL_BUS_TIMESCALE", timescaleFor(c->bytes), 1);
  std::vector<snclComm_t> comms(t.nranks);
  if (!ok(snclCommInitAll(comms.data(), t.nranks, nullptr), nullptr, "snclCommInitAll")) return false;
  bool fine = busUs(o, comms, bufs, c->bytes, &c->busUs, &c->busWorstUs);
  for (snclComm_t comm : comms) fine &= ok(snclCommDestroy(comm), nullptr, "snclCommDestroy");
  return fine;
}

// Every algorithm and size of one topology: the bus, then the simulator on the variant the
// bus ran.
bool runTopology(const Options& o, const Topology& t, std::vector<Cell>* cells) {
  if (t.busFile) setenv("SNCL_TOPO_FILE", (o.topologies + "/" + t.busFile).c_str(), 1);
  else unsetenv("SNCL_TOPO_FILE");
  std::vector<std::vector<float>> bufs(t.nranks, std::vector<float>(kSizes[std::size(kSizes) - 1] / sizeof(float)));
  for (const char* algo : kAlgorithms) {
    setenv("SNCL_ALGO", (std::string("allreduce:") + algo).c_str(), 1);
    for (size_t bytes : kSizes) {
      Cell c{t.name, algo, "", bytes};
      if (!plannedVariant(o, t, algo, bytes, &c.variant)) return false;
      if (c.variant.empty()) {
        c.variant = "not a candidate";
      } else {
        if (!busCell(o, t, bufs, &c) || !simulateUs(o, t, c.variant, bytes, &c.simUs)) return false;
        c.ran = true;
      }
      printRow(c);
      fflush(stdout);
      cells->push_back(c);
    }
  }
  return true;
}

std::string toolsNextToThisBinary() {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return "tools";
  std::string path(exe, size_t(len));
  path = path.substr(0, path.rfind('/'));             // build/perf
  return path.substr(0, path.rfind('/')) + "/tools";  // build/tools
}

int usage() {
  fprintf(stderr,
          "usage: sim_vs_bus [--topologies DIR] [--tools DIR] [--only TEXT] [--reps N] [--version]\n"
          "  defaults: --topologies topologies --tools (../tools beside this binary) --only (every case)\n"
          "            --reps 3\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.tools = toolsNextToThisBinary();
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--version")) return printf("sim_vs_bus %s\n", snclGetBuildVersion()), 0;
    if (i + 1 >= argc) return usage();
    if (!strcmp(argv[i], "--topologies")) o.topologies = argv[++i];
    else if (!strcmp(argv[i], "--tools")) o.tools = argv[++i];
    else if (!strcmp(argv[i], "--only")) o.only = argv[++i];
    else if (!strcmp(argv[i], "--reps")) {
      o.reps = atoi(argv[++i]);
      if (o.reps < 1 || o.reps > 100) return usage();
    } else {
      return usage();
    }
  }
  for (const char* tool : {"sncl-sim", "sncl-topo"})
    if (access((o.tools + "/" + tool).c_str(), X_OK) != 0) {
      fprintf(stderr, "sim_vs_bus: %s/%s not found (build it, or pass --tools DIR)\n", o.tools.c_str(), tool);
      return 2;
    }
  for (const Topology& t : kTopologies)
    if (access((o.topologies + "/" + t.simFile).c_str(), R_OK) != 0) {
      fprintf(stderr, "sim_vs_bus: %s/%s not found (run from the source tree, or pass --topologies DIR)\n",
              o.topologies.c_str(), t.simFile);
      return 2;
    }
  if (o.only && std::none_of(std::begin(kTopologies), std::end(kTopologies),
                             [&](const Topology& t) { return strstr(t.name, o.only) != nullptr; })) {
    fprintf(stderr, "sim_vs_bus: no topology's name contains '%s'\n", o.only);
    return 2;
  }
  setenv("SNCL_TRANSPORT", "bus", 1);
  const char* scale = getenv("SNCL_BUS_TIMESCALE");
  o.userTimescale = scale != nullptr;
  printf("sim_vs_bus: All-Reduce float32 sum, bus modeled time (best of %d, timescale %s)"
         " vs sncl-sim --engine exact\n",
         o.reps, scale ? scale : "10000 up to 1 MiB, 1000 above");
  // spread: the bus's worst repetition over its best.
  printf("  %-22s %-7s %-26s %9s %11s %7s %11s %8s\n", "topology", "algo", "ran as", "bytes", "bus us", "spread",
         "sim us", "sim/bus");
  std::vector<Cell> cells;
  for (const Topology& t : kTopologies) {
    if (o.only && !strstr(t.name, o.only)) continue;
    if (!runTopology(o, t, &cells)) {
      fprintf(stderr, "sim_vs_bus: %s failed\n", t.name);
      return 1;
    }
  }
  // The large sizes apart: there the per-message differences of the two models (latency,
  // order of flows on a shared link) are a small part of the time.
  constexpr size_t kLarge = size_t(16) << 20;
  int compared = 0, inside = 0, comparedLarge = 0, insideLarge = 0;
  double worst = 1;
  for (const Cell& c : cells) {
    if (!c.ran) continue;
    const double ratio = c.simUs / c.busUs;
    ++compared;
    inside += within(c);
    comparedLarge += c.bytes >= kLarge;
    insideLarge += c.bytes >= kLarge && within(c);
    if (std::fabs(ratio - 1) > std::fabs(worst - 1)) worst = ratio;
  }
  printf("\n%d of %d cells within +-%.0f%% (worst sim/bus %.3f); from %zu MiB: %d of %d\n", inside, compared,
         kTolerance * 100, worst, kLarge >> 20, insideLarge, comparedLarge);
  return 0;
}
