#include "lib/base/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

namespace sncl::trace {
namespace {

thread_local uint32_t cachedTid = 0;
thread_local Role role = Role::Caller;

}  // namespace

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t coarseNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

uint32_t threadId() {
  if (cachedTid == 0) cachedTid = static_cast<uint32_t>(syscall(SYS_gettid));
  return cachedTid;
}

Role threadRole() { return role; }
void setThreadRole(Role r) { role = r; }

Buffer::Buffer(size_t capacity) : events_(new Event[capacity]()), capacity_(capacity) {}

}  // namespace sncl::trace
