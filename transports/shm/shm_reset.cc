// The shm transport as a comm holds it. A retry after another transport's fault (an ofi
// rail lost, docs/faults.md) resets every transport of the comm; shm has nothing to route
// around, so it starts over with segments of its own, named after the attempt: nothing of
// the failed attempt can be matched by the re-run. Its own faults (a dead peer) are
// reported as they are. A wrapper rather than a reset inside ShmTransport: the comm and
// the executor keep pointers to the transport, and a fresh ShmTransport is the state
// that is known to be clean.
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "lib/base/log.h"
#include "transports/shm/shm.h"

namespace sncl {
namespace {

constexpr uint64_t kResetSalt = 0x5e7a11c0ffee0001ull;

class ResettableShm final : public Transport {
 public:
  explicit ResettableShm(const ShmOptions& options) : options_(options), inner_(createShmTransport(options)) {}

  const char* name() const override { return "shm"; }
  Result setup(const TransportContext& ctx, const std::vector<int>& peers) override {
    ctx_ = ctx;
    peers_ = peers;
    return inner_->setup(ctx, peers);
  }
  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override {
    return inner_->isend(peer, tag, data, bytes, req);
  }
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override {
    return inner_->irecv(peer, tag, bytes, sink, req);
  }
  Result test(RequestId req, bool* done) override { return inner_->test(req, done); }
  void wait(int64_t maxMicros) override { inner_->wait(maxMicros); }
  void callBegin(const CallHints& hints) override { inner_->callBegin(hints); }
  void callEnd() override { inner_->callEnd(); }
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);  // abort may come from another thread than a reset
    aborted_ = true;
    inner_->abort();
  }
  bool faultPending() override { return inner_->faultPending(); }
  void observedFaults(std::vector<uint32_t>* links, std::vector<int>* deadRanks) const override {
    inner_->observedFaults(links, deadRanks);
  }
  // The current inner transport's: a reset brings fresh cells in fresh segments.
  LocalCells* localCells() override { return inner_->localCells(); }
  size_t memoryBytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_ ? inner_->memoryBytes() : 0;
  }
  void addCounters(TransportCounters* out) const override {
    std::lock_guard<std::mutex> lock(mu_);  // a reset swaps inner_
    out->bytesSent += before_.bytesSent;
    out->bytesReceived += before_.bytesReceived;
    out->bytesCopied += before_.bytesCopied;
    inner_->addCounters(out);
  }

  // Every rank stopped posting: the old pairs go (their destructor tells peers the pairs
  // closed), and the fresh setup's exchanges are the barrier after which all are new.
  Result reset(uint32_t attempt, Deadline deadline) override {
    (void)deadline;  // the fresh setup keeps the comm's deadline, which is also its stall deadline
    std::unique_ptr<Transport> fresh = createShmTransport(options_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return fail(snclInvalidUsage, "shm: rank {}: reset after an abort", ctx_.rank);
      inner_->addCounters(&before_);  // the old one: its counts carry over
      inner_.swap(fresh);
    }
    fresh.reset();
    TransportContext ctx = ctx_;
    ctx.commId ^= kResetSalt * (uint64_t(attempt) + 1);
    log::info(log::Subsys::Transport, "shm: rank {}: reset for attempt {}", ctx_.rank, attempt);
    return inner_->setup(ctx, peers_);
  }

 private:
  ShmOptions options_;
  TransportContext ctx_;
  std::vector<int> peers_;
  mutable std::mutex mu_;
  bool aborted_ = false;
  TransportCounters before_;  // of the transports replaced by resets
  std::unique_ptr<Transport> inner_;
};

}  // namespace

std::unique_ptr<Transport> createResettableShmTransport() {
  return std::make_unique<ResettableShm>(ShmOptions::fromEnv());
}

}  // namespace sncl
