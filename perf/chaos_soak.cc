// Chaos soak: ranks as processes run a seeded loop of All-Reduce, All-Gather, Broadcast
// and Reduce-Scatter of random sizes and types, every result checked exactly, while one
// rank (--injector R; any: a member drawn per fault) injects faults between its own calls
// (a link down and later up, a degrade, jitter), so the other ranks meet each fault
// wherever they are. One summary line at the end. On the
// bus the links' fault alarms (snclCommGetLinks) must equal the faults that hurt training:
// one per down and per degrade of 2x or more, none for jitter.
//
// --kill (bus): in each seed a rank drawn from the seed kills itself (SIGKILL) at a call
// drawn from the seed (10% to 90% of the calls) while the injector goes on; the survivors
// shrink, agree (an All-Reduce MIN on the shrunk comm) on the lowest call not done by all,
// grow the comm back to --ranks with a spare process (snclCommGetUniqueId, snclCommGrow)
// and go on from that call. The one loss per seed is expected; every process must end in a
// comm of --ranks. Shrink and grow times (the slowest rank's) are reported.
//
//   chaos_soak [--ranks 8] [--transport bus] [--topo FILE] [--seed 1] [--seeds 1]
//              [--calls 1000] [--max-bytes 4M] [--fault-rate 0.05] [--faults down,degrade,jitter]
//              [--injector 3|any] [--links a-b,c-d] [--timeout-ms 20000] [--deadline-s 900] [--kill]
//   chaos_soak --transport ofi [--ranks 8] [--seed 1] [--seeds 1] [--calls 1000] [--max-bytes 4M]
//              [--faults rail|none] [--timeout-ms 20000] [--deadline-s 900]
//
// --transport ofi runs the ranks over a real network stack instead of the emulated bus: the
// parent makes two "hosts", network namespaces (perf/common/netns.h) joined by two veth
// pairs that are the ofi transport's rails (SNCL_OFI_IFACES=rail0,rail1) and a third, ctl,
// for the bootstrap (the agreement's side channel, as a management network would carry
// it); ranks/2 rank processes enter each (shm inside a host, ofi between, retry on), as in
// tests/test_ofi_rails.cc. No rank injects anything: in each seed the parent takes the rail
// carrying the traffic down on one host (`ip link set rail0 down`), once, at a moment drawn
// from the seed (after 10% to 90% of the calls, and part way into a call), and brings it
// back up before the next seed; each seed has its own comm (a rail does not come back
// within one). "faults" are then the rails pulled. --faults none pulls nothing. Needs root
// and `ip netns`: exit status 77 (skipped) otherwise. The namespaces are removed at the end
// (on SIGINT and SIGTERM too), and those a killed earlier run left behind at the start.
//
// Public API only. Exit status 0 when nothing was wrong, failed or hung.
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "perf/common/args.h"
#include "perf/common/exact_calls.h"
#include "perf/common/netns.h"
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
  bool kill = false;
  bool ofi() const { return transport == "ofi"; }
};

constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE
// The ofi mode's hosts. Global, so that exit() removes them too; a forked rank ends with
// _exit() and leaves them (TwoHosts removes them only in the process that made them).
constexpr const char* kNsPrefix = "sncl-soak-";
const char* const kRails[] = {"rail0", "rail1"};
std::unique_ptr<sncl::netns::TwoHosts> gHosts;
volatile sig_atomic_t gStop = 0;  // SIGINT, SIGTERM: stop the ranks, remove the hosts

std::vector<std::string> faultKinds(const Options& o) {
  return o.faults == "none" ? std::vector<std::string>{} : splitList(o.faults);
}

constexpr int kMaxRecoveries = 4096;

// What each rank reports, in memory shared with the parent.
struct RankReport {
  int callsDone;
  int wrong;
  int errors;
  int faultsInjected;
  // The injector's: fault alarms its faults should raise (a down; a degrade of 2x or more on
  // a link not already a fault) and the links' alarms at the end (snclCommGetLinks).
  int alarmsExpected;
  int alarms;
  uint64_t reroutes;
  int nrecoveries;
  double recoveryMs[kMaxRecoveries];
  double wallS;
  double bytes;
  double maxRssMiB;       // of the rank's process, at its end
  double retryPeakMiB;    // the most its retry history held at once (snclCommGetMemoryUsage)
  double sinclMiB;        // what sncl held at the end, every part (totalBytes)
  int killed;             // this process is the seed's victim: its SIGKILL is expected
  int finalRanks;         // the size of the comm it ended in
  double shrinkMs, growMs;
  char firstError[512];
};

// The fault stream's state, shared by every rank process of a seed (mapped before the
// fork). The member that injects the next fault draws and injects it under the lock, so
// that in real time too a down comes only after the up of the link before it, whichever
// members injected them (a member may be calls ahead of another).
struct Injection {
  std::atomic<int> lock;
  std::mt19937_64 rng;
  int downLink;  // index in Options::links, -1: none
  int nfaults;   // links down, or degraded 2x or more: a fault already
  int faultLinks[64];
};

void resetInjection(Injection* in, uint64_t seed) {
  in->rng.seed(seed);
  in->downLink = -1;
  in->nfaults = 0;
}

// What the processes of a seed share (mapped before the fork): the fault stream, and
// with --kill what the survivors hand the spare.
struct SeedShared {
  int ready;  // --kill: written last
  int resume; // --kill: the first call the grown comm runs
  snclUniqueId id;
  Injection injection;
};

// --kill: the seed's victim and the call it dies at (rank -1: none).
struct Kill {
  int rank = -1, call = -1;
};

Kill drawKill(const Options& o, uint64_t seed) {
  Kill k;
  if (!o.kill || o.calls < 10) return k;
  std::mt19937_64 rng(seed * 15485863 + 3);
  k.rank = int(rng() % uint64_t(o.ranks));
  k.call = o.calls / 10 + int(rng() % uint64_t(o.calls * 8 / 10));
  return k;
}

std::string endpointLink(int n, int e, int p) {
  char name[64];
  snprintf(name, sizeof name, "n%d.e%d-n%d.l1p%d", n, e, n, p);
  return name;
}

// The two-plane Clos of topologies/supernode-2plane-2x4.json: every endpoint's link into
// either plane, and each leaf's uplink. Any one of them down leaves a route.
std::vector<std::string> twoPlaneLinks() {
  std::vector<std::string> links;
  for (int n = 0; n < 2; ++n)
    for (int p = 0; p < 2; ++p) {
      for (int e = 0; e < 4; ++e) links.push_back(endpointLink(n, e, p));
      char uplink[64];
      snprintf(uplink, sizeof uplink, "n%d.l1p%d-l2p%d.s0", n, p, p);
      links.push_back(uplink);
    }
  return links;
}

// topologies/supernode-4x4.json: one plane, so an endpoint's only link is no choice; each
// leaf's two spine uplinks are.
std::vector<std::string> fourByFourLinks() {
  std::vector<std::string> links;
  for (int n = 0; n < 4; ++n)
    for (int s = 0; s < 2; ++s) {
      char uplink[64];
      snprintf(uplink, sizeof uplink, "n%d.l1p0-l2p0.s%d", n, s);
      links.push_back(uplink);
    }
  return links;
}

// The injector's next fault: at most one link down at a time, so a route always exists. A
// link may go down right after another came back: the comm takes the "up" with the
// agreement on the failure (docs/faults.md).
std::string drawFault(std::mt19937_64& rng, const Options& o, const std::vector<std::string>& kinds, int* downLink) {
  if (*downLink >= 0) {
    std::string spec = "link=" + o.links[size_t(*downLink)] + ":up";
    *downLink = -1;
    return spec;
  }
  const std::string kind = kinds[rng() % kinds.size()];
  const size_t index = rng() % o.links.size();
  const std::string& link = o.links[index];
  if (kind == "down") {
    *downLink = int(index);
    return "link=" + link + ":down";
  }
  if (kind == "degrade") return "link=" + link + ":degrade=" + std::to_string(2 + rng() % 7);
  return "jitter=0.0" + std::to_string(1 + rng() % 9) + ":" + std::to_string(5 + rng() % 50) + "us";
}

// The alarm a fault should raise (docs/observability.md, "Links"): 1 for a down, and for a
// degrade of 2x or more of a link that is not a fault already; 0 for jitter and ups.
int expectAlarm(const std::string& spec, std::vector<std::string>* faultLinks) {
  if (spec.rfind("link=", 0) != 0) return 0;
  const size_t colon = spec.find(':');
  const std::string link = spec.substr(5, colon - 5), what = spec.substr(colon + 1);
  const auto it = std::find(faultLinks->begin(), faultLinks->end(), link);
  const bool wasFault = it != faultLinks->end();
  if (what == "up") {
    if (wasFault) faultLinks->erase(it);
    return 0;
  }
  const bool fault = what == "down" || (what.rfind("degrade=", 0) == 0 && atof(what.c_str() + 8) >= 2.0);
  if (!fault) return 0;
  if (!wasFault) faultLinks->push_back(link);
  return what == "down" || !wasFault ? 1 : 0;
}

// The fault alarms of every link of the comm.
int linkAlarms(snclComm_t comm) {
  int n = 0;
  if (snclCommGetLinks(comm, nullptr, 0, &n) != snclSuccess || n == 0) return 0;
  std::vector<snclLinkStatus_t> links(static_cast<size_t>(n));
  if (snclCommGetLinks(comm, links.data(), n, &n) != snclSuccess) return -1;
  int alarms = 0;
  for (const snclLinkStatus_t& l : links) alarms += int(l.faultAlarms);
  return alarms;
}

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// --kill: the survivors' way back to --ranks after the loss in call `failed`: shrink, agree
// on the lowest call not done by all, grow with the spare. Returns that call, or -1 (the
// reason in rep->firstError).
int regrow(const Options& o, uint64_t seed, snclComm_t* comm, int failed, RankReport* rep, SeedShared* shared) {
  auto t = std::chrono::steady_clock::now();
  snclComm_t shrunk = nullptr, grown = nullptr;
  if (snclCommShrink(*comm, nullptr, 0, &shrunk, nullptr, SNCL_SHRINK_DEFAULT) != snclSuccess) {
    snprintf(rep->firstError, sizeof(rep->firstError), "shrink: %s", snclGetLastError(*comm));
    return -1;
  }
  rep->shrinkMs = msSince(t);
  snclCommDestroy(*comm);
  *comm = shrunk;
  int32_t mine = failed, resume = 0;
  if (snclAllReduce(&mine, &resume, 1, snclInt32, snclMin, shrunk, nullptr) != snclSuccess) {
    snprintf(rep->firstError, sizeof(rep->firstError), "agreeing on the call to resume: %s", snclGetLastError(shrunk));
    return -1;
  }
  int rank = 0;
  snclCommUserRank(shrunk, &rank);
  snclUniqueId id{};
  t = std::chrono::steady_clock::now();
  if (rank == 0) {
    if (snclCommGetUniqueId(shrunk, &id) != snclSuccess) {
      snprintf(rep->firstError, sizeof(rep->firstError), "grow id: %s", snclGetLastError(shrunk));
      return -1;
    }
    shared->id = id;
    shared->resume = resume;
    resetInjection(&shared->injection, seed * 7919 + 2 + uint64_t(resume));  // the grown comm's links are all up
    __atomic_store_n(&shared->ready, 1, __ATOMIC_RELEASE);
  }
  if (snclCommGrow(shrunk, o.ranks, rank == 0 ? &id : nullptr, -1, &grown, nullptr) != snclSuccess) {
    snprintf(rep->firstError, sizeof(rep->firstError), "grow: %s", snclGetLastError(shrunk));
    return -1;
  }
  rep->growMs = msSince(t);
  snclCommDestroy(shrunk);
  *comm = grown;
  return resume;
}

// Whether comm agreed that a rank was lost (the seed's kill: the only rank failure there).
bool rankLost(snclComm_t comm) {
  snclFaultStats_t stats{};
  return snclCommGetFaultStats(comm, &stats) == snclSuccess && stats.rankFailures > 0;
}

// The spare of a --kill seed: waits for the survivors' id (at most the seed's deadline) and
// joins as the last rank. Returns the call to start from, or -1.
int joinAsSpare(const Options& o, const snclConfig_t& config, SeedShared* shared, snclComm_t* comm, RankReport* rep) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.deadlineS);
  while (!__atomic_load_n(&shared->ready, __ATOMIC_ACQUIRE)) {
    if (std::chrono::steady_clock::now() > until) {
      snprintf(rep->firstError, sizeof(rep->firstError), "spare: no grow id came");
      return -1;
    }
    usleep(2000);
  }
  snclConfig_t c = config;
  if (snclCommGrow(nullptr, o.ranks, &shared->id, o.ranks - 1, comm, &c) != snclSuccess) {
    snprintf(rep->firstError, sizeof(rep->firstError), "spare: grow: %s", snclGetLastError(nullptr));
    return -1;
  }
  return shared->resume;
}

// proc: the rank in the first comm, or --ranks for the spare of a --kill seed.
// Draws the next fault from the shared stream and injects it, under its lock; adds the
// alarm it should raise to *alarms. False (why in rep) when the bus refused it.
bool injectNext(snclComm_t comm, const Options& o, const std::vector<std::string>& kinds, Injection* in,
                RankReport* rep) {
  // Held only for a draw and an injection; a holder gone for the deadline is a harness bug.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeoutMs);
  while (in->lock.exchange(1, std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() > until) {
      snprintf(rep->firstError, sizeof(rep->firstError), "inject: the fault stream's lock was held %d ms", o.timeoutMs);
      return false;
    }
    usleep(10);
  }
  const std::string spec = drawFault(in->rng, o, kinds, &in->downLink);
  std::vector<std::string> faultLinks;
  for (int i = 0; i < in->nfaults; ++i) faultLinks.push_back(o.links[size_t(in->faultLinks[i])]);
  const int alarm = expectAlarm(spec, &faultLinks);
  in->nfaults = 0;
  for (const std::string& l : faultLinks)
    if (in->nfaults < 64) in->faultLinks[in->nfaults++] = int(std::find(o.links.begin(), o.links.end(), l) - o.links.begin());
  const bool ok = spec.empty() || snclBusInjectFault(comm, spec.c_str()) == snclSuccess;
  in->lock.store(0, std::memory_order_release);
  if (!ok) {
    snprintf(rep->firstError, sizeof(rep->firstError), "inject %s: %s", spec.c_str(), snclGetLastError(comm));
    return false;
  }
  rep->faultsInjected += !spec.empty();
  rep->alarmsExpected += alarm;
  return true;
}

int rankMain(int proc, const Options& o, uint64_t seed, const snclUniqueId& id, RankReport* rep, SeedShared* shared) {
  snclConfig_t config = SNCL_CONFIG_INITIALIZER;
  config.timeoutMs = o.timeoutMs;
  snclComm_t comm = nullptr;
  int first = 0;
  if (proc == o.ranks) {
    first = joinAsSpare(o, config, shared, &comm, rep);
    if (first < 0) return rep->errors = 1, 1;
  } else if (snclCommInitRankConfig(&comm, o.ranks, id, proc, &config) != snclSuccess) {
    snprintf(rep->firstError, sizeof(rep->firstError), "init: %s", snclGetLastError(nullptr));
    rep->errors = 1;
    return 1;
  }
  const Kill kill = drawKill(o, seed);
  bool lost = proc == o.ranks;  // the seed's loss has happened (the spare comes after it)
  std::mt19937_64 calls(seed), faults(seed * 7919 + 1 + uint64_t(first));
  for (int k = 0; k < first; ++k) (void)drawCall(calls, o.ranks, o.maxBytes, 50);
  const std::vector<std::string> kinds = o.ofi() ? std::vector<std::string>{} : faultKinds(o);
  std::vector<char> in(o.maxBytes + 64), out(o.maxBytes * 2 + 64);
  const auto start = std::chrono::steady_clock::now();
  uint64_t reroutes = 0;
  int rank = proc;
  snclCommUserRank(comm, &rank);  // the spare's is the last
  for (int i = first; i < o.calls; ++i) {
    const Call c = drawCall(calls, o.ranks, o.maxBytes, 50);
    if (!lost && i == kill.call && rank == kill.rank) {
      rep->killed = 1;
      raise(SIGKILL);
    }
    // Every process draws whether a fault comes before this call and which member injects
    // it (the same stream on all); the member draws the fault itself from the shared one.
    if (!kinds.empty() && std::uniform_real_distribution<double>(0, 1)(faults) < o.faultRate) {
      const int member = o.injector >= 0 ? o.injector : int(faults() % uint64_t(o.ranks));
      if (rank == member && !injectNext(comm, o, kinds, &shared->injection, rep)) {
        ++rep->errors;
        break;
      }
    }
    const long wrong = runCall(comm, rank, o.ranks, i, c, in, out, &rep->bytes);
    // The seed's loss fails the victim's call kill.call, or an earlier one on a rank still
    // in it when the victim, done with it (its last sends out), went on and was killed:
    // the rank failure the comm then agreed on says so.
    if (wrong < 0 && !lost && kill.rank >= 0 && (i >= kill.call || rankLost(comm))) {
      // The seed's loss: back to --ranks with the spare, and on from the agreed call. The
      // grown comm's links start healthy: the injector starts afresh, as does its count.
      lost = true;
      const int resume = regrow(o, seed, &comm, i, rep, shared);
      if (resume < 0) {
        ++rep->errors;
        break;
      }
      snclCommUserRank(comm, &rank);
      calls.seed(seed);
      for (int k = 0; k < resume; ++k) (void)drawCall(calls, o.ranks, o.maxBytes, 50);
      faults.seed(seed * 7919 + 1 + uint64_t(resume));
      rep->alarmsExpected = 0;
      reroutes = 0;
      i = resume - 1;
      continue;
    }
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
  if (rank == std::max(o.injector, 0)) rep->alarms = linkAlarms(comm);  // the bus counts them for all
  snclCommCount(comm, &rep->finalRanks);
  rep->wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rep->reroutes = reroutes;
  snclMemoryUsage_t mem{};
  mem.size = sizeof(mem);
  if (snclCommGetMemoryUsage(comm, &mem) == snclSuccess) {
    rep->retryPeakMiB = double(mem.retryPeak) / (1 << 20);
    rep->sinclMiB = double(mem.totalBytes) / (1 << 20);
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  rep->maxRssMiB = double(ru.ru_maxrss) / 1024;
  snclCommDestroy(comm);
  return rep->errors || rep->wrong ? 1 : 0;
}

struct SeedResult {
  long rankOps = 0;
  int wrong = 0, errors = 0, hangs = 0, faults = 0;
  int alarms = 0, alarmsExpected = 0, alarmsWrong = 0;  // alarmsWrong: seeds whose alarms differ
  uint64_t reroutes = 0;
  std::vector<double> recoveries;
  int killed = 0;                      // --kill: victims that died as drawn
  std::vector<double> shrinkMs, growMs;  // --kill: per surviving process
  double wallS = 0, bytes = 0;
  double maxRssMiB = 0, retryPeakMiB = 0, sinclMiB = 0;  // the largest of any rank
  std::string pulled;  // ofi: which rail went down, and where the ranks were
  bool interrupted = false;
};

// A rank of the ofi mode: into its host's namespace, with the environment of
// tests/test_ofi_rails.cc. Before the comm exists: the sockets it opens are the host's.
bool enterHost(const Options& o, int rank, RankReport* rep) {
  const int host = rank / (o.ranks / 2);
  setenv("SNCL_SOCKET_IFNAME", "=ctl", 1);
  setenv("SNCL_OFI_IFACES", "rail0,rail1", 1);
  unsetenv("FI_TCP_IFACE");  // one interface for the whole process; the rails bind by address
  setenv("SNCL_OFI_PROVIDER", "tcp;ofi_rxm", 1);
  setenv("SNCL_HOSTID", gHosts->ns[host].c_str(), 1);  // shm inside a host, ofi between
  setenv("SNCL_RETRY", "1", 1);
  if (gHosts->enter(host)) return true;
  snprintf(rep->firstError, sizeof(rep->firstError), "setns into %s: %s", gHosts->ns[host].c_str(), strerror(errno));
  rep->errors = 1;
  return false;
}

// Every rail of both hosts up with a carrier (the last seed's pull undone).
bool railsUp() {
  for (int h = 0; h < 2; ++h)
    for (const char* rail : kRails)
      if (!gHosts->setLink(h, rail, true)) return false;
  for (int tries = 0; tries < 250; ++tries) {
    bool all = true;
    for (int h = 0; h < 2 && all; ++h)
      for (const char* rail : kRails) all = all && gHosts->linkRunning(h, rail);
    if (all) return true;
    usleep(20000);
  }
  return false;
}

// When the parent pulls a rail in a seed. The calls done place the moment in the run (a
// wall-clock draw alone would need the run's length in advance, which varies with the
// seed and the machine's load several times over); a fraction of the mean call's time
// after that puts it inside a call rather than at a rank's call boundary. The rail is
// the one of the host that carried the traffic (sent the most since the seed began).
struct RailPull {
  int afterCall = -1;  // -1: none in this seed
  int calls = 0;
  double intoCall = 0;
  int host = 0;
  bool armed = false, done = false;
  std::chrono::steady_clock::time_point firstCall, at;
  uint64_t txStart[2][2] = {};
  int rail = 0;
};

RailPull drawPull(const Options& o, uint64_t seed) {
  RailPull p;
  if (!o.ofi() || faultKinds(o).empty() || o.calls < 1) return p;
  std::mt19937_64 rng(seed * 104729 + 17);
  p.calls = o.calls;
  p.afterCall = o.calls / 10 + int(rng() % uint64_t(std::max(1, o.calls * 8 / 10)));
  p.intoCall = std::uniform_real_distribution<double>(0, 1)(rng);
  p.host = int(rng() % 2);
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 2; ++k) p.txStart[h][k] = gHosts->txBytes(h, kRails[k]);
  return p;
}

// Called every poll while the ranks run: arms the pull once a rank finished afterCall,
// and takes the rail down when its moment came.
void stepPull(RailPull* p, const RankReport* reps, int nranks, SeedResult* res) {
  if (p->afterCall < 0 || p->done) return;
  int lo = 0, hi = 0;  // the calls the slowest and the fastest rank finished
  const auto progress = [&] {
    lo = hi = reps[0].callsDone;
    for (int r = 1; r < nranks; ++r) lo = std::min(lo, reps[r].callsDone), hi = std::max(hi, reps[r].callsDone);
  };
  progress();
  if (hi == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (p->firstCall == std::chrono::steady_clock::time_point{}) p->firstCall = now;
  if (!p->armed && hi >= p->afterCall) {
    const auto meanCall = (now - p->firstCall) / std::max(1, hi - 1);
    p->at = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(meanCall * p->intoCall);
    const uint64_t sent0 = gHosts->txBytes(p->host, kRails[0]) - p->txStart[p->host][0];
    const uint64_t sent1 = gHosts->txBytes(p->host, kRails[1]) - p->txStart[p->host][1];
    p->rail = sent1 > sent0 ? 1 : 0;
    p->armed = true;
  }
  if (!p->armed || std::chrono::steady_clock::now() < p->at) return;
  p->done = true;
  progress();  // the shell commands above took milliseconds
  if (lo >= p->calls) {  // a short run ended first: no rank is in a call to meet it
    res->pulled = "no rail pulled: every rank had finished its calls";
    return;
  }
  if (!gHosts->setLink(p->host, kRails[p->rail], false)) {
    fprintf(stderr, "chaos_soak: ip link set %s down in %s failed\n", kRails[p->rail], gHosts->ns[p->host].c_str());
    return;
  }
  res->faults = 1;
  res->pulled = std::string(kRails[p->rail]) + " of host " + "ab"[p->host] + " pulled with the ranks at calls " +
                std::to_string(lo + 1) + (hi > lo ? "-" + std::to_string(hi + 1) : "");
}

SeedResult runSeed(const Options& o, uint64_t seed) {
  const int procs = o.ranks + (o.kill ? 1 : 0);  // --kill: the spare last
  auto* reps = static_cast<RankReport*>(
      mmap(nullptr, sizeof(RankReport) * procs, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  memset(reps, 0, sizeof(RankReport) * procs);
  auto* shared = static_cast<SeedShared*>(
      mmap(nullptr, sizeof(SeedShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (shared) SeedShared{};
  resetInjection(&shared->injection, seed * 7919 + 1);
  RailPull pull = drawPull(o, seed);
  // Rank 0's process makes the unique id and hands it to the others through pipes, so
  // this process forks without the bootstrap's threads.
  std::vector<int> pipes(2 * o.ranks);
  for (int r = 0; r < o.ranks; ++r)
    if (pipe(&pipes[2 * r]) != 0) { perror("pipe"); exit(2); }
  std::vector<pid_t> pids;
  for (int r = 0; r < procs; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      if (o.ofi() && !enterHost(o, r, &reps[r])) _exit(3);
      snclUniqueId id{};
      if (r == o.ranks) {
        // The spare: its id comes from the survivors.
      } else if (r == 0) {
        if (snclGetUniqueId(&id) != snclSuccess) {
          snprintf(reps[r].firstError, sizeof(reps[r].firstError), "unique id: %s", snclGetLastError(nullptr));
          _exit(3);
        }
        for (int q = 1; q < o.ranks; ++q)
          if (write(pipes[2 * q + 1], &id, sizeof(id)) != ssize_t(sizeof(id))) _exit(3);
      } else if (read(pipes[2 * r], &id, sizeof(id)) != ssize_t(sizeof(id))) {
        _exit(3);
      }
      _exit(rankMain(r, o, seed, id, &reps[r], shared));
    }
    pids.push_back(pid);
  }
  for (int fd : pipes) close(fd);
  SeedResult res;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.deadlineS);
  std::vector<bool> exited(procs, false);
  std::vector<int> status(procs, 0);
  for (int left = procs; left > 0;) {
    for (int r = 0; r < procs; ++r) {
      if (exited[r]) continue;
      if (waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
        exited[r] = true;
        --left;
      }
    }
    res.interrupted = gStop;
    if (left > 0 && (res.interrupted || std::chrono::steady_clock::now() > deadline)) {
      // All at once: a rank killed alone would fail its peers' calls before their turn.
      for (int r = 0; r < procs; ++r)
        if (!exited[r]) kill(pids[r], SIGKILL);
      for (int r = 0; r < procs; ++r) {
        if (exited[r]) continue;
        waitpid(pids[r], nullptr, 0);
        exited[r] = true;
        if (res.interrupted) continue;
        ++res.hangs;
        fprintf(stderr, "seed %llu rank %d: hung after %d calls (killed at the deadline)\n", (unsigned long long)seed, r,
                reps[r].callsDone);
      }
      break;
    }
    stepPull(&pull, reps, o.ranks, &res);
    usleep(pull.afterCall >= 0 && !pull.done ? 1000 : 20000);  // the pull's moment to a millisecond
  }
  for (int r = 0; r < procs; ++r) {
    RankReport& rep = reps[r];
    // A rank that died without a report (a signal; a library's handler of one that exits)
    // is an error too. A hung one was killed, and counted as hung. --kill's victim dies
    // by its own SIGKILL; every other process must end in a comm of --ranks.
    if (rep.killed && WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL) {
      res.rankOps += rep.callsDone;
      ++res.killed;
      continue;
    }
    const bool clean = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
    if (!res.interrupted && clean && rep.finalRanks != o.ranks && !rep.errors && !rep.wrong) {
      ++rep.errors;
      snprintf(rep.firstError, sizeof(rep.firstError), "ended in a comm of %d ranks, not %d", rep.finalRanks, o.ranks);
    }
    if (rep.shrinkMs > 0) res.shrinkMs.push_back(rep.shrinkMs);
    if (rep.growMs > 0) res.growMs.push_back(rep.growMs);
    if (!res.interrupted && !clean && rep.errors == 0 && rep.wrong == 0) {
      ++rep.errors;
      if (!rep.firstError[0])
        snprintf(rep.firstError, sizeof(rep.firstError), "%s %d after %d calls",
                 WIFSIGNALED(status[r]) ? "killed by signal" : "exited with status",
                 WIFSIGNALED(status[r]) ? WTERMSIG(status[r]) : WEXITSTATUS(status[r]), rep.callsDone);
    }
    res.rankOps += rep.callsDone;
    res.wrong += rep.wrong;
    res.errors += rep.errors;
    res.faults += rep.faultsInjected;
    res.alarms += rep.alarms;
    res.alarmsExpected += rep.alarmsExpected;
    res.reroutes = std::max(res.reroutes, rep.reroutes);
    res.wallS = std::max(res.wallS, rep.wallS);
    res.bytes += rep.bytes;
    res.maxRssMiB = std::max(res.maxRssMiB, rep.maxRssMiB);
    res.retryPeakMiB = std::max(res.retryPeakMiB, rep.retryPeakMiB);
    res.sinclMiB = std::max(res.sinclMiB, rep.sinclMiB);
    res.recoveries.insert(res.recoveries.end(), rep.recoveryMs, rep.recoveryMs + rep.nrecoveries);
    if (rep.firstError[0] && !res.interrupted)
      fprintf(stderr, "seed %llu rank %d: %s\n", (unsigned long long)seed, r, rep.firstError);
  }
  munmap(reps, sizeof(RankReport) * procs);
  shared->~SeedShared();
  munmap(shared, sizeof(SeedShared));
  if (o.kill && !res.interrupted && res.killed != (drawKill(o, seed).rank >= 0 ? 1 : 0)) {
    fprintf(stderr, "seed %llu: %d ranks killed, expected 1\n", (unsigned long long)seed, res.killed);
    ++res.errors;
  }
  // A clean run of the bus: each fault that hurts training raised one alarm, jitter none.
  if (!o.ofi() && !res.interrupted && res.errors == 0 && res.alarms != res.alarmsExpected) {
    fprintf(stderr, "seed %llu: %d link fault alarms, expected %d\n", (unsigned long long)seed, res.alarms,
            res.alarmsExpected);
    res.alarmsWrong = 1;
  }
  return res;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

// "; killed k, shrink p50 a ms p99 b ms, grow p50 c ms p99 d ms" (per surviving process).
std::string fmtSeedShared(const SeedResult& r) {
  char text[160];
  snprintf(text, sizeof(text), "; killed %d, shrink p50 %.1f ms p99 %.1f ms, grow p50 %.1f ms p99 %.1f ms", r.killed,
           percentile(r.shrinkMs, 0.5), percentile(r.shrinkMs, 0.99), percentile(r.growMs, 0.5),
           percentile(r.growMs, 0.99));
  return text;
}

void usage() {
  fprintf(stderr,
          "usage: chaos_soak [--ranks N] [--transport bus|shm] [--topo FILE] [--seed S] [--seeds K] [--calls N]\n"
          "                  [--max-bytes B] [--fault-rate P] [--faults down,degrade,jitter|none] [--injector R|any]\n"
          "                  [--links a-b,...] [--timeout-ms T] [--deadline-s S] [--kill]\n"
          "       chaos_soak --transport ofi [--ranks N (even: 2 hosts x N/2)] [--seed S] [--seeds K] [--calls N]\n"
          "                  [--max-bytes B] [--faults rail|none] [--timeout-ms T] [--deadline-s S]\n"
          "                  (root and `ip netns`; exit status 77 when they are missing)\n"
          "       chaos_soak --version\n"
          "  defaults: --ranks 8 --transport bus --topo (a default bus Clos) --seed 1 --seeds 1 --calls 1000\n"
          "            --max-bytes 4M --fault-rate 0.05 --faults down,degrade,jitter (ofi: rail) --injector 3\n"
          "            --links (every endpoint and leaf uplink of supernode-2plane-2x4.json; the leaf uplinks of\n"
          "            supernode-4x4.json) --timeout-ms 20000 --deadline-s 900\n");
  exit(2);
}

[[noreturn]] void skip(const std::string& why) {
  fprintf(stderr, "chaos_soak: skipped: %s\n", why.c_str());
  exit(kSkipped);  // removes hosts made so far (gHosts)
}

// The ofi mode's two hosts, or a skip: this machine cannot make them.
void makeHosts() {
  if (geteuid() != 0) skip("creating network namespaces needs root");
  if (!sncl::netns::sh("ip netns list")) skip("`ip netns` is not available");
  sncl::netns::removeStaleNamespaces(kNsPrefix);
  gHosts = std::make_unique<sncl::netns::TwoHosts>(kNsPrefix, std::vector<std::string>{kRails[0], kRails[1], "ctl"});
  std::string why;
  if (!gHosts->create(&why)) skip(why);
  struct sigaction sa{};
  sa.sa_handler = [](int) { gStop = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool faultsGiven = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--version") return printf("chaos_soak %s\n", snclGetBuildVersion()), 0;
    if (i + 1 >= argc && a != "--kill") usage();
    const char* v = argv[++i];
    if (a == "--ranks") o.ranks = atoi(v);
    else if (a == "--transport") o.transport = v;
    else if (a == "--topo") o.topo = v;
    else if (a == "--seed") o.seed = strtoull(v, nullptr, 10);
    else if (a == "--seeds") o.seeds = atoi(v);
    else if (a == "--calls") o.calls = atoi(v);
    else if (a == "--max-bytes") { if (snclParseSize(v, &o.maxBytes) != snclSuccess) usage(); }
    else if (a == "--fault-rate") o.faultRate = atof(v);
    else if (a == "--faults") o.faults = v, faultsGiven = true;
    else if (a == "--injector") o.injector = std::string(v) == "any" ? -1 : atoi(v);
    else if (a == "--links") o.links = splitList(v);
    else if (a == "--timeout-ms") o.timeoutMs = atoi(v);
    else if (a == "--deadline-s") o.deadlineS = atoi(v);
    else if (a == "--kill") o.kill = true, --i;  // takes no value
    else usage();
  }
  if (o.ofi() && !faultsGiven) o.faults = "rail";
  if (o.ranks < 2 || o.ranks > 64 || o.calls < 0 || o.seeds < 1 || o.injector < -1 || o.injector >= o.ranks) usage();
  if (o.ofi() && (o.ranks % 2 || !o.topo.empty() || (o.faults != "rail" && o.faults != "none") || o.kill)) usage();
  if (o.links.empty())
    o.links = o.topo.find("supernode-4x4") != std::string::npos ? fourByFourLinks() : twoPlaneLinks();
  if (o.ofi()) {
    makeHosts();
    unsetenv("SNCL_TRANSPORT");  // shm inside a host, ofi between (by SNCL_HOSTID)
  } else {
    setenv("SNCL_TRANSPORT", o.transport.c_str(), 1);
  }
  if (!o.topo.empty()) setenv("SNCL_TOPO_FILE", o.topo.c_str(), 1);
  SeedResult all;
  int seedsRun = 0;
  for (int s = 0; s < o.seeds && !gStop; ++s) {
    const uint64_t seed = o.seed + uint64_t(s);
    if (o.ofi() && !railsUp()) {
      fprintf(stderr, "chaos_soak: the rails did not come back up before seed %llu\n", (unsigned long long)seed);
      return 2;
    }
    SeedResult r = runSeed(o, seed);
    if (r.interrupted) break;
    ++seedsRun;
    printf("seed %llu: rank-ops %ld, wrong %d, errors %d, hangs %d, faults injected %d, fault alarms %d (expected %d), "
           "reroutes %llu, %.1f s%s%s%s\n",
           (unsigned long long)seed, r.rankOps, r.wrong, r.errors, r.hangs, r.faults, r.alarms, r.alarmsExpected,
           (unsigned long long)r.reroutes, r.wallS, r.pulled.empty() ? "" : "; ", r.pulled.c_str(),
           o.kill ? fmtSeedShared(r).c_str() : "");
    if (o.ofi() && r.faults && !r.reroutes && !r.errors && !r.hangs)
      printf("seed %llu: a rail was pulled but no rank rerouted a call (the pull went unseen)\n", (unsigned long long)seed);
    fflush(stdout);
    all.rankOps += r.rankOps;
    all.wrong += r.wrong;
    all.errors += r.errors;
    all.hangs += r.hangs;
    all.faults += r.faults;
    all.alarms += r.alarms;
    all.alarmsExpected += r.alarmsExpected;
    all.alarmsWrong += r.alarmsWrong;
    all.reroutes += r.reroutes;
    all.wallS += r.wallS;
    all.bytes += r.bytes;
    all.maxRssMiB = std::max(all.maxRssMiB, r.maxRssMiB);
    all.retryPeakMiB = std::max(all.retryPeakMiB, r.retryPeakMiB);
    all.sinclMiB = std::max(all.sinclMiB, r.sinclMiB);
    all.recoveries.insert(all.recoveries.end(), r.recoveries.begin(), r.recoveries.end());
    all.killed += r.killed;
    all.shrinkMs.insert(all.shrinkMs.end(), r.shrinkMs.begin(), r.shrinkMs.end());
    all.growMs.insert(all.growMs.end(), r.growMs.begin(), r.growMs.end());
  }
  if (o.kill) printf("chaos --kill: %s\n", fmtSeedShared(all).c_str() + 2);
  if (gStop) fprintf(stderr, "chaos_soak: interrupted after %d seeds\n", seedsRun);
  printf("chaos: %d seeds x %d calls, %d ranks, %s: rank-ops %ld, wrong %d, errors %d, hangs %d, faults %d, "
         "fault alarms %d (expected %d), reroutes %llu, recovery p50 %.1f ms p99 %.1f ms, %.1f s, %.2f MB/s per rank; per rank at most: max RSS %.1f "
         "MiB, sncl %.1f MiB at the end, retry history peak %.1f MiB\n",
         seedsRun, o.calls, o.ranks, o.ofi() ? "ofi (2 hosts, 2 rails)" : o.transport.c_str(), all.rankOps, all.wrong,
         all.errors, all.hangs, all.faults, all.alarms, all.alarmsExpected, (unsigned long long)all.reroutes, percentile(all.recoveries, 0.5),
         percentile(all.recoveries, 0.99), all.wallS, all.wallS > 0 ? all.bytes / o.ranks / all.wallS / 1e6 : 0.0,
         all.maxRssMiB, all.sinclMiB, all.retryPeakMiB);
  return all.wrong || all.errors || all.hangs || all.alarmsWrong || gStop ? 1 : 0;
}
