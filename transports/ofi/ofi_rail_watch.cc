// RailWatch (ofi_rail_watch.h): probing a lost rail without blocking.
#include "transports/ofi/ofi_rail_watch.h"

#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace sncl::ofi {
namespace {

// A cycle every 50 ms: a rail back in service is agreed within a few of them (ofi_rails.h),
// and each costs one connect per peer.
constexpr auto kCycleInterval = std::chrono::milliseconds(50);
// A kernel on a working path answers a connect in microseconds; a loaded machine's, in
// milliseconds. No answer within this is no path.
constexpr auto kProbeDeadline = std::chrono::milliseconds(500);

}  // namespace

bool interfaceRunning(int fd, const std::string& iface) {
  ifreq ifr{};
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", iface.c_str());
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) return false;  // the interface is gone
  return (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING);
}

RailWatch::RailWatch(std::string iface, sockaddr_in railAddr, int listenFd, std::vector<sockaddr_in> peers)
    : iface_(std::move(iface)), railAddr_(railAddr), listenFd_(listenFd), peers_(std::move(peers)) {
  railAddr_.sin_port = 0;  // probes leave from the rail's address, any port
  flagsFd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  probes_.assign(peers_.size(), -1);
}

RailWatch::~RailWatch() {
  closeProbes();
  if (listenFd_ >= 0) close(listenFd_);
  if (flagsFd_ >= 0) close(flagsFd_);
}

void RailWatch::step(Clock::time_point now) {
  if (listenFd_ >= 0)
    for (int fd; (fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) close(fd);  // peers' probes
  if (inCycle_) return readAnswers(now);
  if (now >= nextCycle_) startCycle(now);
}

void RailWatch::startCycle(Clock::time_point now) {
  nextCycle_ = now + kCycleInterval;
  if (flagsFd_ < 0 || !interfaceRunning(flagsFd_, iface_)) return endCycle(false);
  inCycle_ = true;
  cycleFailed_ = false;
  cycleEnds_ = now + kProbeDeadline;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {  // out of descriptors: no verdict this cycle
      cycleFailed_ = true;
      break;
    }
    // From the rail's address: the probe takes the rail's path, not another interface's.
    if (bind(fd, reinterpret_cast<const sockaddr*>(&railAddr_), sizeof(railAddr_)) != 0) {
      close(fd);
      cycleFailed_ = true;  // the address is gone with the interface
      break;
    }
    if (connect(fd, reinterpret_cast<const sockaddr*>(&peers_[i]), sizeof(sockaddr_in)) == 0 || errno == ECONNREFUSED) {
      close(fd);
      continue;
    }
    if (errno != EINPROGRESS) {
      close(fd);
      cycleFailed_ = true;  // no route
      break;
    }
    probes_[i] = fd;
  }
  readAnswers(now);
}

void RailWatch::readAnswers(Clock::time_point now) {
  bool open = false;
  for (int& fd : probes_) {
    if (fd < 0 || cycleFailed_) continue;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) {
      open = true;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err && err != ECONNREFUSED) cycleFailed_ = true;
    close(fd);
    fd = -1;
  }
  if (cycleFailed_) return endCycle(false);
  if (!open) return endCycle(true);
  if (now >= cycleEnds_) endCycle(false);
}

void RailWatch::endCycle(bool answered) {
  closeProbes();
  inCycle_ = false;
  answered_ = answered ? answered_ + 1 : 0;
}

void RailWatch::closeProbes() {
  for (int& fd : probes_)
    if (fd >= 0) close(fd), fd = -1;
}

}  // namespace sncl::ofi
