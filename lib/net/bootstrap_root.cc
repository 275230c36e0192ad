// The rendezvous root: a thread (usually in rank 0's process, started by snclGetUniqueId)
// that collects every rank's hello, checks them against each other, and hands the address
// table to rank 0 alone; the ranks pass it down the gather tree (bootstrap_rendezvous.cc).
// It keeps every rank's connection open until that rank has the table, so that a rank whose
// table source failed can report it here, and the root tells every waiting rank who is
// missing instead of leaving a subtree to time out blind. Serves one rendezvous, then exits.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/net/bootstrap_wire.h"

namespace sncl::wire {
namespace {

constexpr size_t kMaxPendingConnections = 1024;

class Root {
 public:
  Root(Socket listener, const Secret& secret, Deadline deadline)
      : listener_(std::move(listener)), secret_(secret), deadline_(deadline) {}

  void run() {
    const auto start = Clock::now();
    std::vector<Pending> pending;
    std::vector<pollfd> fds;
    while (!finished() && !deadline_.expired()) {
      // Rebuilt each round: O(n) per wake-up, small next to the n hellos it serves.
      fds.assign(1, {listener_.fd(), POLLIN, 0});
      for (const Pending& p : pending) fds.push_back({p.sock.fd(), POLLIN, 0});
      for (const Arrival& a : arrivals_) fds.push_back({a.sock.fd(), POLLIN, 0});
      int rc = ::poll(fds.data(), fds.size(), std::min(deadline_.remainingMs(), 100));
      if (rc < 0 && errno != EINTR) {
        log::warn("bootstrap root {}: poll failed: {}", listener_.name(), strerror(errno));
        return;
      }
      if (rc <= 0) continue;
      // Arrivals first (their fds follow the pending ones), from the back so that removing
      // one (swap with the last) does not move an unvisited one.
      const size_t base = 1 + pending.size();
      for (size_t i = arrivals_.size(); i-- > 0;) {
        if (i < arrivals_.size() && fds[base + i].revents) serveArrival(i);
      }
      for (size_t i = pending.size(); i-- > 0;) {
        if (fds[i + 1].revents) {
          serveHello(std::move(pending[i].sock));
          pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
        } else if (pending[i].expires.expired()) {
          log::warn("bootstrap root {}: {} sent no hello within {} ms, closing it", listener_.name(),
                    pending[i].sock.name(), kHelloTimeoutMs);
          pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
        }
      }
      if (fds[0].revents) {
        Socket sock;
        if (listener_.accept(Deadline::afterMs(0), &sock) != snclSuccess) continue;
        // Bounded memory: a flood of silent connections displaces the oldest of them.
        if (pending.size() >= kMaxPendingConnections) pending.erase(pending.begin());
        pending.push_back({std::move(sock), Deadline::afterMs(kHelloTimeoutMs)});
      }
    }
    if (!finished()) giveUp();
    else if (error_.empty())
      log::info(log::Subsys::Bootstrap, "bootstrap root {}: rendezvous of {} ranks done in {:.1f} ms",
                listener_.name(), expected_, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }

 private:
  struct Pending {
    Socket sock;
    Deadline expires;
  };
  struct Arrival {
    Socket sock;
    RootHello hello;
  };

  // Done when every rank any hello announced has arrived and closed its connection (it has
  // the table) or was told of an error.
  bool finished() const { return expected_ > 0 && arrived_ >= expected_ && arrivals_.empty(); }

  void serveHello(Socket sock) {
    RootHello hello;
    // The peer polled readable; its hello is one small write, so a short wait suffices.
    if (sock.recvAll(&hello, sizeof(hello), Deadline::afterMs(200)) != snclSuccess) {
      log::warn("bootstrap root {}: dropped {}: no complete hello ({})", listener_.name(), sock.name(), lastError());
      return;
    }
    if (hello.magic != kHelloMagic || !sameSecret(hello.secret, secret_)) {
      log::warn("bootstrap root {}: refused {}: wrong magic or secret", listener_.name(), sock.name());
      return;
    }
    log::trace("bootstrap root: rank {} of {} arrived from {} (listens on {})", hello.rank, hello.nranks,
               sock.name(), toString(hello.listenAddress));
    ++arrived_;
    if (hello.nranks >= 1 && hello.nranks <= kMaxRanks) expected_ = std::max(expected_, hello.nranks);
    if (!error_.empty()) {
      replyError(sock);
      return;
    }

    arrivals_.push_back({std::move(sock), hello});
    std::string error = checkArrivals();
    if (!error.empty()) {
      failAll(std::move(error));
    } else if (static_cast<int32_t>(arrivals_.size()) == arrivals_[0].hello.nranks) {
      sendTable();
    }
  }

  // A rank's connection became readable: it closed (it has the table) or reports a failure.
  void serveArrival(size_t i) {
    RankReport report{};
    ExpectedErrors quiet;  // a close is the normal end of a connection here
    Result r = arrivals_[i].sock.recvAll(&report, sizeof(report), Deadline::afterMs(200));
    const int32_t rank = arrivals_[i].hello.rank;
    if (r == snclSuccess && report.magic == kReportMagic && report.rank == rank) {
      // Missing ranks are a timeout; a rank that did not pass the table on, a remote failure.
      failAll(describe(report), tableSent_ ? snclRemoteError : snclTimeout);
      return;
    }
    std::swap(arrivals_[i], arrivals_.back());
    arrivals_.pop_back();
    if (r == snclSuccess) {
      log::warn("bootstrap root {}: rank {} sent garbage instead of a report; dropped it", listener_.name(), rank);
    } else if (!tableSent_) {
      // Before the table went out nobody has it, so a close means the rank gave up or died.
      failAll(fmt::format("rank {} left the rendezvous before all ranks arrived (it exited, crashed or "
                          "timed out)", rank), snclRemoteError);
    }
  }

  std::string describe(const RankReport& report) const {
    if (!tableSent_) {
      return fmt::format("{} (rank {} gave up waiting for the address table)", missingRanks(), report.rank);
    }
    const char* why = report.result == snclTimeout ? "sent nothing before the deadline"
                      : report.result == snclRemoteError ? "closed its connection"
                                                         : "could not be reached";
    if (report.missing > report.rank) {  // a parent could not reach its child
      return fmt::format("rank {} could not pass the address table on to rank {} ({}): rank {} exited, hung "
                         "or lost its connection", report.rank, report.missing,
                         report.result == snclTimeout ? "no connection in time" : "the connection failed",
                         report.missing);
    }
    return fmt::format("rank {} did not pass the address table on to rank {} (it {}): it exited, hung or "
                       "lost its connection", report.missing, report.rank, why);
  }

  // Which ranks never said hello, e.g. "ranks 3, 7 never arrived at the root (6 of 8 did)".
  std::string missingRanks() const {
    std::vector<bool> seen(static_cast<size_t>(std::max(expected_, 0)), false);
    for (const Arrival& a : arrivals_)
      if (a.hello.rank >= 0 && a.hello.rank < expected_) seen[static_cast<size_t>(a.hello.rank)] = true;
    std::string list;
    int count = 0;
    for (int r = 0; r < expected_; ++r) {
      if (seen[static_cast<size_t>(r)]) continue;
      if (++count <= 8) list += fmt::format("{}{}", list.empty() ? "" : ", ", r);
    }
    if (count > 8) list += fmt::format(" and {} more", count - 8);
    return fmt::format("rank{} {} never arrived at the root ({} of {} did)", count == 1 ? "" : "s", list,
                       expected_ - count, expected_);
  }

  // Checks the newest arrival against the others: the first error is reported to all.
  std::string checkArrivals() const {
    const RootHello& first = arrivals_.front().hello;
    const RootHello& last = arrivals_.back().hello;
    if (last.nranks < 1 || last.nranks > kMaxRanks) {
      return fmt::format("rank {} reported an invalid nranks {} (must be in 1..{})", last.rank, last.nranks,
                         kMaxRanks);
    }
    if (last.nranks != first.nranks) {
      return fmt::format("ranks disagree on nranks: rank {} says {}, rank {} says {}", first.rank, first.nranks,
                         last.rank, last.nranks);
    }
    if (last.rank < 0 || last.rank >= last.nranks) {
      return fmt::format("rank {} is out of range for nranks {}", last.rank, last.nranks);
    }
    if (!isValidAddress(last.listenAddress) && last.nranks > 1) {
      return fmt::format("rank {} reported an invalid listen address", last.rank);
    }
    for (size_t i = 0; i + 1 < arrivals_.size(); ++i) {
      if (arrivals_[i].hello.rank == last.rank) {
        return fmt::format("rank {} was claimed twice (by {} and {})", last.rank, arrivals_[i].sock.name(),
                           arrivals_.back().sock.name());
      }
    }
    return {};
  }

  // Tells every rank still connected, and every later arrival, what went wrong.
  void failAll(std::string error, Result code = snclInvalidArgument) {
    error_ = std::move(error);
    errorCode_ = code;
    log::warn("bootstrap root {}: {}", listener_.name(), error_);
    answerRootsProcessLast();
    for (Arrival& a : arrivals_) replyError(a.sock);
    arrivals_.clear();
    // With no valid nranks at all there is nobody left to wait for.
    if (expected_ == 0) expected_ = arrived_;
  }

  void giveUp() {
    if (!tableSent_ && error_.empty() && !arrivals_.empty()) {
      failAll(missingRanks() + fmt::format(" within {} ms", env::timeoutMs()), snclTimeout);
    } else {
      log::warn("bootstrap root {}: gave up after {} ms with {} of {} ranks arrived", listener_.name(),
                env::timeoutMs(), arrived_, expected_);
    }
  }

  void replyError(Socket& sock) {
    std::string text = error_.substr(0, kMaxErrorText);
    RootReply reply{errorCode_, static_cast<uint32_t>(text.size())};
    std::vector<char> message(sizeof(reply) + text.size());
    memcpy(message.data(), &reply, sizeof(reply));
    memcpy(message.data() + sizeof(reply), text.data(), text.size());
    ExpectedErrors quiet;  // a rank that already gave up has closed its end
    if (sock.sendAll(message.data(), message.size(), Deadline::afterMs(1000)) != snclSuccess) {
      log::info(log::Subsys::Bootstrap, "bootstrap root: could not tell {} about the error", sock.name());
    }
  }

  // The root usually runs in rank 0's process (its snclGetUniqueId), and dies with it: a
  // rank 0 told of an error can return and exit before the others were told, who would
  // then see only a closed connection. So rank 0 hears last.
  void answerRootsProcessLast() {
    std::stable_partition(arrivals_.begin(), arrivals_.end(), [](const Arrival& a) { return a.hello.rank != 0; });
  }

  // Only rank 0 gets the table from here; the others get it from their tree parent.
  void sendTable() {
    std::vector<SocketAddress> table(arrivals_.size());
    Arrival* rank0 = nullptr;
    for (Arrival& a : arrivals_) {
      table[static_cast<size_t>(a.hello.rank)] = a.hello.listenAddress;
      if (a.hello.rank == 0) rank0 = &a;
    }
    RootReply reply{snclSuccess, static_cast<uint32_t>(table.size() * sizeof(SocketAddress))};
    std::vector<char> message(sizeof(reply) + reply.bytes);
    memcpy(message.data(), &reply, sizeof(reply));
    memcpy(message.data() + sizeof(reply), table.data(), reply.bytes);
    tableSent_ = true;
    if (rank0->sock.sendAll(message.data(), message.size(), deadline_) != snclSuccess) {
      failAll(fmt::format("could not send the address table to rank 0: {}", lastError()), snclRemoteError);
    }
  }

  Socket listener_;
  const Secret secret_;
  const Deadline deadline_;
  std::vector<Arrival> arrivals_;  // valid and still connected; cleared once told of an error
  std::string error_;
  Result errorCode_ = snclInvalidArgument;  // what the ranks' connect returns with error_
  bool tableSent_ = false;
  int32_t arrived_ = 0;
  int32_t expected_ = 0;
};

}  // namespace

Result startRoot(const SocketAddress& address, bool reuseAddr, const Secret& secret, snclUniqueId* id) {
  Socket listener;
  SNCL_CHECK(Socket::listen(address, reuseAddr, &listener));
  encodeId(listener.address(), secret, id);
  log::trace("bootstrap root: listening on {}", listener.name());
  Deadline deadline = Deadline::afterMs(env::timeoutMs());
  try {
    std::thread([root = std::make_shared<Root>(std::move(listener), secret, deadline)] {
      try {
        root->run();
      } catch (const std::exception& e) {
        log::warn("bootstrap root: stopped: {}", e.what());
      }
    }).detach();
  } catch (const std::exception& e) {
    return fail(snclSystemError, "cannot start the bootstrap root thread: {}", e.what());
  }
  return snclSuccess;
}

}  // namespace sncl::wire
