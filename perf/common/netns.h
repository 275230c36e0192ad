// Two "hosts" on one machine: network namespaces joined by veth pairs, so that ranks in
// different namespaces cross a real network stack (veth, not loopback). Used by the netns
// tests and by chaos_soak's ofi mode. Header only and libc only: chaos_soak uses the public
// headers only, and tests/ already take perf/common's checked loop of calls, so both
// depend on perf/common and not on each other. Needs root (CAP_SYS_ADMIN) and `ip`.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace sncl::netns {

// Runs cmd through the shell, its output discarded; true when it exited 0.
inline bool sh(const std::string& cmd) { return system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// Runs cmd through the shell and returns what it printed.
inline std::string shOut(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof(buf), p)) out += buf;
    pclose(p);
  }
  return out;
}

// Deletes the namespaces named prefix + one letter + "-" + pid whose process is gone (a
// run killed before it could remove them).
inline void removeStaleNamespaces(const std::string& prefix) {
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

// Namespaces prefix + {a,b} + "-" + pid joined by one veth pair per entry of links, named
// so in both; pair k has 10.250.S.(4k+1) on host a and 10.250.S.(4k+2) on host b, each
// its own /30 (S from the pid: up to 3 pairs per /28). The new namespaces are empty, so
// no address or port meets anything of this machine's. Removed in the destructor (deleting
// a namespace deletes the veth ends in it, and with them the pairs), by the process that
// created them only: a forked child that exits does not take them away.
struct TwoHosts {
  std::string prefix;
  std::vector<std::string> links;
  std::string ns[2];
  int subnet = 0;
  pid_t owner = 0;

  TwoHosts(std::string prefix_, std::vector<std::string> links_) : prefix(std::move(prefix_)), links(std::move(links_)) {}
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;
  ~TwoHosts() { remove(); }

  void remove() {
    if (owner != getpid()) return;
    for (std::string& n : ns)
      if (!n.empty()) sh("ip netns del " + n), n.clear();
  }

  std::string addr(int host, int link) const {
    return "10.250." + std::to_string(subnet) + "." + std::to_string(4 * link + host + 1);
  }

  bool create(std::string* why) {
    owner = getpid();
    const std::string pid = std::to_string(owner);
    subnet = owner % 250 + 1;
    for (int i = 0; i < 2; ++i) {
      const std::string name = prefix + "ab"[i] + "-" + pid;
      if (!sh("ip netns add " + name)) {
        *why = "ip netns add failed (no CAP_SYS_ADMIN?)";
        return false;
      }
      ns[i] = name;
      sh("ip -n " + ns[i] + " link set lo up");
    }
    for (size_t k = 0; k < links.size(); ++k) {
      // Unique names while both ends are in this namespace; renamed once moved.
      const std::string end[2] = {"sncl" + std::to_string(k) + "a" + pid, "sncl" + std::to_string(k) + "b" + pid};
      if (!sh("ip link add " + end[0] + " type veth peer name " + end[1])) {
        *why = "ip link add ... type veth failed";
        return false;
      }
      for (int i = 0; i < 2; ++i) {
        const std::string in = "ip -n " + ns[i] + " ";
        if (!sh("ip link set " + end[i] + " netns " + ns[i]) || !sh(in + "link set " + end[i] + " name " + links[k]) ||
            !sh(in + "addr add " + addr(i, int(k)) + "/30 dev " + links[k]) || !sh(in + "link set " + links[k] + " up")) {
          sh("ip link del " + end[0]);  // still here when the move failed
          *why = "configuring a veth pair failed";
          return false;
        }
      }
    }
    return true;
  }

  uint64_t txBytes(int host, const std::string& dev) const {
    return strtoull(shOut("ip netns exec " + ns[host] + " cat /sys/class/net/" + dev + "/statistics/tx_bytes").c_str(),
                    nullptr, 10);
  }
  // Administratively down (the peer's end loses its carrier) or up again.
  bool setLink(int host, const std::string& dev, bool up) const {
    return sh("ip -n " + ns[host] + " link set " + dev + (up ? " up" : " down"));
  }
  // Up with a carrier: both ends up.
  bool linkRunning(int host, const std::string& dev) const {
    return shOut("ip -n " + ns[host] + " -o link show dev " + dev + " 2>/dev/null").find("LOWER_UP") != std::string::npos;
  }
  // The link stays up (carrier and all) but nothing of host's reaches the peer's end of
  // pair k: what a failure past the first hop looks like.
  bool blackhole(int host, int k) const {
    return sh("ip -n " + ns[host] + " route add blackhole " + addr(1 - host, k) + "/32");
  }
  // Moves the calling thread into host's namespace (before it opens any socket; the mount
  // namespace, and with it /sys, stays this machine's).
  bool enter(int host) const {
    const int fd = open(("/run/netns/" + ns[host]).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = setns(fd, CLONE_NEWNET) == 0;
    close(fd);
    return ok;
  }
};

}  // namespace sncl::netns
