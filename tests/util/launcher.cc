#include "tests/util/launcher.h"

#include <dirent.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <thread>
#include <vector>

namespace sncl::test {

namespace {

// Every rank process this process launched: the segments a test may have left are theirs
// or its own (other programs on the machine make segments of their own meanwhile).
std::vector<pid_t>& launched() {
  static std::vector<pid_t> pids;
  return pids;
}

// The unique id travels from rank 0's process to the others through a shared page.
struct SharedId {
  std::atomic<int> state;  // 0: not yet, 1: id valid, 2: rank 0 could not make one
  snclUniqueId id;
};
static_assert(std::atomic<int>::is_always_lock_free, "the id's flag is shared between processes");

// Rank 0 makes the id; the others wait for it (bounded).
bool obtainId(SharedId* shared, int rank, int timeoutMs, snclUniqueId* id) {
  if (rank == 0) {
    snclUniqueId made;
    const bool ok = snclGetUniqueId(&made) == snclSuccess;
    if (!ok) fprintf(stderr, "runRanks: snclGetUniqueId failed: %s\n", snclGetLastError(nullptr));
    shared->id = made;
    shared->state.store(ok ? 1 : 2, std::memory_order_release);
    *id = made;
    return ok;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (shared->state.load(std::memory_order_acquire) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      fprintf(stderr, "runRanks: rank %d got no unique id from rank 0\n", rank);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  *id = shared->id;
  return shared->state.load(std::memory_order_acquire) == 1;
}

}  // namespace

// Forks before anything starts a thread here: the id is made in rank 0's process, not in
// this one, because snclGetUniqueId starts the rendezvous root's thread, and a fork of a
// process with threads copies locks that those threads may hold (stdio's, the allocator's)
// into children that then wait on them forever.
std::vector<RankExit> runRanks(int nranks,
                               const std::function<int(int, int, const snclUniqueId&)>& body,
                               int timeoutMs) {
  std::vector<RankExit> exits(nranks);
  void* page = mmap(nullptr, sizeof(SharedId), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    fprintf(stderr, "runRanks: mmap failed: %s\n", strerror(errno));
    return exits;
  }
  auto* shared = new (page) SharedId{};
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids(nranks, -1);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        snclUniqueId id;
        if (obtainId(shared, r, timeoutMs, &id)) rc = body(r, nranks, id);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: exception: %s\n", r, e.what());
      } catch (...) {
        fprintf(stderr, "rank %d: exception\n", r);
      }
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids[r] = pid;
    if (pid > 0) launched().push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  int left = nranks;
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] != pid) continue;
        if (WIFEXITED(status)) exits[r].code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) exits[r].signal = WTERMSIG(status);
        pids[r] = -1;
        --left;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        exits[r].killed = true;
        pids[r] = -1;
        --left;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  munmap(page, sizeof(SharedId));
  return exits;
}

bool allSucceeded(const std::vector<RankExit>& exits) {
  bool ok = true;
  for (size_t r = 0; r < exits.size(); ++r) {
    const RankExit& e = exits[r];
    if (e.code == 0 && !e.killed) continue;
    ok = false;
    fprintf(stderr, "rank %zu: exit %d signal %d%s\n", r, e.code, e.signal,
            e.killed ? " (killed at the deadline)" : "");
  }
  return ok;
}

int countShmSegments() {
  int n = 0;
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    // sncl-<comm id>-<rank>-<creator pid>-<pid namespace> (transports/shm/segment.cc)
    unsigned long long comm = 0;
    int rank = 0, pid = 0;
    if (sscanf(e->d_name, "sncl-%16llx-%d-%d-", &comm, &rank, &pid) != 3) continue;
    const std::vector<pid_t>& mine = launched();
    n += pid == getpid() || std::find(mine.begin(), mine.end(), pid_t(pid)) != mine.end();
  }
  closedir(d);
  return n;
}

snclResult_t initWithAlgo(snclComm_t* comm, int nranks, const snclUniqueId& id, int rank, const char* algo) {
  setenv("SNCL_ALGO", algo, 1);
  const snclResult_t r = snclCommInitRank(comm, nranks, id, rank);
  unsetenv("SNCL_ALGO");
  if (r != snclSuccess) fprintf(stderr, "rank %d: init (%s) failed: %s\n", rank, algo, snclGetLastError(nullptr));
  return r;
}

int initDirectAndPipelined(int nranks, const snclUniqueId& id, int rank, snclComm_t* direct, snclComm_t* pipelined) {
  if (initWithAlgo(direct, nranks, id, rank, "direct") != snclSuccess) return 2;
  snclUniqueId id2;
  if (rank == 0 && snclGetUniqueId(&id2) != snclSuccess) return 2;
  if (snclBroadcast(&id2, &id2, sizeof(id2), snclUint8, 0, *direct, nullptr) != snclSuccess) return 2;
  return initWithAlgo(pipelined, nranks, id2, rank, "ring,chain") != snclSuccess ? 2 : 0;
}

}  // namespace sncl::test
