// Bootstrap tests: real processes (fork) or threads meeting at a root on loopback.
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/gather_tree.h"
#include "lib/net/bootstrap.h"
#include "lib/net/bootstrap_wire.h"
#include "lib/net/socket.h"

using namespace sncl;

namespace {

constexpr int kDeadlineMs = 20000;

// Forks one process per rank; rank r runs body(r) and exits with its result (0: passed).
// Ranks still running after timeoutMs are killed and reported as -1. The root must already
// run in this process: children start no threads (TSan forbids that after a threaded fork).
std::vector<int> forkRanks(int nranks, const std::function<int(int rank)>& body, int timeoutMs = 60000) {
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids(static_cast<size_t>(nranks));
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = body(rank);
      fflush(stderr);
      _exit(rc);
    }
    pids[static_cast<size_t>(rank)] = pid;
  }
  std::vector<int> codes(static_cast<size_t>(nranks), -1);
  Deadline deadline = Deadline::afterMs(timeoutMs);
  for (int rank = 0; rank < nranks; ++rank) {
    int status = 0;
    pid_t pid = pids[static_cast<size_t>(rank)];
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (deadline.expired()) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (status != -1 && WIFEXITED(status)) codes[static_cast<size_t>(rank)] = WEXITSTATUS(status);
  }
  return codes;
}

void requireAllPassed(const std::vector<int>& codes) {
  for (size_t rank = 0; rank < codes.size(); ++rank) {
    INFO("rank " << rank << " exited with " << codes[rank]);
    CHECK(codes[rank] == 0);
  }
}

#define CHILD_CHECK(cond)                                                                  \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "child check failed at line %d: %s (last error: %s)\n", __LINE__, #cond, \
              lastError());                                                                \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

snclUniqueId createRoot() {
  snclUniqueId id;
  REQUIRE(bootstrapCreateRoot(&id) == snclSuccess);
  return id;
}

// A loopback port that nobody listens on (bound, read, closed).
int freePort(const char* host = "127.0.0.1:1") {
  SocketAddress address;
  REQUIRE(parseHostPort(host, &address) == snclSuccess);
  if (address.sa.sa_family == AF_INET) address.sin.sin_port = 0;
  else address.sin6.sin6_port = 0;
  Socket listener;
  REQUIRE(Socket::listen(address, false, &listener) == snclSuccess);
  return addressPort(listener.address());
}

uint8_t pattern(int rank, size_t i) { return static_cast<uint8_t>(rank * 31 + i * 7 + 1); }

// Every rank fills its slot, all-gathers, and checks every slot.
int checkAllGather(Bootstrap& bootstrap, size_t bytesPerRank) {
  const int rank = bootstrap.rank();
  const int nranks = bootstrap.nranks();
  std::vector<uint8_t> data(bytesPerRank * static_cast<size_t>(nranks), 0);
  for (size_t i = 0; i < bytesPerRank; ++i) data[static_cast<size_t>(rank) * bytesPerRank + i] = pattern(rank, i);
  CHILD_CHECK(bootstrap.allGather(data.data(), bytesPerRank, Deadline::afterMs(kDeadlineMs)) == snclSuccess);
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < bytesPerRank; ++i) {
      CHILD_CHECK(data[static_cast<size_t>(r) * bytesPerRank + i] == pattern(r, i));
    }
  }
  return 0;
}

int connectAndGather(const snclUniqueId& id, int rank, int nranks) {
  std::unique_ptr<Bootstrap> bootstrap;
  CHILD_CHECK(Bootstrap::connect(id, rank, nranks, Deadline::afterMs(kDeadlineMs), &bootstrap) == snclSuccess);
  if (checkAllGather(*bootstrap, 40) != 0) return 1;
  CHILD_CHECK(bootstrap->barrier(Deadline::afterMs(kDeadlineMs)) == snclSuccess);
  return 0;
}

struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST_CASE("allGather and barrier across processes", "[bootstrap]") {
  const int nranks = GENERATE(1, 2, 3, 5, 8);
  snclUniqueId id = createRoot();
  auto codes = forkRanks(nranks, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap;
    CHILD_CHECK(Bootstrap::connect(id, rank, nranks, Deadline::afterMs(kDeadlineMs), &bootstrap) == snclSuccess);
    CHILD_CHECK(bootstrap->rank() == rank && bootstrap->nranks() == nranks);
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{300000}}) {
      if (checkAllGather(*bootstrap, bytes) != 0) return 1;
      CHILD_CHECK(bootstrap->barrier(Deadline::afterMs(kDeadlineMs)) == snclSuccess);
    }
    return 0;
  });
  INFO("nranks " << nranks);
  requireAllPassed(codes);
}

TEST_CASE("collectives and p2p from two threads per rank", "[bootstrap]") {
  constexpr int nranks = 4;
  snclUniqueId id = createRoot();
  std::vector<int> results(nranks, -1);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < nranks; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<Bootstrap> bootstrap;
      if (Bootstrap::connect(id, rank, nranks, Deadline::afterMs(kDeadlineMs), &bootstrap) != snclSuccess) return;
      // A side thread exchanges p2p messages with the partner rank while collectives run.
      int p2pResult = -1;
      std::thread side([&] {
        const int partner = rank ^ 1;
        for (uint32_t tag = 100; tag < 120; ++tag) {
          uint64_t out = uint64_t{tag} * 1000 + static_cast<uint64_t>(rank);
          uint64_t in = 0;
          auto deadline = Deadline::afterMs(kDeadlineMs);
          if (bootstrap->send(partner, tag, &out, sizeof(out), deadline) != snclSuccess) return;
          if (bootstrap->recv(partner, tag, &in, sizeof(in), deadline) != snclSuccess) return;
          if (in != uint64_t{tag} * 1000 + static_cast<uint64_t>(partner)) return;
        }
        p2pResult = 0;
      });
      int collectiveResult = 0;
      for (int i = 0; i < 20 && collectiveResult == 0; ++i) {
        collectiveResult = checkAllGather(*bootstrap, 64);
        if (bootstrap->barrier(Deadline::afterMs(kDeadlineMs)) != snclSuccess) collectiveResult = 1;
      }
      side.join();
      if (bootstrap->barrier(Deadline::afterMs(kDeadlineMs)) != snclSuccess) return;
      results[static_cast<size_t>(rank)] = collectiveResult | p2pResult;
    });
  }
  for (auto& t : ranks) t.join();
  requireAllPassed(results);
}

TEST_CASE("p2p messages are matched by peer and tag", "[bootstrap]") {
  snclUniqueId id = createRoot();
  auto codes = forkRanks(3, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap;
    CHILD_CHECK(Bootstrap::connect(id, rank, 3, Deadline::afterMs(kDeadlineMs), &bootstrap) == snclSuccess);
    auto deadline = Deadline::afterMs(kDeadlineMs);
    if (rank == 0) {
      for (uint32_t tag : {3u, 1u, 2u}) {
        std::vector<uint8_t> message(tag * 10, static_cast<uint8_t>(tag));
        CHILD_CHECK(bootstrap->send(1, tag, message.data(), message.size(), deadline) == snclSuccess);
      }
      uint64_t eight = 8;
      CHILD_CHECK(bootstrap->send(1, 7, &eight, sizeof(eight), deadline) == snclSuccess);
    } else if (rank == 2) {
      uint8_t fromTwo = 42;
      CHILD_CHECK(bootstrap->send(1, 1, &fromTwo, 1, deadline) == snclSuccess);
    } else {
      // Same tag from another peer first, then tags out of the order they were sent.
      uint8_t fromTwo = 0;
      CHILD_CHECK(bootstrap->recv(2, 1, &fromTwo, 1, deadline) == snclSuccess);
      CHILD_CHECK(fromTwo == 42);
      for (uint32_t tag : {1u, 2u, 3u}) {
        std::vector<uint8_t> message(tag * 10, 0);
        CHILD_CHECK(bootstrap->recv(0, tag, message.data(), message.size(), deadline) == snclSuccess);
        CHILD_CHECK(message == std::vector<uint8_t>(tag * 10, static_cast<uint8_t>(tag)));
      }
      uint32_t tooSmall = 0;
      CHILD_CHECK(bootstrap->recv(0, 7, &tooSmall, sizeof(tooSmall), deadline) == snclInvalidArgument);
      CHILD_CHECK(strstr(lastError(), "has 8 bytes, expected 4"));
      CHILD_CHECK(bootstrap->send(1, 1, &fromTwo, 1, deadline) == snclInvalidArgument);  // self
      CHILD_CHECK(bootstrap->recv(3, 1, &fromTwo, 1, deadline) == snclInvalidArgument);  // out of range
    }
    CHILD_CHECK(bootstrap->barrier(deadline) == snclSuccess);
    return 0;
  });
  requireAllPassed(codes);
}

TEST_CASE("ranks that disagree on nranks all fail with the reason", "[bootstrap]") {
  snclUniqueId id = createRoot();
  auto codes = forkRanks(4, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap;
    const int nranks = rank == 3 ? 8 : 4;
    Result r = Bootstrap::connect(id, rank, nranks, Deadline::afterMs(kDeadlineMs), &bootstrap);
    CHILD_CHECK(r == snclInvalidArgument);
    CHILD_CHECK(strstr(lastError(), "ranks disagree on nranks"));
    CHILD_CHECK(strstr(lastError(), "says 8"));
    return 0;
  });
  requireAllPassed(codes);
}

TEST_CASE("a rank claimed twice fails every rank", "[bootstrap]") {
  snclUniqueId id = createRoot();
  auto codes = forkRanks(3, [&](int child) {
    std::unique_ptr<Bootstrap> bootstrap;
    const int rank = child == 2 ? 1 : child;
    Result r = Bootstrap::connect(id, rank, 3, Deadline::afterMs(kDeadlineMs), &bootstrap);
    CHILD_CHECK(r == snclInvalidArgument);
    CHILD_CHECK(strstr(lastError(), "rank 1 was claimed twice"));
    return 0;
  });
  requireAllPassed(codes);
}

TEST_CASE("bad arguments and garbage ids fail before connecting", "[bootstrap]") {
  // A listener stands in for the root, to check that nobody connected to it.
  const int port = freePort();
  SocketAddress address;
  REQUIRE(parseHostPort(fmt::format("127.0.0.1:{}", port), &address) == snclSuccess);
  Socket fakeRoot;
  REQUIRE(Socket::listen(address, true, &fakeRoot) == snclSuccess);
  snclUniqueId valid;
  {
    ScopedEnv commId("SNCL_COMM_ID", fmt::format("127.0.0.1:{}", port));
    REQUIRE(bootstrapIdFromEnv(&valid, false) == snclSuccess);
  }
  REQUIRE(bootstrapCheckId(valid) == snclSuccess);
  std::unique_ptr<Bootstrap> bootstrap;
  auto deadline = Deadline::afterMs(kDeadlineMs);

  SECTION("rank and nranks") {
    CHECK(Bootstrap::connect(valid, -1, 4, deadline, &bootstrap) == snclInvalidArgument);
    CHECK(std::string(lastError()) == "rank -1 is out of range for nranks 4");
    CHECK(Bootstrap::connect(valid, 4, 4, deadline, &bootstrap) == snclInvalidArgument);
    CHECK(Bootstrap::connect(valid, 0, 0, deadline, &bootstrap) == snclInvalidArgument);
  }
  SECTION("random bytes") {
    snclUniqueId garbage;
    REQUIRE(getrandom(garbage.internal, sizeof(garbage.internal), 0) == sizeof(garbage.internal));
    CHECK(bootstrapCheckId(garbage) == snclInvalidArgument);
    CHECK(Bootstrap::connect(garbage, 0, 2, deadline, &bootstrap) == snclInvalidArgument);
    CHECK(strstr(lastError(), "unique id"));
    snclUniqueId zeros{};
    CHECK(Bootstrap::connect(zeros, 0, 2, deadline, &bootstrap) == snclInvalidArgument);
  }
  SECTION("one flipped byte anywhere") {
    for (size_t i = 0; i < sizeof(valid.internal); ++i) {
      snclUniqueId corrupt = valid;
      corrupt.internal[i] ^= 0x10;
      INFO("byte " << i);
      CHECK(bootstrapCheckId(corrupt) == snclInvalidArgument);
      CHECK(Bootstrap::connect(corrupt, 0, 2, deadline, &bootstrap) == snclInvalidArgument);
    }
  }
  CHECK(!bootstrap);
  CHECK(pollFd(fakeRoot.fd(), POLLIN, Deadline::afterMs(0), nullptr) == PollStatus::Timeout);
}

TEST_CASE("an unreachable root is a fast timeout", "[bootstrap]") {
  const int port = freePort();
  const std::string where = fmt::format("127.0.0.1:{}", port);
  snclUniqueId id;
  {
    ScopedEnv commId("SNCL_COMM_ID", where);
    REQUIRE(bootstrapIdFromEnv(&id, false) == snclSuccess);
  }
  std::unique_ptr<Bootstrap> bootstrap;
  const auto start = Clock::now();
  CHECK(Bootstrap::connect(id, 0, 2, Deadline::afterMs(500), &bootstrap) == snclTimeout);
  CHECK(Clock::now() - start < std::chrono::milliseconds(2000));
  CHECK_THAT(lastError(), Catch::Contains(where) && Catch::Contains("timed out"));
}

TEST_CASE("a wrong secret or a stray client does not disturb a rendezvous", "[bootstrap]") {
  const int port = freePort();
  const std::string where = fmt::format("127.0.0.1:{}", port);
  ScopedEnv commId("SNCL_COMM_ID", where);
  snclUniqueId good;
  snclUniqueId bad;
  {
    ScopedEnv secret("SNCL_COMM_SECRET", "good");
    REQUIRE(bootstrapIdFromEnv(&good, true) == snclSuccess);
  }
  {
    ScopedEnv secret("SNCL_COMM_SECRET", "bad");
    REQUIRE(bootstrapIdFromEnv(&bad, false) == snclSuccess);
  }
  // A client that sends a few bytes of garbage and one that sends nothing, both kept open.
  SocketAddress rootAddress;
  REQUIRE(parseHostPort(where, &rootAddress) == snclSuccess);
  Socket garbage;
  Socket silent;
  REQUIRE(Socket::connect(rootAddress, Deadline::afterMs(kDeadlineMs), &garbage) == snclSuccess);
  REQUIRE(garbage.sendAll("garbage", 7, Deadline::afterMs(kDeadlineMs)) == snclSuccess);
  REQUIRE(Socket::connect(rootAddress, Deadline::afterMs(kDeadlineMs), &silent) == snclSuccess);

  std::unique_ptr<Bootstrap> intruder;
  CHECK(Bootstrap::connect(bad, 0, 2, Deadline::afterMs(5000), &intruder) == snclRemoteError);
  CHECK_THAT(lastError(), Catch::Contains("closed the connection"));

  requireAllPassed(forkRanks(2, [&](int rank) { return connectAndGather(good, rank, 2); }));
}

TEST_CASE("SNCL_COMM_ID rendezvous, ranks starting before the root", "[bootstrap]") {
  auto [host, family] = GENERATE(table<std::string, std::string>(
      {{"127.0.0.1", "AF_INET"}, {"[::1]", "AF_INET6"}, {"localhost", "AF_INET"}}));
  const std::string loopback = family == "AF_INET6" ? "[::1]:1" : "127.0.0.1:1";
  ScopedEnv commId("SNCL_COMM_ID", fmt::format("{}:{}", host, freePort(loopback.c_str())));
  ScopedEnv socketFamily("SNCL_SOCKET_FAMILY", family);
  INFO("SNCL_COMM_ID=" << getenv("SNCL_COMM_ID"));
  // Children are forked first: their connects are refused until the root below listens.
  std::thread root([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    snclUniqueId id;
    CHECK(bootstrapIdFromEnv(&id, true) == snclSuccess);
  });
  auto codes = forkRanks(3, [&](int rank) {
    snclUniqueId id;
    CHILD_CHECK(bootstrapIdFromEnv(&id, false) == snclSuccess);
    return connectAndGather(id, rank, 3);
  });
  root.join();
  requireAllPassed(codes);
}

TEST_CASE("a single rank needs no peers", "[bootstrap]") {
  snclUniqueId id = createRoot();
  std::unique_ptr<Bootstrap> bootstrap;
  REQUIRE(Bootstrap::connect(id, 0, 1, Deadline::afterMs(kDeadlineMs), &bootstrap) == snclSuccess);
  CHECK(checkAllGather(*bootstrap, 16) == 0);
  CHECK(bootstrap->barrier(Deadline::afterMs(kDeadlineMs)) == snclSuccess);
  int x = 0;
  CHECK(bootstrap->send(0, 1, &x, sizeof(x), Deadline::afterMs(100)) == snclInvalidArgument);
}

TEST_CASE("abort unblocks a recv waiting in another thread", "[bootstrap]") {
  const bool connected = GENERATE(false, true);
  INFO((connected ? "on an established connection" : "before the peer connected"));
  snclUniqueId id = createRoot();
  std::unique_ptr<Bootstrap> bootstraps[2];
  std::thread other([&] {
    Bootstrap::connect(id, 0, 2, Deadline::afterMs(kDeadlineMs), &bootstraps[0]);
  });
  REQUIRE(Bootstrap::connect(id, 1, 2, Deadline::afterMs(kDeadlineMs), &bootstraps[1]) == snclSuccess);
  other.join();
  REQUIRE(bootstraps[0]);
  if (connected) {
    std::thread peer([&] { bootstraps[0]->barrier(Deadline::afterMs(kDeadlineMs)); });
    REQUIRE(bootstraps[1]->barrier(Deadline::afterMs(kDeadlineMs)) == snclSuccess);
    peer.join();
  }
  Result blocked = snclSuccess;
  auto start = Clock::now();
  std::thread waiter([&] {
    int x = 0;
    blocked = bootstraps[1]->recv(0, 5, &x, sizeof(x), Deadline::afterMs(kDeadlineMs));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  bootstraps[1]->abort();
  waiter.join();
  CHECK(blocked == snclInvalidUsage);
  CHECK(Clock::now() - start < std::chrono::milliseconds(1500));
  int x = 0;
  CHECK(bootstraps[1]->send(0, 1, &x, sizeof(x), Deadline::afterMs(kDeadlineMs)) == snclInvalidUsage);
  CHECK(bootstraps[1]->barrier(Deadline::afterMs(kDeadlineMs)) == snclInvalidUsage);
  CHECK_THAT(lastError(), Catch::Contains("aborted"));
  // The survivor sees the aborted rank's connection die instead of hanging.
  start = Clock::now();
  CHECK(bootstraps[0]->barrier(Deadline::afterMs(1000)) != snclSuccess);
  bootstraps[0].reset();
  bootstraps[1].reset();
  CHECK(Clock::now() - start < std::chrono::milliseconds(2000));
}

TEST_CASE("a peer that exits is an error, not a hang", "[bootstrap]") {
  snclUniqueId id = createRoot();
  auto codes = forkRanks(2, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap;
    CHILD_CHECK(Bootstrap::connect(id, rank, 2, Deadline::afterMs(kDeadlineMs), &bootstrap) == snclSuccess);
    CHILD_CHECK(bootstrap->barrier(Deadline::afterMs(kDeadlineMs)) == snclSuccess);
    if (rank == 1) return 0;
    const auto start = Clock::now();
    int x = 0;
    CHILD_CHECK(bootstrap->recv(1, 9, &x, sizeof(x), Deadline::afterMs(kDeadlineMs)) == snclRemoteError);
    CHILD_CHECK(strstr(lastError(), "closed the connection"));
    CHILD_CHECK(Clock::now() - start < std::chrono::milliseconds(5000));
    return 0;
  });
  requireAllPassed(codes);
}

// ---- The rendezvous down the tree: a missing or stuck rank fails the ranks that wait on
// it, with its name, before their deadline. ----

namespace {

uint64_t testSeed() {
  const char* s = getenv("SNCL_TEST_SEED");
  const uint64_t seed = s ? strtoull(s, nullptr, 10) : std::random_device{}();
  printf("test_bootstrap seed %llu (SNCL_TEST_SEED to repeat)\n", static_cast<unsigned long long>(seed));
  return seed;
}

// A rank that says a valid hello to the root and then does nothing: its listener accepts
// nothing (connects still succeed, into the backlog) and it never passes the table on.
struct StuckRank {
  Socket listener, root;
  StuckRank(const snclUniqueId& id, int rank, int nranks) {
    SocketAddress address;
    REQUIRE(parseHostPort("127.0.0.1:1", &address) == snclSuccess);
    address.sin.sin_port = 0;  // any free port
    REQUIRE(Socket::listen(address, false, &listener) == snclSuccess);
    const wire::IdLayout layout = wire::decodeId(id);
    REQUIRE(Socket::connect(layout.root, Deadline::afterMs(kDeadlineMs), &root) == snclSuccess);
    wire::RootHello hello{wire::kHelloMagic, layout.secret, rank, nranks, listener.address()};
    REQUIRE(root.sendAll(&hello, sizeof(hello), Deadline::afterMs(kDeadlineMs)) == snclSuccess);
  }
};

}  // namespace

TEST_CASE("a rank that never arrives fails the others, named, before their deadline", "[bootstrap]") {
  std::mt19937_64 rng(testSeed());
  const int nranks = int(rng() % 7) + 2;  // 2..8
  const int missing = int(rng() % uint64_t(nranks));
  INFO("nranks " << nranks << ", rank " << missing << " never arrives");
  snclUniqueId id = createRoot();
  const std::string expected = fmt::format("rank {} never arrived at the root", missing);
  auto codes = forkRanks(nranks - 1, [&](int child) {
    const int rank = child < missing ? child : child + 1;
    std::unique_ptr<Bootstrap> bootstrap;
    const auto start = Clock::now();
    Result r = Bootstrap::connect(id, rank, nranks, Deadline::afterMs(3000), &bootstrap);
    CHILD_CHECK(r == snclTimeout);
    CHILD_CHECK(strstr(lastError(), expected.c_str()));
    CHILD_CHECK(Clock::now() - start < std::chrono::milliseconds(3500));
    return 0;
  });
  requireAllPassed(codes);
}

TEST_CASE("a rank stuck after its hello fails its whole subtree, named", "[bootstrap]") {
  std::mt19937_64 rng(testSeed());
  const int nranks = int(rng() % 6) + 4;  // 4..9
  std::vector<int> parents;  // ranks with a subtree below them (rank 0 is the real root's child)
  for (int r = 1; r < nranks; ++r)
    if (gather_tree::subtreeSize(r, nranks) > 1) parents.push_back(r);
  const int stuck = parents[rng() % parents.size()];
  const int end = stuck + gather_tree::subtreeSize(stuck, nranks);
  INFO("nranks " << nranks << ", rank " << stuck << " is stuck; its subtree ends before " << end);
  snclUniqueId id = createRoot();
  StuckRank fake(id, stuck, nranks);
  const std::string expected = fmt::format("rank {} did not pass the address table on to rank", stuck);
  auto codes = forkRanks(nranks - 1, [&](int child) {
    const int rank = child < stuck ? child : child + 1;
    std::unique_ptr<Bootstrap> bootstrap;
    const auto start = Clock::now();
    Result r = Bootstrap::connect(id, rank, nranks, Deadline::afterMs(4000), &bootstrap);
    if (rank < stuck || rank >= end) {  // outside the subtree: the table reached it
      CHILD_CHECK(r == snclSuccess);
      return 0;
    }
    CHILD_CHECK(r == snclRemoteError);
    CHILD_CHECK(strstr(lastError(), expected.c_str()));
    CHILD_CHECK(Clock::now() - start < std::chrono::milliseconds(4500));
    return 0;
  });
  requireAllPassed(codes);
}

TEST_CASE("a rank that leaves before all arrived fails everyone, named", "[bootstrap]") {
  std::mt19937_64 rng(testSeed());
  const int nranks = int(rng() % 7) + 2;  // 2..8
  const int leaver = int(rng() % uint64_t(nranks));
  INFO("nranks " << nranks << ", rank " << leaver << " leaves");
  snclUniqueId id = createRoot();
  { StuckRank gone(id, leaver, nranks); }  // hello, then both sockets close
  // Before the others arrive (were all in first, the close would mean "has the table").
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string expected = fmt::format("rank {} left the rendezvous before all ranks arrived", leaver);
  auto codes = forkRanks(nranks - 1, [&](int child) {
    const int rank = child < leaver ? child : child + 1;
    std::unique_ptr<Bootstrap> bootstrap;
    Result r = Bootstrap::connect(id, rank, nranks, Deadline::afterMs(kDeadlineMs), &bootstrap);
    CHILD_CHECK(r == snclRemoteError);
    CHILD_CHECK(strstr(lastError(), expected.c_str()));
    return 0;
  });
  requireAllPassed(codes);
}
