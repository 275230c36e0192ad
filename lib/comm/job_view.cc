// The job view's documents: the comms of this process, their calls, waits, counters, the
// progress board's line of every rank and the links' health, as JSON and as Prometheus
// text. The server that hands them out is job_view_server.cc.
#include "lib/comm/job_view.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include <fmt/format.h>

#include "lib/base/trace.h"
#include "lib/comm/comm.h"
#include "lib/comm/observe.h"
#include "lib/transport/link_verdict.h"

namespace sncl::jobview {

void startServer(int rank);  // job_view_server.cc

namespace {

using json = nlohmann::json;

struct Registry {
  std::mutex mu;  // held while a document is built: a comm is not freed under it
  std::vector<snclComm*> comms;
};
Registry& registry() {
  static Registry* r = new Registry;  // outlives every comm (never destroyed at exit)
  return *r;
}

std::string commLabel(const snclComm* comm) { return fmt::format("{:016x}", comm->commId); }

// One comm as both documents see it, read once.
struct CommSnapshot {
  const snclComm* comm = nullptr;
  snclCommStatus_t status{};
  int64_t bytes = 0;
  int waitPeer = -1;
  double waitMs = 0;
  TransportCounters moved;
  uint64_t copied = 0, reduced = 0;
  uint32_t railsUsable = 0, railsLost = 0;
  std::vector<LinkView> links;
};

CommSnapshot snapshot(snclComm* comm) {
  CommSnapshot s;
  s.comm = comm;
  observeStatus(comm, &s.status);
  s.bytes = int64_t(comm->obs.bytes.load(std::memory_order_relaxed));
  if (comm->executor) {
    int64_t sinceNs = 0;
    comm->executor->waiting(&s.waitPeer, &sinceNs);
    if (s.waitPeer >= 0) s.waitMs = double(trace::coarseNowNs() - sinceNs) / 1e6;
    s.copied = comm->executor->bytesCopied();
    s.reduced = comm->executor->bytesReduced();
  }
  for (const auto& t : comm->transports) {
    if (!t) continue;
    t->addCounters(&s.moved);
    s.railsUsable |= t->railsUsable();
    s.railsLost |= t->railsLost();
    t->linkViews(&s.links);
  }
  return s;
}

std::vector<CommSnapshot> snapshots() {
  std::vector<CommSnapshot> out;
  for (snclComm* comm : registry().comms) out.push_back(snapshot(comm));
  return out;
}

json linkJson(const LinkView& v) {
  const linkverdict::Judgement j = linkverdict::judge(v);
  return {{"name", v.name},
          {"state", linkverdict::stateName(v.state)},
          {"slowdown", v.slowdown},
          {"bytes", v.bytes},
          {"transfers", v.transfers},
          {"errors", v.errors},
          {"jittered", v.jittered},
          {"jitter_score", linkverdict::jitterScore(v)},
          {"downs", v.downs},
          {"recent_downs", linkverdict::recentDowns(v)},
          {"fault_alarms", v.faultAlarms},
          {"verdict", linkverdict::verdictName(j.verdict)},
          {"reason", j.reason}};
}

json commJson(const CommSnapshot& s) {
  const snclComm* comm = s.comm;
  const snclCommStatus_t& st = s.status;
  json c = {{"id", commLabel(comm)},
            {"name", comm->name},
            {"rank", comm->rank},
            {"nranks", comm->nranks},
            {"calls_started", st.callsStarted},
            {"calls_finished", st.callsFinished},
            {"last_result", resultName(st.lastResult)},
            {"last_error", st.lastError},
            {"fault_rounds", st.faultRounds},
            {"links_down", st.linksDown},
            {"ranks_lost", st.ranksLost},
            {"bytes_sent", s.moved.bytesSent},
            {"bytes_received", s.moved.bytesReceived},
            {"bytes_copied", s.moved.bytesCopied + s.copied},
            {"bytes_reduced", s.reduced},
            {"rails_usable", std::popcount(s.railsUsable)},
            {"rails_lost", std::popcount(s.railsLost)}};
  std::vector<std::string> transports;
  for (const auto& t : comm->transports)
    if (t) transports.push_back(t->name());
  c["transports"] = transports;
  c["call"] = {{"in_call", bool(st.inCall)}, {"seq", st.seq},        {"name", st.callName},
               {"bytes", s.bytes},           {"step", st.step},      {"steps", st.steps},
               {"elapsed_ms", st.elapsedUs / 1000}};
  c["wait"] = s.waitPeer >= 0 ? json{{"peer", s.waitPeer}, {"ms", s.waitMs}} : json(nullptr);
  // Every rank's line of the progress board: what this process knows of its peers, also
  // of one that stopped answering.
  json board = json::array();
  const int64_t now = trace::nowNs();
  for (int r = 0; r < comm->board.nranks(); ++r) {
    const ProgressBoard::RankProgress p = comm->board.progressOf(r);
    board.push_back({{"rank", r},
                     {"pid", p.pid},
                     {"finished", p.finished},
                     {"entered", p.entered},
                     {"call", p.call},
                     {"finished_ago_ms", p.finishedAtNs > 0 ? double(now - p.finishedAtNs) / 1e6 : -1.0}});
  }
  c["board"] = board;
  json links = json::array();
  for (const LinkView& v : s.links) links.push_back(linkJson(v));
  c["links"] = links;
  return c;
}

// Prometheus' text format: label values escaped (backslash, quote, newline).
std::string escape(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\' || ch == '"') out += '\\', out += ch;
    else if (ch == '\n') out += "\\n";
    else out += ch;
  }
  return out;
}

class Exposition {
 public:
  // A metric family: its HELP and TYPE once, then its samples.
  void family(const char* name, const char* type, const char* help) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    name_ = name;
  }
  void sample(const std::string& labels, double value) { text_ += fmt::format("{}{{{}}} {}\n", name_, labels, value); }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
  const char* name_ = "";
};

std::string rankLabels(const snclComm* comm) {
  return fmt::format("comm=\"{}\",name=\"{}\",rank=\"{}\"", commLabel(comm), escape(comm->name), comm->rank);
}

}  // namespace

void add(snclComm* comm) {
  Registry& r = registry();
  bool first;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    first = r.comms.empty();
    r.comms.push_back(comm);
  }
  if (first) startServer(comm->rank);
}

void remove(snclComm* comm) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.comms.erase(std::remove(r.comms.begin(), r.comms.end(), comm), r.comms.end());
}

std::string statusJson() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  json doc = {{"pid", getpid()}, {"host", host}, {"port", port()}};
  json comms = json::array();
  for (const CommSnapshot& s : snapshots()) comms.push_back(commJson(s));
  doc["comms"] = comms;
  return doc.dump() + "\n";
}

std::string metricsText() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::vector<CommSnapshot> all = snapshots();
  Exposition e;
  struct RankMetric {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const CommSnapshot&);
  };
  static const RankMetric rankMetrics[] = {
      {"sncl_calls_started_total", "counter", "Calls started on the comm (a group of sends and receives counts once).",
       [](const CommSnapshot& s) { return double(s.status.callsStarted); }},
      {"sncl_calls_finished_total", "counter", "Calls finished on the comm.",
       [](const CommSnapshot& s) { return double(s.status.callsFinished); }},
      {"sncl_call_in_progress", "gauge", "1 while a call runs.",
       [](const CommSnapshot& s) { return double(s.status.inCall); }},
      {"sncl_call_seq", "gauge", "Collective number of the running or last call, equal on every rank.",
       [](const CommSnapshot& s) { return double(s.status.seq); }},
      {"sncl_call_elapsed_seconds", "gauge", "How long the running call has run (the last one: how long it took).",
       [](const CommSnapshot& s) { return s.status.elapsedUs / 1e6; }},
      {"sncl_wait_peer", "gauge", "The peer the running step waits on, -1 while it makes progress.",
       [](const CommSnapshot& s) { return double(s.waitPeer); }},
      {"sncl_wait_seconds", "gauge", "How long the running step has waited on that peer.",
       [](const CommSnapshot& s) { return s.waitMs / 1000; }},
      {"sncl_fault_rounds_total", "counter", "Recovery rounds this rank took part in.",
       [](const CommSnapshot& s) { return double(s.status.faultRounds); }},
      {"sncl_links_down", "gauge", "Links the comm agreed lost.",
       [](const CommSnapshot& s) { return double(s.status.linksDown); }},
      {"sncl_ranks_lost", "gauge", "Ranks the comm agreed lost.",
       [](const CommSnapshot& s) { return double(s.status.ranksLost); }},
      {"sncl_rails_usable", "gauge", "Rails (network endpoints) the comm's transports use.",
       [](const CommSnapshot& s) { return double(std::popcount(s.railsUsable)); }},
      {"sncl_rails_lost", "gauge", "Rails lost since the last recovery.",
       [](const CommSnapshot& s) { return double(std::popcount(s.railsLost)); }},
      {"sncl_sent_bytes_total", "counter", "Message bytes this rank's transports sent.",
       [](const CommSnapshot& s) { return double(s.moved.bytesSent); }},
      {"sncl_received_bytes_total", "counter", "Message bytes this rank's transports received.",
       [](const CommSnapshot& s) { return double(s.moved.bytesReceived); }},
      {"sncl_copied_bytes_total", "counter", "Bytes copied through memory for this rank.",
       [](const CommSnapshot& s) { return double(s.moved.bytesCopied + s.copied); }},
      {"sncl_reduced_bytes_total", "counter", "Result bytes of the reductions this rank computed.",
       [](const CommSnapshot& s) { return double(s.reduced); }},
  };
  for (const RankMetric& m : rankMetrics) {
    if (all.empty()) break;
    e.family(m.name, m.type, m.help);
    for (const CommSnapshot& s : all) e.sample(rankLabels(s.comm), m.value(s));
  }
  // Links are the comm's, alike on every rank: rank 0 of each comm exports them.
  struct LinkMetric {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const LinkView&);
  };
  static const LinkMetric linkMetrics[] = {
      {"sncl_link_up", "gauge", "1 while the link is up or degraded, 0 while it is down.",
       [](const LinkView& v) { return double(v.state != LinkView::State::Down); }},
      {"sncl_link_slowdown", "gauge", "How many times slower the link's transfers are (1: full speed).",
       [](const LinkView& v) { return v.slowdown; }},
      {"sncl_link_bytes_total", "counter", "Bytes that crossed the link, both directions.",
       [](const LinkView& v) { return double(v.bytes); }},
      {"sncl_link_transfers_total", "counter", "Transfers that used the link.",
       [](const LinkView& v) { return double(v.transfers); }},
      {"sncl_link_errors_total", "counter", "Transfers that failed because the link was down.",
       [](const LinkView& v) { return double(v.errors); }},
      {"sncl_link_jittered_total", "counter", "Transfers that jitter delayed.",
       [](const LinkView& v) { return double(v.jittered); }},
      {"sncl_link_jitter_score", "gauge", "1 + the mean delay jitter adds over the mean transfer time.",
       [](const LinkView& v) { return linkverdict::jitterScore(v); }},
      {"sncl_link_downs_total", "counter", "Times the link went down.",
       [](const LinkView& v) { return double(v.downs); }},
      {"sncl_link_fault_alarms_total", "counter", "Times the link became a fault (down, or slowed 2x or more).",
       [](const LinkView& v) { return double(v.faultAlarms); }},
      {"sncl_link_fault", "gauge", "1 while the link's verdict is fault (down, flapping, slowed 2x or more).",
       [](const LinkView& v) { return double(linkverdict::judge(v).verdict == linkverdict::Verdict::Fault); }},
      {"sncl_link_jitter", "gauge", "1 while the link's verdict is jitter (noise that does not stop training).",
       [](const LinkView& v) { return double(linkverdict::judge(v).verdict == linkverdict::Verdict::Jitter); }},
  };
  const bool anyLinks = std::any_of(all.begin(), all.end(),
                                    [](const CommSnapshot& s) { return s.comm->rank == 0 && !s.links.empty(); });
  for (const LinkMetric& m : linkMetrics) {
    if (!anyLinks) break;
    e.family(m.name, m.type, m.help);
    for (const CommSnapshot& s : all) {
      if (s.comm->rank != 0) continue;
      for (const LinkView& v : s.links)
        e.sample(fmt::format("comm=\"{}\",link=\"{}\"", commLabel(s.comm), escape(v.name)), m.value(v));
    }
  }
  return e.take();
}

}  // namespace sncl::jobview
