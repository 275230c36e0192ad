// OfiTransport as one rail of several (ofi_rails.h): watching the rail and losing it.
//
// With tcp, a rail whose link went down shows no error: the kernel keeps retransmitting
// and sends sit in socket buffers. So a rail counts as lost when
// - its interface has no carrier (checked every few milliseconds while requests are out:
//   one ioctl), which a veth sees at both ends, or a NIC whose cable or switch port died;
// - or its requests made no progress for railDetectMs and a probe of a peer they wait on
//   gets no answer: a TCP connect from this rail's address to the listener the peer's
//   transport opened on its rail address, which the peer's kernel completes (or refuses)
//   whether or not its process is reading the rail. A slow peer answers; a dead path
//   does not (or fails at once: no route).
// - or the provider fails an operation (an error completion, a refused post).
// The probe listener never reads what it accepts: it accepts and closes, so its backlog
// stays free.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lib/base/log.h"
#include "transports/ofi/ofi_transport.h"

namespace sncl::ofi {
namespace {

constexpr auto kCheckInterval = std::chrono::milliseconds(2);

int64_t msBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

}  // namespace

Result OfiTransport::openRailChecks(const std::string& node, AddressRecord* mine) {
  railAddr_ = sockaddr_in{};
  railAddr_.sin_family = AF_INET;
  if (inet_pton(AF_INET, node.c_str(), &railAddr_.sin_addr) != 1)
    return fail(snclInvalidArgument, "ofi: rail {} address {} is not IPv4", options_.rail, node);
  ifFd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  probeFd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  socklen_t len = sizeof(railAddr_);
  sockaddr_in bound{};
  if (ifFd_ < 0 || probeFd_ < 0 || bind(probeFd_, reinterpret_cast<const sockaddr*>(&railAddr_), sizeof(railAddr_)) ||
      listen(probeFd_, 128) || getsockname(probeFd_, reinterpret_cast<sockaddr*>(&bound), &len))
    return fail(snclSystemError, "ofi: rail {} ({}): probe listener on {}: {}", options_.rail, options_.iface, node,
                strerror(errno));
  mine->probeAddr = railAddr_.sin_addr.s_addr;
  mine->probePort = bound.sin_port;
  railProgress_ = nextRailCheck_ = Clock::now();
  return snclSuccess;
}

std::unique_ptr<RailWatch> OfiTransport::takeWatch() {
  if (!railChecks_ || probeFd_ < 0) return nullptr;
  std::vector<sockaddr_in> targets;
  for (const Peer& p : peers_)
    if (p.connected && p.probe.sin_port) targets.push_back(p.probe);
  const int listenFd = probeFd_;
  probeFd_ = -1;
  return std::make_unique<RailWatch>(options_.iface, railAddr_, listenFd, std::move(targets));
}

// Rate-limited; completed: the progress that calls it read a completion of this rail.
void OfiTransport::checkRail(bool completed) {
  const Clock::time_point now = Clock::now();
  if (completed) railProgress_ = now;
  if (railLost_ || now < nextRailCheck_) return;
  nextRailCheck_ = now + kCheckInterval;
  for (int fd; (fd = accept4(probeFd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) close(fd);  // probes of peers
  if (freeRequests_.size() == requests_.size()) return;  // idle: nothing can stall
  if (!interfaceRunning(ifFd_, options_.iface)) return loseRail(fmt::format("interface {} is down (no carrier)", options_.iface));
  if (options_.railDetectMs <= 0 || msBetween(railProgress_, now) < options_.railDetectMs) return;
  std::string why;
  if (!probePeers(&why)) return loseRail(why);
  railProgress_ = Clock::now();  // the peers' kernels answer: they are slow, the rail is there
}

// Probes the peers that requests wait on, all at once; false (why) when one does not answer.
bool OfiTransport::probePeers(std::string* why) {
  std::vector<int> wanted(size_t(nranks_), 0);
  for (const Request& r : requests_)
    if (r.active && peers_[r.peer].probe.sin_port) wanted[size_t(r.peer)] = 1;
  std::vector<pollfd> fds;
  std::vector<int> peerOf;
  bool alive = true;
  for (int p = 0; p < nranks_ && alive; ++p) {
    if (!wanted[size_t(p)]) continue;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in src = railAddr_;
    src.sin_port = 0;
    if (fd < 0) continue;  // out of descriptors: no verdict on this peer
    // From this rail's address: the probe takes the rail's path, not another interface's.
    if (bind(fd, reinterpret_cast<const sockaddr*>(&src), sizeof(src)) == 0 &&
        connect(fd, reinterpret_cast<const sockaddr*>(&peers_[p].probe), sizeof(sockaddr_in)) == 0) {
      close(fd);
      continue;
    }
    if (errno == EINPROGRESS) {
      fds.push_back({fd, POLLOUT, 0});
      peerOf.push_back(p);
      continue;
    }
    if (errno != ECONNREFUSED) {
      *why = fmt::format("no path to rank {} ({}): {}", p, peers_[p].address, strerror(errno));
      alive = false;
    }
    close(fd);
  }
  const int64_t probeMs = std::clamp<int64_t>(options_.railDetectMs / 2, 20, 1000);
  const Deadline deadline = Deadline::afterMs(probeMs);
  size_t open = fds.size();
  while (alive && open && !deadline.expired()) {
    if (poll(fds.data(), fds.size(), int(std::max<int64_t>(1, deadline.remainingMs()))) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size() && alive; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err && err != ECONNREFUSED) {
        *why = fmt::format("no path to rank {} ({}): {}", peerOf[i], peers_[peerOf[i]].address, strerror(err));
        alive = false;
      }
      close(fds[i].fd);
      fds[i].fd = -1;
      --open;
    }
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].fd < 0) continue;
    close(fds[i].fd);
    if (alive)
      *why = fmt::format("no progress for {} ms and rank {} ({}) did not answer a probe within {} ms",
                         options_.railDetectMs, peerOf[i], peers_[peerOf[i]].address, probeMs);
    alive = false;
  }
  return alive;
}

// The whole rail goes: every peer's requests fail naming it, and the rails above re-run
// the call on another after the comm agreed (docs/faults.md).
void OfiTransport::loseRail(const std::string& why) {
  if (railLost_) return;
  railLost_ = true;
  const std::string text = fmt::format("ofi: rank {}: rail {} ({}) lost: {}", rank_, options_.rail, options_.iface, why);
  log::warn("{}", text);
  for (Peer& p : peers_)  // not failPeer: one line for the rail, not one per peer
    if (p.connected && p.error == snclSuccess) p.error = snclRemoteError, p.message = text;
}

}  // namespace sncl::ofi
