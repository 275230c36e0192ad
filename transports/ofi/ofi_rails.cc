// OfiRails: the ofi transport over several rails (see ofi_rails.h).
#include "transports/ofi/ofi_rails.h"

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
    SNCL_CHECK(openRails(0, (n >= 32 ? ~0u : (1u << n) - 1), Deadline::afterMs(ctx.timeoutMs), /*all=*/true));
    if (!peers.empty())
      log::info(log::Subsys::Transport, "ofi: rank {}: {} rails ({}), traffic on rail {} ({}), detection {} ms",
                ctx.rank, n, fmt::join(options_.ifaces, ", "), active_, options_.ifaces[size_t(active_)], detectMs_);
    return snclSuccess;
  }

  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override {
    if (active_ < 0) return noRail();
    return rails_[size_t(active_)]->isend(peer, tag, data, bytes, req);
  }
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override {
    if (active_ < 0) return noRail();
    return rails_[size_t(active_)]->irecv(peer, tag, bytes, sink, req);
  }
  Result test(RequestId req, bool* done) override {
    if (active_ < 0) return noRail();
    return rails_[size_t(active_)]->test(req, done);
  }
  void wait(int64_t maxMicros) override {
    if (active_ >= 0) rails_[size_t(active_)]->wait(maxMicros);
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);  // abort may come from another thread than a reset
    aborted_ = true;
    for (auto& r : rails_)
      if (r) r->abort();
  }

  // Only the active rail carries requests; the others show their loss when they are
  // opened again, which then drops them.
  bool faultPending() override { return railsLost() != 0; }
  uint32_t railsUsable() const override { return usable_; }
  uint32_t railsLost() const override {
    uint32_t lost = 0;
    for (size_t i = 0; i < rails_.size(); ++i)
      if (rails_[i] && rails_[i]->railLost()) lost |= 1u << i;
    return lost;
  }

  Result reset(uint32_t attempt, Deadline deadline) override {
    std::vector<uint32_t> lost(size_t(ctx_.nranks));
    lost[size_t(ctx_.rank)] = railsLost();
    SNCL_CHECK(ctx_.bootstrap->allGather(lost.data(), sizeof(uint32_t), deadline));
    uint32_t anyLost = 0;
    for (uint32_t m : lost) anyLost |= m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return fail(snclInvalidUsage, "ofi: rank {}: reset after an abort", ctx_.rank);
      // Every rank stopped posting: what is in flight goes with the endpoints (a rail that
      // any rank lost is parked, also here where it looked healthy: its link is gone).
      for (size_t i = 0; i < rails_.size(); ++i)
        if (anyLost >> i & 1) park(std::move(rails_[i]));
        else rails_[i].reset();
      active_ = -1;
    }
    const uint32_t keep = usable_ & ~anyLost;
    log::info(log::Subsys::Fault, "ofi: rank {}: reset for attempt {}: rail(s) lost [{}], opening [{}] afresh",
              ctx_.rank, attempt, railList(anyLost & usable_), railList(keep));
    const int64_t reopenMs = std::max<int64_t>(kReopenMinMs, 10 * detectMs_);
    const Deadline bounded = Deadline::afterMs(std::min<int64_t>(std::max<int64_t>(deadline.remainingMs(), 1), reopenMs));
    return openRails(attempt, keep, bounded, false);
  }

 private:
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
    active_ = everywhere ? __builtin_ctz(everywhere) : -1;
    if (active_ < 0) {
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
  int active_ = -1;
  std::string noRailText_;
  std::mutex mu_;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Transport> createOfiRails(const OfiOptions& options) { return std::make_unique<OfiRails>(options); }

}  // namespace sncl::ofi
