// Membership that cannot split (docs/faults.md, "Shrink"): snclCommShrink is an agreement
// among the comm's ranks. Every member gets the same member list; a rank cut off from the
// majority (stopped past the deadline, then resumed) or excluded by the others gets an
// error, never a comm of its own. Ranks are real processes where a signal is involved.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sncl/sncl.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr int kMaxRanks = 8;
constexpr size_t kCount = 1u << 16;

// Exit codes tell the parent what went wrong on a rank.
enum : int {
  kOk = 0,
  kInitFailed = 10,
  kFirstCall,
  kNoError,
  kShrink,
  kWrongCount,
  kWrongSum,
  kGather,
  kSplitBrain,   // a cut-off rank got a comm
  kVague,        // a cut-off rank's error does not say why
  kNoSignal,
  kLoopEnded,    // the victim never died
};

// What ranks tell the parent (a page shared across the fork).
struct Shared {
  std::atomic<int> pid[kMaxRanks];
  std::atomic<int> firstDone;      // ranks whose first call completed
  std::atomic<int> survivorsDone;  // survivors that finished with their shrunk comm
  std::atomic<int> victimDone;
  int members[kMaxRanks][kMaxRanks];  // per rank: its shrunk comm's members, as old ranks
  int count[kMaxRanks];
  int failedCall[kMaxRanks];  // the iteration whose call failed first
  int victimShrink;
  char victimCall[256];
  char victimMessage[512];
};

Shared* makeShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return new (p) Shared{};
}

void freeShared(Shared* s) { munmap(s, sizeof(Shared)); }

snclResult_t allReduceInt(snclComm_t comm, int rank, int nranks, size_t count, bool* correct) {
  std::vector<int32_t> in(count), out(count);
  test::fillInput(snclInt32, snclSum, rank, nranks, in.data(), count);
  const snclResult_t r = snclAllReduce(in.data(), out.data(), count, snclInt32, snclSum, comm, nullptr);
  *correct = r == snclSuccess && test::countWrong(snclInt32, snclSum, nranks, out.data(), count) == 0;
  return r;
}

// Checks the shrunk comm (an All-Reduce whose result is known) and records its members,
// gathered over it, for the parent to compare across ranks.
int useShrunk(snclComm_t shrunk, int oldRank, Shared* shared) {
  int count = 0, newRank = -1;
  snclCommCount(shrunk, &count);
  snclCommUserRank(shrunk, &newRank);
  if (count < 1 || count > kMaxRanks || newRank < 0) return kWrongCount;
  bool correct = false;
  if (allReduceInt(shrunk, newRank, count, kCount, &correct) != snclSuccess || !correct) return kWrongSum;
  int32_t me = oldRank;
  std::vector<int32_t> all(size_t(count), -1);
  if (snclAllGather(&me, all.data(), 1, snclInt32, shrunk, nullptr) != snclSuccess) return kGather;
  shared->count[oldRank] = count;
  for (int i = 0; i < count; ++i) shared->members[oldRank][i] = all[size_t(i)];
  return kOk;
}

bool waitFor(const std::atomic<int>& v, int atLeast, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (v.load() < atLeast) {
    if (std::chrono::steady_clock::now() > until) return false;
    usleep(1000);
  }
  return true;
}

std::vector<int> membersOf(const Shared& s, int rank) {
  return std::vector<int>(s.members[rank], s.members[rank] + s.count[rank]);
}

uint64_t testSeed() {
  const char* env = getenv("SNCL_TEST_SEED");
  const uint64_t seed = env ? strtoull(env, nullptr, 0) : std::random_device{}();
  fprintf(stderr, "test_membership: seed %llu (SNCL_TEST_SEED=%llu repeats this run)\n",
          static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace

// The bug this guards: the survivors of a stopped rank shrank to 3 ranks, and the rank,
// resumed, shrank to a working comm of 1 of its own.
TEST_CASE("membership: a rank stopped past the deadline, then resumed, is cut off; survivors agree",
          "[fault][membership][process]") {
  constexpr int kRanks = 4;
  constexpr int kTimeoutMs = 3000;
  // victim 0 is the coordinator of every agreement: the survivors must pass it over.
  // Survivors that stay (their old comm open, silent) make the resumed rank wait out its
  // deadlines; survivors that leave break its connections.
  // The coordinator's case every run; one of the other two, drawn from the seed (each takes
  // about three deadlines).
  struct Case { int victim; bool survivorsStay; };
  const Case others[] = {Case{2, true}, Case{1, false}};
  for (const Case c : {Case{0, true}, others[testSeed() % 2]}) {
    INFO("victim " << c.victim << (c.survivorsStay ? ", survivors stay" : ", survivors leave"));
    Shared* shared = makeShared();
    const int controller = c.victim == kRanks - 1 ? 0 : kRanks - 1;  // stops and resumes it
    const auto t0 = std::chrono::steady_clock::now();
    auto exits = test::runRanks(kRanks, [&](int rank, int nranks, const snclUniqueId& id) {
      shared->pid[rank].store(getpid());
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = kTimeoutMs;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, nranks, id, rank, &config) != snclSuccess) return int(kInitFailed);
      bool correct = false;
      if (allReduceInt(comm, rank, nranks, kCount, &correct) != snclSuccess || !correct) return int(kFirstCall);
      shared->firstDone.fetch_add(1);
      // Stopped once every rank is done with the first call (a direct All-Reduce completes
      // on one rank while another still waits for the victim's data).
      // Generous: on 2 loaded cores the last rank may finish its first call seconds later.
      if (rank == controller && (!waitFor(shared->firstDone, nranks, 4 * kTimeoutMs) ||
                                 kill(shared->pid[c.victim].load(), SIGSTOP) != 0))
        return int(kNoSignal);
      snclResult_t second = allReduceInt(comm, rank, nranks, kCount, &correct);
      if (rank == c.victim) {  // runs on only once resumed
        // Its call may even complete, when all its data had arrived before it stopped (a
        // direct All-Reduce); the next one cannot.
        for (int more = 0; second == snclSuccess && more < 2; ++more)
          second = allReduceInt(comm, rank, nranks, kCount, &correct);
        snprintf(shared->victimCall, sizeof(shared->victimCall), "%s", snclGetLastError(comm));
        if (second == snclSuccess) return int(kNoError);
        snclComm_t own = nullptr;
        const snclResult_t r = snclCommShrink(comm, nullptr, 0, &own, nullptr, SNCL_SHRINK_DEFAULT);
        shared->victimShrink = r;
        snprintf(shared->victimMessage, sizeof(shared->victimMessage), "%s", snclGetLastError(comm));
        shared->victimDone.store(1);
        if (r == snclSuccess || own) return int(kSplitBrain);
        const std::string why = shared->victimMessage;
        if (r != snclRemoteError || (why.find("cut off") == std::string::npos && why.find("excluded") == std::string::npos))
          return int(kVague);
        snclCommDestroy(comm);
        return int(kOk);
      }
      if (second != snclRemoteError) return int(kNoError);
      snclComm_t shrunk = nullptr;
      if (snclCommShrink(comm, nullptr, 0, &shrunk, nullptr, SNCL_SHRINK_DEFAULT) != snclSuccess) return int(kShrink);
      const int used = useShrunk(shrunk, rank, shared);
      if (used != kOk) return used;
      shared->survivorsDone.fetch_add(1);
      waitFor(shared->survivorsDone, nranks - 1, 4 * kTimeoutMs);  // every survivor used the new comm
      snclCommDestroy(shrunk);
      if (!c.survivorsStay) snclCommDestroy(comm);
      if (rank == controller && kill(shared->pid[c.victim].load(), SIGCONT) != 0) return int(kNoSignal);
      if (!c.survivorsStay) return int(kOk);
      waitFor(shared->victimDone, 1, 8 * kTimeoutMs);  // silent but connected until the victim gave up
      snclCommDestroy(comm);
      return int(kOk);
    }, 60000);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fprintf(stderr, "test_membership: victim %d%s: %.1f s\n", c.victim, c.survivorsStay ? " (survivors stay)" : "",
            seconds);
    INFO("the victim's call: " << shared->victimCall);
    INFO("the victim's shrink: " << shared->victimShrink << ": " << shared->victimMessage);
    INFO(seconds << " s");
    std::vector<int> expected;
    for (int r = 0; r < kRanks; ++r)
      if (r != c.victim) expected.push_back(r);
    for (int r = 0; r < kRanks; ++r) {
      INFO("rank " << r << " exit " << exits[r].code << " signal " << exits[r].signal);
      CHECK(exits[r].code == kOk);
      if (r != c.victim) CHECK(membersOf(*shared, r) == expected);
    }
    freeShared(shared);
  }
}

// A rank dies at a moment drawn from a seeded generator (which call, how far into it) in
// a loop of collectives of a random size on 4 to 8 ranks: every survivor's call fails, and
// all of them shrink to the same member list, which works.
TEST_CASE("membership: a rank killed at a random moment; all survivors shrink to one list",
          "[fault][membership][process]") {
  std::mt19937_64 gen(testSeed());
  constexpr int kTrials = 8;
  constexpr int kIterations = 1 << 20;  // the victim dies long before: survivors leave at their first error
  for (int trial = 0; trial < kTrials; ++trial) {
    const int nranks = std::uniform_int_distribution<int>(4, kMaxRanks)(gen);
    const int victim = std::uniform_int_distribution<int>(0, nranks - 1)(gen);
    const int killAt = std::uniform_int_distribution<int>(1, 30)(gen);
    const int delayUs = std::uniform_int_distribution<int>(0, 20000)(gen);
    const size_t count = size_t(1) << std::uniform_int_distribution<int>(6, 17)(gen);
    const char* transport = std::uniform_int_distribution<int>(0, 1)(gen) ? "bus" : "shm";
    INFO("trial " << trial << ": " << nranks << " ranks, rank " << victim << " killed " << delayUs
                  << " us after it began call " << killAt << " of " << count << " ints, on " << transport);
    fprintf(stderr, "test_membership: trial %d: %d ranks, rank %d killed %d us into call %d (%zu ints, %s)\n", trial,
            nranks, victim, delayUs, killAt, count, transport);
    setenv("SNCL_TRANSPORT", transport, 1);
    Shared* shared = makeShared();
    const auto t0 = std::chrono::steady_clock::now();
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = 5000;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return int(kInitFailed);
      std::vector<int32_t> buf(count, rank);
      for (int it = 0; it < kIterations; ++it) {
        if (rank == victim && it == killAt)
          std::thread([delay = delayUs] { usleep(useconds_t(delay)); raise(SIGKILL); }).detach();
        bool correct = true;
        snclResult_t r;
        switch (it % 3) {  // a mix, so that the ranks' steps and their timing differ
          case 0: r = allReduceInt(comm, rank, n, count, &correct); break;
          case 1: r = snclBroadcast(buf.data(), buf.data(), count, snclInt32, it % n, comm, nullptr); break;
          default: {
            std::vector<int32_t> all(count * size_t(n));
            r = snclAllGather(buf.data(), all.data(), count, snclInt32, comm, nullptr);
          }
        }
        if (r == snclSuccess && correct) continue;
        if (rank == victim || r != snclRemoteError) return int(kNoError);
        shared->failedCall[rank] = it;
        snclComm_t shrunk = nullptr;
        if (snclCommShrink(comm, nullptr, 0, &shrunk, nullptr, SNCL_SHRINK_DEFAULT) != snclSuccess)
          return int(kShrink);
        const int used = useShrunk(shrunk, rank, shared);
        snclCommDestroy(shrunk);
        snclCommDestroy(comm);
        return used;
      }
      return int(kLoopEnded);
    }, 60000);
    unsetenv("SNCL_TRANSPORT");
    fprintf(stderr, "test_membership: trial %d: %.1f s\n", trial,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::vector<int> expected;
    for (int r = 0; r < nranks; ++r)
      if (r != victim) expected.push_back(r);
    for (int r = 0; r < nranks; ++r) {
      INFO("rank " << r << " exit " << exits[r].code << " signal " << exits[r].signal << " failed call "
                   << shared->failedCall[r]);
      if (r == victim) {
        CHECK(exits[r].signal == SIGKILL);
        CHECK_FALSE(exits[r].killed);
      } else {
        CHECK(exits[r].code == kOk);
        CHECK(membersOf(*shared, r) == expected);
      }
    }
    freeShared(shared);
  }
}

namespace {

// Ranks as threads of this process, each with its own comm of the given deadline.
std::vector<snclComm_t> threadComms(int nranks, int timeoutMs) {
  snclUniqueId id;
  REQUIRE(snclGetUniqueId(&id) == snclSuccess);
  std::vector<snclComm_t> comms(size_t(nranks), nullptr);
  std::vector<snclResult_t> rs(size_t(nranks), snclSuccess);
  test::onEveryRank(nranks, [&](int r) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = timeoutMs;
    rs[size_t(r)] = snclCommInitRankConfig(&comms[size_t(r)], nranks, id, r, &config);
  });
  for (snclResult_t r : rs) REQUIRE(r == snclSuccess);
  return comms;
}

struct ShrinkOutcome {
  snclResult_t result = snclInternalError;
  snclComm_t comm = nullptr;
  std::string message;
  int count = 0;
};

// Shrinks on the ranks that take part (after a delay of their own), each with its list.
std::vector<ShrinkOutcome> shrinkOn(std::vector<snclComm_t>& comms, const std::vector<bool>& takesPart,
                                    const std::vector<std::vector<int>>& excludes,
                                    const std::vector<int>& delayMs = {}) {
  const int n = int(comms.size());
  std::vector<ShrinkOutcome> out(static_cast<size_t>(n));
  test::onEveryRank(n, [&](int r) {
    if (!takesPart[size_t(r)]) return;
    if (!delayMs.empty()) usleep(useconds_t(delayMs[size_t(r)]) * 1000);
    std::vector<int> ex = excludes[size_t(r)];
    ShrinkOutcome& o = out[size_t(r)];
    o.result = snclCommShrink(comms[size_t(r)], ex.empty() ? nullptr : ex.data(), int(ex.size()), &o.comm, nullptr,
                              SNCL_SHRINK_DEFAULT);
    o.message = snclGetLastError(nullptr);
    if (o.comm) snclCommCount(o.comm, &o.count);
  });
  return out;
}

// The shrunk comms work together: an All-Reduce with a known result on every one.
void checkWorks(std::vector<ShrinkOutcome>& outs) {
  std::vector<snclComm_t> shrunk;
  for (auto& o : outs)
    if (o.comm) shrunk.push_back(o.comm);
  const int n = int(shrunk.size());
  std::vector<int> ok(size_t(n), 0);
  test::onEveryRank(n, [&](int r) {
    int rank = -1;
    snclCommUserRank(shrunk[size_t(r)], &rank);
    bool correct = false;
    ok[size_t(r)] = allReduceInt(shrunk[size_t(r)], rank, n, 4096, &correct) == snclSuccess && correct;
  });
  for (int r = 0; r < n; ++r) CHECK(ok[size_t(r)]);
  test::destroyAll(shrunk);
}

}  // namespace

TEST_CASE("membership: exclusion lists that differ are unioned; the excluded rank is told", "[membership]") {
  auto comms = threadComms(4, 2000);
  // Rank 1 excludes 3, the others exclude nobody (NULL: nothing was found lost).
  auto outs = shrinkOn(comms, {true, true, true, true}, {{}, {3}, {}, {}});
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << outs[size_t(r)].message);
    CHECK(outs[size_t(r)].result == snclSuccess);
    CHECK(outs[size_t(r)].count == 3);
  }
  INFO(outs[3].message);
  CHECK(outs[3].result == snclRemoteError);
  CHECK(outs[3].comm == nullptr);
  CHECK(outs[3].message.find("excluded by the survivors") != std::string::npos);
  CHECK(outs[3].message.find("3 (by rank 1)") != std::string::npos);
  checkWorks(outs);
  test::destroyAll(comms);
}

TEST_CASE("membership: a bad argument on one rank fails every rank at once", "[membership]") {
  auto comms = threadComms(4, 5000);
  const auto t0 = std::chrono::steady_clock::now();
  auto outs = shrinkOn(comms, {true, true, true, true}, {{}, {}, {7}, {}});  // 7 is out of range
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << outs[size_t(r)].message);
    CHECK(outs[size_t(r)].result == snclInvalidArgument);
    CHECK(outs[size_t(r)].comm == nullptr);
    if (r != 2) CHECK(outs[size_t(r)].message.find("rank 2 passed bad arguments") != std::string::npos);
  }
  test::destroyAll(comms);
}

TEST_CASE("membership: a minority that shrinks is cut off; a majority goes on without a silent rank",
          "[membership]") {
  constexpr int kTimeoutMs = 2000;
  auto comms = threadComms(4, kTimeoutMs);
  SECTION("2 of 4 call shrink: neither gets a comm") {
    const auto t0 = std::chrono::steady_clock::now();
    auto outs = shrinkOn(comms, {false, false, true, true}, {{}, {}, {}, {}});
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2 * kTimeoutMs));
    for (int r = 2; r < 4; ++r) {
      INFO("rank " << r << ": " << outs[size_t(r)].message);
      CHECK(outs[size_t(r)].result == snclRemoteError);
      CHECK(outs[size_t(r)].comm == nullptr);
      CHECK(outs[size_t(r)].message.find("cut off from the majority") != std::string::npos);
    }
  }
  SECTION("3 of 4 call shrink, at moments up to a third of the deadline apart; rank 0 stays silent") {
    auto outs = shrinkOn(comms, {false, true, true, true}, {{}, {}, {}, {}}, {0, 600, 0, 300});
    for (int r = 1; r < 4; ++r) {
      INFO("rank " << r << ": " << outs[size_t(r)].message);
      CHECK(outs[size_t(r)].result == snclSuccess);
      CHECK(outs[size_t(r)].count == 3);
    }
    checkWorks(outs);
  }
  test::destroyAll(comms);
}
