#include "lib/net/socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "lib/base/env.h"
#include "lib/base/log.h"

namespace sncl {
namespace {

// Longest single poll(): how quickly a blocked call notices an abort flag.
constexpr int kPollSliceMs = 50;

int64_t elapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// One NCCL-style interface filter: "^" excludes, "=" matches whole names, else prefixes.
struct InterfaceFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  explicit InterfaceFilter(std::string spec) {
    if (!spec.empty() && spec[0] == '^') exclude = true, spec.erase(0, 1);
    if (!spec.empty() && spec[0] == '=') exact = true, spec.erase(0, 1);
    size_t start = 0;
    while (start <= spec.size()) {
      size_t comma = spec.find(',', start);
      if (comma == std::string::npos) comma = spec.size();
      if (comma > start) names.push_back(spec.substr(start, comma - start));
      start = comma + 1;
    }
  }
  bool accepts(const char* ifname) const {
    bool listed = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return exact ? n == ifname : strncmp(ifname, n.c_str(), n.size()) == 0;
    });
    return listed != exclude;
  }
};

}  // namespace

bool isValidAddress(const SocketAddress& addr) {
  return (addr.sa.sa_family == AF_INET || addr.sa.sa_family == AF_INET6) && addressPort(addr) != 0;
}

socklen_t addressLength(const SocketAddress& addr) {
  return addr.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

uint16_t addressPort(const SocketAddress& addr) {
  if (addr.sa.sa_family == AF_INET) return ntohs(addr.sin.sin_port);
  if (addr.sa.sa_family == AF_INET6) return ntohs(addr.sin6.sin6_port);
  return 0;
}

std::string toString(const SocketAddress& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr.sin.sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, addressPort(addr));
  }
  if (addr.sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr.sin6.sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, addressPort(addr));
  }
  return fmt::format("<address family {}>", addr.sa.sa_family);
}

Result findInterfaceAddress(SocketAddress* out) {
  std::string spec = env::str("SNCL_SOCKET_IFNAME").value_or("lo");
  std::string family = env::str("SNCL_SOCKET_FAMILY").value_or("");
  if (!family.empty() && family != "AF_INET" && family != "AF_INET6") {
    return fail(snclInvalidArgument, "SNCL_SOCKET_FAMILY={} is neither AF_INET nor AF_INET6", family);
  }
  InterfaceFilter filter(spec);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return fail(snclSystemError, "getifaddrs failed: {}", strerror(errno));
  }
  // IPv4 first unless the user asked for IPv6; link-local IPv6 needs a scope, skip it.
  const int families[2] = {family == "AF_INET6" ? AF_INET6 : AF_INET,
                           family.empty() ? AF_INET6 : -1};
  bool found = false;
  for (int fam : families) {
    for (ifaddrs* ifa = list; ifa && !found; ifa = ifa->ifa_next) {
      if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP)) continue;
      if (ifa->ifa_addr->sa_family != fam || !filter.accepts(ifa->ifa_name)) continue;
      if (fam == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr))
        continue;
      *out = SocketAddress{};
      memcpy(out, ifa->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      log::trace("socket: using interface {} address {}", ifa->ifa_name, toString(*out));
      found = true;
    }
  }
  std::string available;
  for (ifaddrs* ifa = list; ifa && !found; ifa = ifa->ifa_next) {
    if (available.find(fmt::format(" {} ", ifa->ifa_name)) == std::string::npos)
      available += fmt::format(" {} ", ifa->ifa_name);
  }
  freeifaddrs(list);
  if (!found) {
    return fail(snclInvalidArgument, "no {}interface matches SNCL_SOCKET_IFNAME={} (interfaces:{})",
                family.empty() ? "" : family + " ", spec, available);
  }
  return snclSuccess;
}

Result parseHostPort(const std::string& text, SocketAddress* out) {
  std::string host;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return fail(snclInvalidArgument, "'{}' is not [ipv6]:port", text);
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return fail(snclInvalidArgument, "'{}' is not host:port", text);
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long portNumber = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end || portNumber <= 0 || portNumber > 65535) {
    return fail(snclInvalidArgument, "'{}': port '{}' is not in 1..65535", text, port);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || !found) {
    return fail(snclInvalidArgument, "cannot resolve '{}': {}", host, gai_strerror(rc));
  }
  *out = SocketAddress{};
  memcpy(out, found->ai_addr, std::min<size_t>(found->ai_addrlen, sizeof(SocketAddress)));
  freeaddrinfo(found);
  return snclSuccess;
}

PollStatus pollFd(int fd, short events, Deadline deadline, const AbortFlag* abort) {
  while (true) {
    if (abort && abort->load(std::memory_order_acquire)) return PollStatus::Aborted;
    int waitMs = std::min(deadline.remainingMs(), kPollSliceMs);
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, waitMs);
    if (rc < 0 && errno != EINTR) return PollStatus::Error;
    // HUP/ERR count as ready: the following send/recv reports what happened.
    if (rc > 0) return PollStatus::Ready;
    if (deadline.expired()) return PollStatus::Timeout;
  }
}

Socket::Socket(int fd, const SocketAddress& addr) : fd_(fd), addr_(addr), name_(toString(addr)) {}

Socket::Socket(Socket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), addr_(other.addr_), name_(std::move(other.name_)) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    addr_ = other.addr_;
    name_ = std::move(other.name_);
  }
  return *this;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result Socket::listen(const SocketAddress& addr, bool reuseAddr, Socket* out) {
  int fd = ::socket(addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return fail(snclSystemError, "socket() for {} failed: {}", toString(addr), strerror(errno));
  Socket sock(fd, addr);
  int one = 1;
  if (reuseAddr) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, &addr.sa, addressLength(addr)) != 0) {
    return fail(snclSystemError, "cannot bind to {}: {}", toString(addr), strerror(errno));
  }
  if (::listen(fd, SOMAXCONN) != 0) {
    return fail(snclSystemError, "cannot listen on {}: {}", toString(addr), strerror(errno));
  }
  socklen_t len = sizeof(SocketAddress);
  if (getsockname(fd, &sock.addr_.sa, &len) != 0) {
    return fail(snclSystemError, "getsockname on {} failed: {}", toString(addr), strerror(errno));
  }
  sock.name_ = toString(sock.addr_);
  *out = std::move(sock);
  return snclSuccess;
}

Result Socket::connect(const SocketAddress& addr, Deadline deadline, Socket* out,
                       const AbortFlag* abort) {
  const auto start = Clock::now();
  int backoffMs = 1;
  while (true) {
    int fd = ::socket(addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return fail(snclSystemError, "socket() for {} failed: {}", toString(addr), strerror(errno));
    Socket sock(fd, addr);
    int err = 0;
    if (::connect(fd, &addr.sa, addressLength(addr)) != 0) err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      PollStatus st = pollFd(fd, POLLOUT, deadline, abort);
      if (st == PollStatus::Aborted) return fail(snclInvalidUsage, "connect to {} aborted", toString(addr));
      if (st != PollStatus::Ready) break;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      setNoDelay(fd);
      *out = std::move(sock);
      return snclSuccess;
    }
    // Refused (nobody listens yet) or a transient failure: retry until the deadline.
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != ECONNRESET && err != EAGAIN) {
      return fail(snclSystemError, "connect to {} failed: {}", toString(addr), strerror(err));
    }
    if (abort && abort->load()) return fail(snclInvalidUsage, "connect to {} aborted", toString(addr));
    if (deadline.remainingMs() <= 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(backoffMs, deadline.remainingMs())));
    backoffMs = std::min(backoffMs * 2, 100);
  }
  return fail(snclTimeout, "connect to {} timed out after {} ms", toString(addr), elapsedMs(start));
}

Result Socket::accept(Deadline deadline, Socket* out, const AbortFlag* abort) {
  const auto start = Clock::now();
  while (true) {
    PollStatus st = pollFd(fd_, POLLIN, deadline, abort);
    if (st == PollStatus::Aborted) return fail(snclInvalidUsage, "accept on {} aborted", name_);
    if (st == PollStatus::Timeout) {
      return fail(snclTimeout, "accept on {} timed out after {} ms", name_, elapsedMs(start));
    }
    SocketAddress peer{};
    socklen_t len = sizeof(peer);
    int fd = ::accept4(fd_, &peer.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      setNoDelay(fd);
      *out = Socket(fd, peer);
      return snclSuccess;
    }
    // Another accepter won the race, or the connection died before we took it.
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
    if (abort && abort->load()) return fail(snclInvalidUsage, "accept on {} aborted", name_);
    return fail(snclSystemError, "accept on {} failed: {}", name_, strerror(errno));
  }
}

Result Socket::sendAll(const void* data, size_t bytes, Deadline deadline, const AbortFlag* abort) {
  const auto start = Clock::now();
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::send(fd_, p + done, bytes - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) {
      if (abort && abort->load()) return fail(snclInvalidUsage, "send to {} aborted", name_);
      return fail(snclRemoteError, "send to {} failed: {}", name_, strerror(errno));
    }
    PollStatus st = pollFd(fd_, POLLOUT, deadline, abort);
    if (st == PollStatus::Aborted) return fail(snclInvalidUsage, "send to {} aborted", name_);
    if (st == PollStatus::Timeout) {
      return fail(snclTimeout, "send to {} timed out after {} ms ({} of {} bytes sent)", name_,
                  elapsedMs(start), done, bytes);
    }
  }
  return snclSuccess;
}

Result Socket::recvAll(void* data, size_t bytes, Deadline deadline, const AbortFlag* abort) {
  const auto start = Clock::now();
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::recv(fd_, p + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (abort && abort->load()) return fail(snclInvalidUsage, "recv from {} aborted", name_);
    if (n == 0) {
      return fail(snclRemoteError, "{} closed the connection ({} of {} bytes received)", name_, done, bytes);
    }
    if (errno != EAGAIN) return fail(snclRemoteError, "recv from {} failed: {}", name_, strerror(errno));
    PollStatus st = pollFd(fd_, POLLIN, deadline, abort);
    if (st == PollStatus::Aborted) return fail(snclInvalidUsage, "recv from {} aborted", name_);
    if (st == PollStatus::Timeout) {
      return fail(snclTimeout, "recv from {} timed out after {} ms ({} of {} bytes received)", name_,
                  elapsedMs(start), done, bytes);
    }
  }
  return snclSuccess;
}

}  // namespace sncl
