// A stream: an ordered asynchronous queue of calls served by one progress thread, so that
// the caller computes while communication runs. The thread sleeps when idle. One queued
// item is one call, or a group's calls that use this stream (run together, as at
// snclGroupEnd).
#pragma once

#include <condition_variable>
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

 private:
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
  std::thread thread_;
};
