// Chaos soak: ranks as processes run a seeded loop of All-Reduce, All-Gather, Broadcast
// and Reduce-Scatter of random sizes and types, every result checked exactly, while one
// rank injects faults between its own calls (a link down and later up, a degrade, jitter),
// so the other ranks meet each fault wherever they are. One summary line at the end.
//
//   chaos_soak [--ranks 8] [--transport bus] [--topo FILE] [--seed 1] [--seeds 1]
//              [--calls 1000] [--max-bytes 4M] [--fault-rate 0.05] [--faults down,degrade,jitter]
//              [--injector 3] [--links a-b,c-d] [--timeout-ms 20000] [--deadline-s 900]
//
// Public API only. Exit status 0 when nothing was wrong, failed or hung.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "perf/common/args.h"
#include "perf/common/exact_calls.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

namespace {

using namespace sncl::exact;
using perf::splitList;

struct Options {
  int ranks = 8;
  std::string transport = "bus";
  std::string topo;
  uint64_t seed = 1;
  int seeds = 1;
  int calls = 1000;
  size_t maxBytes = 4u << 20;
  double faultRate = 0.05;
  std::string faults = "down,degrade,jitter";
  int injector = 3;
  std::vector<std::string> links;
  int timeoutMs = 20000;
  int deadlineS = 900;
};

constexpr int kMaxRecoveries = 4096;

// What each rank reports, in memory shared with the parent.
struct RankReport {
  int callsDone;
  int wrong;
  int errors;
  int faultsInjected;
  uint64_t reroutes;
  int nrecoveries;
  double recoveryMs[kMaxRecoveries];
  double wallS;
  double bytes;
  char firstError[512];
};

std::string endpointLink(int n, int e, int p) {
  return "n" + std::to_string(n) + ".e" + std::to_string(e) + "-n" + std::to_string(n) + ".l1p" + std::to_string(p);
}

// The two-plane Clos of topologies/supernode-2plane-2x4.json: every endpoint's link into
// either plane, and each leaf's uplink. Any one of them down leaves a route.
std::vector<std::string> twoPlaneLinks() {
  std::vector<std::string> links;
  for (int n = 0; n < 2; ++n)
    for (int p = 0; p < 2; ++p) {
      for (int e = 0; e < 4; ++e) links.push_back(endpointLink(n, e, p));
      links.push_back("n" + std::to_string(n) + ".l1p" + std::to_string(p) + "-l2p" + std::to_string(p) + ".s0");
    }
  return links;
}

// Calls of the injector after a link's "up" before another link goes down: a link back up
// reaches the graph at the first collective no rank had planned yet (docs/bus.md), a few
// calls later, and two links of one endpoint down at once leave it no route.
constexpr int kUpSettleCalls = 12;

// The injector's next fault: at most one link down at a time, so a route always exists.
std::string drawFault(std::mt19937_64& rng, const Options& o, const std::vector<std::string>& kinds,
                      std::string* downLink, int call, int* lastUp) {
  if (!downLink->empty()) {
    std::string spec = "link=" + *downLink + ":up";
    downLink->clear();
    *lastUp = call;
    return spec;
  }
  std::string kind = kinds[rng() % kinds.size()];
  const std::string& link = o.links[rng() % o.links.size()];
  if (kind == "down" && call - *lastUp < kUpSettleCalls) kind = kinds.size() > 1 ? "degrade" : "";
  if (kind.empty()) return "";
  if (kind == "down") {
    *downLink = link;
    return "link=" + link + ":down";
  }
  if (kind == "degrade") return "link=" + link + ":degrade=" + std::to_string(2 + rng() % 7);
  return "jitter=0.0" + std::to_string(1 + rng() % 9) + ":" + std::to_string(5 + rng() % 50) + "us";
}

int rankMain(int rank, const Options& o, uint64_t seed, const snclUniqueId& id, RankReport* rep) {
  snclConfig_t config = SNCL_CONFIG_INITIALIZER;
  config.timeoutMs = o.timeoutMs;
  snclComm_t comm = nullptr;
  if (snclCommInitRankConfig(&comm, o.ranks, id, rank, &config) != snclSuccess) {
    snprintf(rep->firstError, sizeof(rep->firstError), "init: %s", snclGetLastError(nullptr));
    rep->errors = 1;
    return 1;
  }
  std::mt19937_64 calls(seed), faults(seed * 7919 + 1);
  const std::vector<std::string> kinds = splitList(o.faults);
  std::string downLink;
  int lastUp = -kUpSettleCalls;
  std::vector<char> in(o.maxBytes + 64), out(o.maxBytes * 2 + 64);
  const auto start = std::chrono::steady_clock::now();
  uint64_t reroutes = 0;
  for (int i = 0; i < o.calls; ++i) {
    const Call c = drawCall(calls, o.ranks, o.maxBytes, 50);
    if (rank == o.injector && !kinds.empty() && std::uniform_real_distribution<double>(0, 1)(faults) < o.faultRate) {
      const std::string spec = drawFault(faults, o, kinds, &downLink, i, &lastUp);
      if (!spec.empty() && snclBusInjectFault(comm, spec.c_str()) != snclSuccess) {
        snprintf(rep->firstError, sizeof(rep->firstError), "inject %s: %s", spec.c_str(), snclGetLastError(comm));
        ++rep->errors;
        break;
      }
      rep->faultsInjected += !spec.empty();
    }
    const long wrong = runCall(comm, rank, o.ranks, i, c, in, out, &rep->bytes);
    if (wrong < 0) {
      snprintf(rep->firstError, sizeof(rep->firstError), "call %d (%s %zu x %d B): %s", i, collName(c.coll),
               c.count, int(elemSize(c.type)), snclGetLastError(comm));
      ++rep->errors;
      break;  // the comm has an asynchronous error now: every later call fails
    }
    if (wrong > 0 && rep->wrong++ == 0)
      snprintf(rep->firstError, sizeof(rep->firstError), "call %d (%s %zu x %d B): %ld wrong", i, collName(c.coll),
               c.count, int(elemSize(c.type)), wrong);
    snclFaultStats_t stats{};
    if (snclCommGetFaultStats(comm, &stats) == snclSuccess && stats.reroutes != reroutes) {
      reroutes = stats.reroutes;
      if (rep->nrecoveries < kMaxRecoveries) rep->recoveryMs[rep->nrecoveries++] = stats.lastRecoveryMs;
    }
    rep->callsDone = i + 1;
  }
  // Collective with retry on: a fault in a peer's last calls is still caught up.
  if (rep->errors == 0 && snclCommFinalize(comm) != snclSuccess) {
    snprintf(rep->firstError, sizeof(rep->firstError), "finalize: %s", snclGetLastError(comm));
    ++rep->errors;
  }
  snclFaultStats_t stats{};
  if (snclCommGetFaultStats(comm, &stats) == snclSuccess) reroutes = stats.reroutes;
  rep->wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rep->reroutes = reroutes;
  snclCommDestroy(comm);
  return rep->errors || rep->wrong ? 1 : 0;
}

struct SeedResult {
  long rankOps = 0;
  int wrong = 0, errors = 0, hangs = 0, faults = 0;
  uint64_t reroutes = 0;
  std::vector<double> recoveries;
  double wallS = 0, bytes = 0;
};

SeedResult runSeed(const Options& o, uint64_t seed) {
  auto* reps = static_cast<RankReport*>(
      mmap(nullptr, sizeof(RankReport) * o.ranks, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  memset(reps, 0, sizeof(RankReport) * o.ranks);
  // Rank 0's process makes the unique id and hands it to the others through pipes, so
  // this process forks without the bootstrap's threads.
  std::vector<int> pipes(2 * o.ranks);
  for (int r = 0; r < o.ranks; ++r)
    if (pipe(&pipes[2 * r]) != 0) { perror("pipe"); exit(2); }
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      snclUniqueId id{};
      if (r == 0) {
        if (snclGetUniqueId(&id) != snclSuccess) _exit(3);
        for (int q = 1; q < o.ranks; ++q)
          if (write(pipes[2 * q + 1], &id, sizeof(id)) != ssize_t(sizeof(id))) _exit(3);
      } else if (read(pipes[2 * r], &id, sizeof(id)) != ssize_t(sizeof(id))) {
        _exit(3);
      }
      _exit(rankMain(r, o, seed, id, &reps[r]));
    }
    pids.push_back(pid);
  }
  for (int fd : pipes) close(fd);
  SeedResult res;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.deadlineS);
  std::vector<bool> exited(o.ranks, false);
  for (int left = o.ranks; left > 0;) {
    for (int r = 0; r < o.ranks; ++r) {
      if (exited[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        exited[r] = true;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < o.ranks; ++r)
        if (!exited[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          ++res.hangs;
          fprintf(stderr, "seed %llu rank %d: hung after %d calls (killed at the deadline)\n",
                  (unsigned long long)seed, r, reps[r].callsDone);
        }
      break;
    }
    usleep(20000);
  }
  for (int r = 0; r < o.ranks; ++r) {
    const RankReport& rep = reps[r];
    res.rankOps += rep.callsDone;
    res.wrong += rep.wrong;
    res.errors += rep.errors;
    res.faults += rep.faultsInjected;
    res.reroutes = std::max(res.reroutes, rep.reroutes);
    res.wallS = std::max(res.wallS, rep.wallS);
    res.bytes += rep.bytes;
    res.recoveries.insert(res.recoveries.end(), rep.recoveryMs, rep.recoveryMs + rep.nrecoveries);
    if (rep.firstError[0]) fprintf(stderr, "seed %llu rank %d: %s\n", (unsigned long long)seed, r, rep.firstError);
  }
  munmap(reps, sizeof(RankReport) * o.ranks);
  return res;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

void usage() {
  fprintf(stderr,
          "usage: chaos_soak [--ranks N] [--transport bus|shm|ofi] [--topo FILE] [--seed S] [--seeds K] [--calls N]\n"
          "                  [--max-bytes B] [--fault-rate P] [--faults down,degrade,jitter] [--injector R]\n"
          "                  [--links a-b,...] [--timeout-ms T] [--deadline-s S]\n");
  exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (a == "--ranks") o.ranks = atoi(v);
    else if (a == "--transport") o.transport = v;
    else if (a == "--topo") o.topo = v;
    else if (a == "--seed") o.seed = strtoull(v, nullptr, 10);
    else if (a == "--seeds") o.seeds = atoi(v);
    else if (a == "--calls") o.calls = atoi(v);
    else if (a == "--max-bytes") { if (!perf::parseSize(v, &o.maxBytes)) usage(); }
    else if (a == "--fault-rate") o.faultRate = atof(v);
    else if (a == "--faults") o.faults = v;
    else if (a == "--injector") o.injector = atoi(v);
    else if (a == "--links") o.links = splitList(v);
    else if (a == "--timeout-ms") o.timeoutMs = atoi(v);
    else if (a == "--deadline-s") o.deadlineS = atoi(v);
    else usage();
  }
  if (o.ranks < 2 || o.ranks > 64 || o.calls < 0 || o.seeds < 1 || o.injector < 0 || o.injector >= o.ranks) usage();
  if (o.links.empty()) o.links = twoPlaneLinks();
  setenv("SNCL_TRANSPORT", o.transport.c_str(), 1);
  if (!o.topo.empty()) setenv("SNCL_TOPO_FILE", o.topo.c_str(), 1);
  SeedResult all;
  for (int s = 0; s < o.seeds; ++s) {
    const uint64_t seed = o.seed + uint64_t(s);
    SeedResult r = runSeed(o, seed);
    printf("seed %llu: rank-ops %ld, wrong %d, errors %d, hangs %d, faults injected %d, reroutes %llu, %.1f s\n",
           (unsigned long long)seed, r.rankOps, r.wrong, r.errors, r.hangs, r.faults, (unsigned long long)r.reroutes,
           r.wallS);
    fflush(stdout);
    all.rankOps += r.rankOps;
    all.wrong += r.wrong;
    all.errors += r.errors;
    all.hangs += r.hangs;
    all.faults += r.faults;
    all.reroutes += r.reroutes;
    all.wallS += r.wallS;
    all.bytes += r.bytes;
    all.recoveries.insert(all.recoveries.end(), r.recoveries.begin(), r.recoveries.end());
  }
  printf("chaos: %d seeds x %d calls, %d ranks, %s: rank-ops %ld, wrong %d, errors %d, hangs %d, faults %d, "
         "reroutes %llu, recovery p50 %.1f ms p99 %.1f ms, %.1f s, %.2f MB/s per rank\n",
         o.seeds, o.calls, o.ranks, o.transport.c_str(), all.rankOps, all.wrong, all.errors, all.hangs, all.faults,
         (unsigned long long)all.reroutes, percentile(all.recoveries, 0.5), percentile(all.recoveries, 0.99),
         all.wallS, all.wallS > 0 ? all.bytes / o.ranks / all.wallS / 1e6 : 0.0);
  return all.wrong || all.errors || all.hangs ? 1 : 0;
}
