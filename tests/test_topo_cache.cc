// The topology cache (lib/topo/topo_cache.h, graph_binary.h): a graph from the cache is
// the parsed graph, field by field; N rank processes on one file parse it once; corrupt,
// truncated and foreign cache files fall back to parsing with one WARN; an edited file gets
// a new key; SNCL_TOPO_CACHE=0 parses; threads of one process share one decoded graph.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "lib/topo/comm_topo.h"
#include "lib/topo/generators.h"
#include "lib/topo/graph_binary.h"
#include "lib/topo/topo_cache.h"
#include "lib/topo/topo_file.h"
#include "tests/util/launcher.h"

using namespace sncl;
using namespace sncl::topo;
namespace fs = std::filesystem;

namespace {

std::string exampleDir() {
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/topologies/";
}

uint64_t testSeed() {
  uint64_t seed = std::random_device{}();
  if (const char* s = getenv("SNCL_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  return seed;
}

// A fresh directory, removed with everything in it at the end of the scope.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/sncl_topo_cache.XXXXXX";
    REQUIRE(mkdtemp(t) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  size_t files(const std::string& prefix = "") const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(path)) n += e.path().filename().string().rfind(prefix, 0) == 0;
    return n;
  }
};

// Sets an environment variable for one scope.
struct Env {
  std::string name;
  Env(const char* n, const std::string& v) : name(n) { setenv(n, v.c_str(), 1); }
  ~Env() { unsetenv(name.c_str()); }
};

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}
std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The first field in which a and b differ, or empty. Every public view of the graph:
// attributes, adjacency, health, endpoint and rank levels, names, and the JSON form.
std::string firstDifference(const Graph& a, const Graph& b) {
  std::ostringstream d;
  auto diff = [&](const char* what, auto x, auto y, size_t i = 0) {
    if (x == y) return false;
    d << what << " [" << i << "]: " << x << " vs " << y;
    return true;
  };
  if (diff("name", a.name(), b.name()) || diff("finalized", a.finalized(), b.finalized()) ||
      diff("epoch", a.epoch(), b.epoch()) || diff("vertices", a.vertexCount(), b.vertexCount()) ||
      diff("links", a.linkCount(), b.linkCount()) || diff("endpoints", a.endpointCount(), b.endpointCount()) ||
      diff("ranks", a.rankCount(), b.rankCount()) || diff("rank order", a.rankOrder().size(), b.rankOrder().size()))
    return d.str();
  for (VertexId v = 0; v < a.vertexCount(); ++v) {
    auto la = a.linksOf(v), lb = b.linksOf(v);
    auto na = a.neighborsOf(v), nb = b.neighborsOf(v);
    if (diff("vertex name", a.vertexName(v), b.vertexName(v), v) ||
        diff("kind", int(a.vertexKind(v)), int(b.vertexKind(v)), v) || diff("parent", a.parent(v), b.parent(v), v) ||
        diff("forwards", a.forwards(v), b.forwards(v), v) || diff("tier", int(a.tier(v)), int(b.tier(v)), v) ||
        diff("plane", a.plane(v), b.plane(v), v) || diff("findVertex", b.findVertex(a.vertexName(v)), v, v) ||
        diff("endpointOf", a.endpointOf(v), b.endpointOf(v), v) ||
        diff("adjacency", std::vector<LinkId>(la.begin(), la.end()) == std::vector<LinkId>(lb.begin(), lb.end()), true, v) ||
        diff("neighbors", std::vector<VertexId>(na.begin(), na.end()) == std::vector<VertexId>(nb.begin(), nb.end()), true, v))
      return d.str();
  }
  for (LinkId l = 0; l < a.linkCount(); ++l)
    if (diff("link a", a.linkA(l), b.linkA(l), l) || diff("link b", a.linkB(l), b.linkB(l), l) ||
        diff("link kind", int(a.linkKind(l)), int(b.linkKind(l)), l) ||
        diff("latency", a.linkLatencyUs(l), b.linkLatencyUs(l), l) ||
        diff("bandwidth", a.linkNominalGBps(l), b.linkNominalGBps(l), l) ||
        diff("state", int(a.linkState(l)), int(b.linkState(l)), l) || diff("factor", a.linkFactor(l), b.linkFactor(l), l))
      return d.str();
  for (size_t i = 0; i < a.rankOrder().size(); ++i)
    if (diff("rank order", a.rankOrder()[i], b.rankOrder()[i], i)) return d.str();
  for (EndpointId e = 0; e < a.endpointCount(); ++e)
    if (diff("endpoint", a.endpointVertex(e), b.endpointVertex(e), e) ||
        diff("endpointRank", a.endpointRank(e), b.endpointRank(e), e))
      return d.str();
  for (int r = 0; r < a.rankCount(); ++r)
    if (diff("rankEndpoint", a.rankEndpoint(r), b.rankEndpoint(r), r)) return d.str();
  for (int li = 0; li < kNumLevels; ++li) {
    Level l = Level(li);
    if (diff("level defined", a.levelDefined(l), b.levelDefined(l), li) ||
        diff("groups", a.groupCount(l), b.groupCount(l), li) ||
        diff("rank groups", a.rankGroupCount(l), b.rankGroupCount(l), li))
      return d.str();
    for (int g = 0; g < a.groupCount(l); ++g) {
      auto ma = a.groupMembers(l, g), mb = b.groupMembers(l, g);
      if (diff("group vertex", a.groupVertex(l, g), b.groupVertex(l, g), g) ||
          diff("group members", std::vector<uint32_t>(ma.begin(), ma.end()) == std::vector<uint32_t>(mb.begin(), mb.end()), true, g))
        return d.str();
    }
    for (EndpointId e = 0; e < a.endpointCount(); ++e)
      if (diff("groupOf", a.groupOf(e, l), b.groupOf(e, l), e)) return d.str();
    for (int g = 0; g < a.rankGroupCount(l); ++g) {
      auto ma = a.rankGroupMembers(l, g), mb = b.rankGroupMembers(l, g);
      if (diff("rank group members", std::vector<uint32_t>(ma.begin(), ma.end()) == std::vector<uint32_t>(mb.begin(), mb.end()), true, g))
        return d.str();
    }
    for (int r = 0; r < a.rankCount(); ++r)
      if (diff("rankGroupOf", a.rankGroupOf(r, l), b.rankGroupOf(r, l), r)) return d.str();
  }
  if (topologyToJson(a) != topologyToJson(b)) return "topologyToJson differs";
  return "";
}

// Encode + decode, and clone: both must give back g exactly.
void requireRoundTrip(const Graph& g) {
  std::vector<uint8_t> bytes;
  REQUIRE(encodeGraph(g, 42, &bytes) == snclSuccess);
  Graph back;
  REQUIRE(decodeGraph(bytes, 42, &back) == snclSuccess);
  INFO("graph " << g.name());
  CHECK(firstDifference(g, back) == "");
  CHECK(firstDifference(g, g.clone()) == "");
}

// A random generated shape with a random rank map and random failed and degraded links.
Graph randomGraph(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return int(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  Graph g;
  g.setName("random");
  GeneratorParams p;
  do {
    switch (pick(0, 4)) {
      case 0: p = FullMeshParams{"mesh", "", pick(1, 12), pick(0, 4)}; break;
      case 1: {
        ClosParams c;
        c.nodes = pick(1, 9), c.perNode = pick(1, 5), c.nodesPerRack = pick(1, 3), c.planes = pick(1, 3);
        c.spines = pick(0, 3);
        p = c;
        break;
      }
      case 2: {
        TorusParams t;
        for (int i = pick(1, 3); i > 0; --i) t.dims.push_back(pick(1, 5));
        t.wrap = pick(0, 1), t.perNode = pick(1, 3);
        p = t;
        break;
      }
      case 3: p = uniformHosts(pick(1, 4), pick(1, 6), pick(1, 2)); break;
      default: {
        FatTreeParams f;
        f.k = 2 * pick(1, 3);
        p = f;
      }
    }
  } while (!checkParams(p).empty());
  REQUIRE(generate(g, p) == snclSuccess);
  std::vector<VertexId> endpoints;
  for (VertexId v = 0; v < g.vertexCount(); ++v)
    if (g.vertexKind(v) == VertexKind::Endpoint) endpoints.push_back(v);
  if (pick(0, 1)) {  // a rank map over a random subset, in random order
    std::shuffle(endpoints.begin(), endpoints.end(), rng);
    endpoints.resize(pick(1, int(endpoints.size())));
    REQUIRE(g.setRankOrder(endpoints) == snclSuccess);
  }
  REQUIRE(g.finalize() == snclSuccess);
  for (LinkId l = 0; l < g.linkCount(); ++l) {
    int x = pick(0, 9);
    if (x == 0) REQUIRE(g.setLinkState(l, LinkState::Down) == snclSuccess);
    if (x == 1) REQUIRE(g.setLinkState(l, LinkState::Degraded, 0.01 + 0.98 * (pick(0, 1000) / 1000.0)) == snclSuccess);
  }
  return g;
}

// Captures what this process writes to stderr (the log) during f.
template <class F>
std::string captureStderr(F f) {
  fflush(stderr);
  char path[] = "/tmp/sncl_topo_cache_err.XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  int saved = dup(2);
  dup2(fd, 2);
  f();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::string text = readFile(path);
  unlink(path);
  return text;
}

TopoCacheStats delta(const TopoCacheStats& a, const TopoCacheStats& b) {
  return {b.parsed - a.parsed, b.hostHits - a.hostHits, b.processHits - a.processHits, b.rejected - a.rejected,
          b.written - a.written};
}

// A small topology with a given uplink bandwidth (editing it edits the file).
std::string smallTopology(int uplinkBw, int nodes = 4) {
  return fmt::format(R"({{"format": "sncl-topology/1", "name": "cache-test", "generators": [
  {{"type": "clos", "name": "sn", "nodes": {}, "per_node": 2, "planes": 2, "spines": 2, "bw": 50,
   "lat": 0.2, "uplink_bw": {}, "uplink_lat": 0.3}}]}})",
                     nodes, uplinkBw);
}

}  // namespace

TEST_CASE("topology cache: every example file decodes to the parsed graph", "[topo_cache]") {
  for (const auto& e : fs::directory_iterator(exampleDir())) {
    if (e.path().extension() != ".json") continue;
    INFO(e.path());
    Graph g;
    REQUIRE(loadTopologyFile(e.path(), &g) == snclSuccess);
    requireRoundTrip(g);
  }
}

TEST_CASE("topology cache: random shapes with rank maps and failed links round-trip", "[topo_cache]") {
  uint64_t seed = testSeed();
  INFO("seed " << seed << " (SNCL_TEST_SEED to repeat)");
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 60; ++i) requireRoundTrip(randomGraph(rng));
}

TEST_CASE("topology cache: corrupt bytes are refused, never crash", "[topo_cache]") {
  uint64_t seed = testSeed();
  INFO("seed " << seed << " (SNCL_TEST_SEED to repeat)");
  std::mt19937_64 rng(seed);
  ExpectedErrors quiet;  // a few thousand refusals, logged at INFO
  Graph g;
  REQUIRE(loadTopologyFile(exampleDir() + "cloudmatrix384.json", &g) == snclSuccess);
  std::vector<uint8_t> good;
  REQUIRE(encodeGraph(g, 7, &good) == snclSuccess);
  Graph out;
  CHECK(decodeGraph(good, 8, &out) == snclInvalidArgument);  // another file's key
  for (int i = 0; i < 200; ++i) {  // truncated: at 0, inside the header, anywhere
    size_t n = i == 0 ? 0 : i < 50 ? size_t(i) : size_t(rng() % good.size());
    CHECK(decodeGraph(std::span(good.data(), n), 7, &out) == snclInvalidArgument);
  }
  for (int i = 0; i < 300; ++i) {  // a flipped byte anywhere: the checksum or the header catches it
    auto bad = good;
    size_t at = rng() % bad.size();
    bad[at] ^= uint8_t(1 + rng() % 255);
    INFO("byte " << at);
    CHECK(decodeGraph(bad, 7, &out) == snclInvalidArgument);
  }
  auto wrongVersion = good;
  wrongVersion[8] ^= 0x7f;
  CHECK(decodeGraph(wrongVersion, 7, &out) == snclInvalidArgument);
  CHECK(std::string(lastError()).find("version") != std::string::npos);
  // Past the checksum (as the fuzzer goes): values are checked one by one. Whatever decodes
  // must be a graph the parser accepts again. Sanitized builds try fewer (each costs 40 ms
  // there; fuzz_graph_binary runs the same under ASan in CI).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kMutations = 250;
#else
  constexpr int kMutations = 2000;
#endif
  int decoded = 0;
  for (int i = 0; i < kMutations; ++i) {
    auto bad = good;
    for (int k = 1 + int(rng() % 3); k > 0; --k) bad[kGraphBinaryHeaderBytes + rng() % (bad.size() - kGraphBinaryHeaderBytes)] = uint8_t(rng());
    Graph h;
    if (decodeGraph(bad, 7, &h, /*verifyChecksum=*/false) != snclSuccess) continue;
    ++decoded;
    Graph again;
    std::string json = topologyToJson(h);
    REQUIRE(parseTopology(json, "decoded", &again) == snclSuccess);
  }
  WARN(decoded << " of " << kMutations << " mutated payloads decoded (all re-parsed)");
}

TEST_CASE("topology cache: a second load comes from the host cache, then the process cache", "[topo_cache]") {
  TempDir dir;
  Env env("SNCL_TOPO_CACHE_DIR", dir.path);
  std::string file = dir.path + "/t.json";
  writeFile(file, smallTopology(50));
  clearTopoProcessCache();
  Graph parsed;
  REQUIRE(loadTopologyFile(file, &parsed) == snclSuccess);
  TopoSource how;
  Graph a, b, c;
  REQUIRE(loadTopologyCached(file, &a, &how) == snclSuccess);
  CHECK(how == TopoSource::Parsed);
  std::string cacheFile;
  REQUIRE(topoCacheFileFor(file, &cacheFile) == snclSuccess);
  CHECK(fs::exists(cacheFile));
  CHECK(fs::path(cacheFile).filename().string().find(std::to_string(geteuid())) != std::string::npos);
  CHECK(dir.files("sncl-topo-") == 1);  // no lock or temporary left behind
  REQUIRE(loadTopologyCached(file, &b, &how) == snclSuccess);
  CHECK(how == TopoSource::ProcessCache);
  clearTopoProcessCache();
  REQUIRE(loadTopologyCached(file, &c, &how) == snclSuccess);
  CHECK(how == TopoSource::HostCache);
  CHECK(firstDifference(parsed, a) == "");
  CHECK(firstDifference(parsed, b) == "");
  CHECK(firstDifference(parsed, c) == "");
  // Each caller owns its graph: a health change in one is not seen by another.
  REQUIRE(b.setLinkState(0, LinkState::Down) == snclSuccess);
  Graph d;
  REQUIRE(loadTopologyCached(file, &d, &how) == snclSuccess);
  CHECK(how == TopoSource::ProcessCache);
  CHECK(d.linkState(0) == LinkState::Up);
  CHECK(firstDifference(parsed, d) == "");
  // Errors are the parser's, with or without the cache.
  writeFile(file, "{\"format\": \"sncl-topology/1\", \"links\": 3}");
  CHECK(loadTopologyCached(file, &d) == snclInvalidArgument);
  CHECK(std::string(lastError()).find("/links") != std::string::npos);
  CHECK(loadTopologyCached(dir.path + "/missing.json", &d) == snclInvalidArgument);
}

TEST_CASE("topology cache: corrupt, truncated and wrong-version files fall back with one WARN", "[topo_cache]") {
  TempDir dir;
  Env env("SNCL_TOPO_CACHE_DIR", dir.path);
  std::string file = dir.path + "/t.json";
  writeFile(file, smallTopology(40));
  Graph parsed;
  REQUIRE(loadTopologyFile(file, &parsed) == snclSuccess);
  clearTopoProcessCache();
  Graph g;
  REQUIRE(loadTopologyCached(file, &g) == snclSuccess);
  std::string cacheFile;
  REQUIRE(topoCacheFileFor(file, &cacheFile) == snclSuccess);
  const std::string good = readFile(cacheFile);
  REQUIRE(good.size() > kGraphBinaryHeaderBytes);
  uint64_t seed = testSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  struct Case {
    const char* what;
    std::string bytes;
  };
  std::string flipped = good, version = good, payloadFlip = good;
  flipped[rng() % flipped.size()] ^= 0x20;
  version[8] = char(version[8] + 1);
  payloadFlip[kGraphBinaryHeaderBytes + rng() % (good.size() - kGraphBinaryHeaderBytes)] ^= 1;
  for (const Case& c : {Case{"truncated", good.substr(0, 1 + rng() % (good.size() - 1))}, Case{"empty", ""},
                        Case{"flipped byte", flipped}, Case{"flipped payload bit", payloadFlip},
                        Case{"wrong version", version}, Case{"text", "not a cache file at all"}}) {
    INFO(c.what);
    writeFile(cacheFile, c.bytes);
    clearTopoProcessCache();
    TopoCacheStats before = topoCacheStats();
    TopoSource how = TopoSource::HostCache;
    Graph h;
    std::string err = captureStderr([&] { REQUIRE(loadTopologyCached(file, &h, &how) == snclSuccess); });
    TopoCacheStats d = delta(before, topoCacheStats());
    CHECK(how == TopoSource::Parsed);
    CHECK(d.rejected == 1);
    CHECK(d.parsed == 1);
    CHECK(firstDifference(parsed, h) == "");
    // One WARN, naming the cache file.
    size_t warns = 0;
    for (size_t at = err.find("WARN"); at != std::string::npos; at = err.find("WARN", at + 1)) ++warns;
    CHECK(warns == 1);
    CHECK(err.find(cacheFile) != std::string::npos);
    // The parsing rank replaced it with a good file.
    CHECK(readFile(cacheFile) == good);
  }
  // A cache file that is not a regular file is not read.
  fs::remove(cacheFile);
  fs::create_directory(cacheFile);
  clearTopoProcessCache();
  TopoSource how;
  REQUIRE(loadTopologyCached(file, &g, &how) == snclSuccess);
  CHECK(how == TopoSource::Parsed);
  CHECK(firstDifference(parsed, g) == "");
}

TEST_CASE("topology cache: an edited file gets a new key; SNCL_TOPO_CACHE=0 parses", "[topo_cache]") {
  TempDir dir;
  Env env("SNCL_TOPO_CACHE_DIR", dir.path);
  std::string file = dir.path + "/t.json";
  writeFile(file, smallTopology(50));
  clearTopoProcessCache();
  Graph g;
  REQUIRE(loadTopologyCached(file, &g) == snclSuccess);
  std::string before, after;
  REQUIRE(topoCacheFileFor(file, &before) == snclSuccess);
  writeFile(file, smallTopology(25));  // same size, same name, other bandwidth
  REQUIRE(topoCacheFileFor(file, &after) == snclSuccess);
  CHECK(before != after);
  TopoSource how;
  Graph edited, parsed;
  REQUIRE(loadTopologyCached(file, &edited, &how) == snclSuccess);
  CHECK(how == TopoSource::Parsed);
  REQUIRE(loadTopologyFile(file, &parsed) == snclSuccess);
  CHECK(firstDifference(parsed, edited) == "");
  CHECK(firstDifference(g, edited) != "");

  Env off("SNCL_TOPO_CACHE", "0");
  writeFile(file, smallTopology(30));
  for (int i = 0; i < 3; ++i) {
    Graph h;
    REQUIRE(loadTopologyCached(file, &h, &how) == snclSuccess);
    CHECK(how == TopoSource::Parsed);
  }
  CHECK(dir.files("sncl-topo-") == 2);  // nothing written for the third content
}

TEST_CASE("topology cache: a cache directory that does not exist only costs the parse", "[topo_cache]") {
  TempDir dir;
  std::string file = dir.path + "/t.json";
  writeFile(file, smallTopology(80));
  Env env("SNCL_TOPO_CACHE_DIR", dir.path + "/no/such/dir");
  Graph parsed;
  REQUIRE(loadTopologyFile(file, &parsed) == snclSuccess);
  for (int i = 0; i < 2; ++i) {
    clearTopoProcessCache();
    TopoSource how;
    Graph g;
    REQUIRE(loadTopologyCached(file, &g, &how) == snclSuccess);
    CHECK(how == TopoSource::Parsed);
    CHECK(firstDifference(parsed, g) == "");
  }
  CHECK_FALSE(fs::exists(dir.path + "/no"));
}

TEST_CASE("topology cache: waits for a writer's lock, and not for a dead one", "[topo_cache]") {
  TempDir dir;
  Env env("SNCL_TOPO_CACHE_DIR", dir.path);
  std::string file = dir.path + "/t.json";
  writeFile(file, smallTopology(60));
  std::string cacheFile;
  REQUIRE(topoCacheFileFor(file, &cacheFile) == snclSuccess);
  Graph parsed;
  REQUIRE(loadTopologyFile(file, &parsed) == snclSuccess);
  // The key is not public: take it from a real cache file, made and then set aside.
  clearTopoProcessCache();
  Graph tmp;
  REQUIRE(loadTopologyCached(file, &tmp) == snclSuccess);
  std::string made = readFile(cacheFile);
  fs::remove(cacheFile);
  clearTopoProcessCache();

  // A live writer (this process) holds the lock and renames the file in after 300 ms.
  writeFile(cacheFile + ".lock", std::to_string(getpid()));
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    writeFile(cacheFile + ".tmp", made);
    fs::rename(cacheFile + ".tmp", cacheFile);
    fs::remove(cacheFile + ".lock");
  });
  TopoSource how;
  Graph g;
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(loadTopologyCached(file, &g, &how) == snclSuccess);
  writer.join();
  CHECK(how == TopoSource::HostCache);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(250));
  CHECK(firstDifference(parsed, g) == "");

  // A lock whose owner is gone: parse at once, write the file, remove the lock.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  REQUIRE(dead > 0);
  waitpid(dead, nullptr, 0);
  fs::remove(cacheFile);
  clearTopoProcessCache();
  writeFile(cacheFile + ".lock", std::to_string(dead));
  t0 = std::chrono::steady_clock::now();
  REQUIRE(loadTopologyCached(file, &g, &how) == snclSuccess);
  CHECK(how == TopoSource::Parsed);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(fs::exists(cacheFile));
  CHECK_FALSE(fs::exists(cacheFile + ".lock"));
  CHECK(firstDifference(parsed, g) == "");

  // A lock without a pid (its writer died before writing one), older than a few seconds:
  // left over, so parse at once and remove it.
  fs::remove(cacheFile);
  clearTopoProcessCache();
  writeFile(cacheFile + ".lock", "");
  fs::last_write_time(cacheFile + ".lock", fs::file_time_type::clock::now() - std::chrono::seconds(60));
  t0 = std::chrono::steady_clock::now();
  REQUIRE(loadTopologyCached(file, &g, &how) == snclSuccess);
  CHECK(how == TopoSource::Parsed);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK_FALSE(fs::exists(cacheFile + ".lock"));
  CHECK(firstDifference(parsed, g) == "");

  // A live owner that never finishes: wait until the deadline, parse, and remove its lock so
  // that the next comm does not wait as long.
  fs::remove(cacheFile);
  clearTopoProcessCache();
  writeFile(cacheFile + ".lock", std::to_string(getpid()));
  const char* timeout = getenv("SNCL_TIMEOUT_MS");
  const std::string savedTimeout = timeout ? timeout : "";
  setenv("SNCL_TIMEOUT_MS", "300", 1);
  const Result late = loadTopologyCached(file, &g, &how);
  if (timeout) setenv("SNCL_TIMEOUT_MS", savedTimeout.c_str(), 1);
  else unsetenv("SNCL_TIMEOUT_MS");
  REQUIRE(late == snclSuccess);
  CHECK(how == TopoSource::Parsed);
  CHECK_FALSE(fs::exists(cacheFile + ".lock"));
  CHECK(firstDifference(parsed, g) == "");
}

TEST_CASE("topology cache: N rank processes on one file parse it once; All-Reduce is right", "[topo_cache][process]") {
  TempDir dir;
  uint64_t seed = testSeed();
  INFO("seed " << seed << " (SNCL_TEST_SEED to repeat)");
  std::mt19937_64 rng(seed);
  const int nranks = 2 + int(rng() % 7);  // 2..8
  std::string file = dir.path + "/topo.json";
  writeFile(file, smallTopology(50, 4));  // 8 endpoints
  Env e1("SNCL_TOPO_CACHE_DIR", dir.path);
  Env e2("SNCL_TOPO_FILE", file);
  clearTopoProcessCache();  // the children inherit this process's memory
  const size_t counts[] = {0, 1, 997, size_t(rng() % 300000)};
  INFO("nranks " << nranks << ", counts 0 1 997 " << counts[3]);
  auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
    TopoCacheStats before = topoCacheStats();
    snclComm_t comm = nullptr;
    if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
    TopoCacheStats d = delta(before, topoCacheStats());
    writeFile(fmt::format("{}/rank{}.stats", dir.path, rank),
              fmt::format("{} {} {} {}", d.parsed, d.hostHits, d.processHits, d.rejected));
    int bad = 0;
    for (size_t count : counts) {
      std::vector<int32_t> in(count + 1), out(count + 1, -1);
      for (size_t i = 0; i < count; ++i) in[i] = int32_t((i * 31 + rank * 7) % 1001);
      if (snclAllReduce(in.data(), out.data(), count, snclInt32, snclSum, comm, nullptr) != snclSuccess) return 3;
      for (size_t i = 0; i < count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < n; ++r) want += int32_t((i * 31 + r * 7) % 1001);
        bad += out[i] != want;
      }
      bad += out[count] != -1;  // nothing past the end
    }
    snclCommDestroy(comm);
    return bad ? 4 : 0;
  });
  REQUIRE(test::allSucceeded(exits));
  uint64_t parsed = 0, host = 0, process = 0, rejected = 0;
  for (int r = 0; r < nranks; ++r) {
    std::istringstream in(readFile(fmt::format("{}/rank{}.stats", dir.path, r)));
    uint64_t p = 9, h = 9, q = 9, x = 9;
    in >> p >> h >> q >> x;
    INFO("rank " << r);
    CHECK(p + h + q == 1);  // one load per comm
    parsed += p, host += h, process += q, rejected += x;
  }
  CHECK(parsed == 1);
  CHECK(host == uint64_t(nranks - 1));
  CHECK(process == 0);
  CHECK(rejected == 0);
  CHECK(dir.files("sncl-topo-") == 1);
}

TEST_CASE("topology cache: the threads of snclCommInitAll share one decoded graph", "[topo_cache]") {
  TempDir dir;
  std::string file = dir.path + "/topo.json";
  writeFile(file, smallTopology(70, 4));
  Env e1("SNCL_TOPO_CACHE_DIR", dir.path);
  Env e2("SNCL_TOPO_FILE", file);
  clearTopoProcessCache();
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    const int n = 4;
    TopoCacheStats before = topoCacheStats();
    std::vector<snclComm_t> comms(n);
    REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
    TopoCacheStats d = delta(before, topoCacheStats());
    CHECK(d.parsed == (round == 0 ? 1u : 0u));  // the second round finds the process cache
    CHECK(d.hostHits == 0);
    CHECK(d.processHits == uint64_t(round == 0 ? n - 1 : n));
    for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
  }
  // Comms' topologies are separate graphs: health changes stay in their comm.
  std::shared_ptr<CommTopology> a, b;
  REQUIRE(CommTopology::build(8, &a) == snclSuccess);
  REQUIRE(CommTopology::build(8, &b) == snclSuccess);
  REQUIRE(a->setLinkState(0, LinkState::Down) == snclSuccess);
  CHECK(a->graph().linkState(0) == LinkState::Down);
  CHECK(b->graph().linkState(0) == LinkState::Up);
  CHECK(a->epoch() != b->epoch());
}
