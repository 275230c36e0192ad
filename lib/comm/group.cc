#include "lib/comm/group.h"

#include <algorithm>
#include <functional>
#include <system_error>
#include <vector>

#include "lib/base/hot_tls.h"
#include "lib/base/log.h"
#include "lib/base/trace.h"
#include "lib/comm/comm.h"
#include "lib/comm/stream.h"

namespace sncl {

GroupWorker::~GroupWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool GroupWorker::start(snclComm* comm, const GroupTask* tasks, size_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  // Bounded: the part before this one ends by its comm's deadlines.
  cv_.wait(lock, [this] { return !busy_; });
  if (!thread_.joinable()) {
    try {
      thread_ = std::thread([this] { serve(); });
    } catch (const std::system_error& e) {
      fail(snclSystemError, "comm {} rank {}: cannot start a group worker thread: {}", comm->name, comm->rank, e.what());
      return false;
    }
  }
  comm_ = comm;
  tasks_ = tasks;
  count_ = n;
  busy_ = running_ = true;
  lock.unlock();
  cv_.notify_all();
  return true;
}

Result GroupWorker::finish(const GroupTask* tasks, std::string* message) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!busy_ || tasks_ != tasks) return snclSuccess;  // start() failed: already reported
  cv_.wait(lock, [this] { return !running_; });
  const Result r = result_;
  if (r != snclSuccess) *message = message_;
  busy_ = false;
  lock.unlock();
  cv_.notify_all();
  return r;
}

void GroupWorker::serve() {
  trace::setThreadRole(trace::Role::GroupWorker);  // names its track in a trace
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return running_ || stopping_; });
    if (!running_) return;  // stopping
    lock.unlock();
    const Result r = commRunBatch(comm_, tasks_, count_);
    lock.lock();
    result_ = r;
    if (r != snclSuccess) message_ = lastError();
    running_ = false;
    cv_.notify_all();
  }
}

namespace {

// The end of the run of tasks on tasks[begin].comm.
size_t commEnd(const GroupTask* tasks, size_t n, size_t begin) {
  size_t end = begin + 1;
  while (end < n && tasks[end].comm == tasks[begin].comm) ++end;
  return end;
}

struct GroupState {
  std::vector<GroupTask> tasks;
  std::vector<GroupTask> issuing;  // the group being issued; kept for its capacity
  Result error = snclSuccess;
  std::string message;
};
thread_local GroupState group;
// Apart from the group: every call reads it, and a trivial thread-local is one load, where
// one with a destructor goes through its first-use guard.
SNCL_HOT_THREAD_LOCAL int tGroupDepth = 0;

}  // namespace

Result runTasks(const GroupTask* tasks, size_t n) {
  if (n == 0) return snclSuccess;
  const size_t firstEnd = commEnd(tasks, n, 0);
  if (firstEnd == n) return commRunBatch(tasks[0].comm, tasks, n);
  // Every other comm's part on its worker, the first here, then collect in comm order.
  Result first = snclSuccess;
  std::string message;
  for (size_t begin = firstEnd; begin < n; begin = commEnd(tasks, n, begin)) {
    const size_t end = commEnd(tasks, n, begin);
    if (!tasks[begin].comm->worker.start(tasks[begin].comm, tasks + begin, end - begin) && first == snclSuccess) {
      first = snclSystemError;
      message = lastError();
    }
  }
  Result r = commRunBatch(tasks[0].comm, tasks, firstEnd);
  if (r != snclSuccess && first == snclSuccess) {
    first = r;
    message = lastError();
  }
  for (size_t begin = firstEnd; begin < n; begin = commEnd(tasks, n, begin)) {
    std::string workerMessage;
    r = tasks[begin].comm->worker.finish(tasks + begin, &workerMessage);
    if (r != snclSuccess && first == snclSuccess) {
      first = r;
      message = std::move(workerMessage);
    }
  }
  return first == snclSuccess ? first : recordError(first, std::move(message));
}

int groupDepth() { return tGroupDepth; }

void groupStart() { ++tGroupDepth; }

void groupAdd(snclComm* comm, snclStream* stream, const CollOp& op) {
  group.tasks.push_back({comm, stream, static_cast<uint32_t>(group.tasks.size()), op});
}

void groupFail(Result r) {
  if (group.error != snclSuccess) return;
  group.error = r;
  group.message = lastError();
}

Result groupEnd(Result (*checkComm)(snclComm* comm, const char* fn)) {
  if (tGroupDepth == 0) return fail(snclInvalidUsage, "snclGroupEnd: no group is open (snclGroupStart missing)");
  if (--tGroupDepth > 0) return snclSuccess;
  std::vector<GroupTask>& tasks = group.issuing;
  tasks.swap(group.tasks);
  group.tasks.clear();
  const Result error = group.error;
  group.error = snclSuccess;
  if (error != snclSuccess) {
    tasks.clear();
    return fail(error, "snclGroupEnd: nothing in the group ran, since a call in it failed: {}", group.message);
  }
  // By comm: each comm checked once, and its calls must share one stream.
  const std::less<const void*> before;  // a total order on unrelated pointers
  std::sort(tasks.begin(), tasks.end(), [&](const GroupTask& a, const GroupTask& b) {
    return a.comm != b.comm ? before(a.comm, b.comm) : a.order < b.order;
  });
  for (size_t begin = 0; begin < tasks.size(); begin = commEnd(tasks.data(), tasks.size(), begin)) {
    const size_t end = commEnd(tasks.data(), tasks.size(), begin);
    Result r = checkComm(tasks[begin].comm, "snclGroupEnd");
    for (size_t i = begin + 1; r == snclSuccess && i < end; ++i)
      if (tasks[i].stream != tasks[begin].stream)
        r = fail(snclInvalidUsage, "snclGroupEnd: calls on comm {} rank {} in one group use different streams",
                 tasks[begin].comm->name, tasks[begin].comm->rank);
    if (r != snclSuccess) {
      tasks.clear();
      return r;
    }
  }
  // By stream: each stream's calls queued as one item, then the NULL stream's run here.
  std::sort(tasks.begin(), tasks.end(), [&](const GroupTask& a, const GroupTask& b) {
    if (a.stream != b.stream) return before(a.stream, b.stream);
    return a.comm != b.comm ? before(a.comm, b.comm) : a.order < b.order;
  });
  Result r = snclSuccess;
  size_t nullBegin = 0, nullEnd = 0;
  for (size_t begin = 0; begin < tasks.size() && r == snclSuccess;) {
    size_t end = begin + 1;
    while (end < tasks.size() && tasks[end].stream == tasks[begin].stream) ++end;
    if (tasks[begin].stream) r = tasks[begin].stream->enqueue(tasks.data() + begin, end - begin, tasks[begin].comm->timeoutMs);
    else nullBegin = begin, nullEnd = end;
    begin = end;
  }
  if (r == snclSuccess) r = runTasks(tasks.data() + nullBegin, nullEnd - nullBegin);
  tasks.clear();
  return r;
}

}  // namespace sncl
