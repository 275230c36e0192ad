// The ofi transport on its own: ranks as threads meeting over the real bootstrap, messages
// through the Transport interface, on every provider that works on loopback here, with
// every registration policy, tagged and FI_MSG; and its failures (bad provider, peers
// that do not resolve or answer, mismatched messages, abort).
#include <netinet/in.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/error.h"
#include "lib/net/bootstrap.h"
#include "tests/util/requests.h"
#include "transports/ofi/ofi.h"
#include "transports/ofi/ofi_fabric.h"

using namespace sncl;

namespace {

constexpr int kDeadlineMs = 20000;

// Forwards to the real bootstrap; tamper may rewrite the gathered slots (fake addresses).
class TamperingBootstrap : public Bootstrap {
 public:
  TamperingBootstrap(std::unique_ptr<Bootstrap> inner, std::function<void(void*, size_t)> tamper)
      : Bootstrap(inner->rank(), inner->nranks()), inner_(std::move(inner)), tamper_(std::move(tamper)) {}
  Result allGather(void* data, size_t bytesPerRank, Deadline deadline) override {
    SNCL_CHECK(inner_->allGather(data, bytesPerRank, deadline));
    if (tamper_) tamper_(data, bytesPerRank);
    return snclSuccess;
  }
  Result barrier(Deadline deadline) override { return inner_->barrier(deadline); }
  Result send(int peer, uint32_t tag, const void* data, size_t bytes, Deadline deadline) override {
    return inner_->send(peer, tag, data, bytes, deadline);
  }
  Result recv(int peer, uint32_t tag, void* data, size_t bytes, Deadline deadline) override {
    return inner_->recv(peer, tag, data, bytes, deadline);
  }
  Result tryRecv(int peer, uint32_t tag, void* data, size_t bytes, bool* got) override {
    return inner_->tryRecv(peer, tag, data, bytes, got);
  }
  void abort() override { inner_->abort(); }

 private:
  std::unique_ptr<Bootstrap> inner_;
  std::function<void(void*, size_t)> tamper_;
};

struct Rank {
  int rank = 0;
  int nranks = 0;
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Transport> transport;
  Result setupResult = snclInternalError;
  std::string setupError;
  std::atomic<int>* finished = nullptr;  // ranks done with their exchange (shared by runRanks' threads)
};

// Runs nranks threads; each connects a bootstrap, sets up an ofi transport with options
// (all other ranks as peers, unless peersOf says otherwise) and runs body.
void runRanks(int nranks, const OfiOptions& options, const std::function<void(Rank&)>& body,
              std::function<void(int rank, void*, size_t)> tamper = nullptr, int64_t timeoutMs = kDeadlineMs) {
  snclUniqueId id;
  REQUIRE(bootstrapCreateRoot(&id) == snclSuccess);
  std::vector<Rank> ranks(nranks);
  std::vector<PeerInfo> infos(nranks);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = ranks[r];
      me.rank = r;
      me.nranks = nranks;
      me.finished = &finished;
      std::unique_ptr<Bootstrap> bs;
      if (Bootstrap::connect(id, r, nranks, Deadline::afterMs(kDeadlineMs), &bs) != snclSuccess) {
        me.setupError = lastError();
        return;
      }
      if (tamper)
        bs = std::make_unique<TamperingBootstrap>(std::move(bs), [&, r](void* d, size_t b) { tamper(r, d, b); });
      me.bootstrap = std::move(bs);
      me.transport = createOfiTransport(options);
      TransportContext ctx;
      ctx.rank = r;
      ctx.nranks = nranks;
      ctx.commId = 0x5eed;
      ctx.commName = "test";
      ctx.peers = &infos;
      ctx.bootstrap = me.bootstrap.get();
      ctx.timeoutMs = timeoutMs;
      std::vector<int> peers;
      for (int p = 0; p < nranks; ++p)
        if (p != r) peers.push_back(p);
      me.setupResult = me.transport->setup(ctx, peers);
      if (me.setupResult != snclSuccess) me.setupError = lastError();
      body(me);
    });
  }
  for (auto& t : threads) t.join();
}

// Collects what a sink receives, checking the RecvSink contract (in order, 64-byte multiples).
// A direct collector (its data named as the sink's dst) may see only some fragments: the
// transport writes the others into data itself.
struct Collector {
  std::vector<unsigned char> data;
  size_t next = 0;
  size_t copied = 0;  // bytes handed to deliver
  bool direct = false;
  bool contractBroken = false;
  static void deliver(void* ctx, size_t offset, const void* bytes, size_t n) {
    auto* c = static_cast<Collector*>(ctx);
    if ((c->direct ? offset < c->next : offset != c->next) || offset % 64 ||
        (offset + n < c->data.size() && n % 64) || offset + n > c->data.size()) {
      c->contractBroken = true;
      return;
    }
    memcpy(c->data.data() + offset, bytes, n);
    c->next = offset + n;
    c->copied += n;
  }
  RecvSink sink() { return {deliver, this, direct ? data.data() : nullptr}; }
};

unsigned char pattern(int from, size_t msg, size_t i) { return static_cast<unsigned char>(from * 31 + msg * 7 + i * 13); }

// Waits for every request (tests/util/requests.h) and empties reqs; returns the
// first failure (with the transport's message in lastError()).
Result waitAll(Transport& t, std::vector<RequestId>& reqs, int64_t timeoutMs = kDeadlineMs) {
  const Result r = test::completeAll(t, reqs, timeoutMs);
  if (r == snclSuccess) reqs.clear();
  return r;
}

// Every rank sends sizes.size() messages to every other rank at once and checks what it receives.
int exchange(Rank& me, const std::vector<size_t>& sizes) {
  auto giveUp = [&] {  // no rank waits for this one to finish
    me.finished->fetch_add(1);
    return 1;
  };
  if (me.setupResult != snclSuccess) {
    fprintf(stderr, "rank %d: setup failed: %s\n", me.rank, me.setupError.c_str());
    return giveUp();
  }
  std::vector<std::vector<unsigned char>> out;
  std::vector<Collector> in(sizes.size() * me.nranks);
  std::vector<RequestId> reqs;
  for (int p = 0; p < me.nranks; ++p) {
    if (p == me.rank) continue;
    for (size_t m = 0; m < sizes.size(); ++m) {
      Collector& c = in[p * sizes.size() + m];
      c.data.assign(sizes[m], 0);
      c.direct = m % 2 == 1;  // every other receive names its buffer
      RequestId id;
      if (me.transport->irecv(p, (m << 8) | 1, sizes[m], c.sink(), &id) != snclSuccess) return giveUp();
      reqs.push_back(id);
      out.emplace_back(sizes[m]);
      for (size_t i = 0; i < sizes[m]; ++i) out.back()[i] = pattern(me.rank, m, i);
      if (me.transport->isend(p, (m << 8) | 1, out.back().data(), sizes[m], &id) != snclSuccess) return giveUp();
      reqs.push_back(id);
    }
  }
  const Result waited = waitAll(*me.transport, reqs);
  // Keep driving the transport until every rank has all it waited for, as a comm's ranks
  // do by going on to their next call. Under manual progress a sender's completion may need
  // the receiver's: ofi_rxd acknowledges only inside the receiver's completion-queue reads,
  // so when its last ack is lost (udp drops datagrams under load; rxd drops an ack it cannot
  // post) the retransmission is answered only if the receiver reads again. A rank that
  // stopped here once its own requests were done left a peer's last send pending for good.
  me.finished->fetch_add(1);
  const Deadline linger = Deadline::afterMs(kDeadlineMs);
  while (me.finished->load() < me.nranks && !linger.expired()) me.transport->wait(1000);
  if (waited != snclSuccess) {
    fprintf(stderr, "rank %d: %s\n", me.rank, lastError());
    return 1;
  }
  int wrong = 0;
  for (int p = 0; p < me.nranks; ++p) {
    if (p == me.rank) continue;
    for (size_t m = 0; m < sizes.size(); ++m) {
      const Collector& c = in[p * sizes.size() + m];
      bool ok = !c.contractBroken && (c.direct || c.next == sizes[m]);
      for (size_t i = 0; ok && i < sizes[m]; ++i) ok = c.data[i] == pattern(p, m, i);
      if (!ok) {
        fprintf(stderr, "rank %d: message %zu (%zu bytes) from rank %d is wrong\n", me.rank, m, sizes[m], p);
        ++wrong;
      }
    }
  }
  return wrong;
}

const std::vector<size_t> kSizes = {0, 1, 63, 64, 4095, 4096, 4097, 65536 + 8, (1u << 20) + 3, 3u << 20};

// What setup returned on each of two ranks, nothing exchanged after it.
struct SetupOutcome {
  std::vector<Result> results = std::vector<Result>(2);
  std::vector<std::string> errors = std::vector<std::string>(2);
};
SetupOutcome setupTwoRanks(const OfiOptions& o) {
  SetupOutcome out;
  runRanks(2, o, [&](Rank& me) {
    out.results[me.rank] = me.setupResult;
    out.errors[me.rank] = me.setupError;
  });
  return out;
}

bool providerWorks(const std::string& provider) {
  return ofi::availableProviders("127.0.0.1").find(provider) != std::string::npos;
}

}  // namespace

TEST_CASE("ofi moves messages exactly over each provider and registration policy", "[ofi][transport]") {
  struct Case {
    std::string provider;
    bool tagged;
    OfiMrPolicy mr;
  };
  const std::vector<Case> cases = {
      {"tcp;ofi_rxm", true, OfiMrPolicy::Auto},  {"tcp;ofi_rxm", true, OfiMrPolicy::Cache},
      {"tcp;ofi_rxm", true, OfiMrPolicy::Bounce}, {"tcp;ofi_rxm", false, OfiMrPolicy::Auto},
      {"udp;ofi_rxd", true, OfiMrPolicy::Auto},  {"shm", true, OfiMrPolicy::Auto},
      {"shm", false, OfiMrPolicy::Cache},        {"sockets", true, OfiMrPolicy::Auto},
  };
  for (const Case& c : cases) {
    if (!providerWorks(c.provider)) {
      WARN("provider " << c.provider << " is not available here; skipped");
      continue;
    }
    INFO("provider " << c.provider << (c.tagged ? " tagged" : " msg") << " mr " << static_cast<int>(c.mr));
    OfiOptions o;
    o.provider = c.provider;
    o.tagged = c.tagged;
    o.mr = c.mr;
    o.chunkBytes = 256 << 10;  // 3 MiB messages stream through the window of 2 slots, or of 1
    o.slots = c.tagged ? 2 : 1;
    for (int nranks : {2, 3}) {
      // udp;ofi_rxd (libfabric 1.17) at 3 ranks under ASan's slowdown once stalled with every
      // request of every rank pending, then spun in fi_close for good: 2 ranks only.
      if (nranks == 3 && c.provider == "udp;ofi_rxd") continue;
      // Named on stderr before it runs: a run that hangs (and is killed) says where.
      fprintf(stderr, "ofi transport: %s, %s, mr %d, %d ranks\n", c.provider.c_str(), c.tagged ? "tagged" : "msg",
              static_cast<int>(c.mr), nranks);
      std::vector<int> wrong(nranks, -1);
      runRanks(nranks, o, [&](Rank& me) { wrong[me.rank] = exchange(me, kSizes); });
      for (int r = 0; r < nranks; ++r) CHECK(wrong[r] == 0);
    }
  }
}

// A receive that names its buffer takes every chunk above the eager limit (128 KiB) there.
// Posted before its message is sent: the slots already posted for it are cancelled and
// posted again into the buffer, the later chunks are posted there directly, and only the
// small last chunk is copied out of a slot. Posted late, after the first chunks were
// matched to their slots: those are copied, the rest land directly, in order. Random
// sizes; the window (2 slots of 256 KiB) is smaller than the message, and a second
// message follows at once on the same stream.
TEST_CASE("ofi: a plain receive lands in the caller's buffer, posted early or late", "[ofi][transport]") {
  OfiOptions o;
  o.provider = "tcp;ofi_rxm";
  o.chunkBytes = 256 << 10;
  o.slots = 2;
  std::mt19937_64 rng(Catch::rngSeed());
  for (int round = 0; round < 6; ++round) {
    const bool late = round % 2 == 1;
    const size_t chunk = o.chunkBytes;
    std::vector<size_t> sizes = {chunk * (3 + rng() % 9) + 1 + rng() % 4095, chunk * (1 + rng() % 3) + 97};
    INFO("sizes " << sizes[0] << ", " << sizes[1] << (late ? ", receives posted late" : ""));
    std::vector<int> ok(2, 0);
    std::vector<size_t> copied(2, 0);
    runRanks(2, o, [&](Rank& me) {
      if (me.setupResult != snclSuccess) return;
      const Deadline deadline = Deadline::afterMs(kDeadlineMs);
      std::vector<RequestId> reqs(sizes.size());
      if (me.rank == 0) {
        std::vector<std::vector<unsigned char>> out;
        for (size_t m = 0; m < sizes.size(); ++m) {
          out.emplace_back(sizes[m]);
          for (size_t i = 0; i < sizes[m]; ++i) out.back()[i] = pattern(0, m, i);
        }
        if (!late && me.bootstrap->barrier(deadline) != snclSuccess) return;  // rank 1's receives are posted
        for (size_t m = 0; m < sizes.size(); ++m)
          if (me.transport->isend(1, 5, out[m].data(), sizes[m], &reqs[m]) != snclSuccess) return;
        if (late && me.bootstrap->barrier(deadline) != snclSuccess) return;  // the sends are out
        ok[0] = waitAll(*me.transport, reqs) == snclSuccess;
        return;
      }
      std::vector<Collector> in(sizes.size());
      auto post = [&] {
        for (size_t m = 0; m < sizes.size(); ++m) {
          in[m].data.assign(sizes[m], 0);
          in[m].direct = true;
          if (me.transport->irecv(0, 5, sizes[m], in[m].sink(), &reqs[m]) != snclSuccess) return false;
        }
        return true;
      };
      if (!late && !post()) return;
      me.transport->wait(1000);  // early: reads the cancellations; late: matches the first chunks to slots
      if (me.bootstrap->barrier(deadline) != snclSuccess) return;
      if (late) {
        for (int i = 0; i < 20; ++i) me.transport->wait(1000);
        if (!post()) return;
      }
      if (waitAll(*me.transport, reqs) != snclSuccess) return;
      bool exact = true;
      for (size_t m = 0; m < sizes.size(); ++m) {
        exact = exact && !in[m].contractBroken;
        for (size_t i = 0; exact && i < sizes[m]; ++i) exact = in[m].data[i] == pattern(0, m, i);
        copied[m] = in[m].copied;
      }
      ok[1] = exact;
    });
    CHECK(ok[0] == 1);
    CHECK(ok[1] == 1);
    if (!late)
      for (size_t m = 0; m < sizes.size(); ++m) CHECK(copied[m] == sizes[m] % o.chunkBytes);  // the last chunk only
    else
      CHECK(copied[0] < sizes[0]);  // the chunks past the window still land directly
  }
}

// A stranger (an endpoint of another job, say a replaced rank's old sender still
// retransmitting to a port the kernel has since given to this job) sends a chunk with
// the tag of rank 1's first slot for rank 0. Receives directed at their peer never
// match it: the exchange that follows is exact. Undirected, rank 1 took the stranger's
// oversized chunk into that slot and failed rank 0 (FI_ETRUNC).
TEST_CASE("ofi: a stranger's chunk that reaches a rank's endpoint matches none of its receives", "[ofi][transport]") {
  for (const char* provider : {"tcp;ofi_rxm", "udp;ofi_rxd"}) {
    if (!providerWorks(provider)) {
      WARN("provider " << provider << " is not available here; skipped");
      continue;
    }
    INFO("provider " << provider);
    OfiOptions o;
    o.provider = provider;
    o.chunkBytes = 4096;  // the stranger's 8 KiB chunk is larger than a slot
    o.slots = 2;
    std::mutex mu;
    ofi::AddressRecord target{};
    std::atomic<bool> haveTarget{false}, strangerSent{false}, rank1Ready{false}, done{false};
    std::string strangerError = "never ran";
    ssize_t strangerPosted = -1;
    const auto waitFor = [](const std::atomic<bool>& flag) {
      const Deadline d = Deadline::afterMs(kDeadlineMs);
      while (!flag.load() && !d.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return flag.load();
    };
    std::thread stranger([&] {
      if (!waitFor(haveTarget)) return;
      ofi::Fabric fabric;
      fi_addr_t addr = 0;
      std::vector<char> chunk(8192, 'x');
      fid_mr* mr = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (fabric.open(o, "127.0.0.1", 1, 64) != snclSuccess || fabric.insert(target, 1, &addr) != snclSuccess ||
            fi_mr_reg(fabric.domain(), chunk.data(), chunk.size(), FI_SEND, 0, 0, 0, &mr, nullptr) != 0) {
          strangerError = lastError();
          return;
        }
      }
      fi_context2 ctx{};
      const Deadline d = Deadline::afterMs(kDeadlineMs);
      ssize_t rc = -FI_EAGAIN;
      while (rc == -FI_EAGAIN && !d.expired()) {
        rc = fi_tsenddata(fabric.ep(), chunk.data(), chunk.size(), fi_mr_desc(mr), 0, addr, 0 /* rank 0, chunk 0 */, &ctx);
        fi_cq_tagged_entry e;
        if (rc == -FI_EAGAIN) fi_cq_read(fabric.cq(), &e, 1);
      }
      strangerPosted = rc;
      strangerSent = true;
      while (!done.load() && !d.expired()) {  // its connection and retransmissions need progress
        fi_cq_tagged_entry e;
        fi_cq_read(fabric.cq(), &e, 1);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      fabric.closeEndpoint();
      fi_close(&mr->fid);
      strangerError = "";
    });
    std::vector<int> wrong(2, -1);
    runRanks(
        2, o,
        [&](Rank& me) {
          if (me.rank == 1) {
            // The stranger's chunk arrives first, while rank 1's slots wait for rank 0; its
            // connection needs rank 1's progress.
            const Deadline d = Deadline::afterMs(kDeadlineMs);
            while (!strangerSent.load() && !d.expired()) me.transport->wait(20);
            const Deadline settle = Deadline::afterMs(300);
            while (!settle.expired()) me.transport->wait(20);
            rank1Ready = true;
          } else {
            waitFor(rank1Ready);
          }
          wrong[me.rank] = exchange(me, {0, 1, 4096, 4097, 12288 + 5});
        },
        [&](int rank, void* data, size_t bytes) {
          if (rank != 0 || bytes != sizeof(ofi::AddressRecord)) return;
          std::lock_guard<std::mutex> lock(mu);
          target = static_cast<ofi::AddressRecord*>(data)[1];
          haveTarget = true;
        });
    done = true;
    stranger.join();
    INFO("stranger: " << strangerError);
    REQUIRE(strangerPosted == 0);
    CHECK(wrong[0] == 0);
    CHECK(wrong[1] == 0);
  }
}

TEST_CASE("ofi: an unavailable provider is an error that lists the available ones", "[ofi][errors]") {
  OfiOptions o;
  o.provider = "no-such-provider";
  const SetupOutcome setup = setupTwoRanks(o);
  for (int r = 0; r < 2; ++r) {
    CHECK(setup.results[r] == snclInvalidArgument);
    CHECK_THAT(setup.errors[r], Catch::Contains("no-such-provider") && Catch::Contains("available: ") &&
                              Catch::Contains("tcp;ofi_rxm"));
  }
}

TEST_CASE("ofi: SNCL_OFI_SLOTS outside 1..1024 or malformed fails setup naming it", "[ofi][errors]") {
  for (const char* value : {"0", "1025", "-3", "four", "4x"}) {
    INFO("SNCL_OFI_SLOTS=" << value);
    setenv("SNCL_OFI_SLOTS", value, 1);
    OfiOptions o = OfiOptions::fromEnv();
    unsetenv("SNCL_OFI_SLOTS");
    o.provider = "tcp;ofi_rxm";
    const SetupOutcome setup = setupTwoRanks(o);
    for (int r = 0; r < 2; ++r) {
      CHECK(setup.results[r] == snclInvalidArgument);
      CHECK_THAT(setup.errors[r], Catch::Contains("SNCL_OFI_SLOTS") && Catch::Contains("1..1024"));
    }
  }
}

TEST_CASE("ofi: a peer address that does not resolve fails setup naming the rank", "[ofi][errors]") {
  OfiOptions o;
  o.provider = "tcp;ofi_rxm";
  std::vector<std::string> errors(2);
  std::vector<Result> results(2);
  runRanks(
      2, o,
      [&](Rank& me) {
        results[me.rank] = me.setupResult;
        errors[me.rank] = me.setupError;
      },
      [](int rank, void* data, size_t bytes) {
        if (bytes != sizeof(ofi::AddressRecord) || rank != 0) return;
        auto* rec = static_cast<ofi::AddressRecord*>(data) + 1;
        memset(rec->addr, 0xff, sizeof(rec->addr));  // family 0xffff: no sockaddr
      },
      4000);
  CHECK(results[0] == snclRemoteError);
  CHECK_THAT(errors[0], Catch::Contains("rank 1") && Catch::Contains("does not resolve"));
  CHECK(results[1] != snclSuccess);  // its hello goes unanswered: a timeout naming rank 0
  CHECK_THAT(errors[1], Catch::Contains("rank 0"));
}

TEST_CASE("ofi: a peer that does not answer times out with a message", "[ofi][errors]") {
  // A listening socket that never accepts: the kernel completes TCP handshakes, but no
  // libfabric endpoint ever answers behind it.
  int silent = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(silent >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(silent, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  REQUIRE(listen(silent, 16) == 0);
  socklen_t len = sizeof(sa);
  REQUIRE(getsockname(silent, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  OfiOptions o;
  o.provider = "tcp;ofi_rxm";
  std::vector<std::string> errors(2);
  std::vector<Result> results(2);
  const auto start = Clock::now();
  runRanks(
      2, o,
      [&](Rank& me) {
        results[me.rank] = me.setupResult;
        errors[me.rank] = me.setupError;
      },
      [&](int rank, void* data, size_t bytes) {
        if (bytes != sizeof(ofi::AddressRecord) || rank != 0) return;
        auto* rec = static_cast<ofi::AddressRecord*>(data) + 1;
        memcpy(rec->addr, &sa, sizeof(sa));
        rec->addrLen = sizeof(sa);
      },
      4000);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  close(silent);
  CHECK(results[0] == snclTimeout);
  CHECK_THAT(errors[0], Catch::Contains("no answer") && Catch::Contains("rank 1 at") && Catch::Contains("127.0.0.1"));
  CHECK(results[1] == snclTimeout);
  CHECK_THAT(errors[1], Catch::Contains("rank 0"));
  CHECK(seconds < 30);  // the deadline (4 s), not never
}

TEST_CASE("ofi: mismatched sizes and tags are errors naming the peer", "[ofi][errors]") {
  OfiOptions o;
  o.provider = "tcp;ofi_rxm";
  for (int variant = 0; variant < 12; ++variant) {
    const bool late = variant % 6 >= 3;
    const bool direct = variant >= 6;  // the receive names its buffer: chunks land there (ofi_transport.h)
    INFO("variant " << variant % 3 << (late ? ", receive posted late" : "") << (direct ? ", direct" : ""));  // 0: receiver expects more, 1: less (truncation), 2: other tag
    std::vector<Result> results(2, snclSuccess);
    std::vector<std::string> errors(2);
    runRanks(2, o, [&](Rank& me) {
      if (me.setupResult != snclSuccess) {
        results[me.rank] = me.setupResult;
        return;
      }
      std::vector<char> buf(200000, 1);  // above the eager limit: a direct receive takes it
      Collector c;
      c.data.resize(variant % 3 == 0 ? 240000 : variant % 3 == 1 ? 150000 : buf.size());
      RequestId id;
      std::vector<RequestId> reqs;
      // The receive is posted late: the message is unexpected when it is matched.
      if (me.rank == 1 && late) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      Result r = me.rank == 0 ? me.transport->isend(1, 7, buf.data(), buf.size(), &id)
                              : me.transport->irecv(0, variant % 3 == 2 ? 8 : 7, c.data.size(),
                                                    {Collector::deliver, &c, direct ? c.data.data() : nullptr}, &id);
      if (r == snclSuccess) {
        reqs.push_back(id);
        // The sender waits as long as the receiver: with manual progress (tcp;ofi_rxm), the
        // segments of a message it sent unexpected move only while it polls.
        r = waitAll(*me.transport, reqs);
      }
      results[me.rank] = r;
      errors[me.rank] = lastError();
    });
    CHECK(results[1] == snclInvalidArgument);
    CHECK_THAT(errors[1], Catch::Contains("rank 0") && Catch::Contains(variant % 3 == 2 ? "tag" : "bytes"));
  }
}

TEST_CASE("ofi: abort fails outstanding requests and wakes a waiter at once", "[ofi][abort]") {
  OfiOptions o;
  o.provider = "tcp;ofi_rxm";
  std::vector<int> ok(2, 0);
  runRanks(2, o, [&](Rank& me) {
    if (me.setupResult != snclSuccess) return;
    if (me.rank == 1) {
      ok[1] = 1;
      return;
    }
    Collector c, big;
    c.data.resize(4096);
    big.data.resize(300 << 10);  // above the eager limit: posted into its own buffer
    big.direct = true;
    RequestId id, bigId;
    if (me.transport->irecv(1, 1, 4096, {Collector::deliver, &c}, &id) != snclSuccess) return;
    if (me.transport->irecv(1, 2, big.data.size(), big.sink(), &bigId) != snclSuccess) return;
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      me.transport->abort();
    });
    const auto start = Clock::now();
    me.transport->wait(10'000'000);  // returns when abort() writes the eventfd, not after 10 s
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    aborter.join();
    bool done = false;
    ok[0] = waited < 5 && me.transport->test(id, &done) == snclInvalidUsage && !done &&
            me.transport->test(bigId, &done) == snclInvalidUsage && !done &&
            me.transport->isend(1, 1, c.data.data(), 64, &id) == snclInvalidUsage;
  });
  CHECK(ok[0] == 1);
  CHECK(ok[1] == 1);
}

// A wait() whose completion-queue read finished the request returns at once: the caller
// is to see it done, not sleep until the timeout on an fd the provider may leave quiet.
TEST_CASE("ofi: a wait whose read completes a receive returns without sleeping", "[ofi][wait]") {
  OfiOptions o;
  o.provider = "tcp;ofi_rxm";
  std::vector<double> waited(2, -1);
  runRanks(2, o, [&](Rank& me) {
    if (me.setupResult != snclSuccess) return;
    const Deadline deadline = Deadline::afterMs(kDeadlineMs);
    std::vector<unsigned char> bytes(64, 7);
    RequestId id;
    if (me.rank == 0) {
      std::vector<RequestId> reqs(1);
      if (me.transport->isend(1, 1, bytes.data(), bytes.size(), &reqs[0]) != snclSuccess) return;
      if (waitAll(*me.transport, reqs) != snclSuccess) return;
      if (me.bootstrap->barrier(deadline) != snclSuccess) return;  // the bytes left
      waited[0] = 0;
      return;
    }
    Collector c;
    c.data.resize(bytes.size());
    if (me.transport->irecv(0, 1, bytes.size(), {Collector::deliver, &c}, &id) != snclSuccess) return;
    if (me.bootstrap->barrier(deadline) != snclSuccess) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // they are in the socket by now
    const auto start = Clock::now();
    me.transport->wait(10'000'000);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    bool done = false;
    if (me.transport->test(id, &done) == snclSuccess && done && c.next == bytes.size()) waited[1] = seconds;
  });
  CHECK(waited[0] == 0);
  CHECK(waited[1] >= 0);
  CHECK(waited[1] < 1);
}
