#include "lib/comm/progress_board.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/base/trace.h"
#include "lib/exec/reduce.h"
#include "lib/plan/planner.h"

namespace sncl {
namespace {

uint64_t& word(char* words, size_t stride, int rank) {
  return *reinterpret_cast<uint64_t*>(words + stride * size_t(rank));
}
uint64_t& pidWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[1]; }
uint64_t& enteredWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[2]; }
uint64_t& finishedAtWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[3]; }
// The entered call as packCall made it, and its bytes: stored before the entered count.
uint64_t& callWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[4]; }
uint64_t& bytesWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[5]; }

uint64_t load(uint64_t& w, std::memory_order order = std::memory_order_relaxed) {
  return std::atomic_ref<uint64_t>(w).load(order);
}

// What names a collective in a message: its kind, a reduction's type and op, a root.
uint64_t packCall(const CollOp& op) {
  const bool reduction = reduces(op.coll);
  return uint64_t(op.coll) | uint64_t(reduction ? op.dtype : 0) << 8 |
         uint64_t(reduction ? (op.preMul ? 0xff : op.op & 0xff) : 0) << 16 | uint64_t(hasRoot(op.coll)) << 24 |
         uint64_t(uint32_t(hasRoot(op.coll) ? op.root : 0)) << 32;
}

std::string describeCall(uint64_t call, uint64_t bytes) {
  const auto coll = CollType(call & 0xff);
  std::string text = fmt::format("{} of {} B", collName(coll), bytes);
  if (reduces(coll)) {
    const auto op = uint32_t(call >> 16 & 0xff);
    text += fmt::format(" ({} {})", dtypeName(snclDataType_t(call >> 8 & 0xff)),
                        op == 0xff ? "premulsum" : redOpName(snclRedOp_t(op)));
  }
  if (call >> 24 & 1) text += fmt::format(" root {}", uint32_t(call >> 32));
  return text;
}

}  // namespace

ProgressBoard::~ProgressBoard() {
  if (owned_) sharedFree(owned_);
}

void ProgressBoard::create(int nranks, SharedRef* ref) {
  *ref = SharedRef{};
  void* p = nullptr;
  // SNCL_PROGRESS_BOARD=0 turns it off, read here only: rank 0's choice is every rank's.
  if (env::integer("SNCL_PROGRESS_BOARD", 1) == 0 || nranks < 2) return;
  if (sharedAlloc(stride_ * size_t(nranks), &p) != snclSuccess) return;
  if (!sharedFind(p, stride_ * size_t(nranks), ref)) {
    sharedFree(p);
    *ref = SharedRef{};
    return;
  }
  owned_ = p;
}

void ProgressBoard::attach(int rank, int nranks, bool allLocal, const SharedRef& ref) {
  rank_ = rank, nranks_ = nranks;
  if (!allLocal || ref.fd < 0) {
    if (owned_) sharedFree(owned_), owned_ = nullptr;
    return;
  }
  if (owned_) {
    words_ = static_cast<char*>(owned_);
  } else {
    char* mapped = nullptr;
    if (maps_.map(ref, stride_ * size_t(nranks), &mapped) != snclSuccess) {
      log::info(log::Subsys::Init, "rank {}: no progress board (rank 0's memory cannot be mapped: {}); kept calls "
                "are released by what calls' data shows", rank, lastError());
      return;
    }
    words_ = mapped;
  }
  std::atomic_ref<uint64_t>(pidWord(words_, stride_, rank)).store(uint64_t(getpid()), std::memory_order_relaxed);
}

void ProgressBoard::enter(uint64_t calls, const CollOp& op, size_t elemSize) {
  if (!words_) return;
  std::atomic_ref<uint64_t>(callWord(words_, stride_, rank_)).store(packCall(op), std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(bytesWord(words_, stride_, rank_))
      .store(hasLayout(op.coll) ? 0 : op.count * elemSize, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(enteredWord(words_, stride_, rank_)).store(calls, std::memory_order_release);
}

std::string ProgressBoard::differText(uint64_t calls) const {
  if (!words_) return {};
  // The ranks in call number `calls`, grouped by what they called there, in rank order.
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> groups;
  for (int r = 0; r < nranks_; ++r) {
    if (load(enteredWord(words_, stride_, r), std::memory_order_acquire) != calls) continue;
    const std::pair<uint64_t, uint64_t> call{load(callWord(words_, stride_, r)), load(bytesWord(words_, stride_, r))};
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == call; });
    if (g == groups.end()) groups.push_back({call, fmt::format("{}", r)});
    else g->second += fmt::format(", {}", r);
  }
  if (groups.size() < 2) return {};
  std::string text = fmt::format("calls differ across ranks at call #{}:", calls);
  for (const auto& [call, ranks] : groups)
    text += fmt::format(" rank(s) {} called {};", ranks, describeCall(call.first, call.second));
  text.pop_back();
  return text;
}

ProgressBoard::RankProgress ProgressBoard::progressOf(int rank) const {
  RankProgress p;
  if (!words_ || rank < 0 || rank >= nranks_) return p;
  p.finished = load(word(words_, stride_, rank), std::memory_order_acquire);
  p.pid = int64_t(load(pidWord(words_, stride_, rank)));
  p.entered = load(enteredWord(words_, stride_, rank), std::memory_order_acquire);
  p.finishedAtNs = int64_t(load(finishedAtWord(words_, stride_, rank)));
  p.call = p.entered ? describeCall(load(callWord(words_, stride_, rank)), load(bytesWord(words_, stride_, rank))) : "";
  return p;
}

void ProgressBoard::publish(uint64_t calls) {
  if (!words_) return;
  // The coarse clock: a few ns, where the fine one costs 30 (a tenth of an 8-byte call); late
  // ranks are named to the millisecond.
  std::atomic_ref<uint64_t>(finishedAtWord(words_, stride_, rank_)).store(uint64_t(trace::coarseNowNs()),
                                                                          std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(word(words_, stride_, rank_)).store(calls, std::memory_order_release);
}

std::string ProgressBoard::lateText(uint64_t calls) const {
  if (!words_) return {};
  std::string ranks;
  const uint64_t now = uint64_t(trace::nowNs());
  for (int r = 0; r < nranks_; ++r) {
    if (std::atomic_ref<uint64_t>(enteredWord(words_, stride_, r)).load(std::memory_order_relaxed) >= calls) continue;
    const uint64_t done = std::atomic_ref<uint64_t>(word(words_, stride_, r)).load(std::memory_order_acquire);
    const uint64_t at = std::atomic_ref<uint64_t>(finishedAtWord(words_, stride_, r)).load(std::memory_order_relaxed);
    ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
    if (done && at && now > at) ranks += fmt::format(" (finished call #{} {} ms ago)", done, (now - at) / 1000000);
    else if (!done) ranks += " (no call finished yet)";
  }
  if (ranks.empty()) return {};
  return fmt::format("rank(s) {} had not reached call #{}", ranks, calls);
}

uint64_t ProgressBoard::minFinished() const {
  uint64_t low = UINT64_MAX;
  for (int r = 0; r < nranks_; ++r)
    low = std::min(low, std::atomic_ref<uint64_t>(word(words_, stride_, r)).load(std::memory_order_acquire));
  return low;
}

int ProgressBoard::goneBehind(uint64_t calls) const {
  for (int r = 0; r < nranks_; ++r) {
    if (std::atomic_ref<uint64_t>(word(words_, stride_, r)).load(std::memory_order_acquire) >= calls) continue;
    const auto pid = pid_t(std::atomic_ref<uint64_t>(pidWord(words_, stride_, r)).load(std::memory_order_relaxed));
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) return r;
  }
  return -1;
}

std::vector<int> ProgressBoard::behind(uint64_t calls) const {
  std::vector<int> out;
  for (int r = 0; r < nranks_; ++r)
    if (std::atomic_ref<uint64_t>(word(words_, stride_, r)).load(std::memory_order_acquire) < calls) out.push_back(r);
  return out;
}

}  // namespace sncl
