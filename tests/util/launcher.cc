#include "tests/util/launcher.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

namespace sncl::test {

std::vector<RankExit> runRanks(int nranks,
                               const std::function<int(int, int, const snclUniqueId&)>& body,
                               int timeoutMs) {
  std::vector<RankExit> exits(nranks);
  snclUniqueId id;
  if (snclGetUniqueId(&id) != snclSuccess) {
    fprintf(stderr, "runRanks: snclGetUniqueId failed: %s\n", snclGetLastError(nullptr));
    return exits;
  }
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids(nranks, -1);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = body(r, nranks, id);
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
    if (strncmp(e->d_name, "sncl", 4) == 0) ++n;
  }
  closedir(d);
  return n;
}

}  // namespace sncl::test
