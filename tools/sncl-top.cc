// sncl-top: a running job at a glance (docs/observability.md, "The job view"). Each process
// of a job run with SNCL_OBSERVE_PORT=P serves its comms' state on 127.0.0.1:(P + rank);
// sncl-top asks every rank at once, puts the answers side by side, and names the ranks that
// hold the job up: those that do not answer (and what their process is doing, from the
// peers' progress board and /proc), those the others wait on, those behind the others.
//
//   sncl-top [--port P] [--ranks N] [--once] [--json] [--interval MS] [--timeout MS] [--stall MS]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

using nlohmann::json;

namespace {

constexpr const char* kUsage = R"(usage: sncl-top [--port P] [--ranks N] [--once] [--json] [--interval MS] [--timeout MS] [--stall MS]
  --port P       the job's SNCL_OBSERVE_PORT (default: that variable): rank r answers on 127.0.0.1:P+r
  --ranks N      ranks to ask (default: every port from P that answers, up to the job's size, at most 64)
  --once         one snapshot, then exit (exit 0; 3 when no rank answered)
  --json         the snapshot as one JSON document
  --interval MS  refresh period of the live view (default 1000)
  --timeout MS   how long a rank gets to answer (default 500)
  --stall MS     a rank that others wait on, or that is behind them, this long is a suspect (default 1000)
)";

struct Answer {
  int port = 0;
  bool answered = false;
  std::string error;  // why not
  json doc;
};

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// GET /status from every port at once; each gets timeoutMs from the start.
std::vector<Answer> ask(int port, int count, int timeoutMs) {
  struct Conn {
    int fd = -1;
    bool sent = false;
    std::string data;
  };
  std::vector<Answer> out(static_cast<size_t>(count));
  std::vector<Conn> conns(static_cast<size_t>(count));
  const std::string request = "GET /status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  for (int i = 0; i < count; ++i) {
    out[i].port = port + i;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port + i));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS)) {
      out[i].error = "not listening";
      if (fd >= 0) close(fd);
      continue;
    }
    conns[i].fd = fd;
  }
  const int64_t end = nowMs() + timeoutMs;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < count; ++i)
      if (conns[i].fd >= 0) {
        fds.push_back({conns[i].fd, short(conns[i].sent ? POLLIN : POLLOUT), 0});
        which.push_back(i);
      }
    const int64_t left = end - nowMs();
    if (fds.empty() || left <= 0) break;
    if (poll(fds.data(), fds.size(), int(left)) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      Conn& c = conns[size_t(which[k])];
      Answer& a = out[size_t(which[k])];
      if (!fds[k].revents) continue;
      if (!c.sent) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0 || send(c.fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
          a.error = "not listening";
          close(c.fd), c.fd = -1;
          continue;
        }
        c.sent = true;
        continue;
      }
      char buf[65536];
      const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.data.append(buf, size_t(n));
        continue;
      }
      close(c.fd), c.fd = -1;
      const size_t body = c.data.find("\r\n\r\n");
      try {
        if (body == std::string::npos) throw std::runtime_error("no HTTP response");
        a.doc = json::parse(c.data.substr(body + 4));
        a.answered = true;
      } catch (const std::exception& e) {
        a.error = fmt::format("bad answer: {}", e.what());
      }
    }
  }
  for (int i = 0; i < count; ++i)
    if (conns[i].fd >= 0) {
      close(conns[i].fd);
      out[i].error = fmt::format("connected but no answer in {} ms", timeoutMs);
    }
  return out;
}

// What /proc says of a process of this machine: "running", "stopped (SIGSTOP or a
// debugger)", "gone", ...
std::string processState(int64_t pid) {
  if (pid <= 0) return "unknown";
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return "gone";
  const size_t paren = stat.rfind(')');
  const char s = paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
  switch (s) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "in uninterruptible wait";
    case 'T': return "stopped (SIGSTOP or job control)";
    case 't': return "stopped by a debugger";
    case 'Z': return "exited (zombie)";
    default: return std::string("state ") + s;
  }
}

// One snapshot of the job: the comm with the most ranks among the answers (the job's
// world), each of its ranks, its links, and the suspects.
json snapshot(int port, int ranks, int timeoutMs, int stallMs) {
  const int count = ranks > 0 ? ranks : 64;
  std::vector<Answer> answers = ask(port, count, timeoutMs);
  json job = {{"port", port}};
  // The world comm: the largest; its id names it.
  std::string id;
  int nranks = 0;
  for (const Answer& a : answers) {
    if (!a.answered) continue;
    for (const json& c : a.doc["comms"])
      if (c["nranks"].get<int>() > nranks) nranks = c["nranks"].get<int>(), id = c["id"].get<std::string>();
  }
  job["comm"] = id;
  job["nranks"] = nranks;
  if (ranks <= 0) answers.resize(size_t(std::min(nranks, count)));
  std::map<int, json> byRank;  // rank -> its comm's entry
  std::map<int, json> processOf;
  for (const Answer& a : answers) {
    if (!a.answered) continue;
    for (const json& c : a.doc["comms"])
      if (c["id"] == id) byRank[c["rank"].get<int>()] = c, processOf[c["rank"].get<int>()] = a.doc;
  }
  // The board as the answering ranks see it (rank 0's view when it answers).
  json board = json::array();
  for (const auto& [r, c] : byRank)
    if (!c["board"].empty()) {
      board = c["board"];
      break;
    }
  uint64_t maxEntered = 0;
  for (const json& b : board) maxEntered = std::max(maxEntered, b["entered"].get<uint64_t>());
  json list = json::array(), suspects = json::array();
  uint64_t rounds = 0;
  std::map<int, int> waitedOn;  // peer -> ranks waiting on it past the stall time
  for (const auto& [r, c] : byRank)
    if (!c["wait"].is_null() && c["wait"]["ms"].get<double>() >= stallMs) ++waitedOn[c["wait"]["peer"].get<int>()];
  for (int r = 0; r < nranks; ++r) {
    json e = {{"rank", r}, {"port", port + r}};
    const json* line = size_t(r) < board.size() ? &board[size_t(r)] : nullptr;
    auto it = byRank.find(r);
    if (it != byRank.end()) {
      const json& c = it->second;
      e["answered"] = true;
      e["pid"] = processOf[r]["pid"];
      e["host"] = processOf[r]["host"];
      e["call"] = c["call"];
      e["wait"] = c["wait"];
      e["calls_finished"] = c["calls_finished"];
      e["fault_rounds"] = c["fault_rounds"];
      e["last_error"] = c["last_error"];
      rounds = std::max(rounds, c["fault_rounds"].get<uint64_t>());
    } else {
      const Answer* a = size_t(r) < answers.size() ? &answers[size_t(r)] : nullptr;
      e["answered"] = false;
      e["error"] = a ? a->error : "not asked";
      if (line) {
        e["pid"] = (*line)["pid"];
        e["process"] = processState((*line)["pid"].get<int64_t>());
      }
      std::string why = fmt::format("rank {} does not answer ({})", r, e["error"].get<std::string>());
      if (e.contains("process")) why += fmt::format("; its process {} is {}", e["pid"].get<int64_t>(),
                                                      e["process"].get<std::string>());
      if (line) why += fmt::format("; it is in call #{} ({}), finished {}", (*line)["entered"].get<uint64_t>(),
                                   (*line)["call"].get<std::string>(), (*line)["finished"].get<uint64_t>());
      if (waitedOn.count(r)) why += fmt::format("; {} rank(s) wait on it", waitedOn[r]);
      suspects.push_back({{"rank", r}, {"why", why}});
    }
    if (line) e["board"] = *line;
    if (it != byRank.end()) {
      std::string why;
      if (line && (*line)["entered"].get<uint64_t>() < maxEntered && (*line)["finished_ago_ms"].get<double>() >= stallMs)
        why = fmt::format("rank {} has not reached call #{} (it is at #{}, finished {} ms ago)", r, maxEntered,
                          (*line)["entered"].get<uint64_t>(), int64_t((*line)["finished_ago_ms"].get<double>()));
      if (waitedOn.count(r)) why += fmt::format("{}{} rank(s) wait on it", why.empty() ? fmt::format("rank {}: ", r) : "; ",
                                                waitedOn[r]);
      if (!why.empty()) suspects.push_back({{"rank", r}, {"why", why}});
    }
    list.push_back(e);
  }
  job["ranks"] = list;
  job["answered"] = byRank.size();
  job["fault_rounds"] = rounds;
  job["links"] = byRank.empty() ? json::array() : byRank.begin()->second["links"];
  job["suspects"] = suspects;
  return job;
}

void printTable(const json& job, const std::map<std::string, uint64_t>& lastBytes, double seconds) {
  fmt::print("sncl-top  comm {}  {} ranks, {} answered, {} fault rounds\n\n", job["comm"].get<std::string>(),
             job["nranks"].get<int>(), job["answered"].get<size_t>(), job["fault_rounds"].get<uint64_t>());
  fmt::print("{:>5} {:>8}  {:<30} {:>9}  {}\n", "rank", "pid", "call", "step", "waits on");
  for (const json& e : job["ranks"]) {
    const std::string pid = e.contains("pid") ? std::to_string(e["pid"].get<int64_t>()) : "-";
    if (!e["answered"].get<bool>()) {
      fmt::print("{:>5} {:>8}  NO ANSWER: {}{}\n", e["rank"].get<int>(), pid, e["error"].get<std::string>(),
                 e.contains("process") ? ", process " + e["process"].get<std::string>() : "");
      continue;
    }
    const json& c = e["call"];
    const std::string call = c["in_call"].get<bool>()
                                 ? fmt::format("#{} {} {} B", c["seq"].get<uint64_t>() + 1, c["name"].get<std::string>(),
                                               c["bytes"].get<int64_t>())
                                 : fmt::format("idle ({} done)", e["calls_finished"].get<uint64_t>());
    const std::string step = c["in_call"].get<bool>() ? fmt::format("{}/{}", c["step"].get<uint32_t>() + 1,
                                                                     c["steps"].get<uint32_t>()) : "";
    const std::string wait = e["wait"].is_null() ? "" : fmt::format("rank {} for {:.0f} ms", e["wait"]["peer"].get<int>(),
                                                                    e["wait"]["ms"].get<double>());
    fmt::print("{:>5} {:>8}  {:<30} {:>9}  {}\n", e["rank"].get<int>(), pid, call, step, wait);
  }
  if (!job["links"].empty()) {
    fmt::print("\n{:<28} {:<9} {:<7} {:>12} {:>7} {:>7} {:>6} {:>7}  {}\n", "link", "state", "verdict", "bytes/s",
               "errors", "jitter", "downs", "alarms", "why");
    for (const json& l : job["links"]) {
      const std::string name = l["name"].get<std::string>();
      const auto last = lastBytes.find(name);
      const std::string rate = last != lastBytes.end() && seconds > 0
                                   ? fmt::format("{:.3g}", double(l["bytes"].get<uint64_t>() - last->second) / seconds)
                                   : "-";
      fmt::print("{:<28} {:<9} {:<7} {:>12} {:>7} {:>7.3f} {:>6} {:>7}  {}\n", name, l["state"].get<std::string>(),
                 l["verdict"].get<std::string>(), rate, l["errors"].get<uint64_t>(), l["jitter_score"].get<double>(),
                 l["downs"].get<uint64_t>(), l["fault_alarms"].get<uint64_t>(), l["reason"].get<std::string>());
    }
  }
  if (!job["suspects"].empty()) {
    fmt::print("\nsuspects:\n");
    for (const json& s : job["suspects"]) fmt::print("  {}\n", s["why"].get<std::string>());
  }
}

bool number(const char* text, long lo, long hi, long* out) {
  char* end = nullptr;
  const long v = strtol(text, &end, 10);
  if (!*text || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long port = 0, ranks = 0, interval = 1000, timeout = 500, stall = 1000;
  bool once = false, asJson = false;
  if (const char* p = getenv("SNCL_OBSERVE_PORT")) number(p, 1, 65535, &port);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](long lo, long hi, long* out) {
      if (i + 1 >= argc || !number(argv[i + 1], lo, hi, out)) {
        fmt::print(stderr, "sncl-top: {} needs a number from {} to {}\n{}", a, lo, hi, kUsage);
        exit(2);
      }
      ++i;
    };
    if (a == "--port") value(1, 65535, &port);
    else if (a == "--ranks") value(1, 65535, &ranks);
    else if (a == "--interval") value(50, 3600000, &interval);
    else if (a == "--timeout") value(10, 60000, &timeout);
    else if (a == "--stall") value(0, 86400000, &stall);
    else if (a == "--once") once = true;
    else if (a == "--json") asJson = true;
    else if (a == "-h" || a == "--help") return fmt::print("{}", kUsage), 0;
    else return fmt::print(stderr, "sncl-top: unknown option {}\n{}", a, kUsage), 2;
  }
  if (port <= 0) return fmt::print(stderr, "sncl-top: no port: pass --port or set SNCL_OBSERVE_PORT\n{}", kUsage), 2;
  if (port + std::max(ranks, 1L) - 1 > 65535) return fmt::print(stderr, "sncl-top: ports past 65535\n"), 2;
  std::map<std::string, uint64_t> lastBytes;
  int64_t lastMs = 0;
  for (;;) {
    const json job = snapshot(int(port), int(ranks), int(timeout), int(stall));
    const int64_t now = nowMs();
    if (asJson) fmt::print("{}\n", job.dump(once ? 2 : -1));
    else {
      if (!once) fmt::print("\033[H\033[2J");
      printTable(job, lastBytes, double(now - lastMs) / 1000);
    }
    fflush(stdout);
    if (once) return job["answered"].get<size_t>() > 0 ? 0 : 3;
    for (const json& l : job["links"]) lastBytes[l["name"].get<std::string>()] = l["bytes"].get<uint64_t>();
    lastMs = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(interval));
  }
}
