// sncl-topo: look at a topology the way sncl sees it.
//
//   sncl-topo [--file F] [--ranks N] [--fail-link X-Y]... [--degrade-link X-Y=FACTOR]...
//             [--summary] [--route A B]... [--paths N] [--json] [--dot] [--png FILE]
//
// The topology comes from --file, else SNCL_TOPO_FILE, else this machine (hwloc, one host
// with --ranks ranks, default one per core). Failures are applied before anything is shown,
// so --route after --fail-link shows the route around the failure (and the one before).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lib/base/env.h"
#include "lib/plan/cost_model.h"
#include "lib/plan/planner.h"
#include "lib/topo/discovery.h"
#include "lib/topo/draw.h"
#include "lib/topo/graph.h"
#include "lib/topo/merge.h"
#include "lib/topo/route.h"
#include "lib/topo/summary.h"
#include "lib/topo/topo_file.h"
#include "sncl/sncl_ext.h"

using namespace sncl;
using namespace sncl::topo;

namespace {

constexpr const char* kUsage = R"(usage: sncl-topo [options]
  --file F, --topo F     topology file (default: SNCL_TOPO_FILE, else this machine via hwloc)
  --ranks N              map N ranks (default: every endpoint; this machine: one per core)
  --fail-link X-Y        mark the link between vertices X and Y down (repeatable)
  --degrade-link X-Y=F   scale its bandwidth by F in (0,1) (repeatable)
  --summary              counts per level, injection and bisection bandwidth (the default)
  --route A B            routes from A to B: vertex names, or rank numbers (repeatable)
  --paths N              explicit paths shown per route (default 8)
  --json                 the graph as an explicit topology file on stdout
  --dot                  Graphviz text on stdout (grouped when large)
  --png FILE             render with Graphviz dot into FILE
  --grouped              draw grouped even when small
  --plan COLL SIZE       the planner's choice for a collective (allreduce, broadcast, ...) of
                         nccl-tests' SIZE (the whole buffer; 8, 64K, 1.5M, 2G) on --ranks ranks,
                         and every candidate's estimate; honours SNCL_ALGO, SNCL_TUNING_FILE,
                         SNCL_CHUNK_SIZE
  --version              the library's version and git revision
)";

struct Options {
  std::string file;
  int ranks = -1;
  std::vector<std::string> fail, degrade;
  bool summary = false, json = false, dot = false, grouped = false;
  std::string png;
  std::vector<std::pair<std::string, std::string>> routes;
  size_t paths = 8;
  std::string planColl, planSize;
};

int usage(const std::string& why) {
  fmt::print(stderr, "sncl-topo: {}\n{}", why, kUsage);
  return 2;
}

int error(const std::string& what) {
  fmt::print(stderr, "sncl-topo: {}\n", what);
  return 1;
}

bool parseInt(const std::string& s, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(s.c_str(), &end, 10);
  if (errno || end == s.c_str() || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

int parseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](int n) { return i + n < argc; };
    long long x;
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kUsage);
      std::exit(0);
    } else if (a == "--version") {
      fmt::print("sncl-topo {}\n", snclGetBuildVersion());
      std::exit(0);
    } else if ((a == "--file" || a == "--topo") && need(1)) o->file = argv[++i];
    else if (a == "--ranks" && need(1)) {
      if (!parseInt(argv[++i], 1, 1 << 24, &x)) return usage("--ranks needs a positive count");
      o->ranks = int(x);
    } else if (a == "--fail-link" && need(1)) o->fail.push_back(argv[++i]);
    else if (a == "--degrade-link" && need(1)) o->degrade.push_back(argv[++i]);
    else if (a == "--summary") o->summary = true;
    else if (a == "--json") o->json = true;
    else if (a == "--dot") o->dot = true;
    else if (a == "--grouped") o->grouped = true;
    else if (a == "--png" && need(1)) o->png = argv[++i];
    else if (a == "--route" && need(2)) {
      o->routes.emplace_back(argv[i + 1], argv[i + 2]);
      i += 2;
    } else if (a == "--paths" && need(1)) {
      if (!parseInt(argv[++i], 0, 1 << 20, &x)) return usage("--paths needs a count");
      o->paths = size_t(x);
    } else if (a == "--plan" && need(2)) {
      o->planColl = argv[i + 1];
      o->planSize = argv[i + 2];
      i += 2;
    } else return usage(fmt::format("unknown or incomplete option '{}'", a));
  }
  if (!o->json && !o->dot && o->png.empty() && o->routes.empty() && o->planColl.empty()) o->summary = true;
  return 0;
}

// This machine as a one-host graph: the views that ranks bound core by core would send.
Result discoverThisMachine(int ranks, Graph* g) {
  MachineInfo m;
  SNCL_CHECK(discoverMachine(&m));
  if (ranks <= 0) ranks = m.cores;
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::vector<uint8_t> bytes(size_t(ranks) * kLocalViewBytes);
  for (int r = 0; r < ranks; ++r) {
    LocalView v;
    v.hostId = 1;
    v.rank = r;
    v.packages = m.packages;
    v.numaNodes = m.numaNodes;
    v.cores = m.cores;
    v.pus = m.pus;
    v.pciDevices = m.pciDevices;
    v.nics = int32_t(m.nics.size());
    v.core = r % m.cores;
    v.numa = m.coreNuma.empty() ? 0 : m.coreNuma[v.core];
    std::snprintf(v.hostname, sizeof(v.hostname), "%s", host);
    encodeLocalView(v, bytes.data() + size_t(r) * kLocalViewBytes);
  }
  SNCL_CHECK(mergeLocalViews(bytes, ranks, "", g));
  std::string caches;
  for (const auto& c : m.caches) caches += fmt::format(" L{} {} x {} KiB", c.level, c.count, c.bytes >> 10);
  std::string nics;
  for (const auto& n : m.nics) nics += " " + n;
  fmt::print("machine    {} packages, {} NUMA nodes, {} cores, {} PUs;{}; {} PCI devices; NICs:{}\n",
             m.packages, m.numaNodes, m.cores, m.pus, caches, m.pciDevices, nics.empty() ? " none" : nics);
  return snclSuccess;
}

// "X-Y": vertex names may contain dots and slashes but no '-', so the split is unique.
LinkId findLinkByName(const Graph& g, const std::string& spec) {
  for (size_t dash = spec.find('-'); dash != std::string::npos; dash = spec.find('-', dash + 1)) {
    VertexId a = g.findVertex(spec.substr(0, dash)), b = g.findVertex(spec.substr(dash + 1));
    if (a != kNone && b != kNone) return g.findLink(a, b);
  }
  return kNone;
}

VertexId findEndpoint(const Graph& g, const std::string& s) {
  VertexId v = g.findVertex(s);
  long long r;
  if (v == kNone && parseInt(s, 0, g.rankCount() - 1, &r)) v = g.rankVertex(int(r));
  return v;
}

std::string routeLine(const Route& r) {
  if (!r.reachable) return "unreachable";
  return fmt::format("latency {:.4g} us, bandwidth {:.6g} GB/s, {} hops, {:.6g} equal-cost paths over {} links",
                     r.latencyUs, r.bandwidthGBps, r.hops, r.pathCount, r.shares.size());
}

int showRoute(const Graph& g, VertexId a, VertexId b, size_t maxPaths, const Route* before) {
  Route r;
  if (g.route(a, b, &r) != snclSuccess) return error(lastError());
  fmt::print("route {} -> {} (epoch {})\n", g.vertexName(a), g.vertexName(b), r.epoch);
  if (before) fmt::print("  before the failures: {}\n", routeLine(*before));
  fmt::print("  {}\n", routeLine(r));
  for (const Path& p : explicitPaths(g, r, maxPaths)) {
    std::string hops;
    for (VertexId v : p.vertices) hops += (hops.empty() ? "" : " -> ") + g.vertexName(v);
    fmt::print("    {}   ({:.4g} GB/s bottleneck, {:.4g} us)\n", hops, p.bottleneckGBps, p.latencyUs);
  }
  if (r.reachable && r.pathCount > double(maxPaths)) fmt::print("    ...\n");
  return 0;
}

int render(const std::string& dot, const std::string& png) {
  int in[2];
  if (pipe(in) != 0) return error(fmt::format("pipe: {}", strerror(errno)));
  pid_t pid = fork();
  if (pid < 0) return error(fmt::format("fork: {}", strerror(errno)));
  if (pid == 0) {
    dup2(in[0], 0);
    close(in[0]);
    close(in[1]);
    execlp("dot", "dot", "-Tpng", "-Gdpi=96", "-o", png.c_str(), static_cast<char*>(nullptr));
    fmt::print(stderr, "sncl-topo: cannot run Graphviz 'dot' ({}); install the graphviz package\n", strerror(errno));
    _exit(127);
  }
  close(in[0]);
  for (size_t off = 0; off < dot.size();) {
    ssize_t n = write(in[1], dot.data() + off, dot.size() - off);
    if (n <= 0) break;
    off += size_t(n);
  }
  close(in[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return error("Graphviz dot failed");
  fmt::print(stderr, "wrote {}\n", png);
  return 0;
}

// What the planner of a comm on g's mapped ranks would run, with every candidate.
int showPlan(const Graph& g, const std::string& collName_, const std::string& sizeText) {
  CollType coll;
  if (!parseCollName(collName_, &coll)) return usage(fmt::format("--plan: unknown collective '{}'", collName_));
  size_t size = 0;
  if (snclParseSize(sizeText.c_str(), &size) != snclSuccess)
    return usage(fmt::format("--plan: size '{}' is not a byte count (e.g. 8, 64K, 256M)", sizeText));
  const size_t bytes = planBytesOfSize(coll, size, g.rankCount());
  if (g.rankCount() < 1) return error("--plan: the topology maps no ranks");

  Tuning tuning = defaultTuning();
  if (auto file = env::str("SNCL_TUNING_FILE"))
    if (loadTuning(*file, &tuning) != snclSuccess) return error(lastError());
  std::vector<VertexId> rankVertex;
  for (int r = 0; r < g.rankCount(); ++r) rankVertex.push_back(g.rankVertex(r));
  // The tool owns g for the whole run: the model only borrows it.
  // Ranks all in one supernode run on the emulated bus: estimate its modeled clock, as the
  // comm does.
  bool oneSupernode = g.levelDefined(Level::Supernode);
  for (int r = 1; r < g.rankCount() && oneSupernode; ++r)
    oneSupernode = g.rankGroupOf(r, Level::Supernode) == g.rankGroupOf(0, Level::Supernode);
  auto model = std::make_shared<CostModel>(std::shared_ptr<const Graph>(&g, [](const Graph*) {}), rankVertex, tuning,
                                           oneSupernode ? CostClock::BusModeled : CostClock::Wall);
  PlannerOptions options;
  options.algoSpec = env::str("SNCL_ALGO").value_or("");
  options.chunkBytes = env::bytes("SNCL_CHUNK_SIZE", 1u << 20);
  Planner planner(0, model, options);
  const std::vector<Plan> all = planner.candidates(coll, bytes);
  if (all.empty()) return error(fmt::format("--plan: no algorithm can run {} on this topology (SNCL_ALGO='{}')", collName_, options.algoSpec));
  std::string levels;
  for (const auto& h : planner.hierarchies()) levels += " " + h.name;
  fmt::print("plan {} {} B on {} ranks of {} (epoch {}, tuning {}, {} clock; hierarchies:{})\n", collName_, size,
             g.rankCount(), g.name(), g.epoch(), tuning.source, oneSupernode ? "bus modeled" : "wall",
             levels.empty() ? " none" : levels);
  fmt::print("  chosen: {}  chunk {} B  estimate {:.1f} us\n", planner.describe(all.front()), all.front().chunkBytes,
             all.front().estimateUs);
  fmt::print("  candidates:\n");
  for (const Plan& p : all)
    fmt::print("    {:<34} {:>14.1f} us  {:>7.2f}x\n", planner.describe(p), p.estimateUs, p.estimateUs / all.front().estimateUs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Errors are printed here once; sncl's own WARN lines would repeat them.
  setenv("SNCL_DEBUG", "NONE", 0);
  Options o;
  if (int rc = parseArgs(argc, argv, &o)) return rc;
  if (o.file.empty()) o.file = topoFileFromEnv();

  Graph g;
  if (!o.file.empty()) {
    if (loadTopologyFile(o.file, &g) != snclSuccess) return error(lastError());
    if (o.ranks > 0 && g.mapRanks(o.ranks) != snclSuccess) return error(lastError());
  } else if (discoverThisMachine(o.ranks, &g) != snclSuccess) {
    return error(lastError());
  }

  // Routes before any failure, to show what changed.
  std::vector<std::pair<VertexId, VertexId>> ends;
  std::vector<Route> before;
  for (const auto& [a, b] : o.routes) {
    VertexId va = findEndpoint(g, a), vb = findEndpoint(g, b);
    if (va == kNone) return error(fmt::format("--route: no vertex or rank '{}'", a));
    if (vb == kNone) return error(fmt::format("--route: no vertex or rank '{}'", b));
    ends.emplace_back(va, vb);
    before.emplace_back();
    if (g.route(va, vb, &before.back()) != snclSuccess) return error(lastError());
  }

  for (const auto& spec : o.fail) {
    LinkId l = findLinkByName(g, spec);
    if (l == kNone) return error(fmt::format("--fail-link: no link '{}' (name it as vertexA-vertexB)", spec));
    if (g.setLinkState(l, LinkState::Down) != snclSuccess) return error(lastError());
    fmt::print("link {} down (epoch {})\n", g.linkName(l), g.epoch());
  }
  for (const auto& spec : o.degrade) {
    size_t eq = spec.rfind('=');
    char* end = nullptr;
    double factor = eq == std::string::npos ? 0 : strtod(spec.c_str() + eq + 1, &end);
    LinkId l = eq == std::string::npos ? kNone : findLinkByName(g, spec.substr(0, eq));
    if (l == kNone || !end || *end) return error(fmt::format("--degrade-link: expected X-Y=FACTOR, got '{}'", spec));
    if (g.setLinkState(l, LinkState::Degraded, factor) != snclSuccess) return error(lastError());
    fmt::print("link {} degraded to {:.3g}x (epoch {})\n", g.linkName(l), factor, g.epoch());
  }

  if (o.summary) fmt::print("{}", formatSummary(g, summarize(g)));
  bool changed = !o.fail.empty() || !o.degrade.empty();
  for (size_t i = 0; i < ends.size(); ++i)
    if (int rc = showRoute(g, ends[i].first, ends[i].second, o.paths, changed ? &before[i] : nullptr)) return rc;
  if (o.json) fmt::print("{}", topologyToJson(g));
  DrawOptions draw;
  draw.grouped = o.grouped;
  if (o.dot) fmt::print("{}", toDot(g, draw));
  if (!o.png.empty())
    if (int rc = render(toDot(g, draw), o.png)) return rc;
  if (!o.planColl.empty()) return showPlan(g, o.planColl, o.planSize);
  return 0;
}
