// Groups (snclGroupStart/End) and running a batch of calls that may span communicators.
//
// Calls inside a group are collected per thread and issued together at the outermost
// snclGroupEnd: per comm, its collectives run in issue order, then all its sends and
// receives as one step. Comms run concurrently (a single thread may drive all the ranks
// of snclCommInitAll): the first on the calling thread, each other on its comm's worker
// thread. Calls that name a stream are queued on it as one item instead.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "lib/base/error.h"
#include "lib/comm/op.h"

namespace sncl {

// The thread a comm's part of a multi-comm batch runs on; started on first use, stopped
// with the comm. One part at a time: a second batch waits for the first to finish.
class GroupWorker {
 public:
  ~GroupWorker();
  // Starts tasks[0..n) (all on comm) on the worker; false when its thread cannot start.
  bool start(snclComm* comm, const GroupTask* tasks, size_t n);
  // Waits for the part start(.., tasks, ..) began; returns its result and, on failure,
  // its message (success when that start failed: it reported its own error).
  Result finish(const GroupTask* tasks, std::string* message);

 private:
  void serve();

  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  snclComm* comm_ = nullptr;
  const GroupTask* tasks_ = nullptr;
  size_t count_ = 0;
  bool busy_ = false;     // a part was started and not yet finished
  bool running_ = false;  // the thread has not yet run it
  bool stopping_ = false;
  Result result_ = snclSuccess;
  std::string message_;
};

// Runs tasks[0..n), sorted by comm then issue order, to completion (see above). Returns
// the first failure, with its message recorded on the calling thread.
Result runTasks(const GroupTask* tasks, size_t n);

// The calling thread's group.
int groupDepth();
void groupStart();
// Queues a validated call in the open group.
void groupAdd(snclComm* comm, snclStream* stream, const CollOp& op);
// Records a failed call inside the open group: snclGroupEnd reports it and runs nothing.
void groupFail(Result r);
// Closes one level; at the outermost, issues the group. Comms are checked by checkComm
// (that they are still usable) before anything runs.
Result groupEnd(Result (*checkComm)(snclComm* comm, const char* fn));

}  // namespace sncl
