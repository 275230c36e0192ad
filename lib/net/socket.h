// Small RAII TCP socket helpers for the bootstrap (IPv4 and IPv6). Every blocking call takes
// a Deadline and waits in poll() slices, so it also notices an abort flag set by another
// thread. Failures are reported through fail() with the address and what happened.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "lib/base/clock.h"
#include "lib/base/error.h"

namespace sncl {

// An IPv4 or IPv6 socket address; trivially copyable, so it can travel on the wire between
// processes of one job (same ABI).
union SocketAddress {
  sockaddr sa;
  sockaddr_in sin;
  sockaddr_in6 sin6;
};

bool isValidAddress(const SocketAddress& addr);  // AF_INET or AF_INET6 with a port
socklen_t addressLength(const SocketAddress& addr);
uint16_t addressPort(const SocketAddress& addr);
// "127.0.0.1:4567" or "[::1]:4567".
std::string toString(const SocketAddress& addr);

// The address sncl listens on. SNCL_SOCKET_IFNAME selects interfaces with a subset of
// NCCL's syntax: comma-separated name prefixes ("eth,ib"), "=" for exact names ("=eth0"),
// a leading "^" to exclude ("^docker,lo"). When it is unset we use loopback ("lo"): this
// project keeps all traffic on the local machine unless the user names an interface.
// SNCL_SOCKET_FAMILY=AF_INET|AF_INET6 picks the family (default: IPv4, else IPv6).
Result findInterfaceAddress(SocketAddress* out);

// Parses "host:port" (IPv4 literal or hostname) or "[v6]:port".
Result parseHostPort(const std::string& text, SocketAddress* out);

// Set by another thread to make blocked socket calls return InvalidUsage promptly.
using AbortFlag = std::atomic<bool>;

enum class PollStatus { Ready, Timeout, Aborted, Error };
// Waits until fd has one of events (POLLIN/POLLOUT), in short slices; EINTR is retried.
PollStatus pollFd(int fd, short events, Deadline deadline, const AbortFlag* abort);

class Socket {
 public:
  Socket() = default;
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Binds and listens on addr (port 0: an ephemeral port; address() tells which).
  static Result listen(const SocketAddress& addr, bool reuseAddr, Socket* out);
  // Connects, retrying refused connections with a short backoff until the deadline (the
  // listener may not exist yet). An unreachable address ends in Timeout.
  static Result connect(const SocketAddress& addr, Deadline deadline, Socket* out,
                        const AbortFlag* abort = nullptr);
  // Waits for one connection on a listening socket.
  Result accept(Deadline deadline, Socket* out, const AbortFlag* abort = nullptr);

  Result sendAll(const void* data, size_t bytes, Deadline deadline, const AbortFlag* abort = nullptr);
  Result recvAll(void* data, size_t bytes, Deadline deadline, const AbortFlag* abort = nullptr);

  // Wakes every thread blocked on this socket; later I/O fails. The fd stays open.
  void shutdown();
  void close();

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // The local address of a listener, the remote address of a connected socket.
  const SocketAddress& address() const { return addr_; }
  // What error messages call the other side, e.g. "rank 3 (127.0.0.1:4567)".
  void setName(std::string name) { name_ = std::move(name); }
  const std::string& name() const { return name_; }

 private:
  Socket(int fd, const SocketAddress& addr);
  int fd_ = -1;
  SocketAddress addr_{};
  std::string name_;
};

}  // namespace sncl
