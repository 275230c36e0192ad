// The CPUs a thread may run on: its affinity mask (what a launcher's binding sets:
// mpirun's --bind-to, Slurm's --cpu-bind, taskset) capped by its cgroup's CPU quota (what
// a container's or a Slurm step's CPU limit sets). The threading model
// (lib/comm/threading.h) decides from it whether a helper thread has a core of its own
// and whether a wait may spin.
#pragma once

#include <cstdint>
#include <string>

namespace sncl {

// A compact description of a CPU set, exchanged between the ranks of a host at init: a
// mask's range and population (a set with count == last - first + 1 is exactly that
// range; others are summarized), and the cgroup's quota in thousandths of a CPU.
struct CpuSummary {
  int32_t first = 0;        // lowest CPU in the mask
  int32_t last = -1;        // highest
  int32_t count = 0;        // CPUs in the mask
  int32_t quotaMilli = 0;   // the cgroup's quota (cpu.max) in 1/1000 CPU; 0: no quota
  // CPUs this set can use at once: the mask's count, at most the quota rounded up.
  int usable() const;
  bool intersects(const CpuSummary& o) const { return count > 0 && o.count > 0 && first <= o.last && o.first <= last; }
};

// This thread's CPUs, read now (sched_getaffinity, /proc/self/cgroup and the cgroup's
// cpu.max or cpu.cfs_quota_us, up the hierarchy).
CpuSummary cpusOfThisThread();

// The quota of the cgroup at a v2 path under root (e.g. "/sys/fs/cgroup" and "/a/b"),
// the smallest along the path to the root, in 1/1000 CPU; 0: none. Split out for tests.
int32_t cgroupQuotaMilli(const std::string& root, const std::string& path);

}  // namespace sncl
