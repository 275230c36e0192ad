// A stream: an ordered asynchronous queue of collectives served by one progress thread,
// so that the caller computes while communication runs. The thread sleeps when idle.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/error.h"
#include "lib/op.h"

struct snclComm;

struct snclStream {
  snclStream();
  ~snclStream();  // drains queued work, then joins the thread

  // Queues op for comm; waits (up to timeoutMs) while the queue is full.
  sncl::Result enqueue(snclComm* comm, const sncl::CollOp& op, int64_t timeoutMs);
  // Waits until everything queued so far has finished; returns and clears the first error.
  sncl::Result synchronize();
  // InProgress while work is queued or running, else the first error (not cleared).
  sncl::Result query();

 private:
  struct Item {
    snclComm* comm;
    sncl::CollOp op;
  };
  void serve();

  static constexpr size_t kCapacity = 1024;
  std::mutex mu_;
  std::condition_variable workReady_;
  std::condition_variable workDone_;
  std::vector<Item> ring_;  // fixed capacity: enqueue never allocates
  size_t head_ = 0;         // next to run
  size_t size_ = 0;         // queued, including the one running
  bool stopping_ = false;
  sncl::Result error_ = snclSuccess;
  std::string errorMsg_;
  std::thread thread_;
};
