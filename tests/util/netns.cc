#include "tests/util/netns.h"

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace sncl::test {

bool sh(const std::string& cmd) { return system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::string shOut(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof(buf), p)) out += buf;
    pclose(p);
  }
  return out;
}

void removeStaleNamespaces(const std::string& prefix) {
  const std::string list = shOut("ip netns list 2>/dev/null");
  size_t pos = 0;
  while ((pos = list.find(prefix, pos)) != std::string::npos) {
    size_t end = list.find_first_of(" \n", pos);
    const std::string name = list.substr(pos, end - pos);
    pos = end;
    const pid_t pid = static_cast<pid_t>(atol(name.c_str() + prefix.size() + 2));
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) sh("ip netns del " + name);
  }
}

}  // namespace sncl::test
