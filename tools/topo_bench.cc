// topo_bench: how fast a topology loads and how fast routes come out of it, for the
// simulator's sake (it asks for routes between many rank pairs). Not a test: figures only.
//
//   topo_bench FILE [pairs]
//
// Prints load time, the first route, then three rank-pair patterns over every rank:
// ring neighbours (r, r+1), half-way partners (r, r+n/2) and pseudo-random pairs, each
// with routes per second of CPU time, then the peak resident memory.
#include <sys/resource.h>
#include <time.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <functional>

#include "lib/topo/route.h"
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
