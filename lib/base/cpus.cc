#include "lib/base/cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace sncl {
namespace {

// One cgroup's limit in 1/1000 CPU: v2's cpu.max ("max 100000" or "QUOTA PERIOD"), else
// v1's cpu.cfs_quota_us and cpu.cfs_period_us (-1: none). 0: none or unreadable.
int32_t quotaAt(const std::string& dir) {
  std::ifstream max(dir + "/cpu.max");
  std::string quota;
  long period = 0;
  if (max >> quota >> period) {
    if (quota == "max" || period <= 0) return 0;
    return static_cast<int32_t>(std::stol(quota) * 1000 / period);
  }
  long q = -1;
  std::ifstream(dir + "/cpu.cfs_quota_us") >> q;
  std::ifstream(dir + "/cpu.cfs_period_us") >> period;
  if (q <= 0 || period <= 0) return 0;
  return static_cast<int32_t>(q * 1000 / period);
}

// The cgroup hierarchy this process is in: the v2 path ("0::/path"), or v1's cpu
// controller's, with the folder it is mounted at.
bool cgroupOfThisProcess(std::string* root, std::string* path) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    *path = line.substr(b + 1);
    if (controllers.empty()) {  // v2
      *root = "/sys/fs/cgroup";
      return true;
    }
    std::stringstream list(controllers);
    std::string c;
    while (std::getline(list, c, ','))
      if (c == "cpu") {
        *root = "/sys/fs/cgroup/" + controllers;
        if (access(root->c_str(), F_OK) != 0) *root = "/sys/fs/cgroup/cpu";
        return true;
      }
  }
  return false;
}

}  // namespace

int CpuSummary::usable() const {
  if (quotaMilli <= 0) return count;
  return std::max(1, std::min(count, (quotaMilli + 999) / 1000));
}

int32_t cgroupQuotaMilli(const std::string& root, const std::string& path) {
  int32_t least = 0;
  std::string p = path;
  // From the process's own cgroup up to the root: a parent's limit binds its children.
  for (int depth = 0; depth < 64; ++depth) {
    const int32_t q = quotaAt(root + (p == "/" ? "" : p));
    if (q > 0) least = least == 0 ? q : std::min(least, q);
    if (p.empty() || p == "/") break;
    const size_t slash = p.find_last_of('/');
    p = slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
  }
  return least;
}

CpuSummary cpusOfThisThread() {
  CpuSummary s;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      if (s.count == 0) s.first = cpu;
      s.last = cpu;
      ++s.count;
    }
  }
  if (s.count == 0) {  // no mask to read: every online CPU
    s.count = static_cast<int32_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    s.first = 0;
    s.last = s.count - 1;
  }
  std::string root, path;
  if (cgroupOfThisProcess(&root, &path)) s.quotaMilli = cgroupQuotaMilli(root, path);
  return s;
}

}  // namespace sncl
