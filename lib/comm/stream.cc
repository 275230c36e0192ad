#include "lib/comm/stream.h"

#include <atomic>

#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/comm/comm.h"
#include "lib/comm/group.h"

namespace {
std::atomic<uint64_t> nextStreamUid{1};
}  // namespace

snclStream::snclStream() : ring_(kCapacity), uid_(nextStreamUid.fetch_add(1)) {
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
  const auto deadline = sncl::Clock::now() + std::chrono::milliseconds(timeoutMs);
  if (!workDone_.wait_until(lock, deadline, [this] { return size_ < kCapacity; }))
    return sncl::fail(snclTimeout, "stream queue stayed full ({} calls) for {} ms", kCapacity, timeoutMs);
  ring_[(head_ + size_) % kCapacity].assign(tasks, tasks + n);
  ++size_;
  ++queued_;
  for (size_t i = 0; i < n; ++i) tasks[i].comm->inflight.fetch_add(1);
  lock.unlock();
  workReady_.notify_one();
  return snclSuccess;
}

// The progress thread: sleeps on a condition variable when idle (8 ranks share 2 cores).
// The running item stays in its slot (enqueue writes only behind it) until it is done.
void snclStream::serve() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    workReady_.wait(lock, [this] { return size_ > 0 || stopping_; });
    if (size_ == 0) return;  // stopping, drained
    std::vector<sncl::GroupTask>& item = ring_[head_];
    lock.unlock();
    sncl::Result r = sncl::runTasks(item.data(), item.size());
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
    workDone_.notify_all();
  }
}

// Waits without a deadline of its own: every queued call is bounded by its comm's
// deadlines, so the queue always drains.
sncl::Result snclStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  workDone_.wait(lock, [this] { return size_ == 0; });
  sncl::Result r = error_;
  if (r != snclSuccess) {
    sncl::recordError(r, errorMsg_);
    error_ = snclSuccess;
    errorMsg_.clear();
  }
  return r;
}

sncl::Result snclStream::query() {
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
  workDone_.wait(lock, [&] { return finished_ >= ticket || firstFailed_ < ticket; });
  return eventResultLocked(ticket);
}
