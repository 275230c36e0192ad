// The job view (docs/observability.md, "The job view" and "Links"): the verdict that tells a
// link's fault from jitter, the fault alarms counted once per fault, snclCommGetLinks, and
// the /status and /metrics documents served over HTTP on loopback, on ranks of the emulated
// bus. tests/job_view/run_job_view.sh runs sncl-top and Prometheus against a real job.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "lib/comm/job_view.h"
#include "lib/transport/link_verdict.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/bus_ranks.h"

using namespace sncl;
namespace lv = sncl::linkverdict;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 g(Catch::rngSeed());
  return g;
}

// GET path from the job view's server; "" when it does not answer.
std::string httpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string data;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) data.append(buf, size_t(n));
    }
  }
  close(fd);
  const size_t body = data.find("\r\n\r\n");
  return body == std::string::npos ? "" : data.substr(body + 4);
}

std::vector<snclLinkStatus_t> links(snclComm_t comm) {
  int n = 0;
  REQUIRE(snclCommGetLinks(comm, nullptr, 0, &n) == snclSuccess);
  std::vector<snclLinkStatus_t> out(static_cast<size_t>(n));
  REQUIRE(snclCommGetLinks(comm, out.data(), n, &n) == snclSuccess);
  return out;
}

const snclLinkStatus_t& find(const std::vector<snclLinkStatus_t>& all, const std::string& name) {
  for (const auto& l : all)
    if (name == l.name) return l;
  FAIL("no link " << name);
  return all.front();
}

uint64_t totalAlarms(const std::vector<snclLinkStatus_t>& all) {
  uint64_t n = 0;
  for (const auto& l : all) n += l.faultAlarms;
  return n;
}

// A few All-Reduces of random sizes on every rank, all succeeding (a fault is rerouted).
void calls(std::vector<snclComm_t>& comms, int n) {
  for (int i = 0; i < n; ++i) {
    const size_t count = 1 + rng()() % 70000;
    for (const auto& o : test::allReduceFloats(comms, count, rng()() % 2, uint64_t(i))) {
      INFO(o.message);
      REQUIRE(o.result == snclSuccess);
    }
  }
}

}  // namespace

TEST_CASE("link verdicts: faults are what hurts training, jitter is the rest", "[jobview]") {
  LinkView v;
  v.transfers = 1000;
  v.transferNs = 10000;
  CHECK(lv::judge(v).verdict == lv::Verdict::Ok);
  v.state = LinkView::State::Down;
  CHECK(lv::judge(v).verdict == lv::Verdict::Fault);
  v.state = LinkView::State::Degraded;
  v.slowdown = 1 + double(rng()() % 99) / 100;  // below 2x
  CHECK(lv::judge(v).verdict == lv::Verdict::Jitter);
  v.slowdown = lv::kFaultSlowdown + double(rng()() % 800) / 100;
  CHECK(lv::judge(v).verdict == lv::Verdict::Fault);
  v.state = LinkView::State::Up;
  // Jitter, however large, is never a fault by itself.
  v.jittered = 1 + rng()() % 1000;
  v.jitterNs = double(1 + rng()() % 1000000);
  CHECK(lv::judge(v).verdict == lv::Verdict::Jitter);
  CHECK(lv::jitterScore(v) == Approx(1 + double(v.jittered) / 1000 * v.jitterNs / 10000));
  v.jittered = 0;
  // Downs within the flap window: two come and go (jitter), three are flapping (fault).
  v.downs = 2;
  v.downAgesMs[0] = 10, v.downAgesMs[1] = int64_t(rng()() % lv::kFlapWindowMs);
  CHECK(lv::judge(v).verdict == lv::Verdict::Jitter);
  v.downs = 3;
  v.downAgesMs[2] = lv::kFlapWindowMs - 1;
  CHECK(lv::judge(v).verdict == lv::Verdict::Fault);
  v.downAgesMs[2] = lv::kFlapWindowMs + 1 + int64_t(rng()() % 100000);  // the oldest left the window
  CHECK(lv::judge(v).verdict == lv::Verdict::Jitter);
}

TEST_CASE("the job view: links' alarms once per fault, none for jitter, served over HTTP", "[jobview][bus]") {
  // Below the kernel's ephemeral ports (32768 up), where a connection of a test beside this
  // one may hold any port and leave the process without a job view; apart from the ports
  // tests/job_view/run_job_view.sh draws (26000-31999).
  const int base = 20000 + int(rng()() % 750) * 8;
  test::ScopedEnv env{{"SNCL_OBSERVE_PORT", std::to_string(base)},
                      {"SNCL_TOPO_FILE", test::topologyPath("supernode-2plane-2x4.json")},
                      {"SNCL_RETRY", "1"}};
  constexpr int kRanks = 4;
  auto comms = test::busComms(kRanks);
  REQUIRE(comms.size() == size_t(kRanks));
  calls(comms, 2);
  auto all = links(comms[0]);
  REQUIRE(all.size() == 20);  // the topology's links (both planes, both nodes)
  CHECK(totalAlarms(all) == 0);

  // An endpoint's link into one plane: the other plane stays a route.
  const int e = int(rng()() % kRanks), plane = int(rng()() % 2);
  const std::string link = fmt::format("n0.e{}-n0.l1p{}", e, plane);
  const std::string other = fmt::format("n0.e{}-n0.l1p{}", (e + 1) % kRanks, 1 - plane);
  INFO("link " << link << ", other " << other);
  REQUIRE(snclBusInjectFault(comms[0], ("link=" + link + ":down").c_str()) == snclSuccess);
  calls(comms, 2);
  all = links(comms[int(rng()() % kRanks)]);  // every rank sees the same links
  CHECK(find(all, link).state == 2);
  CHECK(find(all, link).verdict == 2);
  CHECK(find(all, link).faultAlarms == 1);
  CHECK(totalAlarms(all) == 1);

  // Back up: no new alarm; it went down and came back (jitter).
  REQUIRE(snclBusInjectFault(comms[0], ("link=" + link + ":up").c_str()) == snclSuccess);
  calls(comms, 3);
  all = links(comms[0]);
  CHECK(find(all, link).state == 0);
  CHECK(find(all, link).verdict == 1);
  CHECK(totalAlarms(all) == 1);

  // Jitter and a slight slowdown raise none; a slowdown of 2x or more raises one.
  REQUIRE(snclBusInjectFault(comms[0], "jitter=0.05:20us") == snclSuccess);
  REQUIRE(snclBusInjectFault(comms[0], ("link=" + other + ":degrade=1.5").c_str()) == snclSuccess);
  // Until a chunk was jittered (5% of them: a few small calls may have none).
  uint64_t jittered = 0;
  for (int round = 0; round < 40 && jittered == 0; ++round) {
    calls(comms, 3);
    all = links(comms[0]);
    for (const auto& l : all) jittered += l.jittered;
  }
  CHECK(jittered > 0);
  CHECK(totalAlarms(all) == 1);
  CHECK(find(all, other).verdict == 1);
  REQUIRE(snclBusInjectFault(comms[0], ("link=" + other + ":degrade=3").c_str()) == snclSuccess);
  calls(comms, 2);
  all = links(comms[0]);
  CHECK(find(all, other).verdict == 2);
  CHECK(totalAlarms(all) == 2);

  // Two more downs of the first link within a minute: flapping, a fault while it is up.
  for (int flap = 0; flap < 2; ++flap) {
    REQUIRE(snclBusInjectFault(comms[0], ("link=" + link + ":down").c_str()) == snclSuccess);
    calls(comms, 2);
    REQUIRE(snclBusInjectFault(comms[0], ("link=" + link + ":up").c_str()) == snclSuccess);
    calls(comms, 3);
  }
  all = links(comms[0]);
  CHECK(find(all, link).state == 0);
  CHECK(find(all, link).downs == 3);
  CHECK(find(all, link).verdict == 2);
  CHECK(totalAlarms(all) == 4);

  // The same over HTTP: /status has every comm and the links, /metrics the alarms.
  const int port = jobview::port();
  REQUIRE(port >= base);
  REQUIRE(port < base + kRanks);
  const auto status = nlohmann::json::parse(httpGet(port, "/status"));
  REQUIRE(status["comms"].size() == size_t(kRanks));
  for (const auto& c : status["comms"]) {
    CHECK(c["calls_finished"].get<uint64_t>() >= 20);
    CHECK(c["links"].size() == 20);
    CHECK(c["board"].size() == size_t(kRanks));
  }
  const std::string metrics = httpGet(port, "/metrics");
  const std::regex sample(R"(^[a-z_]+\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\} -?[0-9.e+-]+$)");
  std::istringstream lines(metrics);
  int samples = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    INFO(line);
    CHECK(std::regex_match(line, sample));
    ++samples;
  }
  CHECK(samples > 16 * kRanks);
  CHECK(metrics.find(fmt::format("sncl_link_fault_alarms_total{{comm=\"{}\",link=\"{}\"}} 3",
                                 status["comms"][0]["id"].get<std::string>(), link)) != std::string::npos);
  CHECK(httpGet(port, "/nothing").find("GET /status") != std::string::npos);
  test::destroyAll(comms);
  // A destroyed comm leaves the view.
  CHECK(nlohmann::json::parse(httpGet(port, "/status"))["comms"].empty());
}
