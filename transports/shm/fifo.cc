#include "transports/shm/fifo.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace sncl::shm {

Fifo::Fifo(char* fifo, size_t nSlots, size_t slotBytes)
    : control_(reinterpret_cast<FifoControl*>(fifo)),
      headers_(reinterpret_cast<SlotHeader*>(fifo + sizeof(FifoControl))),
      payload_(fifo + fifoPayloadOffset(nSlots)),
      nSlots_(nSlots),
      slotBytes_(slotBytes) {}

void failPairStatus(PairStatus& status, PairFailure reason, const PairStatus& details) {
  uint32_t none = static_cast<uint32_t>(PairFailure::None);
  if (!std::atomic_ref<uint32_t>(status.reason)
           .compare_exchange_strong(none, static_cast<uint32_t>(PairFailure::Claimed)))
    return;  // the first failure is the one that counts
  storeRelaxed(status.reporter, details.reporter);
  storeRelaxed(status.fromRank, details.fromRank);
  storeRelaxed(status.toRank, details.toRank);
  storeRelaxed(status.sentTag, details.sentTag);
  storeRelaxed(status.sentBytes, details.sentBytes);
  storeRelaxed(status.expectedTag, details.expectedTag);
  storeRelaxed(status.expectedBytes, details.expectedBytes);
  storeRelease(status.reason, static_cast<uint32_t>(reason));
}

PairFailureInfo readPairStatus(PairStatus& status) {
  PairFailureInfo info;
  auto reason = static_cast<PairFailure>(loadAcquire(status.reason));
  if (reason == PairFailure::None || reason == PairFailure::Claimed) return info;
  info.reason = reason;
  info.details.reporter = loadRelaxed(status.reporter);
  info.details.fromRank = loadRelaxed(status.fromRank);
  info.details.toRank = loadRelaxed(status.toRank);
  info.details.sentTag = loadRelaxed(status.sentTag);
  info.details.sentBytes = loadRelaxed(status.sentBytes);
  info.details.expectedTag = loadRelaxed(status.expectedTag);
  info.details.expectedBytes = loadRelaxed(status.expectedBytes);
  return info;
}

// The doorbell lives in memory shared between processes: the futex calls must not use
// FUTEX_PRIVATE_FLAG, which keys the wait queue by this process's address space.
void DoorbellRef::ring() {
  // seq_cst on both sides (here: bump seq, then read waiters; in arm: bump waiters, then
  // read seq) so that either the sleeper sees the new seq or the ringer sees the sleeper.
  std::atomic_ref<uint32_t>(bell_->seq).fetch_add(1);
  if (std::atomic_ref<uint32_t>(bell_->waiters).load() != 0)
    syscall(SYS_futex, &bell_->seq, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void DoorbellRef::ringIfWaiting() {
  if (std::atomic_ref<uint32_t>(bell_->waiters).load() != 0) ring();
}

uint32_t DoorbellRef::arm() {
  std::atomic_ref<uint32_t>(bell_->waiters).fetch_add(1);
  return std::atomic_ref<uint32_t>(bell_->seq).load();
}

void DoorbellRef::sleep(uint32_t armedSeq, int64_t micros) {
  if (micros <= 0) return;
  timespec timeout{static_cast<time_t>(micros / 1000000), static_cast<long>(micros % 1000000) * 1000};
  // Returns at once when seq moved since arm(); EINTR and timeouts are both fine here.
  syscall(SYS_futex, &bell_->seq, FUTEX_WAIT, armedSeq, &timeout, nullptr, 0);
}

void DoorbellRef::disarm() {
  std::atomic_ref<uint32_t>(bell_->waiters).fetch_sub(1);
}

}  // namespace sncl::shm
