#include "tools/randtest/session.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace randtest {

namespace {

constexpr int kMaxCases = 32;
constexpr int kGraceMs = 10000;

// How long a rank may stay in one case before the driver kills the session: a call that
// stops progressing fails at the comm's deadline, and its fault agreement may take another
// deadline before the failure is reported; then a grace.
int64_t limitOf(const SessionOptions& opt) { return 2 * static_cast<int64_t>(opt.timeoutMs) + kGraceMs; }

// Between the driver and its rank processes, mapped before the fork.
struct Shared {
  std::atomic<int> idState;  // 0 not yet, 1 valid, 2 rank 0 failed to make one
  snclUniqueId id;
  std::atomic<int> current[kMaxRanks];     // case a rank is in (-1: init)
  std::atomic<int64_t> startMs[kMaxRanks];  // when it began it
  std::atomic<int> done[kMaxCases][kMaxRanks];  // 0 not yet, 1 comm usable, 2 not
  RankReport reports[kMaxCases][kMaxRanks];
};

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void setEnv(const char* name, const std::string& value) {
  if (value.empty()) unsetenv(name);
  else setenv(name, value.c_str(), 1);
}

// Returns the process's exit code.
int rankMain(Shared* sh, int rank, const World& world, const std::vector<Case>& cases, const SessionOptions& opt) {
  sh->current[rank] = -1;
  sh->startMs[rank] = nowMs();
  setEnv("SNCL_TRANSPORT", opt.transport == "mixed" ? "" : opt.transport);
  setEnv("SNCL_HOSTID", opt.transport == "mixed" && !world.hosts.empty() ? "randtest-host-" + std::to_string(world.hosts[rank]) : "");
  setEnv("SNCL_ALGO", world.algo);
  setEnv("SNCL_CHUNK_SIZE", world.chunk ? std::to_string(world.chunk) : "");
  setEnv("SNCL_TIMEOUT_MS", std::to_string(opt.timeoutMs));
  const int64_t waitMs = limitOf(opt);
  RankReport& first = sh->reports[0][rank];
  auto initFailed = [&](const char* what) {
    first = RankReport{};
    first.status = kError;
    snprintf(first.note, sizeof first.note, "rank %d: %s: %s", rank, what, snclGetLastError(nullptr));
    sh->done[0][rank] = 2;
    return 4;
  };
  if (rank == 0) {
    snclUniqueId id;
    const bool ok = snclGetUniqueId(&id) == snclSuccess;
    sh->id = id;
    sh->idState.store(ok ? 1 : 2, std::memory_order_release);
    if (!ok) return initFailed("snclGetUniqueId");
  } else {
    for (const int64_t end = nowMs() + waitMs; sh->idState.load(std::memory_order_acquire) == 0;) {
      if (nowMs() > end) return initFailed("no unique id from rank 0");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (sh->idState.load() != 1) return initFailed("rank 0 made no unique id");
  }
  snclConfig_t config = SNCL_CONFIG_INITIALIZER;
  config.timeoutMs = opt.timeoutMs;
  config.commName = "randtest";
  snclComm_t comm = nullptr;
  if (snclCommInitRankConfig(&comm, world.nranks, sh->id, rank, &config) != snclSuccess)
    return initFailed("snclCommInitRankConfig");
  for (size_t j = 0; j < cases.size(); ++j) {
    sh->startMs[rank] = nowMs();
    sh->current[rank] = static_cast<int>(j);
    const bool usable = runCase(cases[j], rank, comm, &sh->reports[j][rank]);
    sh->reports[j][rank].ms = nowMs() - sh->startMs[rank];
    sh->done[j][rank].store(usable ? 1 : 2, std::memory_order_release);
    // Every rank learns how the case ended on the others before it goes on, so that after
    // a failure all stop together (a broken comm would make the next case hang).
    bool anyFailed = false;
    for (int r = 0; r < world.nranks; ++r) {
      for (const int64_t end = nowMs() + waitMs; sh->done[j][r].load(std::memory_order_acquire) == 0;) {
        if (nowMs() > end) return 3;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      anyFailed = anyFailed || sh->done[j][r].load() == 2;
    }
    if (anyFailed) {
      snclCommAbort(comm);
      return 4;
    }
  }
  sh->startMs[rank] = nowMs();
  sh->current[rank] = static_cast<int>(cases.size());  // destroying
  return snclCommDestroy(comm) == snclSuccess ? 0 : 5;
}

}  // namespace

std::vector<CaseOutcome> runSession(const World& world, const std::vector<Case>& cases, const SessionOptions& opt) {
  std::vector<CaseOutcome> out;
  const int n = world.nranks;
  if (cases.empty() || static_cast<int>(cases.size()) > kMaxCases || n < 1 || n > kMaxRanks) return out;
  void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    out.push_back({kError, 0, 0, std::string("mmap: ") + strerror(errno)});
    return out;
  }
  auto* sh = new (page) Shared{};
  for (int r = 0; r < n; ++r) sh->current[r] = -1, sh->startMs[r] = nowMs();  // the watch starts now
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> exitCode(n, -1), exitSignal(n, 0);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = rankMain(sh, r, world, cases, opt);
      } catch (...) {
        rc = 6;
      }
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids[r] = pid;
  }
  // Watch: a rank that stays in one case (or in init) past the deadline is a hang; a rank
  // that dies by a signal leaves the others waiting, so it ends the session too.
  int left = 0, hungRank = -1, deadRank = -1;
  for (pid_t p : pids) left += p > 0;
  const int64_t limitMs = limitOf(opt);
  // Bounded: each case (and init, and destroy) has its deadline, and there are finitely many.
  const int64_t sessionEnd = nowMs() + limitMs * (static_cast<int64_t>(cases.size()) + 3);
  while (left > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] != pid) continue;
        if (WIFEXITED(status)) exitCode[r] = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) exitSignal[r] = WTERMSIG(status);
        // Gone in the middle of a case (a signal, or a sanitizer's exit): the others would
        // wait for it until the deadline.
        const int j = sh->current[r].load();
        const bool midCase = j < 0 || (j < static_cast<int>(cases.size()) && sh->done[j][r].load() == 0);
        if (deadRank < 0 && (WIFSIGNALED(status) || (midCase && exitCode[r] != 0))) deadRank = r;
        pids[r] = -1;
        --left;
      }
      continue;
    }
    const int64_t now = nowMs();
    for (int r = 0; r < n && hungRank < 0; ++r) {
      if (pids[r] <= 0) continue;
      const int j = sh->current[r].load();
      const bool inCase = j < 0 || j >= static_cast<int>(cases.size()) || sh->done[j][r].load() == 0;
      if (inCase && now - sh->startMs[r].load() > limitMs) hungRank = r;
    }
    if (hungRank < 0 && now > sessionEnd) hungRank = 0;
    if (hungRank >= 0 || deadRank >= 0) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        pids[r] = -1;
        --left;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t j = 0; j < cases.size(); ++j) {
    bool all = true;
    for (int r = 0; r < n; ++r) all = all && sh->done[j][r].load() != 0;
    if (!all) {
      // The case the session stopped in: name who did not finish it and why.
      CaseOutcome o;
      o.status = kHang;
      for (int r = 0; r < n; ++r) {
        if (sh->done[j][r].load() != 0) continue;
        char buf[160];
        if (exitSignal[r] && exitSignal[r] != SIGKILL) {
          o.status = kError;
          snprintf(buf, sizeof buf, "rank %d died by signal %d (%s); ", r, exitSignal[r], strsignal(exitSignal[r]));
        } else if (exitCode[r] > 0) {
          o.status = kError;
          snprintf(buf, sizeof buf, "rank %d exited with %d in the case; ", r, exitCode[r]);
        } else {
          snprintf(buf, sizeof buf, "rank %d did not finish %s; ", r, sh->current[r].load() < 0 ? "init" : "the case");
        }
        o.note += buf;
      }
      if (hungRank >= 0) o.note += "killed after " + std::to_string(limitMs / 1000) + " s in one case";
      if (hungRank < 0 && deadRank < 0 && o.status == kHang) o.status = kError, o.note += "ranks exited early";
      if (j == 0 && sh->reports[0][0].status == kError && sh->reports[0][0].note[0]) o.note += std::string(" ") + sh->reports[0][0].note;
      out.push_back(o);
      break;
    }
    CaseOutcome o;
    for (int r = 0; r < n; ++r) {
      const RankReport& rep = sh->reports[j][r];
      o.wrong += rep.wrong;
      o.ops += rep.ops;
      o.status = static_cast<Status>(std::max<int>(rep.status, o.status));
    }
    for (int r = 0; r < n && o.status != kPass; ++r)
      if (sh->reports[j][r].status == o.status) {
        o.note = sh->reports[j][r].note;
        break;
      }
    // An error after a deadline passed is a hang that the library turned into an error
    // (a fault agreement after the timeout, or a peer's remote error).
    int64_t longest = 0;
    for (int r = 0; r < n; ++r) longest = std::max(longest, sh->reports[j][r].ms);
    if (o.status == kError && longest >= opt.timeoutMs) {
      o.status = kHang;
      o.note += " (after " + std::to_string(longest / 1000) + " s)";
    }
    out.push_back(o);
    if (o.status == kError || o.status == kHang) break;
  }
  // A failed destroy after the last case: report it on that case.
  if (out.size() == cases.size() && out.back().status == kPass) {
    for (int r = 0; r < n; ++r) {
      if (exitCode[r] == 0) continue;
      out.back().status = exitSignal[r] ? kError : exitCode[r] == 5 ? kError : kHang;
      out.back().note = "rank " + std::to_string(r) + (exitCode[r] == 5 ? ": snclCommDestroy failed" : ": did not finish the session") +
                        (exitSignal[r] ? " (signal " + std::to_string(exitSignal[r]) + ")" : "");
      break;
    }
  }
  munmap(page, sizeof(Shared));
  return out;
}

}  // namespace randtest
