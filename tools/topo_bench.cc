// topo_bench: how fast a topology loads and how fast routes come out of it, for the
// simulator's sake (it asks for routes between many rank pairs). Not a test: figures only.
//
//   topo_bench FILE [pairs]
//
// Prints load time; then the topology cache (topo_cache.h) in a fresh temporary directory:
// a miss (read, parse, encode, write), a hit from the host cache file (read, decode), a hit
// from the process cache (clone), the best of 5 each; then the first route, then three rank-pair patterns over every rank:
// ring neighbours (r, r+1), half-way partners (r, r+n/2) and pseudo-random pairs, each
// with routes per second of CPU time, then the peak resident memory.
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "lib/topo/route.h"
#include "lib/topo/topo_cache.h"
#include "lib/topo/topo_file.h"

using namespace sncl::topo;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time of this thread: on a shared machine, wall time mostly measures the neighbours.
double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Routes count pairs; returns the sum of latencies so the work cannot be optimized away.
double pattern(const Graph& g, const char* name, int count, const std::function<std::pair<int, int>(int)>& pair) {
  auto t0 = Clock::now();
  double c0 = cpuSeconds();
  double sum = 0;
  size_t shares = 0;
  for (int i = 0; i < count; ++i) {
    auto [a, b] = pair(i);
    Route r;
    if (g.routeRanks(a, b, &r) != snclSuccess) std::exit(1);
    sum += r.latencyUs;
    shares += r.shares.size();
  }
  double s = since(t0), cpu = cpuSeconds() - c0;
  fmt::print("{:<22} {:>7} routes in {:7.3f} s ({:.3f} s CPU) = {:>9.0f} routes/s of CPU, {:.0f} links per route\n",
             name, count, s, cpu, count / cpu, double(shares) / count);
  return sum;
}

// The cache's three paths in a temporary directory of their own, interleaved (miss, host
// hit, process hit) five times so that all three see the same load on a shared machine;
// prints the best of each (CPU and wall seconds).
void cacheTimes(const std::string& file) {
  char dir[] = "/dev/shm/topo_bench.XXXXXX";
  if (!mkdtemp(dir)) return fmt::print("cache: cannot make a temporary directory\n");
  setenv("SNCL_TOPO_CACHE_DIR", dir, 1);
  setenv("SNCL_TOPO_CACHE", "1", 1);
  auto empty = [&] {
    clearTopoProcessCache();
    for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove(e.path());
  };
  const char* names[3] = {"cache miss (parse)", "host cache hit", "process cache hit"};
  TopoSource expect[3] = {TopoSource::Parsed, TopoSource::HostCache, TopoSource::ProcessCache};
  double bestCpu[3] = {1e9, 1e9, 1e9}, bestWall[3] = {1e9, 1e9, 1e9};
  for (int round = 0; round < 5; ++round)
    for (int k = 0; k < 3; ++k) {
      if (k == 0) empty();
      if (k == 1) clearTopoProcessCache();
      Graph g;
      TopoSource how;
      auto t0 = Clock::now();
      double c0 = cpuSeconds();
      if (loadTopologyCached(file, &g, &how) != snclSuccess) {
        fmt::print(stderr, "topo_bench: {}\n", sncl::lastError());
        std::exit(1);
      }
      bestCpu[k] = std::min(bestCpu[k], cpuSeconds() - c0);
      bestWall[k] = std::min(bestWall[k], since(t0));
      if (how != expect[k]) fmt::print("cache: expected {}, got {}\n", sourceName(expect[k]), sourceName(how));
    }
  for (int k = 0; k < 3; ++k)
    fmt::print("{:<22} {:.4f} s ({:.4f} s CPU), best of 5\n", names[k], bestWall[k], bestCpu[k]);
  std::string cf;
  if (topoCacheFileFor(file, &cf) == snclSuccess)
    fmt::print("cache file             {:.1f} MiB\n", std::filesystem::file_size(cf) / 1048576.0);
  empty();
  rmdir(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: topo_bench FILE [pairs]\n");
    return 2;
  }
  auto t0 = Clock::now();
  double c0 = cpuSeconds();
  Graph g;
  if (loadTopologyFile(argv[1], &g) != snclSuccess) {
    fmt::print(stderr, "topo_bench: {}\n", sncl::lastError());
    return 1;
  }
  fmt::print("load                   {:.3f} s ({:.3f} s CPU): {} vertices, {} links, {} endpoints\n", since(t0),
             cpuSeconds() - c0, g.vertexCount(), g.linkCount(), g.endpointCount());
  cacheTimes(argv[1]);
  int n = g.rankCount();
  int count = argc > 2 ? std::atoi(argv[2]) : n;
  auto t1 = Clock::now();
  Route first;
  g.routeRanks(0, n - 1, &first);
  fmt::print("first route            {:.3f} s ({:.3g} us, {:.6g} GB/s)\n", since(t1), first.latencyUs,
             first.bandwidthGBps);
  double sink = 0;
  sink += pattern(g, "ring (r, r+1)", count, [&](int i) { return std::pair{i % n, (i + 1) % n}; });
  sink += pattern(g, "half-way (r, r+n/2)", count, [&](int i) { return std::pair{i % n, (i + n / 2) % n}; });
  uint64_t x = 88172645463325252ull;
  sink += pattern(g, "random pairs", count, [&](int) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: the same pairs every run
    return std::pair{int(x % n), int((x >> 32) % n)};
  });
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  fmt::print("peak memory            {:.1f} MiB (checksum {:.6g})\n", ru.ru_maxrss / 1024.0, sink);
  return 0;
}
