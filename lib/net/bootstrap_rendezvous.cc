// The rank's side of the rendezvous and Bootstrap::connect. Every rank says hello to the root
// (bootstrap_root.cc); the root sends the address table to rank 0 only, and each rank passes
// it on to its children in the gather tree (lib/base/gather_tree.h), largest subtree first.
// So the root sends one table instead of n, a rank sends at most ceil(log2 n), and the
// parent -> child connections the table opens are the ones the all-gathers use next.
//
// A rank waits for its table source (the root for rank 0, else its tree parent) while
// watching its root connection, on which the root may report an error at any time. When
// the source fails or stays silent, the rank reports it to the root, which tells every rank
// still waiting who is missing: the subtree under a dead rank fails naming it, not a hang.
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "lib/base/gather_tree.h"
#include "lib/base/log.h"
#include "lib/net/bootstrap_channel.h"

namespace sncl {
namespace {

// Per tree level, how much sooner a rank gives up on its source than its children do on
// theirs, so that the rank right below a failure reports first (and its name is the one the
// root passes on). Capped by a share of the caller's deadline.
constexpr int kReportStepMs = 250;

int treeDepth(int rank) {
  int d = 0;
  for (int r = rank; r > 0; r = gather_tree::parent(r)) ++d;
  return d;
}

int maxTreeDepth(int nranks) {
  int d = 0;
  while ((2L << d) <= nranks) ++d;
  return d;  // floor(log2 n): the rank with the most one bits
}

class Rendezvous {
 public:
  Rendezvous(const wire::IdLayout& id, SocketBootstrap& bootstrap, const SocketAddress& listenAddress,
             Deadline deadline)
      : id_(id), b_(bootstrap), listenAddress_(listenAddress), deadline_(deadline),
        rank_(bootstrap.rank()), nranks_(bootstrap.nranks()),
        tableBytes_(size_t(nranks_) * sizeof(SocketAddress)) {}

  Result run() {
    SNCL_CHECK(sayHello());
    table_.resize(size_t(nranks_));
    const int levels = maxTreeDepth(nranks_);
    const int remaining = deadline_.remainingMs();
    const int step = std::min(kReportStepMs, remaining / (2 * (levels + 2)));
    const Deadline sourceDeadline = Deadline::afterMs(remaining - (levels - treeDepth(rank_) + 1) * step);
    SNCL_CHECK(rank_ == 0 ? tableFromRoot(sourceDeadline) : tableFromParent(sourceDeadline));
    for (int peer = 0; peer < nranks_ && nranks_ > 1; ++peer) {
      if (!isValidAddress(table_[size_t(peer)])) {
        return fail(snclRemoteError, "bootstrap: the address table has no valid address for rank {}", peer);
      }
    }
    b_.setPeerAddresses(table_);
    SNCL_CHECK(forward());
    root_.close();  // tells the root this rank is done
    return snclSuccess;
  }

 private:
  Result sayHello() {
    const std::string rootName = toString(id_.root);
    Result r = Socket::connect(id_.root, deadline_, &root_);
    if (r != snclSuccess) {
      return fail(r, "bootstrap: rank {} cannot reach the root at {}: {}", rank_, rootName, lastError());
    }
    root_.setName(fmt::format("the bootstrap root ({})", rootName));
    wire::RootHello hello{wire::kHelloMagic, id_.secret, rank_, nranks_, listenAddress_};
    SNCL_CHECK(root_.sendAll(&hello, sizeof(hello), deadline_));
    b_.countRootTraffic(1, 0, sizeof(hello));
    return snclSuccess;
  }

  // One reply from the root: the table (rank 0 only) or an error text (then answered_ is
  // set: the result is the root's verdict). *closed: the root closed the connection
  // instead (it finished, refused us, or its process is gone).
  Result readRootReply(Deadline deadline, bool* closed) {
    *closed = false;
    wire::RootReply reply;
    Result r;
    {
      ExpectedErrors quiet;  // the caller says what a close or a timeout means here
      r = root_.recvAll(&reply, sizeof(reply), deadline);
    }
    if (r == snclRemoteError) *closed = true;
    if (r != snclSuccess) return r;
    if (reply.result != snclSuccess) {
      if (reply.bytes > wire::kMaxErrorText || reply.result < 0 || reply.result >= snclNumResults) {
        return fail(snclRemoteError, "bootstrap: rank {}: malformed error reply from the root", rank_);
      }
      std::string text(reply.bytes, '\0');
      SNCL_CHECK(root_.recvAll(text.data(), text.size(), Deadline::afterMs(wire::kHelloTimeoutMs)));
      answered_ = true;
      return fail(static_cast<Result>(reply.result), "bootstrap: {}", text);
    }
    if (rank_ != 0 || reply.bytes != tableBytes_) {
      return fail(snclRemoteError, "bootstrap: rank {}: the root sent {} bytes of addresses for {} ranks", rank_,
                  reply.bytes, nranks_);
    }
    SNCL_CHECK(root_.recvAll(table_.data(), tableBytes_, deadline_));
    b_.countRootTraffic(0, 1, 0);
    return snclSuccess;
  }

  Result tableFromRoot(Deadline sourceDeadline) {
    bool closed = false;
    Result r = readRootReply(sourceDeadline, &closed);
    // Silence: ask the root why; it answers with the ranks that never arrived.
    if (r == snclTimeout) r = reportAndWait(-1, snclTimeout, &closed);
    if (answered_) return r;
    if (closed) {
      return fail(snclRemoteError, "bootstrap: rank {}: {} closed the connection (wrong secret, or it gave up "
                  "waiting)", rank_, root_.name());
    }
    if (r == snclTimeout) {
      return fail(r, "bootstrap: rank 0 got no address table from {} before the deadline", root_.name());
    }
    return r;
  }

  Result tableFromParent(Deadline sourceDeadline) {
    const int parent = gather_tree::parent(rank_);
    bool rootOpen = true;
    Result why = snclTimeout;
    while (!sourceDeadline.expired()) {
      bool got = false;
      Result r;
      {
        ExpectedErrors quiet;  // a dead parent is reported below, with its name
        r = b_.tryRecvTable(parent, table_.data(), tableBytes_, &got);
      }
      if (got) return snclSuccess;
      if (r != snclSuccess) {
        why = r;
        break;
      }
      pollfd fds[2] = {{b_.waitFdFor(parent), POLLIN, 0}, {root_.fd(), POLLIN, 0}};
      if (::poll(fds, rootOpen ? 2 : 1, std::min(sourceDeadline.remainingMs(), 100)) <= 0) continue;
      if (rootOpen && fds[1].revents) {
        bool closed = false;
        r = readRootReply(Deadline::afterMs(wire::kHelloTimeoutMs), &closed);
        if (closed) rootOpen = false;  // it finished or is gone; the parent may still come
        else if (r != snclSuccess) return r;
      }
    }
    bool closed = !rootOpen;
    Result r = rootOpen ? reportAndWait(parent, why, &closed) : snclRemoteError;
    if (answered_) return r;  // the root's explanation
    return fail(why == snclSuccess ? snclTimeout : why,
                "bootstrap: rank {} got no address table from its tree parent rank {} ({}; the root {})", rank_,
                parent, why == snclTimeout ? "nothing before the deadline" : "its connection failed",
                closed ? "was gone, so nobody could say more" : "did not answer");
  }

  // Tells the root that `missing` (-1: the root itself) did not deliver, then waits for its
  // answer, which is the error every waiting rank gets.
  Result reportAndWait(int missing, Result why, bool* closed) {
    wire::RankReport report{wire::kReportMagic, rank_, missing, why};
    *closed = false;
    {
      ExpectedErrors quiet;
      if (root_.sendAll(&report, sizeof(report), deadline_) != snclSuccess) {
        *closed = true;
        return snclRemoteError;
      }
    }
    log::info(log::Subsys::Bootstrap, "bootstrap: rank {} reported to the root that {} did not deliver the table",
              rank_, missing < 0 ? std::string("the root") : fmt::format("rank {}", missing));
    return readRootReply(deadline_, closed);
  }

  // Passes the table on, the largest subtree first since it has the most levels to go.
  Result forward() {
    const std::vector<int> kids = gather_tree::children(rank_, nranks_);
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
      // A child listened before it said hello, so a refused connection means it is gone:
      // give up on it after a short while, not at the deadline its siblings also wait on.
      const Deadline bounded = Deadline::afterMs(std::min(deadline_.remainingMs(), wire::kHelloTimeoutMs));
      Result r = b_.sendTable(*it, table_.data(), tableBytes_, bounded);
      if (r == snclSuccess) continue;
      const std::string text = lastError();
      bool closed = false;
      Result answer = reportAndWait(*it, r, &closed);
      if (answered_) return answer;
      return fail(r, "bootstrap: rank {} could not pass the address table on to rank {}: {}", rank_, *it, text);
    }
    return snclSuccess;
  }

  const wire::IdLayout& id_;
  SocketBootstrap& b_;
  const SocketAddress listenAddress_;
  const Deadline deadline_;
  const int rank_, nranks_;
  const size_t tableBytes_;
  Socket root_;
  bool answered_ = false;
  std::vector<SocketAddress> table_;
};

}  // namespace

Result Bootstrap::connect(const snclUniqueId& id, int rank, int nranks, Deadline deadline,
                          std::unique_ptr<Bootstrap>* out) {
  if (!out) return fail(snclInvalidArgument, "Bootstrap::connect: out is NULL");
  if (nranks < 1 || nranks > wire::kMaxRanks) {
    return fail(snclInvalidArgument, "nranks {} is not in 1..{}", nranks, wire::kMaxRanks);
  }
  if (rank < 0 || rank >= nranks) {
    return fail(snclInvalidArgument, "rank {} is out of range for nranks {}", rank, nranks);
  }
  SNCL_CHECK(bootstrapCheckId(id));
  const wire::IdLayout layout = wire::decodeId(id);
  const auto start = Clock::now();
  // A single rank needs no listener: it only tells the root that it arrived.
  Socket listener;
  SocketAddress listenAddress{};
  if (nranks > 1) {
    SocketAddress address;
    SNCL_CHECK(findInterfaceAddress(&address));
    SNCL_CHECK(Socket::listen(address, /*reuseAddr=*/false, &listener));
    listenAddress = listener.address();
  }
  std::unique_ptr<SocketBootstrap> bootstrap;
  try {
    bootstrap = std::make_unique<SocketBootstrap>(rank, nranks, layout.secret, std::move(listener));
  } catch (const std::bad_alloc&) {
    return fail(snclSystemError, "bootstrap: out of memory for {} ranks", nranks);
  }
  SNCL_CHECK(Rendezvous(layout, *bootstrap, listenAddress, deadline).run());
  log::trace("bootstrap: rank {} of {} joined via {} in {:.1f} ms", rank, nranks, toString(layout.root),
             std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  *out = std::move(bootstrap);
  return snclSuccess;
}

}  // namespace sncl
