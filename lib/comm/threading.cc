#include "lib/comm/threading.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "lib/base/env.h"

namespace sncl {
namespace {

// The oversubscribed wait: yield this many times before sleeping.
constexpr int kYields = 4;

enum class Progress { Auto, Thread, Caller };

Result progressSetting(Progress* out) {
  const std::string v = env::str("SNCL_PROGRESS").value_or("auto");
  if (v == "auto" || v.empty()) *out = Progress::Auto;
  else if (v == "thread") *out = Progress::Thread;
  else if (v == "caller") *out = Progress::Caller;
  else return fail(snclInvalidArgument, "SNCL_PROGRESS={} is none of auto, thread, caller", v);
  return snclSuccess;
}

// CPUs the given sets can use together: their ranges merged (exact for ranges, an upper
// bound for other masks, so also at most the sum of their counts), at most the largest
// quota among them (ranks of one container share its quota).
int cpusTogether(std::vector<CpuSummary> sets) {
  std::sort(sets.begin(), sets.end(), [](const CpuSummary& a, const CpuSummary& b) { return a.first < b.first; });
  int merged = 0, counts = 0, quota = 0;
  int32_t lo = 0, hi = -2;
  for (const CpuSummary& s : sets) {
    counts += s.count;
    if (s.quotaMilli > 0) quota = std::max(quota, s.usable());
    if (s.first > hi + 1) {
      merged += hi >= lo ? hi - lo + 1 : 0;
      lo = s.first, hi = s.last;
    } else {
      hi = std::max(hi, s.last);
    }
  }
  merged += hi >= lo ? hi - lo + 1 : 0;
  int together = std::min(merged, counts);
  if (quota > 0) together = std::min(together, quota);
  return std::max(1, together);
}

}  // namespace

std::string ThreadModel::describe() const {
  const char* mode = waiterDrives ? "stream work on the waiting thread" : "stream work on the stream's thread";
  return fmt::format("{} CPU{} ({}-{}{}), {} rank{} of this machine on {} CPU{}: {}{}, {}", cpus.usable(),
                     cpus.usable() == 1 ? "" : "s", cpus.first, cpus.last,
                     cpus.quotaMilli > 0 ? fmt::format(", quota {:.2f}", cpus.quotaMilli / 1000.0) : std::string(),
                     hostRanks, hostRanks == 1 ? "" : "s", hostCpus, hostCpus == 1 ? "" : "s", mode,
                     forced ? " (SNCL_PROGRESS)" : "",
                     wait.spins() ? fmt::format("waits spin {} us, then sleep", wait.spinMicros)
                                  : fmt::format("oversubscribed: waits yield {} times, then sleep", wait.yields));
}

Result decideThreads(int rank, const std::vector<PeerInfo>& peers, const std::vector<CpuSummary>& cpus,
                     ThreadModel* out) {
  Progress progress;
  SNCL_CHECK(progressSetting(&progress));
  ThreadModel m;
  m.cpus = cpus[size_t(rank)];
  // The ranks that compete for this rank's CPUs: on this machine, with overlapping masks.
  std::vector<CpuSummary> sharing;
  for (size_t r = 0; r < peers.size(); ++r)
    if (peers[r].bootId == peers[size_t(rank)].bootId && cpus[r].intersects(m.cpus)) sharing.push_back(cpus[r]);
  if (sharing.empty()) sharing.push_back(m.cpus);
  m.hostRanks = static_cast<int>(sharing.size());
  m.hostCpus = cpusTogether(sharing);
  m.oversubscribed = m.hostRanks > m.hostCpus;
  // Every machine's ranks and CPUs (all of its ranks together, whatever their masks).
  std::map<uint64_t, std::vector<CpuSummary>> machines;
  for (size_t r = 0; r < peers.size(); ++r) machines[peers[r].bootId].push_back(cpus[r]);
  for (const auto& [boot, sets] : machines)
    m.busiestShare = std::max(m.busiestShare, double(sets.size()) / cpusTogether(sets));
  m.wait.spinMicros = m.oversubscribed ? 0 : kSpinBeforeSleepMicros;
  m.wait.yields = m.oversubscribed ? kYields : 0;
  // A helper thread pays only with a core of its own beside the caller's.
  const int perRank = std::min(m.cpus.usable(), m.hostCpus / m.hostRanks);
  m.waiterDrives = perRank < 2;
  if (progress != Progress::Auto) {
    m.waiterDrives = progress == Progress::Caller;
    m.forced = true;
  }
  *out = m;
  return snclSuccess;
}

bool helperHasCore() {
  Progress progress = Progress::Auto;
  if (progressSetting(&progress) != snclSuccess) progress = Progress::Auto;  // init reports it
  if (progress != Progress::Auto) return progress == Progress::Thread;
  return cpusOfThisThread().usable() >= 2;
}

}  // namespace sncl
