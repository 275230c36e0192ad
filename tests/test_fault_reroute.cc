// Fault handling on the emulated bus, ranks as threads: a link lost in the middle of an
// All-Reduce is agreed on, routed around and the call re-run (bit-exact with a fault-free
// run, logged, counted), also when only the ranks next to the link see it; a link that is
// the only path fails every rank naming it; jitter is counted and harmless; a killed rank
// fails the survivors, who shrink to a working comm.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"

using namespace sncl;

namespace {

// The reroute's INFO line is part of what is tested; FAULT lines only (read once per process).
const int kLogSetup = (setenv("SNCL_DEBUG", "INFO", 0), setenv("SNCL_DEBUG_SUBSYS", "FAULT", 0), 0);

constexpr int kRanks = 8;
constexpr size_t kCount = 1u << 20;  // 4 MiB of floats



std::vector<test::RankOutcome> allReduce(std::vector<snclComm_t>& comms, bool inPlace = false) {
  return test::allReduceFloats(comms, kCount, inPlace);
}

snclFaultStats_t stats(snclComm_t c) {
  snclFaultStats_t s{};
  REQUIRE(snclCommGetFaultStats(c, &s) == snclSuccess);
  return s;
}

// Captures this process's stderr (the log) while it lives.
class StderrCapture {
 public:
  StderrCapture() : path_("/tmp/sncl_fault_log_" + std::to_string(getpid())) {
    fflush(stderr);
    saved_ = dup(2);
    const int fd = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, 2);
    close(fd);
  }
  std::string finish() {
    fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    unlink(path_.c_str());
    std::fputs(ss.str().c_str(), stderr);
    return ss.str();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

}  // namespace

TEST_CASE("fault: a link lost mid-All-Reduce is rerouted; results bit-exact, logged, counted", "[fault]") {
  (void)kLogSetup;
  test::ScopedEnv env{{"SNCL_TOPO_FILE", test::topologyPath("supernode-2plane-2x4.json")},
                      {"SNCL_BUS_DETECT_US", "50"}};
  for (bool inPlace : {false, true}) {
    INFO("in place: " << inPlace);
    auto comms = test::busComms(kRanks, "link=n0.e1-n0.l1p0:down@op=2");
    REQUIRE(comms.size() == size_t(kRanks));
    auto healthy = allReduce(comms, inPlace);  // op 1: the reference
    for (auto& o : healthy) REQUIRE(o.result == snclSuccess);
    StderrCapture capture;
    auto faulted = allReduce(comms, inPlace);  // op 2: the link goes down as it starts
    const std::string log = capture.finish();
    for (int r = 0; r < kRanks; ++r) {
      INFO("rank " << r << ": " << faulted[r].message);
      REQUIRE(faulted[r].result == snclSuccess);
      CHECK(memcmp(faulted[r].out.data(), healthy[r].out.data(), kCount * sizeof(float)) == 0);
      const snclFaultStats_t s = stats(comms[r]);
      CHECK(s.reroutes == 1);
      CHECK(s.linkFailures == 1);
      CHECK(s.rounds == 1);
      CHECK(s.lastRetryModeledUs > 0);
    }
    CHECK(log.find("link(s) n0.e1-n0.l1p0 lost during allreduce #2") != std::string::npos);
    CHECK(log.find("rerouted on topology epoch") != std::string::npos);
    CHECK(log.find("modeled at") != std::string::npos);
    // Later calls plan on the topology without the link (the plan may change, and with it
    // the order of additions), and stay correct.
    auto after = allReduce(comms, inPlace);
    for (int r = 0; r < kRanks; ++r) {
      REQUIRE(after[r].result == snclSuccess);
      size_t off = 0;
      for (size_t i = 0; i < kCount; ++i) off += std::fabs(after[r].out[i] - healthy[r].out[i]) > 1e-5f;
      CHECK(off == 0);
    }
    test::destroyAll(comms);
  }
}

// A link back up is in service for the next failure at once: here it comes back as the
// other link of its endpoint fails, in the same call, before the collective its change was
// due; every rank takes the change with the agreement and routes over it.
TEST_CASE("fault: a link back up carries the reroute of a failure right after it", "[fault]") {
  test::ScopedEnv env{{"SNCL_TOPO_FILE", test::topologyPath("supernode-2plane-2x4.json")},
                      {"SNCL_BUS_DETECT_US", "50"}};
  const unsigned seed = Catch::rngSeed();
  const int e = int(seed % 4), plane = int(seed / 4 % 2), node = int(seed / 8 % 2);
  const std::string a = fmt::format("n{0}.e{1}-n{0}.l1p{2}", node, e, plane);
  const std::string b = fmt::format("n{0}.e{1}-n{0}.l1p{2}", node, e, 1 - plane);
  INFO("link " << a << " down at call 2, back up at call 4 as " << b << " goes down");
  auto comms = test::busComms(kRanks, fmt::format("link={0}:down@op=2;link={0}:up@op=4;link={1}:down@op=4", a, b));
  REQUIRE(comms.size() == size_t(kRanks));
  auto healthy = allReduce(comms);
  for (int call = 2; call <= 6; ++call) {
    auto out = allReduce(comms);
    for (int r = 0; r < kRanks; ++r) {
      INFO("call " << call << ", rank " << r << ": " << out[r].message);
      REQUIRE(out[r].result == snclSuccess);
      size_t off = 0;
      for (size_t i = 0; i < kCount; ++i) off += std::fabs(out[r].out[i] - healthy[r].out[i]) > 1e-5f;
      CHECK(off == 0);
    }
  }
  for (int r = 0; r < kRanks; ++r) CHECK(stats(comms[r]).linkFailures == 2);
  test::destroyAll(comms);
}

TEST_CASE("fault: a slow detector still converges (only the ring neighbours of the link see it)", "[fault]") {
  test::ScopedEnv env{{"SNCL_TOPO_FILE", test::topologyPath("supernode-2plane-2x4.json")}, {"SNCL_ALGO", "ring"}};
  auto comms = test::busComms(kRanks, "link=n1.e2-n1.l1p1:down@op=2");
  REQUIRE(comms.size() == size_t(kRanks));
  auto healthy = allReduce(comms);
  auto faulted = allReduce(comms);
  uint64_t detected = 0, pulled = 0;
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << ": " << faulted[r].message);
    REQUIRE(faulted[r].result == snclSuccess);
    CHECK(memcmp(faulted[r].out.data(), healthy[r].out.data(), kCount * sizeof(float)) == 0);
    const snclFaultStats_t s = stats(comms[r]);
    CHECK(s.rounds == 1);
    detected += s.detected;
    pulled += s.pulledIn;
  }
  // Rank 6 and its ring neighbours lose transfers; the other ranks learn it on the side channel.
  CHECK(detected >= 1);
  CHECK(detected < uint64_t(kRanks));
  CHECK(pulled >= 1);
  CHECK(detected + pulled == uint64_t(kRanks));
  test::destroyAll(comms);
}

TEST_CASE("fault: a lost link that is the only path fails every rank, naming it", "[fault]") {
  test::ScopedEnv env{{"SNCL_BUS_DETECT_US", "50"}, {"SNCL_RETRY", "1"}};
  unsetenv("SNCL_TOPO_FILE");
  auto comms = test::busComms(kRanks, "link=n0.e1-n0.l1p0:down@op=2");
  REQUIRE(comms.size() == size_t(kRanks));
  for (auto& o : allReduce(comms)) REQUIRE(o.result == snclSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  auto faulted = allReduce(comms);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 20);  // the tests' SNCL_TIMEOUT_MS: nobody waited for the deadline twice
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << ": " << faulted[r].message);
    CHECK(faulted[r].result == snclRemoteError);
    CHECK(faulted[r].message.find("n0.e1-n0.l1p0") != std::string::npos);
    CHECK(faulted[r].message.find("no other route") != std::string::npos);
    snclResult_t async = snclSuccess;
    CHECK(snclCommGetAsyncError(comms[r], &async) == snclSuccess);
    CHECK(async == snclRemoteError);
  }
  test::destroyAll(comms);
}

TEST_CASE("fault: jitter is counted and the data stays exact", "[fault]") {
  unsetenv("SNCL_TOPO_FILE");
  auto comms = test::busComms(kRanks, "jitter=0.2:30us");
  REQUIRE(comms.size() == size_t(kRanks));
  auto a = allReduce(comms);
  auto b = allReduce(comms);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(a[r].result == snclSuccess);
    REQUIRE(b[r].result == snclSuccess);
    CHECK(memcmp(a[r].out.data(), b[r].out.data(), kCount * sizeof(float)) == 0);
    const snclFaultStats_t s = stats(comms[r]);
    CHECK(s.jittered > 0);
    CHECK(s.rounds == 0);
  }
  test::destroyAll(comms);
}

TEST_CASE("fault: a killed rank fails the survivors within the deadline; they shrink and go on", "[fault]") {
  unsetenv("SNCL_TOPO_FILE");
  constexpr int kDead = 3;
  auto comms = test::busComms(kRanks, "rank=3:kill@op=2");
  REQUIRE(comms.size() == size_t(kRanks));
  for (auto& o : allReduce(comms)) REQUIRE(o.result == snclSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  auto faulted = allReduce(comms);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 20);
  CHECK(faulted[kDead].result == snclSystemError);
  for (int r = 0; r < kRanks; ++r) {
    if (r == kDead) continue;
    INFO("rank " << r << ": " << faulted[r].message);
    CHECK(faulted[r].result == snclRemoteError);
    CHECK(faulted[r].message.find("rank(s) 3") != std::string::npos);
    CHECK(stats(comms[r]).rankFailures == 1);
  }
  std::vector<snclComm_t> shrunk(kRanks, nullptr);
  std::vector<snclResult_t> shrinkResult(kRanks, snclSuccess);
  test::onEveryRank(kRanks, [&](int r) {
    if (r != kDead) shrinkResult[r] = snclCommShrink(comms[r], nullptr, 0, &shrunk[r], nullptr, SNCL_SHRINK_DEFAULT);
  });
  std::vector<snclComm_t> survivors;
  for (int r = 0; r < kRanks; ++r) {
    if (r == kDead) continue;
    INFO("rank " << r << ": " << snclGetErrorString(shrinkResult[r]));
    REQUIRE(shrinkResult[r] == snclSuccess);
    int newRank = -1, count = 0;
    REQUIRE(snclCommUserRank(shrunk[r], &newRank) == snclSuccess);
    REQUIRE(snclCommCount(shrunk[r], &count) == snclSuccess);
    CHECK(count == kRanks - 1);
    CHECK(newRank == (r < kDead ? r : r - 1));
    survivors.push_back(shrunk[r]);
  }
  const int n = int(survivors.size());
  std::vector<size_t> wrong(n, 1);
  test::onEveryRank(n, [&](int r) {
    std::vector<int32_t> in(100000), out(100000);
    test::fillInput(snclInt32, snclSum, r, n, in.data(), in.size());
    if (snclAllReduce(in.data(), out.data(), in.size(), snclInt32, snclSum, survivors[r], nullptr) == snclSuccess)
      wrong[r] = test::countWrong(snclInt32, snclSum, n, out.data(), out.size());
  });
  for (int r = 0; r < n; ++r) CHECK(wrong[r] == 0);
  test::destroyAll(survivors);
  test::destroyAll(comms);
}
