// The job view's HTTP server: one thread per process, on loopback only, started with the
// first comm when SNCL_OBSERVE_PORT is set. It answers GET /status (JSON) and GET /metrics
// (Prometheus text), one request per connection (HTTP/1.0, Connection: close), each read
// and written under a deadline so that a client that stalls cannot hold it.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <atomic>
#include <string>
#include <string_view>
#include <thread>

#include "lib/base/clock.h"
#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/comm/job_view.h"
#include "lib/net/socket.h"

namespace sncl::jobview {
namespace {

constexpr int64_t kRequestMs = 1000;  // a client gets this long to send its request line
constexpr size_t kMaxRequest = 8192;

class Server {
 public:
  ~Server() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  // Once per process: the first comm's rank picks the port for the process's life.
  void start(int rank) {
    if (started_.exchange(true)) return;
    const int64_t base = env::integer("SNCL_OBSERVE_PORT", 0);
    if (base <= 0) return;
    if (base + rank > 65535) {
      log::warn("SNCL_OBSERVE_PORT={}: port {} for rank {} is out of range; no job view", base, base + rank, rank);
      return;
    }
    SocketAddress addr{};
    addr.sin.sin_family = AF_INET;
    addr.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // never another interface
    addr.sin.sin_port = htons(uint16_t(base + rank));
    Socket listener;
    if (Socket::listen(addr, true, &listener) != snclSuccess) {
      log::warn("job view: cannot listen on 127.0.0.1:{} ({}); no job view in this process", base + rank, lastError());
      return;
    }
    port_.store(int(base + rank));
    log::info(log::Subsys::Init, "job view on http://127.0.0.1:{}/status and /metrics", base + rank);
    thread_ = std::thread([this, l = std::move(listener)]() mutable { serve(l); });
  }

  int port() const { return port_.load(); }

 private:
  void serve(Socket& listener) {
    while (!stop_.load()) {
      // Short slices: the process's exit (stop_) is noticed within one.
      if (pollFd(listener.fd(), POLLIN, Deadline::afterMs(200), &stop_) != PollStatus::Ready) continue;
      Socket client;
      if (listener.accept(Deadline::afterMs(kRequestMs), &client, &stop_) == snclSuccess) answer(client);
    }
  }

  static void answer(Socket& client) {
    const Deadline deadline = Deadline::afterMs(kRequestMs);
    std::string request;
    char buf[1024];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequest) {
      if (pollFd(client.fd(), POLLIN, deadline, nullptr) != PollStatus::Ready) return;
      const ssize_t n = ::recv(client.fd(), buf, sizeof(buf), 0);
      if (n <= 0) break;
      request.append(buf, size_t(n));
    }
    const std::string_view line = std::string_view(request).substr(0, request.find("\r\n"));
    std::string status = "200 OK", type, body;
    if (line.starts_with("GET /metrics")) {
      type = "text/plain; version=0.0.4; charset=utf-8";
      body = metricsText();
    } else if (line.starts_with("GET /status") || line.starts_with("GET / ")) {
      type = "application/json";
      body = statusJson();
    } else {
      status = "404 Not Found";
      type = "text/plain";
      body = "sncl job view: GET /status (JSON) or GET /metrics (Prometheus text)\n";
    }
    const std::string response = "HTTP/1.0 " + status + "\r\nContent-Type: " + type +
                                 "\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\nConnection: close\r\n\r\n" + body;
    (void)client.sendAll(response.data(), response.size(), Deadline::afterMs(kRequestMs));
  }

  std::atomic<bool> started_{false}, stop_{false};
  std::atomic<int> port_{0};
  std::thread thread_;
};

Server& server() {
  static Server s;  // its destructor stops the thread at the process's exit
  return s;
}

}  // namespace

void startServer(int rank) { server().start(rank); }
int port() { return server().port(); }

}  // namespace sncl::jobview
