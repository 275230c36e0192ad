// The threading model (lib/comm/threading.h): what it decides from the CPUs of a machine's
// ranks (synthetic masks, then real processes pinned with sched_setaffinity), the cgroup
// quota it reads, and who runs stream work: the thread that waits (SNCL_PROGRESS=caller,
// the default without a spare core), the stream's thread (thread), work that is only polled
// or not waited for at all, and one thread driving several ranks' streams.
#include <catch2/catch.hpp>

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "lib/comm/threading.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"
#include "tests/util/shared_calls.h"

using namespace sncl;

namespace {

CpuSummary cpus(int first, int last, int count = -1, int quotaMilli = 0) {
  CpuSummary s;
  s.first = first;
  s.last = last;
  s.count = count < 0 ? last - first + 1 : count;
  s.quotaMilli = quotaMilli;
  return s;
}

std::vector<PeerInfo> peersOn(const std::vector<uint64_t>& boots) {
  std::vector<PeerInfo> peers(boots.size());
  for (size_t r = 0; r < boots.size(); ++r) {
    peers[r].rank = static_cast<int>(r);
    peers[r].bootId = boots[r];
  }
  return peers;
}

ThreadModel decide(int rank, const std::vector<uint64_t>& boots, const std::vector<CpuSummary>& sets) {
  ThreadModel m;
  REQUIRE(decideThreads(rank, peersOn(boots), sets, &m) == snclSuccess);
  INFO(m.describe());
  return m;
}

// Sets (or clears) SNCL_PROGRESS for one scope.
struct ProgressEnv {
  explicit ProgressEnv(const char* v) {
    if (v) setenv("SNCL_PROGRESS", v, 1);
    else unsetenv("SNCL_PROGRESS");
  }
  ~ProgressEnv() { unsetenv("SNCL_PROGRESS"); }
};

// Records the thread each call of a comm began on (the profiler runs on the call's thread).
struct CallThreads {
  std::mutex mu;
  std::vector<std::thread::id> ids;
  static void begin(void* user, snclComm_t, const snclProfilerCall_t*) {
    auto* self = static_cast<CallThreads*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->ids.push_back(std::this_thread::get_id());
  }
  int attach(snclComm_t comm) {
    snclProfiler_v1_t p{this, &CallThreads::begin, nullptr};
    return snclCommSetProfiler(comm, &p) == snclSuccess ? 0 : 1;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return ids.size();
  }
  int on(std::thread::id id) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (auto t : ids) n += t == id;
    return n;
  }
};

// One rank's comm with its calls' threads recorded, and a stream; 0 from init() or the
// step that failed (11 init, 12 profiler, 13 stream).
struct ProfiledRank {
  snclComm_t comm = nullptr;
  snclStream_t stream = nullptr;
  CallThreads threads;
  int init(int rank, int nranks, const snclUniqueId& id, const char* progress) {
    setenv("SNCL_PROGRESS", progress, 1);
    if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) return 11;
    if (threads.attach(comm)) return 12;
    return snclStreamCreate(&stream) == snclSuccess ? 0 : 13;
  }
  ~ProfiledRank() {
    if (stream) snclStreamDestroy(stream);
    if (comm) snclCommDestroy(comm);
  }
};

bool pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

int onlineCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// A checked All-Reduce of a count drawn from rng (odd, prime, zero and large among them);
// on a stream, waited for by snclStreamSynchronize or (poll) a loop of snclStreamQuery.
int checkedAllReduce(snclComm_t comm, int rank, int nranks, std::mt19937_64& rng, snclStream_t stream,
                     bool poll = false) {
  static const size_t kCounts[] = {0, 1, 7, 1021, 4099, 65537, 262147, 1u << 20};
  const size_t count = kCounts[rng() % (sizeof(kCounts) / sizeof(kCounts[0]))] + rng() % 3;
  std::vector<float> buf(count + 1);
  test::fillInput(snclFloat32, snclSum, rank, nranks, buf.data(), count);
  if (snclAllReduce(buf.data(), buf.data(), count, snclFloat32, snclSum, comm, stream) != snclSuccess) return 1;
  if (stream && poll) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    snclResult_t r;
    while ((r = snclStreamQuery(stream)) == snclInProgress && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    if (r != snclSuccess) return 1;
  } else if (stream && snclStreamSynchronize(stream) != snclSuccess) {
    return 1;
  }
  return test::countWrong(snclFloat32, snclSum, nranks, buf.data(), count) != 0;
}

}  // namespace

TEST_CASE("threading: decided from the CPUs of the machine's ranks", "[threading]") {
  SECTION("a core per rank (bound): the waiter runs stream work, waits spin") {
    const ThreadModel m = decide(1, {7, 7}, {cpus(0, 0), cpus(1, 1)});
    CHECK(m.hostRanks == 1);
    CHECK_FALSE(m.oversubscribed);
    CHECK(m.waiterDrives);
    CHECK(m.wait.spins());
  }
  SECTION("two ranks on one core: oversubscribed, waits yield and never spin") {
    const ThreadModel m = decide(0, {7, 7}, {cpus(0, 0), cpus(0, 0)});
    CHECK(m.hostRanks == 2);
    CHECK(m.hostCpus == 1);
    CHECK(m.oversubscribed);
    CHECK(m.waiterDrives);
    CHECK_FALSE(m.wait.spins());
    CHECK(m.wait.yields > 0);
  }
  SECTION("unbound, as many ranks as cores: no spare core, waits spin") {
    const ThreadModel m = decide(0, {7, 7}, {cpus(0, 1), cpus(0, 1)});
    CHECK(m.hostCpus == 2);
    CHECK_FALSE(m.oversubscribed);
    CHECK(m.waiterDrives);
  }
  SECTION("8 ranks on 2 cores unbound: oversubscribed") {
    const ThreadModel m = decide(3, std::vector<uint64_t>(8, 7), std::vector<CpuSummary>(8, cpus(0, 1)));
    CHECK(m.hostRanks == 8);
    CHECK(m.oversubscribed);
  }
  SECTION("a rank with spare cores keeps the stream thread") {
    const ThreadModel m = decide(0, {7, 7}, {cpus(0, 3), cpus(4, 7)});
    CHECK_FALSE(m.waiterDrives);
    CHECK(m.wait.spins());
  }
  SECTION("ranks on other machines do not compete") {
    const ThreadModel m = decide(0, {7, 8, 9}, {cpus(0, 0), cpus(0, 0), cpus(0, 0)});
    CHECK(m.hostRanks == 1);
    CHECK_FALSE(m.oversubscribed);
  }
  SECTION("a cgroup quota caps the CPUs: 4 ranks in a 2-CPU container of 8 cores") {
    const ThreadModel m = decide(0, {7, 7, 7, 7}, std::vector<CpuSummary>(4, cpus(0, 7, 8, 2000)));
    CHECK(m.cpus.usable() == 2);
    CHECK(m.hostCpus == 2);
    CHECK(m.oversubscribed);
  }
  SECTION("interleaved masks are counted by their CPUs, not their span") {
    // {0,2} and {1,3}: 2 CPUs each, 4 together.
    const ThreadModel m = decide(0, {7, 7}, {cpus(0, 2, 2), cpus(1, 3, 2)});
    CHECK(m.hostCpus == 4);
    CHECK_FALSE(m.oversubscribed);
    CHECK_FALSE(m.waiterDrives);  // 2 CPUs per rank: one for the caller, one for the stream's thread
  }
  SECTION("SNCL_PROGRESS overrides who runs stream work, and is checked") {
    {
      ProgressEnv env("thread");
      CHECK_FALSE(decide(0, {7, 7}, {cpus(0, 0), cpus(1, 1)}).waiterDrives);
    }
    {
      ProgressEnv env("caller");
      CHECK(decide(0, {7}, {cpus(0, 7)}).waiterDrives);
    }
    ProgressEnv env("sometimes");
    ThreadModel m;
    CHECK(decideThreads(0, peersOn({7}), {cpus(0, 0)}, &m) == snclInvalidArgument);
  }
}

TEST_CASE("threading: the cgroup quota is the least along the path", "[threading]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("sncl_cgroup_" + std::to_string(getpid()));
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "cpu.max") << "max 100000\n";
  CHECK(cgroupQuotaMilli(root.string(), "/a/b") == 0);
  std::ofstream(root / "a" / "cpu.max") << "150000 100000\n";
  std::ofstream(root / "a" / "b" / "cpu.max") << "max 100000\n";
  CHECK(cgroupQuotaMilli(root.string(), "/a/b") == 1500);
  std::ofstream(root / "a" / "b" / "cpu.max") << "50000 100000\n";
  CHECK(cgroupQuotaMilli(root.string(), "/a/b") == 500);
  // cgroup v1's files
  fs::remove(root / "a" / "b" / "cpu.max");
  fs::remove(root / "a" / "cpu.max");
  std::ofstream(root / "a" / "b" / "cpu.cfs_quota_us") << "300000\n";
  std::ofstream(root / "a" / "b" / "cpu.cfs_period_us") << "100000\n";
  CHECK(cgroupQuotaMilli(root.string(), "/a/b") == 3000);
  CpuSummary s = cpus(0, 7, 8, 2500);
  CHECK(s.usable() == 3);
  s.quotaMilli = 100;
  CHECK(s.usable() == 1);
  fs::remove_all(root);
}

TEST_CASE("threading: real ranks pinned to cores", "[threading][ranks]") {
  if (onlineCpus() < 2) {
    WARN("skipped: needs 2 CPUs");
    return;
  }
  const uint64_t seed = test::shared::testSeed();
  struct Case {
    const char* name;
    int cpuOf[2];
    bool oversubscribed;
  };
  for (const Case& c : {Case{"a core each", {0, 1}, false}, Case{"one core for both", {0, 0}, true}}) {
    INFO(c.name);
    auto exits = test::runRanks(2, [&](int rank, int nranks, const snclUniqueId& id) {
      if (!pinTo(c.cpuOf[rank])) return 10;
      snclComm_t comm;
      if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) return 11;
      snclThreading_t t{};
      if (snclCommGetThreading(comm, &t) != snclSuccess) return 12;
      std::printf("rank %d: %s\n", rank, t.text);
      int bad = 0;
      bad += t.cpus != 1;
      bad += t.oversubscribed != (c.oversubscribed ? 1 : 0);
      bad += (t.spinMicros > 0) == c.oversubscribed;
      bad += t.waiterDrives != 1;
      std::mt19937_64 rng(seed);  // the same counts on every rank
      for (int k = 0; k < 6; ++k) bad += checkedAllReduce(comm, rank, nranks, rng, nullptr);
      snclStream_t stream;
      if (snclStreamCreate(&stream) != snclSuccess) return 13;
      for (int k = 0; k < 6; ++k) bad += checkedAllReduce(comm, rank, nranks, rng, stream);
      snclStreamDestroy(stream);
      snclCommDestroy(comm);
      return bad ? 20 + bad : 0;
    });
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("threading: stream work runs on the thread that waits, or on the stream's", "[threading][ranks]") {
  const uint64_t seed = test::shared::testSeed();
  for (const char* progress : {"caller", "thread"}) {
    INFO("SNCL_PROGRESS=" << progress);
    const bool caller = std::string(progress) == "caller";
    auto exits = test::runRanks(3, [&](int rank, int nranks, const snclUniqueId& id) {
      ProfiledRank me;
      if (const int failed = me.init(rank, nranks, id, progress)) return failed;
      std::mt19937_64 rng(seed);
      const int calls = 12;
      int bad = 0;
      for (int k = 0; k < calls; ++k) bad += checkedAllReduce(me.comm, rank, nranks, rng, me.stream, k % 2 == 1);
      const int mine = me.threads.on(std::this_thread::get_id());
      // Polled calls run on the stream's thread (a query never runs work). The stream's
      // thread also takes an item nobody came for within a millisecond, which a descheduled
      // caller may miss now and then: most synchronized calls, not all, run on the caller.
      const int synchronized = calls / 2;
      if (caller ? mine * 2 < synchronized || mine > synchronized : mine != 0) {
        std::fprintf(stderr, "rank %d: %d of %d calls ran on the calling thread\n", rank, mine, calls);
        ++bad;
      }
      return bad ? 20 + bad : 0;
    });
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("threading: stream work nobody waits for runs anyway", "[threading][ranks]") {
  const uint64_t seed = test::shared::testSeed();
  auto exits = test::runRanks(2, [&](int rank, int nranks, const snclUniqueId& id) {
    ProfiledRank me;
    if (const int failed = me.init(rank, nranks, id, "caller")) return failed;
    std::mt19937_64 rng(seed);
    const size_t count = 1 + rng() % 100000;
    std::vector<int32_t> buf(count);
    test::fillInput(snclInt32, snclSum, rank, nranks, buf.data(), count);
    if (snclAllReduce(buf.data(), buf.data(), count, snclInt32, snclSum, me.comm, me.stream) != snclSuccess) return 14;
    // No sncl call from here on until the call began: the stream's thread must run it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (me.threads.count() == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    int bad = me.threads.count() == 0;
    bad += snclStreamSynchronize(me.stream) != snclSuccess;
    bad += test::countWrong(snclInt32, snclSum, nranks, buf.data(), count) != 0;
    bad += me.threads.on(std::this_thread::get_id()) != 0;
    return bad ? 20 + bad : 0;
  });
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("threading: one thread drives several ranks' streams", "[threading][threads]") {
  ProgressEnv env("caller");
  const uint64_t seed = test::shared::testSeed();
  std::mt19937_64 rng(seed);
  const int nranks = 2 + static_cast<int>(rng() % 3);
  INFO("nranks " << nranks);
  std::vector<snclComm_t> comms(size_t(nranks), nullptr);
  REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
  std::vector<snclStream_t> streams(size_t(nranks), nullptr);
  for (auto& s : streams) REQUIRE(snclStreamCreate(&s) == snclSuccess);
  const int calls = 4;
  std::vector<std::vector<std::vector<float>>> bufs(static_cast<size_t>(calls));
  std::vector<size_t> counts(static_cast<size_t>(calls));
  for (auto& b : bufs) b.resize(static_cast<size_t>(nranks));
  for (int k = 0; k < calls; ++k) {
    counts[size_t(k)] = rng() % 70001;
    for (int r = 0; r < nranks; ++r) {
      auto& b = bufs[size_t(k)][size_t(r)];
      b.resize(counts[size_t(k)] + 1);
      test::fillInput(snclFloat32, snclSum, r, nranks, b.data(), counts[size_t(k)]);
      REQUIRE(snclAllReduce(b.data(), b.data(), counts[size_t(k)], snclFloat32, snclSum, comms[size_t(r)],
                            streams[size_t(r)]) == snclSuccess);
    }
  }
  // Synchronizing rank 0's stream first runs its calls here, which need the other ranks'
  // calls: their streams' threads take those up.
  for (auto s : streams) CHECK(snclStreamSynchronize(s) == snclSuccess);
  for (int k = 0; k < calls; ++k)
    for (int r = 0; r < nranks; ++r)
      CHECK(test::countWrong(snclFloat32, snclSum, nranks, bufs[size_t(k)][size_t(r)].data(), counts[size_t(k)]) == 0);
  for (auto s : streams) CHECK(snclStreamDestroy(s) == snclSuccess);
  for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
}
