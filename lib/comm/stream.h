// A stream: an ordered asynchronous queue of calls served by one progress thread, so that
// the caller computes while communication runs. The thread sleeps when idle. One queued
// item is one call, or a group's calls that use this stream (run together, as at
// snclGroupEnd). The stream numbers its items in queue order (tickets), so that an event
// (stream, ticket) can tell when the items queued before it have finished.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/base/error.h"
#include "lib/comm/op.h"

struct snclComm;

struct snclStream {
  snclStream();
  ~snclStream();  // drains queued work, then joins the thread

  // Queues tasks[0..n) as one item; waits (up to timeoutMs) while the queue is full.
  sncl::Result enqueue(const sncl::GroupTask* tasks, size_t n, int64_t timeoutMs);
  // Waits until everything queued so far has finished; returns and clears the first error.
  sncl::Result synchronize();
  // InProgress while work is queued or running, else the first error (not cleared).
  sncl::Result query();

  // Events. ticket(): items queued so far (an event recorded now covers items [0, ticket)).
  // uid(): a process-wide serial number, so that an event can tell its stream from a later
  // stream at the same address.
  uint64_t ticket();
  uint64_t uid() const { return uid_; }
  // snclSuccess once the items before ticket finished without error, the first error among
  // them (recorded as this thread's last error) as soon as it is known, else InProgress.
  sncl::Result eventQuery(uint64_t ticket);
  // Waits until the items before ticket finished, then as eventQuery. No deadline of its
  // own, as synchronize: every queued call is bounded by its comm's deadlines.
  sncl::Result eventWait(uint64_t ticket);

 private:
  sncl::Result eventResultLocked(uint64_t ticket);
  void serve();

  static constexpr size_t kCapacity = 1024;
  std::mutex mu_;
  std::condition_variable workReady_;
  std::condition_variable workDone_;
  // Fixed capacity; each slot's vector keeps its capacity, so enqueue stops allocating
  // once every slot has held its largest group.
  std::vector<std::vector<sncl::GroupTask>> ring_;
  size_t head_ = 0;         // next to run
  size_t size_ = 0;         // queued, including the one running
  bool stopping_ = false;
  sncl::Result error_ = snclSuccess;
  std::string errorMsg_;
  uint64_t queued_ = 0;    // items ever queued
  uint64_t finished_ = 0;  // items ever finished (they finish in queue order)
  // The first item that ever failed (never cleared: every later event covers it).
  uint64_t firstFailed_ = UINT64_MAX;
  sncl::Result firstFailure_ = snclSuccess;
  std::string firstFailureMsg_;
  const uint64_t uid_;
  std::thread thread_;
};
