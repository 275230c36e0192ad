#include "lib/comm/stream.h"

#include <atomic>
#include <optional>

#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/base/trace.h"
#include "lib/comm/comm.h"
#include "lib/comm/group.h"
#include "lib/comm/threading.h"

namespace {
std::atomic<uint64_t> nextStreamUid{1};
}  // namespace

snclStream::snclStream()
    : ring_(kCapacity), helperHasCore_(sncl::helperHasCore()), uid_(nextStreamUid.fetch_add(1)) {
  thread_ = std::thread([this] { serve(); });
}

snclStream::~snclStream() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
  }
  workReady_.notify_all();
  thread_.join();
}

sncl::Result snclStream::enqueue(const sncl::GroupTask* tasks, size_t n, int64_t timeoutMs) {
  std::unique_lock<std::mutex> lock(mu_);
  // The clock is read only for a full queue: a read costs as much as a small call's queueing.
  if (size_ >= kCapacity &&
      !workDone_.wait_until(lock, sncl::Clock::now() + std::chrono::milliseconds(timeoutMs),
                            [this] { return size_ < kCapacity; }))
    return sncl::fail(snclTimeout, "stream queue stayed full ({} calls) for {} ms", kCapacity, timeoutMs);
  ring_[(head_ + size_) % kCapacity].assign(tasks, tasks + n);
  if (size_ == 0) headSince_ = sncl::Clock::now();
  ++size_;
  ++queued_;
  idle_.store(false, std::memory_order_release);
  for (size_t i = 0; i < n; ++i) tasks[i].comm->inflight.fetch_add(1);
  // Work the waiter runs needs no wake-up, unless the stream's thread sleeps without a
  // timeout (it then starts counting kUnclaimedMicros).
  const bool wake = helperAsleep_ || (size_ == 1 && !waiterDrivesHead());
  lock.unlock();
  if (wake) workReady_.notify_one();
  return snclSuccess;
}

bool snclStream::waiterDrivesHead() const {
  if (!helperHasCore_) return true;
  for (const sncl::GroupTask& task : ring_[head_])
    if (task.comm->threads.waiterDrives) return true;
  return false;
}

void snclStream::runHead(std::unique_lock<std::mutex>& lock, bool onHelper) {
  const bool waiterDrives = waiterDrivesHead();
  running_ = true;
  std::vector<sncl::GroupTask>& item = ring_[head_];  // stays in its slot until done
  lock.unlock();
  sncl::Result r;
  {
    // The stream's thread on the caller's core: its waits must not spin.
    std::optional<sncl::NoSpinHere> noSpin;
    if (onHelper && waiterDrives) noSpin.emplace();
    r = sncl::runTasks(item.data(), item.size());
  }
  std::string msg = r == snclSuccess ? std::string() : sncl::lastError();
  for (const sncl::GroupTask& task : item) task.comm->inflight.fetch_sub(1);
  lock.lock();
  if (r != snclSuccess && firstFailure_ == snclSuccess) {
    firstFailed_ = finished_;
    firstFailure_ = r;
    firstFailureMsg_ = msg;
  }
  if (r != snclSuccess && error_ == snclSuccess) {
    error_ = r;
    errorMsg_ = std::move(msg);
  }
  ++finished_;
  head_ = (head_ + 1) % kCapacity;
  --size_;
  idle_.store(size_ == 0 && error_ == snclSuccess, std::memory_order_release);
  running_ = false;
  if (size_ > 0) headSince_ = sncl::Clock::now();
  if (waiterDrives) lastWaiterWorkNs_ = sncl::trace::coarseNowNs();
  workDone_.notify_all();
  if (!onHelper && helperAsleep_) workReady_.notify_one();
}

// The stream's thread: runs items at once when it has a core of its own; else only items
// nobody came for within kUnclaimedMicros. While such work is about, it looks every
// kUnclaimedMicros instead of being woken (a wake-up costs more than small calls).
void snclStream::serve() {
  using std::chrono::microseconds;
  const auto unclaimed = microseconds(kUnclaimedMicros);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (size_ == 0 && stopping_) return;
    const auto now = sncl::Clock::now();
    if (size_ > 0 && !running_) {
      if (stopping_ || !waiterDrivesHead() || now - headSince_ >= unclaimed) {
        runHead(lock, true);
        continue;
      }
      workReady_.wait_until(lock, headSince_ + unclaimed);
      continue;
    }
    if (size_ > 0 || sncl::trace::coarseNowNs() - lastWaiterWorkNs_ < kLookAroundMicros * 1000) {
      workReady_.wait_for(lock, unclaimed);  // a waiter runs the head, or may queue more soon
      continue;
    }
    helperAsleep_ = true;
    workReady_.wait(lock);
    helperAsleep_ = false;
  }
}

void snclStream::waitFinished(std::unique_lock<std::mutex>& lock, uint64_t ticket, bool stopAtFailure) {
  while (finished_ < ticket && !(stopAtFailure && firstFailed_ < ticket)) {
    if (!running_ && waiterDrivesHead()) {
      runHead(lock, false);
      continue;
    }
    workDone_.wait(lock);
  }
}

// Waits without a deadline of its own: every queued call is bounded by its comm's
// deadlines, so the queue always drains.
sncl::Result snclStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  waitFinished(lock, queued_, false);
  sncl::Result r = error_;
  if (r != snclSuccess) {
    sncl::recordError(r, errorMsg_);
    error_ = snclSuccess;
    errorMsg_.clear();
    idle_.store(size_ == 0, std::memory_order_release);
  }
  return r;
}

sncl::Result snclStream::query() {
  if (idle_.load(std::memory_order_acquire)) return snclSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  if (size_ > 0) return snclInProgress;
  return error_;
}

uint64_t snclStream::ticket() {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

sncl::Result snclStream::eventResultLocked(uint64_t ticket) {
  if (firstFailed_ < ticket) {
    sncl::ExpectedErrors quiet;  // logged when the call failed; polling must not repeat it
    return sncl::recordError(firstFailure_, firstFailureMsg_);
  }
  return finished_ >= ticket ? snclSuccess : snclInProgress;
}

sncl::Result snclStream::eventQuery(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return eventResultLocked(ticket);
}

sncl::Result snclStream::eventWait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  waitFinished(lock, ticket, true);
  return eventResultLocked(ticket);
}
