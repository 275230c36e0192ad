// OfiRails: the ofi transport over several rails (see ofi_rails.h).
#include "transports/ofi/ofi_rails.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>

#include "lib/base/log.h"
#include "lib/net/bootstrap.h"
#include "transports/ofi/ofi_transport.h"

namespace sncl::ofi {
namespace {

constexpr size_t kMaxRails = 32;  // bits of Transport::railsUsable
constexpr uint64_t kRailSalt = 0x7a11ull << 48;
// Opening the rails again after a fault: long enough for every pair's connection under a
// loaded machine, short enough that a rail that died too fails the reset well before the
// comm's deadline.
constexpr int64_t kReopenMinMs = 5000;
// A lost rail is proposed back after answering this many probe cycles in a row (a rail
// that flaps stays out); a proposal that not every rank shared waits this long to be made
// again, so that a rail one rank sees and another does not costs a reset only now and then.
constexpr int kBackCycles = 2;
constexpr auto kProposalBackoff = std::chrono::milliseconds(500);
// Draining the rails kept before closing them: how long at most, and the bootstrap tag
// each rank tells its peers on that its sends are done.
constexpr int64_t kDrainMs = 1000;
constexpr uint32_t kDrainedTag = bootstrap_tags::kRailsDrained;

// A rail whose link went away is never closed: ofi_rxm over tcp (libfabric 1.20) crashed
// now and then in fi_close of such an endpoint, on the ranks across the dead link. It is
// parked here instead, its slots and registrations intact, never progressed again; the
// process's exit closes its sockets. This costs its slots' memory per lost rail.
void park(std::unique_ptr<OfiTransport> rail) {
  static std::mutex mu;
  static auto* parked = new std::vector<std::unique_ptr<OfiTransport>>;  // reachable, never freed
  std::lock_guard<std::mutex> lock(mu);
  parked->push_back(std::move(rail));
}

class OfiRails final : public Transport {
 public:
  explicit OfiRails(const OfiOptions& options) : options_(options) {}
  ~OfiRails() override {
    for (auto& r : rails_)
      if (r && r->railLost()) park(std::move(r));
  }

  const char* name() const override { return "ofi"; }

  Result setup(const TransportContext& ctx, const std::vector<int>& peers) override {
    ctx_ = ctx;
    peers_ = peers;
    const size_t n = options_.ifaces.size();
    // Rails are matched by index across hosts: every rank must have as many.
    std::vector<uint32_t> counts(size_t(ctx.nranks));
    counts[size_t(ctx.rank)] = uint32_t(n);
    SNCL_CHECK(ctx.bootstrap->allGather(counts.data(), sizeof(uint32_t), Deadline::afterMs(ctx.timeoutMs)));
    for (int r = 0; r < ctx.nranks; ++r)
      if (counts[size_t(r)] != n)
        return fail(snclInvalidArgument, "ofi: rank {} names {} rails in SNCL_OFI_IFACES, rank {} names {}", ctx.rank,
                    n, r, counts[size_t(r)]);
    if (n > kMaxRails) return fail(snclInvalidArgument, "ofi: SNCL_OFI_IFACES names {} rails; at most {}", n, kMaxRails);
    // Detection well inside the comm's deadline, which also bounds a stalled step.
    detectMs_ = options_.railDetectMs > 0 ? std::min<int64_t>(options_.railDetectMs, ctx.timeoutMs / 4) : 0;
    rails_.resize(n);
    watches_.resize(n);
    backoff_.assign(n, Clock::time_point{});
    sent_.assign(size_t(ctx.nranks), 0);
    received_.assign(size_t(ctx.nranks), 0);
    SNCL_CHECK(openRails(0, (n >= 32 ? ~0u : (1u << n) - 1), Deadline::afterMs(ctx.timeoutMs), /*all=*/true));
    if (!peers.empty())
      log::info(log::Subsys::Transport, "ofi: rank {}: {} rails ({}), traffic on rail(s) {}, detection {} ms",
                ctx.rank, n, fmt::join(options_.ifaces, ", "), railList(usable_), detectMs_);
    return snclSuccess;
  }

  // The k-th message to (from) a peer goes on the (k mod usable)-th usable rail: both ends
  // count their messages of the pair in the same order, so they pick the same rail.
  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override {
    if (order_.empty()) return noRail();
    const int rail = order_[sent_[size_t(peer)]++ % order_.size()];
    SNCL_CHECK(rails_[size_t(rail)]->isend(peer, tag, data, bytes, req));
    *req |= RequestId(rail) << OfiTransport::kIdBits;
    return snclSuccess;
  }
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override {
    if (order_.empty()) return noRail();
    const int rail = order_[received_[size_t(peer)]++ % order_.size()];
    SNCL_CHECK(rails_[size_t(rail)]->irecv(peer, tag, bytes, sink, req));
    *req |= RequestId(rail) << OfiTransport::kIdBits;
    return snclSuccess;
  }
  Result test(RequestId req, bool* done) override {
    const size_t rail = req >> OfiTransport::kIdBits;
    if (rail >= rails_.size() || !rails_[rail] || !(usable_ >> rail & 1)) {
      if (order_.empty()) return noRail();
      return fail(snclInvalidUsage, "ofi: rank {}: unknown request id {:#x}", ctx_.rank, req);
    }
    SNCL_CHECK(rails_[rail]->test(req & ((RequestId(1) << OfiTransport::kIdBits) - 1), done));
    // Under manual progress a rail moves only when read: the others too, while this waits.
    if (!*done && order_.size() > 1)
      for (int other : order_)
        if (size_t(other) != rail) rails_[size_t(other)]->progressNow();
    return snclSuccess;
  }
  void wait(int64_t maxMicros) override {
    if (order_.size() == 1) return rails_[size_t(order_[0])]->wait(maxMicros);
    if (order_.empty()) return;
    // wait() of OfiTransport over every rail: read each, spin, yield, then sleep on all their fds.
    auto readAll = [&] {
      bool completed = false;
      for (int r : order_) completed |= rails_[size_t(r)]->progressNow();
      return completed;
    };
    if (readAll()) return;
    if (const int64_t spin = std::min(rails_[size_t(order_[0])]->spinMicros(), maxMicros); spin > 0) {
      const auto until = Clock::now() + std::chrono::microseconds(spin);
      do {
        if (readAll()) return;
      } while (Clock::now() < until);
    }
    for (int i = 0; i < rails_[size_t(order_[0])]->yieldsHere(); ++i) {
      sched_yield();
      if (readAll()) return;
    }
    std::vector<pollfd>& fds = sleepFds_;
    fds.clear();
    for (int r : order_) {
      pollfd two[2];
      const int n = rails_[size_t(r)]->sleepFds(two);
      if (n < 0) return;
      fds.insert(fds.end(), two, two + n);
    }
    const int64_t us = std::max<int64_t>(maxMicros, 0);
    const timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
    ppoll(fds.data(), fds.size(), &ts, nullptr);
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);  // abort may come from another thread than a reset
    aborted_ = true;
    for (auto& r : rails_)
      if (r) r->abort();
  }

  // The lost rails' watches probe between collectives (ofi_rail_watch.h).
  void callBegin(const CallHints&) override {
    if (!watched_) return;
    const Clock::time_point now = Clock::now();
    for (auto& w : watches_)
      if (w) w->step(now);
  }

  // A rail lost, or one back that this rank would have the comm take again: a rail that
  // answered kBackCycles probe cycles in a row, not proposed in vain just before.
  bool faultPending() override { return railsLost() != 0 || proposing() != 0; }
  uint32_t railsUsable() const override { return usable_; }
  uint32_t railsLost() const override {
    uint32_t lost = 0;
    for (size_t i = 0; i < rails_.size(); ++i)
      if (rails_[i] && rails_[i]->railLost()) lost |= 1u << i;
    return lost;
  }
  uint32_t railsBack() const override { return answering(); }

  Result reset(uint32_t attempt, Deadline deadline) override {
    // Each rank's lost rails and the lost ones it finds answering; a rail comes back when
    // every rank's probes answered it.
    std::vector<uint32_t> seen(2 * size_t(ctx_.nranks));
    const uint32_t proposed = proposing();
    seen[2 * size_t(ctx_.rank)] = railsLost();
    seen[2 * size_t(ctx_.rank) + 1] = answering();
    SNCL_CHECK(ctx_.bootstrap->allGather(seen.data(), 2 * sizeof(uint32_t), deadline));
    uint32_t anyLost = 0, back = watched_;
    for (int r = 0; r < ctx_.nranks; ++r) anyLost |= seen[2 * size_t(r)], back &= seen[2 * size_t(r) + 1];
    drain(anyLost, attempt, deadline);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return fail(snclInvalidUsage, "ofi: rank {}: reset after an abort", ctx_.rank);
      // Every rank stopped posting: what is in flight goes with the endpoints (a rail that
      // any rank lost is parked, also here where it looked healthy: its link is gone).
      for (size_t i = 0; i < rails_.size(); ++i) {
        if (!rails_[i]) continue;
        if (anyLost >> i & 1) {
          watches_[i] = rails_[i]->takeWatch();
          if (watches_[i]) watched_ |= 1u << i;
          park(std::move(rails_[i]));
        } else {
          rails_[i].reset();
        }
      }
      order_.clear();
    }
    const uint32_t keep = usable_ & ~anyLost;
    log::info(log::Subsys::Fault, "ofi: rank {}: reset for attempt {}: rail(s) lost [{}], back [{}], opening [{}] afresh",
              ctx_.rank, attempt, railList(anyLost & usable_), railList(back), railList(keep | back));
    const int64_t reopenMs = std::max<int64_t>(kReopenMinMs, 10 * detectMs_);
    const Deadline bounded = Deadline::afterMs(std::min<int64_t>(std::max<int64_t>(deadline.remainingMs(), 1), reopenMs));
    const Result r = openRails(attempt, keep | back, bounded, false);
    // Rails back in service are watched no more; a proposal the others did not share
    // waits before this rank makes it again.
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < watches_.size(); ++i) {
      if ((usable_ >> i & 1) && watches_[i]) watches_[i].reset(), watched_ &= ~(1u << i);
      if ((proposed >> i & 1) && !(usable_ >> i & 1)) backoff_[i] = now + kProposalBackoff;
    }
    return r;
  }

 private:
  // Watched rails whose probes answered at least once (kBackCycles: in a row).
  uint32_t answering(int cycles = 1) const {
    uint32_t m = 0;
    for (size_t i = 0; i < watches_.size(); ++i)
      if (watches_[i] && watches_[i]->answeredCycles() >= cycles) m |= 1u << i;
    return m;
  }
  uint32_t proposing() const {
    if (!watched_) return 0;
    uint32_t m = answering(kBackCycles);
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < backoff_.size(); ++i)
      if (now < backoff_[i]) m &= ~(1u << i);
    return m;
  }

  // ofi_rxm over tcp (libfabric 1.17) crashed now and then in fi_close of an endpoint
  // whose sends were still in flight (rendezvous chunks the peer had not read). Before
  // the rails kept are closed, every rank progresses them until its own sends completed,
  // tells its peers so over the bootstrap, and goes on progressing until each peer said
  // the same: then no send is in flight on any of them. Bounded by kDrainMs: a rail that
  // does not drain is closed as it is.
  void drain(uint32_t lost, uint32_t attempt, Deadline deadline) {
    std::vector<OfiTransport*> kept;
    for (size_t i = 0; i < rails_.size(); ++i)
      if (rails_[i] && !(lost >> i & 1)) kept.push_back(rails_[i].get());
    if (kept.empty() || peers_.empty()) return;
    const Deadline bounded = Deadline::afterMs(std::min<int64_t>(std::max<int64_t>(deadline.remainingMs(), 1), kDrainMs));
    const auto progress = [&] {
      bool busy = false;
      for (OfiTransport* r : kept) r->progressNow(), busy |= r->sendsInFlight();
      return busy;
    };
    while (progress() && !bounded.expired()) {
    }
    for (int p : peers_) (void)ctx_.bootstrap->send(p, kDrainedTag, &attempt, sizeof(attempt), bounded);
    std::vector<int> waiting = peers_;
    while (!waiting.empty() && !bounded.expired()) {
      progress();
      for (size_t k = 0; k < waiting.size();) {
        uint32_t theirs = 0;
        bool got = false;
        // A word left from an earlier reset that ran out of time names another attempt.
        if (ctx_.bootstrap->tryRecv(waiting[k], kDrainedTag, &theirs, sizeof(theirs), &got) != snclSuccess ||
            (got && theirs == attempt)) {
          waiting[k] = waiting.back();
          waiting.pop_back();
        } else {
          ++k;
        }
      }
    }
    if (!waiting.empty())
      log::info(log::Subsys::Fault, "ofi: rank {}: {} peer(s) did not drain their rails within {} ms", ctx_.rank,
                waiting.size(), kDrainMs);
  }

  // Opens every rail of candidates, then keeps those that every rank opened. all: every
  // candidate must open (setup), else the ones that did are enough.
  Result openRails(uint32_t attempt, uint32_t candidates, Deadline deadline, bool all) {
    uint32_t opened = 0;
    std::string firstError;
    for (size_t i = 0; i < rails_.size(); ++i) {
      if (!(candidates >> i & 1)) continue;
      OfiOptions o = options_;
      o.ifaces.clear();
      o.iface = options_.ifaces[i];
      o.rail = int(i);
      o.railDetectMs = detectMs_;
      TransportContext c = ctx_;
      c.commId = ctx_.commId ^ kRailSalt ^ (uint64_t(i) << 40) ^ (uint64_t(attempt) * 0x9e3779b97f4a7c15ull);
      c.timeoutMs = std::max<int64_t>(deadline.remainingMs(), 1);
      auto rail = std::make_unique<OfiTransport>(o);
      // Every rank runs every candidate's setup (collective), also after one failed here.
      const Result r = rail->setup(c, peers_);
      if (r == snclSuccess) {
        opened |= 1u << i;
        std::lock_guard<std::mutex> lock(mu_);
        rails_[i] = std::move(rail);
        if (aborted_) rails_[i]->abort();
      } else {
        if (firstError.empty()) firstError = fmt::format("rail {} ({}): {}", i, o.iface, lastError());
        if (all) return fail(r, "ofi: rank {}: {}", ctx_.rank, firstError);
        log::info(log::Subsys::Fault, "ofi: rank {}: {}", ctx_.rank, firstError);
      }
    }
    std::vector<uint32_t> masks(size_t(ctx_.nranks));
    masks[size_t(ctx_.rank)] = opened;
    SNCL_CHECK(ctx_.bootstrap->allGather(masks.data(), sizeof(uint32_t), Deadline::afterMs(ctx_.timeoutMs)));
    uint32_t everywhere = candidates;
    for (uint32_t m : masks) everywhere &= m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < rails_.size(); ++i)
        if (!(everywhere >> i & 1)) rails_[i].reset();
    }
    usable_ = everywhere;
    order_.clear();
    for (size_t i = 0; i < rails_.size(); ++i)
      if (everywhere >> i & 1) order_.push_back(int(i));
    std::fill(sent_.begin(), sent_.end(), 0);  // every rank starts the pairs' counts afresh
    std::fill(received_.begin(), received_.end(), 0);
    if (order_.empty()) {
      noRailText_ = fmt::format("ofi: rank {}: no rail remains of {} ({}){}", ctx_.rank, rails_.size(),
                                fmt::join(options_.ifaces, ", "), firstError.empty() ? "" : "; " + firstError);
      return noRail();
    }
    return snclSuccess;
  }

  Result noRail() const {
    return fail(snclRemoteError, "{}", noRailText_.empty() ? "ofi: no rail remains" : noRailText_);
  }

  static std::string railList(uint32_t mask) {
    std::vector<int> ids;
    for (int i = 0; i < 32; ++i)
      if (mask >> i & 1) ids.push_back(i);
    return fmt::format("{}", fmt::join(ids, ", "));
  }

  OfiOptions options_;
  TransportContext ctx_;
  std::vector<int> peers_;
  int64_t detectMs_ = 0;
  std::vector<std::unique_ptr<OfiTransport>> rails_;  // by rail; empty: lost or not open
  uint32_t usable_ = 0;
  std::vector<int> order_;          // the usable rails, in rail order: messages take them in turn
  std::vector<uint64_t> sent_;      // messages to each peer since the rails were opened
  std::vector<uint64_t> received_;  // messages from each peer
  std::vector<pollfd> sleepFds_;    // wait()'s, kept: no allocation per wait
  std::vector<std::unique_ptr<RailWatch>> watches_;  // by rail: the lost ones, watched for their return
  uint32_t watched_ = 0;
  std::vector<Clock::time_point> backoff_;  // by rail: no proposal before
  std::string noRailText_;
  std::mutex mu_;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Transport> createOfiRails(const OfiOptions& options) { return std::make_unique<OfiRails>(options); }

}  // namespace sncl::ofi
