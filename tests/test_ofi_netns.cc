// All-Reduce between two "hosts" that are network namespaces joined by a veth pair, so the
// bytes cross a real network stack (veth, not loopback): the bootstrap and ofi's tcp
// provider bind to the veth addresses. Needs root and `ip netns`; skipped with a message
// otherwise. The namespaces, the veth pair and the addresses (10.250.x.0/30) exist only
// inside namespaces this test creates, and are removed whatever happens (also the ones a
// killed earlier run left behind).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "perf/common/netns.h"
#include "sncl/sncl.h"
#include "tests/util/data.h"

namespace {

constexpr const char* kPrefix = "sncl-ofi-";  // namespaces are kPrefix + {a,b} + "-" + pid
constexpr int kBootstrapPort = 29500;         // free: the namespaces are new
constexpr int kHelperDeadlineMs = 90000;
constexpr size_t kCount = (4u << 20) + 3;     // floats: 16 MiB cross the veth each way

using sncl::netns::sh;

// Two namespaces joined by one veth pair, "veth" in both (perf/common/netns.h).
struct NetnsPair : sncl::netns::TwoHosts {
  NetnsPair() : TwoHosts(kPrefix, {"veth"}) {}
};

// Starts this test binary as rank `rank` inside its namespace (helper test case below).
pid_t spawnHelper(const NetnsPair& net, int rank) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  setenv("SNCL_TEST_NETNS_RANK", std::to_string(rank).c_str(), 1);
  setenv("SNCL_RANK", std::to_string(rank).c_str(), 1);
  setenv("SNCL_COMM_ID", fmt::format("{}:{}", net.addr(0, 0), kBootstrapPort).c_str(), 1);
  setenv("SNCL_SOCKET_IFNAME", "=veth", 1);
  setenv("FI_TCP_IFACE", "veth", 1);
  setenv("SNCL_OFI_PROVIDER", "tcp;ofi_rxm", 1);
  setenv("SNCL_HOSTID", net.ns[rank].c_str(), 1);
  setenv("SNCL_TIMEOUT_MS", "20000", 1);
  execlp("ip", "ip", "netns", "exec", net.ns[rank].c_str(), exe, "[netns-helper]", static_cast<char*>(nullptr));
  _exit(127);
}

// Exit codes of the helpers, -1 for one killed at the deadline.
std::vector<int> waitHelpers(const std::vector<pid_t>& pids) {
  std::vector<int> codes(pids.size(), -1);
  sncl::Deadline deadline = sncl::Deadline::afterMs(kHelperDeadlineMs);
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == 0) {
      if (deadline.expired()) {
        for (pid_t p : pids) kill(p, SIGKILL);
        waitpid(pids[i], &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pids[i] > 0 && status != -1 && WIFEXITED(status)) codes[i] = WEXITSTATUS(status);
  }
  return codes;
}

}  // namespace

TEST_CASE("all-reduce across two network namespaces over ofi tcp on a veth pair", "[ofi][netns]") {
  if (geteuid() != 0) {
    WARN("skipped: creating network namespaces needs root");
    return;
  }
  if (!sh("ip netns list")) {
    WARN("skipped: `ip netns` is not available");
    return;
  }
  sncl::netns::removeStaleNamespaces(kPrefix);
  NetnsPair net;
  std::string why;
  if (!net.create(&why)) {
    WARN("skipped: " << why);
    return;
  }
  const uint64_t txBefore = net.txBytes(0, "veth");
  std::vector<pid_t> pids = {spawnHelper(net, 0), spawnHelper(net, 1)};
  std::vector<int> codes = waitHelpers(pids);
  const uint64_t sent = net.txBytes(0, "veth") - txBefore;
  INFO("namespaces " << net.ns[0] << ", " << net.ns[1] << "; veth of " << net.ns[0] << " sent " << sent << " bytes");
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
  CHECK(sent >= kCount * sizeof(float));
}

// One rank of the test above, run inside its namespace (hidden: only the test starts it).
TEST_CASE("netns helper", "[.][netns-helper]") {
  const char* rankText = getenv("SNCL_TEST_NETNS_RANK");
  REQUIRE(rankText);
  const int rank = atoi(rankText), nranks = 2;
  snclUniqueId id;
  REQUIRE(snclGetUniqueId(&id) == snclSuccess);
  snclComm_t comm = nullptr;
  INFO("rank " << rank);
  REQUIRE(snclCommInitRank(&comm, nranks, id, rank) == snclSuccess);
  for (snclDataType_t type : {snclFloat32, snclInt64}) {
    for (bool inPlace : {false, true}) {
      const size_t count = type == snclFloat32 ? kCount : 1001;
      std::vector<char> in(count * 8), out(count * 8);
      sncl::test::fillInput(type, snclSum, rank, nranks, in.data(), count);
      void* dst = inPlace ? in.data() : out.data();
      CHECK(snclAllReduce(in.data(), dst, count, type, snclSum, comm, nullptr) == snclSuccess);
      CHECK(sncl::test::countWrong(type, snclSum, nranks, dst, count) == 0);
    }
  }
  CHECK(snclCommDestroy(comm) == snclSuccess);
}
