// sncl-tune: measures this machine's transport figures and writes the tuning file the
// planner reads from SNCL_TUNING_FILE (docs/planner.md, "Calibration").
//
//   sncl-tune [-o FILE] [--kinds shm,ofi,bus] [--ranks 2,4,8,16] [--sizes 8,64K,1M,...]
//             [--iters N] [--quick]
//
// Per link kind, two ranks (processes) ping-pong snclSend/snclRecv at every size; the
// one-way time (half the round trip, median over iterations) is fitted by least squares to
// t = α + bytes / β. shm: one host; ofi: two virtual hosts (SNCL_HOSTID); bus: the
// emulated bus (SNCL_TRANSPORT=bus), timed on its modeled clock, so its α is what the
// emulator charges beyond the route's latency (which the planner takes from the topology).
// Then, per rank count n, n ranks run tiny ring All-Reduces (2(n-1) steps of one message
// each): the step time with the fewest ranks is α inside a call, the rise above it with n
// ranks the step overhead of n ranks on these cores. With shm measured, n ranks also run
// All-Reduces on heap buffers through the host's staging areas and on the schedule
// (SNCL_SHM_STAGE_BYTES=0) over a ladder of sizes: the largest size up to which staging
// won is the planner's crossover for n ranks ("staged_max_bytes").
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lib/plan/cost_model.h"
#include "lib/plan/linear_fit.h"
#include "lib/topo/comm_topo.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

using namespace sncl;

namespace {

constexpr const char* kUsage = R"(usage: sncl-tune [options]
  -o FILE            write the tuning file there (default: print it on stdout only)
  --kinds LIST       link kinds to measure, of shm, ofi, bus (default shm,ofi,bus)
  --ranks LIST       rank counts for the step overhead and the staging crossover
                     (default 2,4,8,16)
  --sizes LIST       ping-pong sizes in bytes, K/M/G suffixes (default 8,4K,64K,256K,1M,4M)
  --iters N          round trips per size (default 30)
  --quick            fewer sizes, iterations and rank counts (10 iterations, ranks <= 8)
  --version          the library's version and git revision
)";

constexpr int kMaxSizes = 32, kMaxIters = 1000;
constexpr int kTimeoutMs = 180000;  // per measurement: a hung transport must not hang the tool

// Bytes per rank of the staging ladder: from past the cells (a few KiB) to well past the
// staging area (2 MiB), where the path runs in many chunks.
constexpr size_t kStageSizes[] = {16u << 10, 64u << 10, 256u << 10, 1u << 20, 4u << 20};
constexpr int kNumStageSizes = sizeof(kStageSizes) / sizeof(kStageSizes[0]);

// Written by the measuring processes, read by the parent.
struct Shared {
  double oneWayUs[kMaxSizes];
  double fanUs[2];  // a group of 1 and of kFan tiny sends, and the reply (wall kinds)
  double stepUs;
  double allReduceUs[kNumStageSizes];
};

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A ping-pong size: 1 byte to 4 GiB, in the library's size syntax.
bool parseBytes(const std::string& s, size_t* out) {
  return snclParseSize(s.c_str(), out) == snclSuccess && *out >= 1 && *out <= (size_t(1) << 32);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

bool check(snclResult_t r, snclComm_t comm, const char* what) {
  if (r == snclSuccess) return true;
  fprintf(stderr, "sncl-tune: %s failed: %s\n", what, snclGetLastError(comm));
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Sets the environment that selects a link kind between the two ping-pong ranks.
void selectKind(const std::string& kind, int rank) {
  if (kind == "ofi") setenv("SNCL_HOSTID", fmt::format("tune-vh{}", rank).c_str(), 1);
  if (kind == "bus") setenv("SNCL_TRANSPORT", "bus", 1);
}

// The fan that measures a message's CPU: messages of one group call, one step; no more
// than ofi's receive slots per peer (SNCL_OFI_SLOTS, 4), past which a send waits for credit.
constexpr int kFan = 4;

// Rank 0 sends `messages` one-byte messages in one group, rank 1 receives them and returns
// one: the median round trip (µs, rank 0), or a negative number on failure.
double fanRoundTripUs(snclComm_t comm, int rank, int messages, int iters) {
  std::vector<char> bytes(size_t(messages) + 1);
  std::vector<double> samples;
  const int peer = 1 - rank;
  for (int i = -2; i < iters; ++i) {
    const double t0 = nowUs();
    snclGroupStart();
    for (int m = 0; m < messages; ++m)
      rank == 0 ? snclSend(&bytes[m], 1, snclUint8, peer, comm, nullptr) : snclRecv(&bytes[m], 1, snclUint8, peer, comm, nullptr);
    if (!check(snclGroupEnd(), comm, "fan")) return -1;
    const bool ok = rank == 0 ? check(snclRecv(&bytes[messages], 1, snclUint8, peer, comm, nullptr), comm, "fan reply")
                              : check(snclSend(&bytes[messages], 1, snclUint8, peer, comm, nullptr), comm, "fan reply");
    if (!ok) return -1;
    if (i >= 0) samples.push_back(nowUs() - t0);
  }
  return median(samples);
}

// Wall kinds: rank 0 sends, rank 1 returns, iters times per size, timed on rank 0. The
// bus: both ranks send and receive in one group call, timed on its common modeled clock
// (the last entry to the last exit): a ping-pong's separate calls would put the CPU time
// between them into the modeled clock, which a collective's steps never see.
int pingPongRank(const std::string& kind, int rank, const snclUniqueId& id, const std::vector<size_t>& sizes, int iters,
                 Shared* out) {
  selectKind(kind, rank);
  snclComm_t comm = nullptr;
  if (!check(snclCommInitRank(&comm, 2, id, rank), nullptr, "init")) return 1;
  const bool modeled = kind == "bus";
  std::vector<char> buf(sizes.back()), back(sizes.back());
  const int peer = 1 - rank;
  std::vector<double> samples;
  for (size_t s = 0; s < sizes.size(); ++s) {
    samples.clear();
    for (int i = -2; i < iters; ++i) {  // two warm-up trips
      const double t0 = nowUs();
      if (modeled) {
        snclGroupStart();
        snclSend(buf.data(), sizes[s], snclUint8, peer, comm, nullptr);
        snclRecv(back.data(), sizes[s], snclUint8, peer, comm, nullptr);
        if (!check(snclGroupEnd(), comm, "exchange")) return 1;
        double span[2];
        if (!check(snclBusLastCallSpanUs(comm, &span[0], &span[1]), comm, "modeled span")) return 1;
        if (!check(snclAllReduce(span, span, 2, snclFloat64, snclMax, comm, nullptr), comm, "span max")) return 1;
        if (i >= 0) samples.push_back(span[1] - span[0]);
        continue;
      }
      if (rank == 0) {
        if (!check(snclSend(buf.data(), sizes[s], snclUint8, peer, comm, nullptr), comm, "send")) return 1;
        if (!check(snclRecv(buf.data(), sizes[s], snclUint8, peer, comm, nullptr), comm, "recv")) return 1;
      } else {
        if (!check(snclRecv(buf.data(), sizes[s], snclUint8, peer, comm, nullptr), comm, "recv")) return 1;
        if (!check(snclSend(buf.data(), sizes[s], snclUint8, peer, comm, nullptr), comm, "send")) return 1;
      }
      if (i >= 0) samples.push_back((nowUs() - t0) / 2);
    }
    if (rank == 0) out->oneWayUs[s] = median(samples);
  }
  // A message's CPU (KindCost::cpuUs): what each further message of one step adds.
  if (!modeled) {
    const double one = fanRoundTripUs(comm, rank, 1, iters), many = fanRoundTripUs(comm, rank, kFan, iters);
    if (one < 0 || many < 0) return 1;
    out->fanUs[0] = one, out->fanUs[1] = many;
  }
  if (!check(snclCommDestroy(comm), nullptr, "destroy")) return 1;
  return 0;
}

// The median over iters (after two warm-up rounds) of the slowest rank's time of call(),
// the ranks lined up by a tiny All-Reduce before each; false (with a message) on failure.
template <class Call>
bool medianSlowestUs(snclComm_t comm, int iters, const char* what, const Call& call, double* out) {
  std::vector<double> samples;
  for (int i = -2; i < iters; ++i) {
    double one = 1;
    if (!check(snclAllReduce(&one, &one, 1, snclFloat64, snclSum, comm, nullptr), comm, "sync")) return false;
    const double t0 = nowUs();
    if (!check(call(), comm, what)) return false;
    double us = nowUs() - t0;
    if (!check(snclAllReduce(&us, &us, 1, snclFloat64, snclMax, comm, nullptr), comm, "max")) return false;
    if (i >= 0) samples.push_back(us);
  }
  *out = median(samples);
  return true;
}

// n ranks on one host run tiny ring All-Reduces: one element per rank, so every one of the
// 2(n-1) steps moves a few bytes and costs α plus the step overhead.
int stepRank(int rank, int n, const snclUniqueId& id, int iters, Shared* out) {
  setenv("SNCL_ALGO", "allreduce:ring", 1);
  snclComm_t comm = nullptr;
  if (!check(snclCommInitRank(&comm, n, id, rank), nullptr, "init")) return 1;
  std::vector<float> buf(n, 1.0f);
  double us = 0;
  if (!medianSlowestUs(comm, iters, "allreduce", [&] {
        return snclAllReduce(buf.data(), buf.data(), n, snclFloat32, snclSum, comm, nullptr);
      }, &us))
    return 1;
  if (rank == 0) out->stepUs = us / (2.0 * (n - 1));
  if (!check(snclCommDestroy(comm), nullptr, "destroy")) return 1;
  return 0;
}

// n ranks on one host run float32 All-Reduces on heap buffers (which peers cannot map), each
// size's median of the slowest rank's time: staged, or with staging off on the schedule.
int stagedRank(int rank, int n, const snclUniqueId& id, bool staged, int iters, Shared* out) {
  if (!staged) setenv("SNCL_SHM_STAGE_BYTES", "0", 1);
  snclComm_t comm = nullptr;
  if (!check(snclCommInitRank(&comm, n, id, rank), nullptr, "init")) return 1;
  const size_t most = kStageSizes[kNumStageSizes - 1] / sizeof(float);
  std::vector<float> in(most, 1.0f), result(most);
  for (int s = 0; s < kNumStageSizes; ++s) {
    const size_t count = kStageSizes[s] / sizeof(float);
    double us = 0;
    if (!medianSlowestUs(comm, iters, "allreduce", [&] {
          return snclAllReduce(in.data(), result.data(), count, snclFloat32, snclSum, comm, nullptr);
        }, &us))
      return 1;
    const auto wrong = std::find_if(result.begin(), result.begin() + count, [n](float v) { return v != float(n); });
    if (wrong != result.begin() + count) {
      fprintf(stderr, "sncl-tune: staged %d: All-Reduce of %zu bytes gave %g at element %td, not %d\n", int(staged),
              kStageSizes[s], double(*wrong), wrong - result.begin(), n);
      return 1;
    }
    if (rank == 0) out->allReduceUs[s] = us;
  }
  if (!check(snclCommDestroy(comm), nullptr, "destroy")) return 1;
  return 0;
}

// Forks n ranks running body; false (with a message) if any fails or the deadline passes.
template <class Body>
bool runRanks(int n, Shared* shared, const Body& body) {
  snclUniqueId id;
  if (snclGetUniqueId(&id) != snclSuccess) {
    fprintf(stderr, "sncl-tune: cannot make a unique id: %s\n", snclGetLastError(nullptr));
    return false;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body(r, id));
    if (pid < 0) {
      perror("sncl-tune: fork");
      for (pid_t p : pids) kill(p, SIGKILL);
      return false;
    }
    pids.push_back(pid);
  }
  const double deadline = nowUs() + kTimeoutMs * 1e3;
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (nowUs() > deadline) {
        fprintf(stderr, "sncl-tune: ranks did not finish within %d s; killed\n", kTimeoutMs / 1000);
        for (pid_t p : pids) kill(p, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  for (pid_t p : pids) waitpid(p, nullptr, WNOHANG);
  return ok;
}

// Latency of the route between ranks 0 and 1 on the topology the bus ping-pong ran on (the
// default one: SNCL_TOPO_FILE is not set for it); negative on error.
double busRouteLatencyUs() {
  std::shared_ptr<CommTopology> topo;
  topo::Route route;
  if (CommTopology::build(2, &topo) != snclSuccess || topo->routeRanks(0, 1, &route) != snclSuccess || !route.reachable) {
    fprintf(stderr, "sncl-tune: bus: no route between ranks 0 and 1: %s\n", lastError());
    return -1;
  }
  return route.latencyUs;
}

struct Options {
  std::string output;
  std::vector<std::string> kinds = {"shm", "ofi", "bus"};
  std::vector<int> ranks = {2, 4, 8, 16};
  std::vector<size_t> sizes = {8, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
  int iters = 30;
};

int usageError(const std::string& why) {
  fprintf(stderr, "sncl-tune: %s\n%s", why.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool quick = false, itersGiven = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool hasValue = i + 1 < argc;
    if ((a == "-o" || a == "--output") && hasValue) {
      o.output = argv[++i];
    } else if (a == "--kinds" && hasValue) {
      o.kinds = split(argv[++i]);
      for (const std::string& k : o.kinds)
        if (k != "shm" && k != "ofi" && k != "bus") return usageError(fmt::format("unknown link kind '{}'", k));
    } else if (a == "--ranks" && hasValue) {
      o.ranks.clear();
      for (const std::string& r : split(argv[++i])) {
        char* end = nullptr;
        const long n = std::strtol(r.c_str(), &end, 10);
        if (r.empty() || *end || n < 2 || n > 256) return usageError(fmt::format("bad rank count '{}' (2..256)", r));
        o.ranks.push_back(int(n));
      }
      std::sort(o.ranks.begin(), o.ranks.end());
      o.ranks.erase(std::unique(o.ranks.begin(), o.ranks.end()), o.ranks.end());
    } else if (a == "--sizes" && hasValue) {
      o.sizes.clear();
      for (const std::string& s : split(argv[++i])) {
        size_t b = 0;
        if (!parseBytes(s, &b)) return usageError(fmt::format("bad size '{}' (1 to 4G bytes, e.g. 8, 64K, 1.5M)", s));
        o.sizes.push_back(b);
      }
      std::sort(o.sizes.begin(), o.sizes.end());
      o.sizes.erase(std::unique(o.sizes.begin(), o.sizes.end()), o.sizes.end());
      if (o.sizes.size() < 2 || o.sizes.size() > size_t(kMaxSizes))
        return usageError(fmt::format("--sizes needs 2..{} distinct sizes", kMaxSizes));
    } else if (a == "--iters" && hasValue) {
      char* end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > kMaxIters) return usageError(fmt::format("bad --iters '{}' (1..{})", argv[i], kMaxIters));
      o.iters = int(n);
      itersGiven = true;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "-h" || a == "--help") {
      printf("%s", kUsage);
      return 0;
    } else if (a == "--version") {
      printf("sncl-tune %s\n", snclGetBuildVersion());
      return 0;
    } else {
      return usageError(fmt::format("unknown or incomplete option '{}'", a));
    }
  }
  if (quick) {
    if (!itersGiven) o.iters = 10;
    std::erase_if(o.ranks, [](int n) { return n > 8; });
  }

  // The machine is measured as it is: no topology file, forced transport or tuning applies.
  for (const char* v : {"SNCL_TOPO_FILE", "SNCL_TRANSPORT", "SNCL_HOSTID", "SNCL_TUNING_FILE", "SNCL_ALGO", "SNCL_FAULTS",
                        "SNCL_SHM_STAGE_BYTES"})
    unsetenv(v);
  auto* shared = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED) {
    perror("sncl-tune: mmap");
    return 1;
  }
  Tuning t = defaultTuning();
  std::array<bool, topo::kNumLinkKinds> measured{};
  int failures = 0;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  fmt::print("sncl-tune: {} cores; ping-pong sizes", cores);
  for (size_t s : o.sizes) fmt::print(" {}", s);
  fmt::print(", {} round trips each\n", o.iters);

  for (const std::string& kind : o.kinds) {
    const bool ran = runRanks(2, shared, [&](int rank, const snclUniqueId& id) {
      return pingPongRank(kind, rank, id, o.sizes, o.iters, shared);
    });
    if (!ran) {
      fprintf(stderr, "sncl-tune: %s: ping-pong failed; its figures keep their defaults\n", kind.c_str());
      ++failures;
      continue;
    }
    std::vector<double> x, y;
    for (size_t s = 0; s < o.sizes.size(); ++s) x.push_back(double(o.sizes[s])), y.push_back(shared->oneWayUs[s]);
    LineFit fit;
    if (fitLine(x, y, &fit, FitWeight::Relative) != snclSuccess) {
      fprintf(stderr, "sncl-tune: %s: %s\n", kind.c_str(), lastError());
      ++failures;
      continue;
    }
    fmt::print("\n{} ({}):\n{:>10} {:>12} {:>12}\n", kind, kind == "bus" ? "modeled clock" : "wall clock", "bytes",
               "one-way us", "fit us");
    for (size_t s = 0; s < x.size(); ++s) fmt::print("{:>10} {:>12.2f} {:>12.2f}\n", o.sizes[s], y[s], fit.intercept + fit.slope * x[s]);
    if (fit.slope <= 0) {
      fprintf(stderr, "sncl-tune: %s: time does not grow with size (slope %.3g us/B); figures keep their defaults\n",
              kind.c_str(), fit.slope);
      ++failures;
      continue;
    }
    const int k = kind == "shm" ? int(topo::LinkKind::Shm) : kind == "ofi" ? int(topo::LinkKind::Net) : int(topo::LinkKind::Bus);
    // The emulated bus charges the route's latency, which the planner adds from the
    // topology: the bus's own α is what the fit finds beyond it.
    const double routeUs = kind == "bus" ? busRouteLatencyUs() : 0.0;
    if (routeUs < 0) {
      ++failures;
      continue;
    }
    // A negative intercept is noise around a small α: the planner takes none.
    t.kind[k] = {std::max(0.0, fit.intercept - routeUs), 1e-3 / fit.slope};
    measured[k] = true;
    fmt::print("  alpha {:.2f} us, beta {:.3f} GB/s; residual rms {:.2f} us, worst {:.1f}%\n", fit.intercept,
               t.kind[k].betaGBs, fit.rmsResidual, 100 * fit.maxRelResidual);
    if (kind != "bus") {
      // Noise can make the fan no slower than the single message: then none.
      t.kind[k].cpuUs = std::max(0.0, (shared->fanUs[1] - shared->fanUs[0]) / (kFan - 1));
      fmt::print("  a message's CPU {:.2f} us (a group of {} one-byte sends {:.1f} us, of 1 {:.1f} us)\n",
                 t.kind[k].cpuUs, kFan, shared->fanUs[1], shared->fanUs[0]);
    }
    if (kind == "bus")
      fmt::print("  route latency {:.2f} us (topology): the bus's own alpha is {:.2f} us\n", routeUs, t.kind[k].alphaUs);
  }
  // A step inside a collective costs less than a ping-pong's half trip, which also pays
  // entering and leaving a call: the tiny ring's step on 2 ranks is α inside a call, the
  // difference the per-call cost that every algorithm pays alike. Steps with n ranks cost
  // beyond that their turns on the cores: the step overhead.
  // The least of three runs' medians: on a shared machine one run can catch another
  // process on a core for all of its calls (a 2-rank step once measured 139 us instead
  // of 0.3), which would turn every step overhead above it to zero.
  constexpr int kStepRuns = 3;
  std::vector<std::pair<int, double>> steps;
  if (!o.ranks.empty())
    fmt::print("\nsteps (tiny ring All-Reduce on shm, wall clock, least of {} runs' median per step):\n", kStepRuns);
  for (int n : o.ranks) {
    double best = 0;
    bool ran = true;
    for (int run = 0; run < kStepRuns && ran; ++run) {
      ran = runRanks(n, shared, [&](int rank, const snclUniqueId& id) { return stepRank(rank, n, id, o.iters, shared); });
      if (ran) best = run == 0 ? shared->stepUs : std::min(best, shared->stepUs);
    }
    if (!ran) {
      fprintf(stderr, "sncl-tune: steps with %d ranks failed\n", n);
      ++failures;
      continue;
    }
    steps.emplace_back(n, best);
    fmt::print("{:>6} ranks {:>10.2f} us\n", n, best);
  }
  if (!steps.empty()) {
    const double base = steps.front().second;
    for (const auto& [n, us] : steps) t.stepOverheadUs.emplace_back(n, std::max(0.0, us - base));
    const int shm = int(topo::LinkKind::Shm), net = int(topo::LinkKind::Net);
    if (measured[shm]) {
      const double callUs = std::max(0.0, t.kind[shm].alphaUs - base);
      fmt::print("per-call cost {:.2f} us (shm ping-pong alpha - step alpha): taken out of the alphas\n", callUs);
      t.kind[shm].alphaUs = base;
      if (measured[net]) t.kind[net].alphaUs = std::max(base, t.kind[net].alphaUs - callUs);
    }
    fmt::print("step overhead beyond {} ranks' step:", steps.front().first);
    for (const auto& [n, us] : t.stepOverheadUs) fmt::print(" {}: {:.2f} us", n, us);
    fmt::print("\n");
  }
  // The staging crossover per rank count: the largest size of the ladder up to which the
  // staged All-Reduce beat the schedule at every size; past the ladder's end, every size.
  const bool stagingMeasured = std::find(o.kinds.begin(), o.kinds.end(), "shm") != o.kinds.end();
  std::vector<std::pair<int, uint64_t>> crossovers;
  if (stagingMeasured)
    fmt::print("\nstaging (float32 All-Reduce on heap buffers, wall clock, median of the slowest rank):\n{:>6} {:>10} "
               "{:>12} {:>12}\n", "ranks", "bytes", "staged us", "schedule us");
  for (int n : stagingMeasured ? o.ranks : std::vector<int>{}) {
    if (n > 32) continue;  // the staged path's most ranks (kSharedMaxRanks)
    double us[2][kNumStageSizes];
    bool ran = true;
    for (int staged = 0; staged < 2 && ran; ++staged) {
      ran = runRanks(n, shared, [&](int rank, const snclUniqueId& id) {
        return stagedRank(rank, n, id, staged == 1, o.iters, shared);
      });
      std::copy(shared->allReduceUs, shared->allReduceUs + kNumStageSizes, us[staged]);
    }
    if (!ran) {
      fprintf(stderr, "sncl-tune: staging with %d ranks failed; the default crossover stays\n", n);
      ++failures;
      continue;
    }
    uint64_t max = kStagedAnySize;
    for (int s = 0; s < kNumStageSizes; ++s) {
      fmt::print("{:>6} {:>10} {:>12.1f} {:>12.1f}\n", n, kStageSizes[s], us[1][s], us[0][s]);
      if (max == kStagedAnySize && us[1][s] >= us[0][s]) max = s == 0 ? 0 : kStageSizes[s - 1];
    }
    crossovers.emplace_back(n, max);
    fmt::print("  {} ranks stage up to {}\n", n, max == kStagedAnySize ? std::string("every size") : fmt::format("{} bytes per rank", max));
  }
  if (!crossovers.empty()) t.stagedMaxBytes = crossovers;
  const std::string json = tuningJson(t, measured);
  if (o.output.empty()) {
    fmt::print("\n{}", json);
  } else {
    std::ofstream f(o.output);
    f << json;
    if (!f.flush()) {
      fprintf(stderr, "sncl-tune: cannot write %s: %s\n", o.output.c_str(), strerror(errno));
      return 1;
    }
    fmt::print("\nwrote {} (SNCL_TUNING_FILE={})\n", o.output, o.output);
  }
  return failures ? 1 : 0;
}
