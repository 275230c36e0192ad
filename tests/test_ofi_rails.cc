// Recovery on a real transport: two "hosts" (network namespaces) joined by two veth pairs,
// the rails of the ofi transport (SNCL_OFI_IFACES=rail0,rail1 in both), and a third pair
// for the bootstrap (the side channel the fault agreement runs on, as a management network
// would carry it). Ranks are processes, several per namespace (shm inside, ofi between).
// A seeded loop of All-Reduce, All-Gather, Broadcast and Reduce-Scatter of random sizes is
// checked exactly while the test takes the rail carrying the traffic down from outside
// (`ip netns exec NS ip link set rail0 down`) at a random call: every call succeeds, and
// every rank's fault stats show the re-run. A rail pulled and put back five times in one
// comm comes back into service each time: traffic (the kernel's byte counters) on both
// rails again, every call exact. With both rails taken down, every rank fails with an
// error naming the rails instead of hanging. Needs root and `ip netns`; skipped
// with a message otherwise. The namespaces and their links are removed whatever happens
// (also those a killed earlier run left behind).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "perf/common/exact_calls.h"
#include "perf/common/netns.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

namespace {

constexpr const char* kPrefix = "sncl-rails-";  // namespaces are kPrefix + {a,b} + "-" + pid
constexpr int kBootstrapPort = 29500;           // free: the namespaces are new
constexpr int kJobDeadlineMs = 80000;
const char* const kLinks[] = {"rail0", "rail1", "ctl"};  // the same names in both namespaces

using sncl::netns::sh;
// The two hosts: rail0, rail1 and ctl (perf/common/netns.h numbers the pairs so).
struct Hosts : sncl::netns::TwoHosts {
  Hosts() : TwoHosts(kPrefix, {kLinks[0], kLinks[1], kLinks[2]}) {}
};

// Starts this binary as rank `rank` inside its namespace (helper test case below). Rank 0
// writes a byte to progressFd after each call, and after call downAt[k] waits for a byte
// on goFd: calls take milliseconds, the strike longer, and it must land while the job
// still runs. The other ranks are in the next call by then, waiting on rank 0.
pid_t spawnHelper(const Hosts& hosts, int rank, int perHost, int calls, const char* mode, int progressFd, int goFd,
                  const int downAt[2]) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  const int host = rank / perHost;
  setenv("SNCL_TEST_RAILS",
         fmt::format("{} {} {} {} {} {} {} {}", rank, 2 * perHost, calls, mode, progressFd, goFd, downAt[0], downAt[1]).c_str(),
         1);
  setenv("SNCL_RANK", std::to_string(rank).c_str(), 1);  // rank 0 hosts the rendezvous
  setenv("SNCL_COMM_ID", fmt::format("{}:{}", hosts.addr(0, 2), kBootstrapPort).c_str(), 1);
  setenv("SNCL_SOCKET_IFNAME", "=ctl", 1);
  setenv("SNCL_OFI_IFACES", "rail0,rail1", 1);
  unsetenv("FI_TCP_IFACE");  // one interface for the whole process; the rails bind by address
  setenv("SNCL_OFI_PROVIDER", "tcp;ofi_rxm", 1);
  setenv("SNCL_HOSTID", hosts.ns[host].c_str(), 1);
  setenv("SNCL_TIMEOUT_MS", "20000", 1);
  execlp("ip", "ip", "netns", "exec", hosts.ns[host].c_str(), exe, "[rails-helper]", static_cast<char*>(nullptr));
  _exit(127);
}

struct Job {
  std::vector<int> codes;
  int callsSeen = 0;      // by rank 0
  int downsAt[2] = {-1, -1};
};

// Runs the job; breaks rail0 of host `host` once rank 0 finished call downAt[0], and rail1
// once it finished downAt[1] (-1: never): the link down, or (blackhole) its path to the
// peer cut. Helpers still running at the deadline are killed (code -1).
Job runJob(Hosts& hosts, int perHost, int calls, const char* mode, const int downAt[2], int host,
           bool blackhole = false) {
  Job job;
  int fds[2], go[2];
  REQUIRE(pipe(fds) == 0);
  REQUIRE(pipe(go) == 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2 * perHost; ++r) pids.push_back(spawnHelper(hosts, r, perHost, calls, mode, fds[1], go[0], downAt));
  close(fds[1]);
  close(go[0]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  job.codes.assign(pids.size(), -1);
  sncl::Deadline deadline = sncl::Deadline::afterMs(kJobDeadlineMs);
  size_t running = pids.size();
  while (running) {
    char buf[256];
    for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) job.callsSeen += int(n);
    for (int k = 0; k < 2; ++k)
      if (downAt[k] >= 0 && job.downsAt[k] < 0 && job.callsSeen >= downAt[k]) {
        REQUIRE((blackhole ? hosts.blackhole(host, k) : hosts.setLink(host, kLinks[k], false)));
        job.downsAt[k] = job.callsSeen;
        REQUIRE(write(go[1], "g", 1) == 1);
      }
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      job.codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pids[i] = -1;
      --running;
    }
    if (deadline.expired()) {
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL), waitpid(p, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  close(fds[0]);
  close(go[1]);
  return job;
}

bool prerequisites(Hosts* hosts) {
  if (geteuid() != 0) {
    WARN("skipped: creating network namespaces needs root");
    return false;
  }
  if (!sh("ip netns list")) {
    WARN("skipped: `ip netns` is not available");
    return false;
  }
  sncl::netns::removeStaleNamespaces(kPrefix);
  std::string why;
  if (!hosts->create(&why)) {
    WARN("skipped: " << why);
    return false;
  }
  return true;
}

// ---- the ranks ----

using namespace sncl::exact;

}  // namespace

TEST_CASE("ofi rails: collectives go on exactly over the other rail when one is taken down", "[ofi][netns][rails]") {
  Hosts hosts;
  if (!prerequisites(&hosts)) return;
  constexpr int kPerHost = 4, kCalls = 80;
  std::mt19937_64 rng(0x7a11);
  const int downAt[2] = {int(10 + rng() % 20), -1};  // well before the end: the strike takes a while
  const int host = int(rng() % 2);
  const uint64_t rail1Before = hosts.txBytes(0, "rail1");
  const Job job = runJob(hosts, kPerHost, kCalls, "survive", downAt, host);
  const uint64_t rail1Sent = hosts.txBytes(0, "rail1") - rail1Before;
  INFO("rail0 of host " << host << " taken down after call " << job.downsAt[0] << " (rank 0 at " << job.callsSeen
                        << " calls); rail1 of host 0 sent " << rail1Sent << " bytes");
  CHECK(job.downsAt[0] >= 0);
  for (size_t r = 0; r < job.codes.size(); ++r) {
    INFO("rank " << r << " (1: wrong results, 2: a call failed, 3: no reroute in the fault stats, -1: killed)");
    CHECK(job.codes[r] == 0);
  }
  CHECK(rail1Sent > 0);  // the re-run and the calls after went over the other rail
}

TEST_CASE("ofi rails: a rail whose path is cut with its link up is found by the progress deadline and a probe",
          "[ofi][netns][rails]") {
  Hosts hosts;
  if (!prerequisites(&hosts)) return;
  constexpr int kPerHost = 2, kCalls = 100;
  const int downAt[2] = {10, -1};
  const Job job = runJob(hosts, kPerHost, kCalls, "survive", downAt, 0, /*blackhole=*/true);
  INFO("rail0 of host 0 cut after call " << job.downsAt[0] << "; rank 0 at " << job.callsSeen);
  CHECK(job.downsAt[0] >= 0);
  for (size_t r = 0; r < job.codes.size(); ++r) {
    INFO("rank " << r << " (1: wrong results, 2: a call failed, 3: no reroute in the fault stats, -1: killed)");
    CHECK(job.codes[r] == 0);
  }
}

TEST_CASE("ofi rails: with every rail down each rank fails with an error naming them", "[ofi][netns][rails]") {
  Hosts hosts;
  if (!prerequisites(&hosts)) return;
  constexpr int kPerHost = 2, kCalls = 400;
  const int downAt[2] = {5, 25};  // rail1 once the job went on over it
  const Job job = runJob(hosts, kPerHost, kCalls, "fail", downAt, 1);
  INFO("rail0 down after call " << job.downsAt[0] << ", rail1 after " << job.downsAt[1] << "; rank 0 at "
                                << job.callsSeen);
  CHECK(job.downsAt[1] >= 0);
  for (size_t r = 0; r < job.codes.size(); ++r) {
    INFO("rank " << r << " (4: every call succeeded, 5: the error names no rail, -1: killed)");
    CHECK(job.codes[r] == 0);
  }
}

// Adds rank 0's progress reported so far to *callsSeen.
static void drainProgress(int progressFd, int* callsSeen) {
  char buf[256];
  for (ssize_t n; (n = read(progressFd, buf, sizeof(buf))) > 0;) *callsSeen += int(n);
}

// Waits until done() or the deadline, reading rank 0's progress meanwhile; false at the deadline.
template <typename Done>
bool awaitJob(int progressFd, int* callsSeen, int64_t ms, Done done) {
  const sncl::Deadline deadline = sncl::Deadline::afterMs(ms);
  while (!done()) {
    drainProgress(progressFd, callsSeen);
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST_CASE("ofi rails: a rail pulled and put back five times returns to service each time", "[ofi][netns][rails]") {
  Hosts hosts;
  if (!prerequisites(&hosts)) return;
  constexpr int kPerHost = 2, kCycles = 5;
  constexpr uint64_t kTraffic = 256 << 10;  // bytes each rail must carry: data, not probes or hellos
  std::mt19937_64 rng(std::random_device{}());
  int fds[2], go[2];
  REQUIRE(pipe(fds) == 0);
  REQUIRE(pipe(go) == 0);
  const int never[2] = {-1, -1};
  std::vector<pid_t> pids;
  for (int r = 0; r < 2 * kPerHost; ++r) pids.push_back(spawnHelper(hosts, r, kPerHost, 100000, "flap", fds[1], go[0], never));
  close(fds[1]);
  close(go[0]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  int calls = 0;
  // Bytes sent on each rail of each host: the kernel's counters.
  const auto sent = [&] {
    std::vector<uint64_t> b;
    for (int h = 0; h < 2; ++h)
      for (const char* dev : {kLinks[0], kLinks[1]}) b.push_back(hosts.txBytes(h, dev));
    return b;
  };
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    const int host = int(rng() % 2), gap = int(5 + rng() % 20);
    const int from = calls;
    REQUIRE(awaitJob(fds[0], &calls, 20000, [&] { return calls >= from + gap; }));
    REQUIRE(hosts.setLink(host, kLinks[0], false));
    // Calls counted from here ran after the pull (rank 0 reports calls ahead of this
    // loop, more so while `ip` is slow under load: they would end the pull before anyone
    // needed rail0, and TCP would ride through it unnoticed).
    drainProgress(fds[0], &calls);
    const int pulledAt = calls;
    const auto pulledTime = std::chrono::steady_clock::now();
    INFO("cycle " << cycle << ": rail0 of host " << host << " pulled at call " << pulledAt);
    // Going on over rail1, the loss found (a stall takes 1 s to be one).
    REQUIRE(awaitJob(fds[0], &calls, 20000, [&] {
      return calls >= pulledAt + gap && std::chrono::steady_clock::now() - pulledTime > std::chrono::milliseconds(1500);
    }));
    const std::vector<uint64_t> before = sent();
    REQUIRE(hosts.setLink(host, kLinks[0], true));
    const int backAt = calls;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<uint64_t> now;
    const bool both = awaitJob(fds[0], &calls, 30000, [&] {
      now = sent();
      for (size_t i = 0; i < now.size(); ++i)
        if (now[i] - before[i] < kTraffic) return false;
      return true;
    });
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    INFO("rail0 put back at call " << backAt << "; bytes sent since (host 0 rail0, rail1, host 1 rail0, rail1): "
                                   << now[0] - before[0] << ", " << now[1] - before[1] << ", " << now[2] - before[2]
                                   << ", " << now[3] - before[3] << " after " << ms << " ms, call " << calls);
    CHECK(both);
    if (!both) break;
    WARN("cycle " << cycle << ": both rails carry traffic " << ms << " ms (" << calls - backAt << " calls) after rail0 of host "
                  << host << " was put back");
  }
  REQUIRE(write(go[1], "s", 1) == 1);  // the job stops at its next check
  std::vector<int> codes(pids.size(), -1);
  const sncl::Deadline deadline = sncl::Deadline::afterMs(kJobDeadlineMs);
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) != pids[i]) {
      if (deadline.expired()) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &status, 0);
        break;
      }
      char buf[256];
      while (read(fds[0], buf, sizeof(buf)) > 0) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  close(fds[0]);
  close(go[1]);
  for (size_t r = 0; r < codes.size(); ++r) {
    INFO("rank " << r << " (1: wrong results, 2: a call failed, 3: fewer re-runs than pulls and returns, 137: killed)");
    CHECK(codes[r] == 0);
  }
}

// One rank of the tests above, run inside its namespace (hidden: only the tests start it).
TEST_CASE("rails helper", "[.][rails-helper]") {
  const char* spec = getenv("SNCL_TEST_RAILS");
  REQUIRE(spec);
  int rank = 0, nranks = 0, calls = 0, progressFd = -1, goFd = -1, downAt[2] = {-1, -1};
  char mode[16] = "";
  REQUIRE(sscanf(spec, "%d %d %d %15s %d %d %d %d", &rank, &nranks, &calls, mode, &progressFd, &goFd, &downAt[0],
                 &downAt[1]) == 8);
  // flap: runs until rank 0 reads 's' on goFd, which every rank learns from an All-Reduce
  // every few calls; each pull and each return of a rail is a re-run.
  const bool flap = !strcmp(mode, "flap");
  const bool survive = flap || !strcmp(mode, "survive");
  snclUniqueId id;
  REQUIRE(snclGetUniqueId(&id) == snclSuccess);
  snclComm_t comm = nullptr;
  REQUIRE(snclCommInitRank(&comm, nranks, id, rank) == snclSuccess);
  std::mt19937_64 rng(1);
  std::vector<char> in, out;
  int code = survive ? 0 : 4;
  for (int i = 0; i < calls; ++i) {
    const Call c = drawCall(rng, nranks, 2u << 20, 40);
    const size_t total = c.count * elemSize(c.type) * (c.coll == kBroadcast || c.coll == kAllReduce ? 1 : nranks);
    in.resize(std::max(in.size(), total + 64));
    out.resize(std::max(out.size(), total + 64));
    const long wrong = runCall(comm, rank, nranks, i, c, in, out, nullptr);
    if (rank == 0) {
      [[maybe_unused]] ssize_t n = write(progressFd, "c", 1);
      if (i + 1 == downAt[0] || i + 1 == downAt[1]) {  // the test strikes now
        pollfd p{goFd, POLLIN, 0};
        char g;
        if (poll(&p, 1, 20000) == 1) n = read(goFd, &g, 1);
      }
    }
    if (flap && wrong == 0 && i % 8 == 7) {
      int stop = 0;
      if (rank == 0) {
        pollfd p{goFd, POLLIN, 0};
        stop = poll(&p, 1, 0) == 1;
      }
      if (snclAllReduce(&stop, &stop, 1, snclInt32, snclSum, comm, nullptr) != snclSuccess) {
        fprintf(stderr, "rank %d: the stop check after call %d failed: %s\n", rank, i, snclGetLastError(comm));
        code = 2;
        break;
      }
      if (stop) break;
    }
    if (wrong != 0 && !survive) {
      const std::string error = snclGetLastError(comm);
      fprintf(stderr, "rank %d: call %d failed as expected: %s\n", rank, i, error.c_str());
      code = wrong < 0 && error.find("rail remains") != std::string::npos ? 0 : 5;
      break;
    }
    if (wrong != 0) {
      fprintf(stderr, "rank %d: call %d (coll %d, %zu elements): %s\n", rank, i, int(c.coll), c.count,
              wrong < 0 ? snclGetLastError(comm) : fmt::format("{} wrong", wrong).c_str());
      code = wrong < 0 ? 2 : 1;
      break;
    }
  }
  snclFaultStats_t stats{};
  snclCommGetFaultStats(comm, &stats);
  fprintf(stderr, "rank %d: rounds %lu, detected %lu, pulled in %lu, reroutes %lu, last recovery %.1f ms\n", rank,
          static_cast<unsigned long>(stats.rounds), static_cast<unsigned long>(stats.detected),
          static_cast<unsigned long>(stats.pulledIn), static_cast<unsigned long>(stats.reroutes), stats.lastRecoveryMs);
  if (survive && code == 0 && stats.reroutes < (flap ? 10u : 1u)) code = 3;
  if (code == 0) snclCommDestroy(comm);
  else snclCommAbort(comm);
  fflush(stderr);
  exit(code);  // the code is the verdict (Catch2's own summary would not carry it); exit() runs the leak check
}
