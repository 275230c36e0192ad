// Network plugins (include/sncl/sncl_net.h, transports/plugin/): load errors of broken
// libraries, init failure, and real ranks over the example socket plugin
// (examples/net_plugin) with random sizes, a size mismatch and the threads mode. The
// whole collective suite over the plugin is test_collectives_plugin (tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/error.h"
#include "lib/net/bootstrap.h"
#include "sncl/sncl.h"
#include "tests/util/launcher.h"
#include "transports/plugin/plugin_loader.h"
#include "transports/plugin/plugin_transport.h"

using namespace sncl;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Environment of one rank process: every peer through the example plugin, small pieces so
// that modest sizes cross several of them.
void usePlugin(const char* pieceBytes) {
  setenv("SNCL_TRANSPORT", "plugin", 1);
  setenv("SNCL_NET_PLUGIN", SNCL_NET_EXAMPLE_PATH, 1);
  setenv("SNCL_NET_PLUGIN_CHUNK", pieceBytes, 1);
}

uint8_t patternByte(uint64_t seed, int from, int to, size_t i) {
  return static_cast<uint8_t>((seed * 131 + from * 31 + to * 17 + i * 7 + (i >> 9)) & 0xff);
}

// Sizes chosen by nobody: zero, one, primes, exact multiples of the piece (whose last piece
// is empty), and large, mixed with random ones from the seed.
std::vector<size_t> randomSizes(uint64_t seed, size_t n) {
  std::vector<size_t> sizes = {0, 1, 4093, 8192, 16384, 65537, (1u << 20) + 3};
  std::mt19937_64 rng(seed);
  while (sizes.size() < n) sizes.push_back(rng() % 3 == 0 ? rng() % 64 : rng() % (300u << 10));
  std::shuffle(sizes.begin(), sizes.end(), rng);
  return sizes;
}

}  // namespace

TEST_CASE("plugin: load errors are clear result codes and messages", "[plugin]") {
  std::shared_ptr<plugin::NetPlugin> p;
  SECTION("a missing file") {
    CHECK(plugin::loadNetPlugin("/nonexistent/libsncl-net-nothing.so", &p) == snclInvalidUsage);
    CHECK(contains(lastError(), "/nonexistent/libsncl-net-nothing.so"));
    CHECK(contains(lastError(), "no such file"));
  }
  SECTION("a name the dynamic loader does not find") {
    CHECK(plugin::loadNetPlugin("nosuchplugin", &p) == snclSystemError);
    CHECK(contains(lastError(), "libsncl-net-nosuchplugin.so"));
    CHECK(contains(lastError(), "cannot load"));
  }
  SECTION("a file that is not a shared library") {
    char path[] = "/tmp/sncl-net-notalib-XXXXXX.so";
    int fd = mkstemps(path, 3);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "junk", 4) == 4);
    close(fd);
    CHECK(plugin::loadNetPlugin(path, &p) == snclSystemError);
    CHECK(contains(lastError(), path));
    unlink(path);
  }
  SECTION("no snclNetPlugin_v1 symbol") {
    CHECK(plugin::loadNetPlugin(SNCL_NET_NO_SYMBOL_PATH, &p) == snclInvalidUsage);
    CHECK(contains(lastError(), SNCL_NET_NO_SYMBOL_PATH));
    CHECK(contains(lastError(), "no symbol snclNetPlugin_v1"));
  }
  SECTION("another ABI version") {
    CHECK(plugin::loadNetPlugin(SNCL_NET_WRONG_VERSION_PATH, &p) == snclInvalidUsage);
    CHECK(contains(lastError(), SNCL_NET_WRONG_VERSION_PATH));
    CHECK(contains(lastError(), "ABI version 99, this sncl wants version 1"));
  }
  SECTION("a NULL entry") {
    CHECK(plugin::loadNetPlugin(SNCL_NET_NULL_ENTRY_PATH, &p) == snclInvalidUsage);
    CHECK(contains(lastError(), "snclNetPlugin_v1.test is NULL"));
  }
  SECTION("the example loads, by path") {
    REQUIRE(plugin::loadNetPlugin(SNCL_NET_EXAMPLE_PATH, &p) == snclSuccess);
    CHECK(std::string(p->net->name) == "socket");
  }
  CHECK_FALSE((p && p->net && std::string(p->net->name) != "socket"));
}

TEST_CASE("plugin: init failure and bad configuration fail setup clearly", "[plugin]") {
  snclUniqueId id;
  REQUIRE(bootstrapCreateRoot(&id) == snclSuccess);
  std::unique_ptr<Bootstrap> bs;
  REQUIRE(Bootstrap::connect(id, 0, 1, Deadline::afterMs(10000), &bs) == snclSuccess);
  std::vector<PeerInfo> peers(1);
  TransportContext ctx;
  ctx.rank = 0;
  ctx.nranks = 1;
  ctx.peers = &peers;
  ctx.bootstrap = bs.get();
  ctx.timeoutMs = 10000;
  SECTION("the plugin's init fails: its reason is in the error") {
    // The example listens on SNCL_SOCKET_IFNAME's address (read at init, after the bootstrap).
    const char* old = getenv("SNCL_SOCKET_IFNAME");
    std::string saved = old ? old : "";
    setenv("SNCL_SOCKET_IFNAME", "nosuchif0", 1);
    plugin::PluginTransport t(SNCL_NET_EXAMPLE_PATH);
    Result r = t.setup(ctx, {});
    if (old) setenv("SNCL_SOCKET_IFNAME", saved.c_str(), 1);
    else unsetenv("SNCL_SOCKET_IFNAME");
    CHECK(r == snclSystemError);
    CHECK(contains(lastError(), "init failed"));
    CHECK(contains(lastError(), "nosuchif0"));
  }
  SECTION("a wrong version through setup") {
    plugin::PluginTransport t(SNCL_NET_WRONG_VERSION_PATH);
    CHECK(t.setup(ctx, {}) == snclInvalidUsage);
    CHECK(contains(lastError(), "ABI version 99"));
  }
  SECTION("a piece size that is not a multiple of 64") {
    setenv("SNCL_NET_PLUGIN_CHUNK", "5000", 1);
    plugin::PluginTransport t(SNCL_NET_EXAMPLE_PATH);
    Result r = t.setup(ctx, {});
    unsetenv("SNCL_NET_PLUGIN_CHUNK");
    CHECK(r == snclInvalidArgument);
    CHECK(contains(lastError(), "SNCL_NET_PLUGIN_CHUNK=5000"));
  }
  SECTION("the example sets up alone, and posting after abort fails at once") {
    plugin::PluginTransport t(SNCL_NET_EXAMPLE_PATH);
    REQUIRE(t.setup(ctx, {}) == snclSuccess);
    RequestId req = 0;
    CHECK(t.isend(1, 0, "x", 1, &req) == snclInvalidArgument);  // not a peer of this transport
    t.abort();
    CHECK(t.irecv(0, 0, 1, RecvSink{}, &req) == snclInvalidUsage);
  }
}

TEST_CASE("plugin: comm init errors through the API", "[plugin]") {
  // Each rank in its own process: the environment is the rank's.
  SECTION("SNCL_TRANSPORT=plugin without SNCL_NET_PLUGIN") {
    auto exits = test::runRanks(2, [](int rank, int n, const snclUniqueId& id) {
      setenv("SNCL_TRANSPORT", "plugin", 1);
      unsetenv("SNCL_NET_PLUGIN");
      snclComm_t comm = nullptr;
      snclResult_t r = snclCommInitRank(&comm, n, id, rank);
      const std::string why = snclGetLastError(nullptr);
      if (r != snclInvalidUsage || !contains(why, "needs SNCL_NET_PLUGIN")) {
        fprintf(stderr, "rank %d: got %d: %s\n", rank, r, why.c_str());
        return 1;
      }
      return 0;
    }, 60000);
    CHECK(test::allSucceeded(exits));
  }
  SECTION("a plugin without the symbol fails every rank, naming the file") {
    auto exits = test::runRanks(3, [](int rank, int n, const snclUniqueId& id) {
      setenv("SNCL_TRANSPORT", "plugin", 1);
      setenv("SNCL_NET_PLUGIN", SNCL_NET_NO_SYMBOL_PATH, 1);
      snclComm_t comm = nullptr;
      snclResult_t r = snclCommInitRank(&comm, n, id, rank);
      const std::string why = snclGetLastError(nullptr);
      if (r != snclInvalidUsage || !contains(why, SNCL_NET_NO_SYMBOL_PATH)) {
        fprintf(stderr, "rank %d: got %d: %s\n", rank, r, why.c_str());
        return 1;
      }
      return 0;
    }, 60000);
    CHECK(test::allSucceeded(exits));
  }
  SECTION("one rank cannot load the plugin: the others fail at once, naming it") {
    auto exits = test::runRanks(3, [](int rank, int n, const snclUniqueId& id) {
      setenv("SNCL_TRANSPORT", "plugin", 1);
      setenv("SNCL_NET_PLUGIN", rank == 1 ? "/nonexistent/plugin.so" : SNCL_NET_EXAMPLE_PATH, 1);
      snclComm_t comm = nullptr;
      snclResult_t r = snclCommInitRank(&comm, n, id, rank);
      const std::string why = snclGetLastError(nullptr);
      const bool ok = rank == 1 ? r == snclInvalidUsage && contains(why, "no such file")
                                : r == snclRemoteError && contains(why, "rank 1 could not load");
      if (!ok) {
        fprintf(stderr, "rank %d: got %d: %s\n", rank, r, why.c_str());
        return 1;
      }
      return 0;
    }, 60000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("plugin: random-size Send/Recv and All-Reduce with 4 and 8 ranks", "[plugin][process]") {
  const uint64_t seed = std::random_device{}();
  printf("test_net_plugin: seed %llu\n", static_cast<unsigned long long>(seed));
  for (int nranks : {4, 8}) {
    INFO("nranks " << nranks << ", seed " << seed);
    auto exits = test::runRanks(nranks, [seed](int rank, int n, const snclUniqueId& id) {
      usePlugin("8192");
      snclComm_t comm = nullptr;
      if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) {
        fprintf(stderr, "rank %d: init: %s\n", rank, snclGetLastError(nullptr));
        return 2;
      }
      int failures = 0;
      const auto sizes = randomSizes(seed, 12);
      size_t maxBytes = 0;
      for (size_t s : sizes) maxBytes = std::max(maxBytes, s);
      std::vector<uint8_t> out(maxBytes + 1), in(maxBytes + 1);
      // Send/Recv: at round k every rank sends to rank+k and receives from rank-k, the size
      // a function of the round and the sender, so that pairs differ.
      for (size_t round = 0; round < sizes.size(); ++round) {
        for (int k = 1; k < n; ++k) {
          const int to = (rank + k) % n, from = (rank - k + n) % n;
          const size_t sendBytes = sizes[(round + rank) % sizes.size()];
          const size_t recvBytes = sizes[(round + from) % sizes.size()];
          for (size_t i = 0; i < sendBytes; ++i) out[i] = patternByte(seed + round, rank, to, i);
          std::memset(in.data(), 0xee, recvBytes + 1);
          snclGroupStart();
          snclSend(out.data(), sendBytes, snclUint8, to, comm, nullptr);
          snclRecv(in.data(), recvBytes, snclUint8, from, comm, nullptr);
          if (snclGroupEnd() != snclSuccess) {
            fprintf(stderr, "rank %d: send/recv round %zu k %d: %s\n", rank, round, k, snclGetLastError(comm));
            return 3;
          }
          size_t wrong = 0;
          for (size_t i = 0; i < recvBytes; ++i) wrong += in[i] != patternByte(seed + round, from, rank, i);
          if (in[recvBytes] != 0xee) ++wrong;  // nothing past the message
          if (wrong) {
            fprintf(stderr, "rank %d: %zu wrong bytes of %zu from rank %d (round %zu)\n", rank, wrong, recvBytes,
                    from, round);
            ++failures;
          }
        }
      }
      // All-Reduce of int32 (exact) at every size, direct and pipelined alike.
      for (size_t bytes : sizes) {
        const size_t count = bytes / 4;
        std::vector<int32_t> buf(count + 1), res(count + 1, -1);
        for (size_t i = 0; i < count; ++i) buf[i] = rank * 7 + static_cast<int32_t>(i % 13);
        if (snclAllReduce(buf.data(), res.data(), count, snclInt32, snclSum, comm, nullptr) != snclSuccess) {
          fprintf(stderr, "rank %d: all-reduce of %zu: %s\n", rank, count, snclGetLastError(comm));
          return 4;
        }
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) wrong += res[i] != 7 * n * (n - 1) / 2 + n * static_cast<int32_t>(i % 13);
        if (res[count] != -1) ++wrong;
        if (wrong) {
          fprintf(stderr, "rank %d: all-reduce of %zu: %zu wrong\n", rank, count, wrong);
          ++failures;
        }
      }
      if (snclCommDestroy(comm) != snclSuccess) ++failures;
      return failures ? 1 : 0;
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("plugin: a size mismatch is InvalidArgument naming the peer", "[plugin][process]") {
  int done[2];
  REQUIRE(pipe(done) == 0);
  auto exits = test::runRanks(2, [&done](int rank, int n, const snclUniqueId& id) {
    usePlugin("8192");
    snclComm_t comm = nullptr;
    if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
    std::vector<char> buf(2000, 1);
    int rc = 0;
    if (rank == 0) {
      if (snclSend(buf.data(), 1000, snclUint8, 1, comm, nullptr) != snclSuccess) rc = 3;
      // Stay connected until rank 1 has seen the message (else it may see a closed peer).
      pollfd p{done[0], POLLIN, 0};
      if (poll(&p, 1, 30000) != 1) rc = 4;
    } else {
      snclResult_t r = snclRecv(buf.data(), 2000, snclUint8, 0, comm, nullptr);
      const std::string why = snclGetLastError(comm);
      if (r != snclInvalidArgument || !contains(why, "size mismatch with rank 0")) {
        fprintf(stderr, "rank 1: got %d: %s\n", r, why.c_str());
        rc = 5;
      }
      if (write(done[1], "x", 1) != 1) rc = 6;
    }
    snclCommAbort(comm);
    return rc;
  }, 60000);
  close(done[0]);
  close(done[1]);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("plugin: ranks as threads share one loaded library", "[plugin][threads]") {
  usePlugin("4096");
  const int nranks = 4;
  std::vector<snclComm_t> comms(nranks);
  REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
  const size_t count = 10007;  // prime, several pieces
  std::vector<std::vector<float>> bufs(nranks, std::vector<float>(count));
  std::vector<std::thread> threads;
  std::vector<int> results(nranks, -1);
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      for (size_t i = 0; i < count; ++i) bufs[r][i] = static_cast<float>(r + (i % 5));
      results[r] = snclAllReduce(bufs[r].data(), bufs[r].data(), count, snclFloat32, snclSum, comms[r], nullptr);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    CHECK(results[r] == snclSuccess);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += bufs[r][i] != static_cast<float>(6 + 4 * (i % 5));
    CHECK(wrong == 0);
  }
  for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
  unsetenv("SNCL_TRANSPORT");
  unsetenv("SNCL_NET_PLUGIN");
  unsetenv("SNCL_NET_PLUGIN_CHUNK");
}

TEST_CASE("plugin: SNCL_NET_PLUGIN alone replaces ofi between hosts, not shm inside one", "[plugin][process]") {
  // Two virtual hosts of two ranks (SNCL_HOSTID). A broken plugin proves which pairs use
  // it: between hosts init fails with its version error; on one host it is never loaded.
  struct Case {
    const char* plugin;
    bool twoHosts;
    snclResult_t expect;
  };
  for (Case c : {Case{SNCL_NET_EXAMPLE_PATH, true, snclSuccess}, Case{SNCL_NET_WRONG_VERSION_PATH, true, snclInvalidUsage},
                 Case{SNCL_NET_WRONG_VERSION_PATH, false, snclSuccess}}) {
    INFO(c.plugin << (c.twoHosts ? " on two hosts" : " on one host"));
    auto exits = test::runRanks(4, [c](int rank, int n, const snclUniqueId& id) {
      unsetenv("SNCL_TRANSPORT");
      setenv("SNCL_NET_PLUGIN", c.plugin, 1);
      setenv("SNCL_HOSTID", c.twoHosts && rank >= 2 ? "plugin-test-host-b" : "plugin-test-host-a", 1);
      snclComm_t comm = nullptr;
      snclResult_t r = snclCommInitRank(&comm, n, id, rank);
      if (r != c.expect) {
        fprintf(stderr, "rank %d: init gave %d, %d expected: %s\n", rank, r, c.expect, snclGetLastError(nullptr));
        return 1;
      }
      if (r != snclSuccess) return contains(snclGetLastError(nullptr), "ABI version 99") ? 0 : 2;
      std::vector<int32_t> buf(70001, rank + 1);
      if (snclAllReduce(buf.data(), buf.data(), buf.size(), snclInt32, snclSum, comm, nullptr) != snclSuccess) return 3;
      for (int32_t v : buf)
        if (v != n * (n + 1) / 2) return 4;
      return snclCommDestroy(comm) == snclSuccess ? 0 : 5;
    }, 120000);
    CHECK(test::allSucceeded(exits));
  }
}
