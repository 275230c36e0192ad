// A stream: an ordered asynchronous queue of calls. One queued item is one call, or a
// group's calls that use this stream (run together, as at snclGroupEnd). The stream numbers
// its items in queue order (tickets), so that an event (stream, ticket) can tell when the
// items queued before it have finished.
//
// Who runs an item (lib/comm/threading.h): with a spare core, the stream's thread, at once,
// so that the caller computes meanwhile. Without one (the stream was created on a thread
// with one usable CPU, or a comm of the item has no core to spare), the thread that waits
// for it (synchronize, an event wait) runs it itself, as a blocking call would:
// no hand-off to a thread on the same core, no wake-up to pay. The stream's thread then
// runs only what nobody came for within kUnclaimedMicros, and its waits never spin. It
// sleeps when idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/error.h"
#include "lib/comm/op.h"

struct snclComm;

struct snclStream {
  snclStream();
  ~snclStream();  // drains queued work, then joins the thread

  // Queues tasks[0..n) as one item; waits (up to timeoutMs) while the queue is full.
  sncl::Result enqueue(const sncl::GroupTask* tasks, size_t n, int64_t timeoutMs);
  // Waits until everything queued so far has finished (running it, when the waiter drives);
  // returns and clears the first error.
  sncl::Result synchronize();
  // InProgress while work is queued or running, else the first error (not cleared). Never
  // blocks: a query runs nothing (a polling caller gets the work done by the stream's
  // thread within kUnclaimedMicros, or by its own synchronize).
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

  // How long an item that the waiter should run waits for it before the stream's thread
  // runs it anyway (nobody may ever wait: a program that polls nothing, or one thread
  // driving several ranks' streams).
  static constexpr int64_t kUnclaimedMicros = 1000;
  // After the waiter last ran work, the stream's thread keeps looking this long rather than
  // sleep until woken (then the next enqueue wakes it).
  static constexpr int64_t kLookAroundMicros = 50000;

 private:
  sncl::Result eventResultLocked(uint64_t ticket);
  void serve();
  // Whether the head item is the waiter's to run.
  bool waiterDrivesHead() const;
  // Runs the head item on this thread (onHelper: the stream's own): lock held on entry and
  // on return, released while it runs.
  void runHead(std::unique_lock<std::mutex>& lock, bool onHelper);
  // Until finished_ >= ticket: runs the items itself when they are the waiter's and nobody
  // runs them yet, else sleeps until they finish.
  // stopAtFailure: return as soon as an item before ticket failed (events).
  void waitFinished(std::unique_lock<std::mutex>& lock, uint64_t ticket, bool stopAtFailure);

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
  bool running_ = false;     // the head item runs (on the stream's thread or a waiter's)
  bool helperAsleep_ = false;  // the stream's thread waits without a timeout: enqueue wakes it
  const bool helperHasCore_;   // read at creation (lib/comm/threading.h)
  sncl::Clock::time_point headSince_;  // when the head item became the head
  // When an item the waiter drives last finished (the coarse clock: kLookAroundMicros is
  // long, and this is stamped after every such item).
  int64_t lastWaiterWorkNs_ = 0;
  sncl::Result error_ = snclSuccess;
  std::string errorMsg_;
  // size_ == 0 and error_ == success, written under mu_ where either changes: query() reads
  // it without the lock (the MPI drop-in asks before every blocking call).
  std::atomic<bool> idle_{true};
  uint64_t queued_ = 0;    // items ever queued
  uint64_t finished_ = 0;  // items ever finished (they finish in queue order)
  // The first item that ever failed (never cleared: every later event covers it).
  uint64_t firstFailed_ = UINT64_MAX;
  sncl::Result firstFailure_ = snclSuccess;
  std::string firstFailureMsg_;
  const uint64_t uid_;
  std::thread thread_;
};
