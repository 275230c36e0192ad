#include "lib/comm/progress_board.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/base/trace.h"

namespace sncl {
namespace {

uint64_t& word(char* words, size_t stride, int rank) {
  return *reinterpret_cast<uint64_t*>(words + stride * size_t(rank));
}
uint64_t& pidWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[1]; }
uint64_t& enteredWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[2]; }
uint64_t& finishedAtWord(char* words, size_t stride, int rank) { return (&word(words, stride, rank))[3]; }

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

void ProgressBoard::enter(uint64_t calls) {
  if (words_) std::atomic_ref<uint64_t>(enteredWord(words_, stride_, rank_)).store(calls, std::memory_order_relaxed);
}

void ProgressBoard::publish(uint64_t calls) {
  if (!words_) return;
  std::atomic_ref<uint64_t>(finishedAtWord(words_, stride_, rank_)).store(uint64_t(trace::nowNs()),
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
