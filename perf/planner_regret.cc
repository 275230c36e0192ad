// planner_regret: how close the planner's automatic All-Reduce choice comes to the best
// algorithm, per (topology, size) cell. Every algorithm is forced in turn with SNCL_ALGO
// (set before comm init) beside the automatic choice; regret = time of auto's plan / best
// time. "auto" is the automatic comm's own time; "auto plan" also takes the trials of a
// forced comm that ran exactly auto's plan (snclCommExplainPlan names both), since they
// ran the same schedule.
//
//   planner_regret [--quick] [--max-bytes N] [--sizes N,N,..] [--only TEXT] [--deadline S]
//
// SNCL_TUNING_FILE (sncl-tune's output) applies to every comm, the automatic choice's
// included; run with and without it to compare. --only keeps the topologies whose name
// contains TEXT. A topology whose ranks fail or pass the deadline (default 900 s) is
// reported and its cells left out of the share. Sizes: 8 B .. 256 MiB by 32x and 64 MiB;
// the 16-rank bus topologies stop at 64 MiB (memory: a buffer per comm and rank).
//
// Topologies: 8 ranks on one host (shm); 2 virtual hosts x 4 (SNCL_HOSTID: shm inside,
// ofi between); 16 ranks on an emulated two-level supernode (topologies/supernode-4x4.json,
// the bus transport), and the same with one leaf-spine link down. Wall time for shm/ofi
// (min over trials of the slowest rank), the bus's modeled clock for the supernode (the
// span from the last rank's entry to the last rank's exit). Ranks are processes (fork).
#include <sys/mman.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf/common/args.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

namespace {

struct Topology {
  const char* name;
  int nranks;
  int perHost;          // > 0: SNCL_HOSTID splits ranks into hosts of this many
  const char* file;     // SNCL_TOPO_FILE, or nullptr
  const char* faults;   // SNCL_FAULTS, or nullptr
  bool modeled;         // time by the bus's modeled clock
  size_t maxBytes;      // largest size run (every rank keeps a buffer per comm)
  std::vector<const char*> algorithms;
};

constexpr int kMaxAlgos = 8, kMaxSizes = 16;
// 8 ranks keep 256 MiB per comm; 16 bus ranks, which also save an in-place input per comm
// for re-runs after a fault, keep 64 MiB.
constexpr size_t kShmMax = size_t(256) << 20, kBusMax = size_t(64) << 20;
struct Shared {  // written by each topology's rank 0, read by the parent
  int cells;
  int within;
  double worst;
};

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool ok(snclResult_t r, snclComm_t comm, const char* what) {
  if (r == snclSuccess) return true;
  fprintf(stderr, "planner_regret: %s failed: %s\n", what, snclGetLastError(comm));
  return false;
}

// Time of one All-Reduce of bytes on comm (one trial), agreed by all ranks (the slowest
// rank's).
bool timeCall(snclComm_t comm, const Topology& t, std::vector<float>& buf, size_t bytes, double* us) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  const int iters = bytes <= (32u << 10) ? 20 : bytes <= (1u << 20) ? 5 : bytes <= (16u << 20) ? 2 : 1;
  if (!ok(snclAllReduce(buf.data(), buf.data(), count, snclFloat32, snclSum, comm, nullptr), comm, "warm-up")) return false;
  if (t.modeled) {
    double span[2] = {0, 0};
    if (!ok(snclAllReduce(buf.data(), buf.data(), count, snclFloat32, snclSum, comm, nullptr), comm, "allreduce")) return false;
    if (!ok(snclBusLastCallSpanUs(comm, &span[0], &span[1]), comm, "modeled span")) return false;
    if (!ok(snclAllReduce(span, span, 2, snclFloat64, snclMax, comm, nullptr), comm, "span max")) return false;
    *us = span[1] - span[0];
    return true;
  }
  float sync = 0;
  if (!ok(snclAllReduce(&sync, &sync, 1, snclFloat32, snclSum, comm, nullptr), comm, "sync")) return false;
  const double t0 = nowUs();
  for (int i = 0; i < iters; ++i)
    if (!ok(snclAllReduce(buf.data(), buf.data(), count, snclFloat32, snclSum, comm, nullptr), comm, "allreduce")) return false;
  double elapsed = (nowUs() - t0) / iters;
  if (!ok(snclAllReduce(&elapsed, &elapsed, 1, snclFloat64, snclMax, comm, nullptr), comm, "time max")) return false;
  *us = elapsed;
  return true;
}

int rankMain(const Topology& t, int rank, const std::vector<snclUniqueId>& ids, std::vector<size_t> sizes, Shared* out) {
  std::erase_if(sizes, [&](size_t b) { return b > t.maxBytes; });
  if (sizes.empty()) return 0;
  if (t.perHost > 0) setenv("SNCL_HOSTID", ("vh" + std::to_string(rank / t.perHost)).c_str(), 1);
  if (t.file) setenv("SNCL_TOPO_FILE", t.file, 1);
  if (t.faults) setenv("SNCL_FAULTS", t.faults, 1);
  std::vector<float> buf(sizes.back() / sizeof(float) + 1, 1.0f);
  double us[kMaxAlgos + 1][kMaxSizes] = {};
  const size_t nalgo = t.algorithms.size();
  // All comms stay up and take turns trial by trial, so that a burst of load from
  // elsewhere on the machine hits every algorithm of a size alike.
  std::vector<snclComm_t> comms(nalgo + 1, nullptr);
  for (size_t a = 0; a <= nalgo; ++a) {  // a == nalgo: the automatic choice
    if (a < nalgo) setenv("SNCL_ALGO", (std::string("allreduce:") + t.algorithms[a]).c_str(), 1);
    else unsetenv("SNCL_ALGO");
    if (!ok(snclCommInitRank(&comms[a], t.nranks, ids[a], rank), nullptr, "init")) return 1;
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    // Wall times of one plan vary by 10-20% between trials with 8 ranks on 2 cores (the
    // minimum settles with a few); modeled times vary little. Small calls are cheap to repeat.
    const int trials = sizes[s] <= (1u << 20) ? 5 : sizes[s] <= (16u << 20) ? 4 : t.modeled ? 2 : 3;
    for (int trial = 0; trial < trials; ++trial)
      for (size_t a = 0; a <= nalgo; ++a) {
        const bool meshTooBig = a < nalgo && !strcmp(t.algorithms[a], "mesh") && sizes[s] > (4u << 20);
        if (meshTooBig) continue;  // not a candidate there: the planner runs ring instead
        double us1 = 0;
        if (!timeCall(comms[a], t, buf, sizes[s], &us1)) return 1;
        us[a][s] = trial == 0 ? us1 : std::min(us[a][s], us1);
      }
  }
  // The plan each comm ran per size (a forced family such as hier runs its best variant).
  char plan[kMaxAlgos + 1][kMaxSizes][96] = {};
  for (size_t a = 0; a <= nalgo; ++a)
    for (size_t s = 0; s < sizes.size(); ++s)
      if (!ok(snclCommExplainPlan(comms[a], "allreduce", sizes[s], plan[a][s], sizeof plan[a][s], nullptr), comms[a],
              "explain"))
        return 1;
  auto& chosen = plan[nalgo];
  for (snclComm_t comm : comms)
    if (!ok(snclCommDestroy(comm), nullptr, "destroy")) return 1;
  if (rank != 0) return 0;
  printf("\n%s: %d ranks, %s\n%10s", t.name, t.nranks, t.modeled ? "modeled bus time (us)" : "wall time (us)", "bytes");
  for (const char* a : t.algorithms) printf(" %10s", a);
  printf(" %10s %10s %8s  %-6s %s\n", "auto", "auto plan", "regret", "best", "auto's plan");
  for (size_t s = 0; s < sizes.size(); ++s) {
    double best = 1e300;
    size_t bestA = 0;
    printf("%10zu", sizes[s]);
    for (size_t a = 0; a < nalgo; ++a) {
      if (us[a][s] > 0) printf(" %10.1f", us[a][s]);
      else printf(" %10s", "-");
      if (us[a][s] > 0 && us[a][s] < best) best = us[a][s], bestA = a;
    }
    // A forced comm that ran auto's very plan ran the same schedule: its trials and auto's
    // are samples of one time, pooled, so that the spread between two runs of one plan
    // (10-20% in wall time here) does not count as a wrong choice.
    double planUs = us[nalgo][s];
    for (size_t a = 0; a < nalgo; ++a)
      if (us[a][s] > 0 && !strcmp(plan[a][s], chosen[s])) planUs = std::min(planUs, us[a][s]);
    const double regret = planUs / best;
    printf(" %10.1f %10.1f %8.2f  %-6s %s%s\n", us[nalgo][s], planUs, regret, t.algorithms[bestA], chosen[s],
           regret <= 1.10 ? "" : "  <-- miss");
    out->cells++;
    out->within += regret <= 1.10;
    out->worst = std::max(out->worst, regret);
  }
  fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t maxBytes = kShmMax;
  std::vector<size_t> sizes;
  const char* only = nullptr;
  double deadlineS = 900;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--version")) return printf("planner_regret %s\n", snclGetBuildVersion()), 0;
    if (!strcmp(argv[i], "--quick")) maxBytes = size_t(8) << 20;
    else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) {
      if (snclParseSize(argv[++i], &maxBytes) != snclSuccess) {
        fprintf(stderr, "planner_regret: %s\n", snclGetLastError(nullptr));
        return 2;
      }
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--deadline") && i + 1 < argc) deadlineS = strtod(argv[++i], nullptr);
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      for (const std::string& text : perf::splitList(argv[++i])) {
        size_t v = 0;
        if (snclParseSize(text.c_str(), &v) != snclSuccess || v == 0 || sizes.size() == kMaxSizes) {
          fprintf(stderr, "planner_regret: bad --sizes (up to %d sizes, e.g. 8,64K,1.5M)\n", kMaxSizes);
          return 2;
        }
        sizes.push_back(v);
      }
      std::sort(sizes.begin(), sizes.end());
    } else {
      fprintf(stderr,
              "usage: planner_regret [--quick] [--max-bytes N] [--sizes N,N,..] [--only TEXT] [--deadline S] [--version]\n"
              "  defaults: --max-bytes %zu (--quick: 8M) --sizes (8 B by 32x up to --max-bytes) --deadline 900\n",
              size_t(kShmMax));
      return 2;
    }
  }
  if (!(deadlineS > 0)) {
    fprintf(stderr, "planner_regret: --deadline needs a positive number of seconds\n");
    return 2;
  }
  const char* tuning = getenv("SNCL_TUNING_FILE");
  printf("planner_regret: tuning %s\n", tuning ? tuning : "defaults (no SNCL_TUNING_FILE)");
  const char* file = getenv("SNCL_REGRET_TOPO");  // the supernode file, if not run from the source tree
  if (!file) file = "topologies/supernode-4x4.json";
  const bool haveFile = access(file, R_OK) == 0;
  std::vector<Topology> topologies = {
      {"flat shm", 8, 0, nullptr, nullptr, false, kShmMax, {"ring", "mesh", "tree", "hd"}},
      {"2 hosts x 4 (shm + ofi)", 8, 4, nullptr, nullptr, false, kShmMax, {"ring", "mesh", "tree", "hd", "hier"}},
  };
  if (haveFile) {
    topologies.push_back(
        {"supernode 4x4 (bus)", 16, 0, file, nullptr, true, kBusMax, {"ring", "mesh", "tree", "hd", "hier"}});
    topologies.push_back({"supernode 4x4, link n0.l1p0-l2p0.s0 down", 16, 0, file, "link=n0.l1p0-l2p0.s0:down", true,
                          kBusMax, {"ring", "mesh", "tree", "hd", "hier"}});
  } else {
    fprintf(stderr, "planner_regret: %s not found (set SNCL_REGRET_TOPO): supernode cells skipped\n", file);
  }
  if (only) std::erase_if(topologies, [&](const Topology& t) { return !strstr(t.name, only); });
  if (sizes.empty()) {  // 8 B .. 256 MiB by 32x, and the 64 MiB of the supernode check
    for (size_t b = 8; b <= maxBytes; b *= 32) sizes.push_back(b);
    if (maxBytes >= kBusMax) sizes.push_back(kBusMax);
    std::sort(sizes.begin(), sizes.end());
  }

  auto* shared = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED) return 1;
  *shared = {0, 0, 0};
  int failures = 0;
  for (const Topology& t : topologies) {
    std::vector<snclUniqueId> ids(t.algorithms.size() + 1);
    for (auto& id : ids)
      if (snclGetUniqueId(&id) != snclSuccess) return 1;
    std::vector<pid_t> pids;
    for (int r = 0; r < t.nranks; ++r) {
      pid_t pid = fork();
      if (pid == 0) _exit(rankMain(t, r, ids, sizes, shared));
      pids.push_back(pid);
    }
    const double deadline = nowUs() + deadlineS * 1e6;
    bool failed = false, late = false;
    for (pid_t pid : pids) {
      int status = 0;
      while (waitpid(pid, &status, WNOHANG) == 0) {
        if (nowUs() > deadline && !late) {
          late = true;
          for (pid_t p : pids) kill(p, SIGKILL);
        }
        usleep(20000);
      }
      failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (failed) {
      ++failures;
      printf("\n%s: %s; its cells are not counted\n", t.name,
             late ? "did not finish before the deadline (hung), ranks killed" : "ranks failed");
      fflush(stdout);
    }
  }
  printf("\ncells %d, auto within 10%% of the best in %d (%.0f%%), worst regret %.2f%s\n", shared->cells, shared->within,
         shared->cells ? 100.0 * shared->within / shared->cells : 0.0, shared->worst, failures ? ", SOME RANKS FAILED" : "");
  return failures ? 1 : 0;
}
