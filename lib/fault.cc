#include "lib/fault.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "lib/catch_up.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"

namespace sncl {
namespace {

constexpr int kMaxLinks = 32;
constexpr int kMaxDead = 64;
constexpr double kPollIntervalS = 0.001;

enum Kind : uint32_t { kReport = 1, kJoin = 2, kDecision = 3 };

// One fixed-size message on the side channel (the bootstrap matches by size and tag).
struct Message {
  uint32_t kind;
  uint32_t round;
  int32_t from;
  int32_t verdict;  // Decision
  int32_t code;     // Report: the sender's failure (snclSuccess: pulled in, or finished)
  int32_t canRetry; // Report: SNCL_RETRY on and attempts left
  uint64_t seq;     // Report: the call it was in; Decision: the call to catch up (or none)
  uint64_t oldest;  // Report: the lowest call it can replay; Decision: the highest call to catch up
  uint32_t nplans;  // Report: the plans of calls oldest..seq; Decision: of seq..oldest
  struct {
    uint64_t seq, chunkBytes;
    int32_t algorithm, hierarchy, inner, outer;
  } plans[kKeptCalls];
  uint32_t nlinks, ndead;
  uint32_t links[kMaxLinks];
  int32_t dead[kMaxDead];
  char text[240];
};

// Tags of the side channel: the round keeps rounds apart, the kind messages of one round.
uint32_t tagOf(Kind kind, uint32_t round) { return 0xfa000000u | ((round & 0x3fffffu) << 2) | kind; }

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

void addUnique(std::vector<int>* v, int x) {
  if (!contains(*v, x)) v->push_back(x);
}

void addUnique(std::vector<uint32_t>* v, uint32_t x) {
  if (std::find(v->begin(), v->end(), x) == v->end()) v->push_back(x);
}

void setText(Message* m, const std::string& text) { snprintf(m->text, sizeof(m->text), "%s", text.c_str()); }

void readLists(const Message& m, std::vector<uint32_t>* links, std::vector<int>* dead) {
  for (uint32_t i = 0; i < std::min<uint32_t>(m.nlinks, kMaxLinks); ++i) addUnique(links, m.links[i]);
  for (uint32_t i = 0; i < std::min<uint32_t>(m.ndead, kMaxDead); ++i) addUnique(dead, m.dead[i]);
}

void writeLists(Message* m, const std::vector<uint32_t>& links, const std::vector<int>& dead) {
  m->nlinks = uint32_t(std::min<size_t>(links.size(), kMaxLinks));
  m->ndead = uint32_t(std::min<size_t>(dead.size(), kMaxDead));
  std::copy_n(links.begin(), m->nlinks, m->links);
  std::copy_n(dead.begin(), m->ndead, m->dead);
}

// What this rank's transports saw, with what the comm agreed before.
void observe(snclComm* comm, std::vector<uint32_t>* links, std::vector<int>* dead) {
  for (auto& t : comm->transports) t->observedFaults(links, dead);
  for (int r : comm->fault.deadRanks) addUnique(dead, r);
  std::vector<uint32_t> unique;
  for (uint32_t l : *links)
    if (comm->topology->graph().linkState(l) != topo::LinkState::Down) addUnique(&unique, l);
  *links = std::move(unique);
}

int lowestLive(int nranks, const std::vector<int>& dead) {
  for (int r = 0; r < nranks; ++r)
    if (!contains(dead, r)) return r;
  return -1;
}

std::string rankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return fmt::format("{}", fmt::join(ranks, ", "));
}

std::string linkList(const topo::Graph& g, const std::vector<uint32_t>& links) {
  std::string s;
  for (uint32_t l : links) s += (s.empty() ? "" : ", ") + g.linkName(l);
  return s;
}

void writePlans(Message* m, const std::vector<std::pair<uint64_t, Plan>>& plans) {
  m->nplans = uint32_t(std::min<size_t>(plans.size(), kKeptCalls));
  for (uint32_t i = 0; i < m->nplans; ++i) {
    const Plan& p = plans[i].second;
    m->plans[i] = {plans[i].first, p.chunkBytes, int32_t(p.algorithm), p.hierarchy, int32_t(p.inner), int32_t(p.outer)};
  }
}

void readPlans(const Message& m, CollType coll, std::vector<std::pair<uint64_t, Plan>>* out) {
  for (uint32_t i = 0; i < std::min<uint32_t>(m.nplans, kKeptCalls); ++i) {
    Plan p;
    p.coll = coll;  // not on the wire: the schedule's shape and the kept op carry it
    p.chunkBytes = m.plans[i].chunkBytes;
    p.algorithm = Algorithm(m.plans[i].algorithm);
    p.hierarchy = m.plans[i].hierarchy;
    p.inner = algo::GroupAlgo(m.plans[i].inner);
    p.outer = algo::FlatAllReduce(m.plans[i].outer);
    out->push_back({m.plans[i].seq, p});
  }
}

void readDecision(const Message& m, Decision* out) {
  out->verdict = Verdict(m.verdict);
  out->code = Result(m.code);
  out->catchUpSeq = m.seq;
  out->highSeq = m.oldest;
  out->plans.clear();
  if (m.seq != Decision::kNoCatchUp) readPlans(m, CollType::kCount, &out->plans);
}

// Sends, ignoring a peer that is gone: the round finds that out by its silence.
bool sendTo(snclComm* comm, int peer, const Message& m, Deadline deadline) {
  const Deadline shortly = Deadline::afterMs(std::min<int64_t>(deadline.remainingMs(), 2000));
  return comm->bootstrap->send(peer, tagOf(Kind(m.kind), m.round), &m, sizeof(m), shortly) == snclSuccess;
}

// The links marked down in the topology (a new epoch); false when two ranks then have no
// route, naming the pair in *why.
bool markDown(snclComm* comm, const std::vector<uint32_t>& links, std::string* why) {
  const CommTopology& t = *comm->topology;
  for (uint32_t l : links)
    if (t.graph().linkState(l) != topo::LinkState::Down) {
      if (t.setLinkState(l, topo::LinkState::Down) != snclSuccess) {
        *why = lastError();
        return false;
      }
      addUnique(&comm->fault.lostLinks, l);
      ++comm->fault.stats.linkFailures;
    }
  topo::Route route;
  for (int a = 0; a < comm->nranks; ++a)
    for (int b = 0; b < comm->nranks; ++b) {
      if (a == b) continue;
      if (t.routeRanks(a, b, &route) != snclSuccess || !route.reachable) {
        *why = fmt::format("ranks {} and {} have no other route", a, b);
        return false;
      }
    }
  return true;
}

// Coordinator: pull every live rank in, collect their reports, decide, tell them.
Result coordinate(snclComm* comm, const Message& mine, std::vector<int> dead, Deadline deadline, Decision* out) {
  const int n = comm->nranks;
  const uint32_t round = mine.round;
  std::vector<Message> reports(n);
  std::vector<bool> have(n, false);
  reports[comm->rank] = mine;
  have[comm->rank] = true;
  FaultState& f = comm->fault;
  if (f.pulledBy >= 0 && !f.pulledIsJoin) {
    memcpy(&reports[f.pulledBy], f.pulledMessage.data(), sizeof(Message));
    have[f.pulledBy] = true;
  }
  Message join = mine;
  join.kind = kJoin;
  for (int r = 0; r < n; ++r)
    if (r != comm->rank && !contains(dead, r)) sendTo(comm, r, join, deadline);
  std::vector<std::string> why(n);
  while (true) {
    bool waiting = false;
    for (int r = 0; r < n; ++r) {
      if (have[r] || contains(dead, r)) continue;
      bool got = false;
      if (comm->bootstrap->tryRecv(r, tagOf(kReport, round), &reports[r], sizeof(Message), &got) != snclSuccess) {
        addUnique(&dead, r);
        why[r] = lastError();
        continue;
      }
      if (got) {
        have[r] = true;
        std::vector<uint32_t> ignored;
        readLists(reports[r], &ignored, &dead);
      } else {
        waiting = true;
      }
    }
    if (!waiting) break;
    if (deadline.expired()) {
      for (int r = 0; r < n; ++r)
        if (!have[r] && !contains(dead, r)) {
          addUnique(&dead, r);
          why[r] = "no report within the deadline";
        }
      break;
    }
    usleep(500);
  }

  // Decide. Ranks may be one call apart: a link fails at an instant, and a rank whose
  // transfers did not cross it can finish the call and wait in the next one.
  std::vector<uint32_t> links;
  bool canRetry = true, serves = true;  // serves: every rank ahead kept what a catch-up replays
  uint64_t lowSeq = UINT64_MAX, highSeq = 0;
  int firstError = -1;
  for (int r = 0; r < n; ++r) {
    if (!have[r]) continue;
    std::vector<int> ignored;
    readLists(reports[r], &links, &ignored);
    lowSeq = std::min(lowSeq, reports[r].seq);
    highSeq = std::max(highSeq, reports[r].seq);
    canRetry &= reports[r].canRetry != 0;
    if (firstError < 0 && reports[r].code != snclSuccess && contains(dead, r) == false) firstError = r;
  }
  // Every rank ahead of lowSeq must replay the calls from it, and each call's plan must be
  // known (from the ranks that reached it).
  std::vector<std::pair<uint64_t, Plan>> plans;
  for (int r = 0; r < n; ++r) {
    if (!have[r]) continue;
    serves &= reports[r].oldest <= lowSeq;
    std::vector<std::pair<uint64_t, Plan>> theirs;
    readPlans(reports[r], CollType::kCount, &theirs);
    for (const auto& e : theirs)
      if (e.first >= lowSeq && std::none_of(plans.begin(), plans.end(), [&](const auto& x) { return x.first == e.first; }))
        plans.push_back(e);
  }
  const bool sameCall = lowSeq == highSeq;
  const bool catchUp = serves && highSeq - lowSeq < uint64_t(kKeptCalls) && plans.size() == highSeq - lowSeq + 1;
  Message d{};
  d.kind = kDecision;
  d.round = round;
  d.from = comm->rank;
  d.code = snclRemoteError;
  d.seq = Decision::kNoCatchUp;
  const topo::Graph& g = comm->topology->graph();
  std::string text;
  if (!dead.empty()) {
    d.verdict = int32_t(Verdict::RankLost);
    text = fmt::format("rank(s) {} of comm {} lost", rankList(dead), comm->name);
    for (int r : dead)
      if (!why[r].empty()) text += fmt::format(" (rank {}: {})", r, why[r]);
    if (firstError >= 0) text += fmt::format("; rank {} saw: {}", firstError, reports[firstError].text);
  } else if (!sameCall && !catchUp) {
    d.verdict = int32_t(Verdict::Failed);
    text = highSeq - lowSeq >= uint64_t(kKeptCalls)
               ? fmt::format("ranks were in calls #{} to #{} when the fault hit; at most {} calls apart are caught up",
                             lowSeq + 1, highSeq + 1, kKeptCalls)
               : fmt::format("ranks were in calls #{} to #{} when the fault hit, and those ahead did not keep the "
                             "calls in between (SNCL_RETRY=0 on some rank?)", lowSeq + 1, highSeq + 1);
  } else if (!links.empty()) {
    std::string unreachable;
    const bool routed = markDown(comm, links, &unreachable);
    if (routed && canRetry) {
      d.verdict = int32_t(Verdict::Retry);
      d.code = snclSuccess;
      text = fmt::format("link(s) {} lost; rerouting", linkList(g, links));
      if (!sameCall) {
        text += fmt::format("; calls #{} to #{} are run again by every rank", lowSeq + 1, highSeq + 1);
        d.seq = lowSeq;
        d.oldest = highSeq;
        writePlans(&d, plans);
      }
    } else {
      d.verdict = int32_t(Verdict::LinkLost);
      text = fmt::format("link {} {} down: {}", linkList(g, links), links.size() > 1 ? "are" : "is",
                         routed ? "retry is off (SNCL_RETRY=0) or its attempts are used up" : unreachable);
    }
  } else if (!sameCall) {
    d.verdict = int32_t(Verdict::Failed);
    text = "ranks were one call apart and no link was lost; the call cannot be re-run";
  } else {
    d.verdict = int32_t(Verdict::Failed);
    const int r = firstError >= 0 ? firstError : comm->rank;
    d.code = reports[r].code != snclSuccess ? reports[r].code : snclRemoteError;
    text = fmt::format("rank {}: {}", r, reports[r].text[0] ? reports[r].text : "failed");
  }
  writeLists(&d, links, dead);
  setText(&d, text);
  for (int r = 0; r < n; ++r)
    if (have[r] && r != comm->rank) sendTo(comm, r, d, deadline);
  readDecision(d, out);
  out->links = links;
  out->deadRanks = dead;
  out->message = text;
  return snclSuccess;
}

// Any other rank: report to the coordinator (the one whose Join comes), await its decision.
Result follow(snclComm* comm, const Message& mine, std::vector<int> dead, Deadline deadline, Decision* out) {
  FaultState& f = comm->fault;
  const uint32_t round = mine.round;
  int coordinator = -1, reportedTo = -1;
  if (f.pulledBy >= 0 && f.pulledIsJoin) {
    coordinator = f.pulledBy;
  } else {
    reportedTo = lowestLive(comm->nranks, dead);
    if (!sendTo(comm, reportedTo, mine, deadline)) addUnique(&dead, reportedTo);
  }
  Message m{};
  while (coordinator < 0) {  // the Join of whichever lower rank coordinates
    for (int r = 0; r < comm->rank && coordinator < 0; ++r) {
      if (contains(dead, r)) continue;
      bool got = false;
      if (comm->bootstrap->tryRecv(r, tagOf(kJoin, round), &m, sizeof(m), &got) != snclSuccess) addUnique(&dead, r);
      else if (got) coordinator = r;
    }
    if (coordinator >= 0) break;
    if (deadline.expired() || lowestLive(comm->nranks, dead) == comm->rank)
      return fail(snclRemoteError, "rank {}: no coordinator answered within the deadline ({} ms); lost rank(s): {}",
                  comm->rank, comm->timeoutMs, dead.empty() ? std::string("unknown") : rankList(dead));
    usleep(500);
  }
  if (coordinator != reportedTo && !sendTo(comm, coordinator, mine, deadline))
    return fail(snclRemoteError, "rank {}: coordinator rank {} of the fault agreement is gone", comm->rank, coordinator);
  while (true) {
    bool got = false;
    if (comm->bootstrap->tryRecv(coordinator, tagOf(kDecision, round), &m, sizeof(m), &got) != snclSuccess)
      return fail(snclRemoteError, "rank {}: coordinator rank {} of the fault agreement is gone: {}", comm->rank,
                  coordinator, lastError());
    if (got) break;
    if (deadline.expired())
      return fail(snclRemoteError, "rank {}: no decision from coordinator rank {} within the deadline ({} ms)",
                  comm->rank, coordinator, comm->timeoutMs);
    usleep(500);
  }
  readDecision(m, out);
  out->links.clear();
  out->deadRanks.clear();
  readLists(m, &out->links, &out->deadRanks);
  out->message = std::string(m.text, strnlen(m.text, sizeof(m.text)));
  if (out->verdict == Verdict::Retry || out->verdict == Verdict::LinkLost) {
    std::string ignored;
    markDown(comm, out->links, &ignored);
  }
  return snclSuccess;
}

bool pollThunk(void* ctx) { return faultPoll(static_cast<snclComm*>(ctx)); }

}  // namespace

void faultInit(snclComm* comm) {
  bool bus = false;
  for (auto& t : comm->transports) bus |= std::string(t->name()) == "bus";
  comm->fault.retry = env::integer("SNCL_RETRY", bus ? 1 : 0) != 0;
  comm->fault.pulledMessage.resize(sizeof(Message));
  comm->fault.sideBroken.assign(size_t(comm->nranks), 0);
  if (comm->executor) comm->executor->setInterrupt({pollThunk, comm});
}

bool faultPoll(snclComm* comm) {
  FaultState& f = comm->fault;
  if (f.revoked.load(std::memory_order_relaxed)) return true;
  const double now = nowSeconds();
  if (now - f.lastPollS < kPollIntervalS) return false;
  f.lastPollS = now;
  const uint32_t round = f.round;
  // A Report means this rank coordinates (its sender knows every lower rank dead); a Join
  // comes from a lower rank that coordinates.
  for (int r = 0; r < comm->nranks; ++r) {
    if (r == comm->rank || f.sideBroken[size_t(r)]) continue;
    const bool join = r < comm->rank;
    bool got = false;
    if (comm->bootstrap->tryRecv(r, tagOf(join ? kJoin : kReport, round), f.pulledMessage.data(), sizeof(Message),
                                 &got) != snclSuccess) {
      f.sideBroken[size_t(r)] = 1;  // r's own failure reaches this rank otherwise (the deadline)
      continue;
    }
    if (got) {
      f.pulledBy = r;
      f.pulledIsJoin = join;
      return true;
    }
  }
  return false;
}

Result faultAgree(snclComm* comm, uint64_t seq, Result cause, const std::string& causeText, bool canRetry,
                  const Plan& plan, Decision* out) {
  FaultState& f = comm->fault;
  const uint32_t round = f.round++;
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);
  ++f.stats.rounds;
  if (f.pulledBy >= 0) ++f.stats.pulledIn;
  else ++f.stats.detected;
  Message mine{};
  mine.kind = kReport;
  mine.round = round;
  mine.from = comm->rank;
  mine.code = cause;
  mine.canRetry = canRetry ? 1 : 0;
  mine.seq = seq;
  mine.oldest = oldestKept(comm, seq);
  std::vector<std::pair<uint64_t, Plan>> plans;
  keptPlans(comm, seq, plan, &plans);
  writePlans(&mine, plans);
  std::vector<uint32_t> links;
  std::vector<int> dead;
  observe(comm, &links, &dead);
  if (f.pulledBy >= 0) {
    Message pulled;
    memcpy(&pulled, f.pulledMessage.data(), sizeof(pulled));
    std::vector<uint32_t> ignored;
    readLists(pulled, &ignored, &dead);
    if (!f.pulledIsJoin) {  // its sender knows every rank below this one is gone
      for (int r = 0; r < comm->rank; ++r) addUnique(&dead, r);
    }
  }
  writeLists(&mine, links, dead);
  setText(&mine, causeText);
  log::info(log::Subsys::Fault, "comm {} rank {}: fault round {} for call #{} ({}{}); saw links [{}], lost ranks [{}]",
            comm->name, comm->rank, round, seq,
            f.pulledBy >= 0 ? fmt::format("pulled in by rank {}", f.pulledBy) : std::string("detected"),
            cause != snclSuccess ? fmt::format(": {}", causeText) : std::string(),
            linkList(comm->topology->graph(), links), rankList(dead));
  const bool coordinates = f.pulledBy >= 0 ? !f.pulledIsJoin : lowestLive(comm->nranks, dead) == comm->rank;
  Result r = coordinates ? coordinate(comm, mine, dead, deadline, out) : follow(comm, mine, dead, deadline, out);
  f.pulledBy = -1;
  if (r != snclSuccess) {
    out->verdict = Verdict::RankLost;
    out->code = r;
    out->message = lastError();
  }
  for (int x : out->deadRanks)
    if (!contains(f.deadRanks, x)) {
      f.deadRanks.push_back(x);
      ++f.stats.rankFailures;
    }
  if (out->verdict != Verdict::Retry) {
    ++f.stats.unrecovered;
    if (out->verdict != Verdict::Failed) {
      f.broken = true;
      f.brokenMessage = out->message;
    }
  }
  log::info(log::Subsys::Fault, "comm {} rank {}: fault round {} decided{}: {}", comm->name, comm->rank, round,
            coordinates ? " (this rank coordinated)" : "", out->message);
  return snclSuccess;
}

bool faultSelfDead(snclComm* comm) {
  std::vector<uint32_t> links;
  std::vector<int> dead;
  for (auto& t : comm->transports) t->observedFaults(&links, &dead);
  return contains(dead, comm->rank);
}

Result faultApplyRetry(snclComm* comm, const Decision& d) {
  (void)d;
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);
  ++comm->fault.attempt;
  for (auto& t : comm->transports) SNCL_CHECK(t->reset(comm->fault.attempt, deadline));
  return snclSuccess;
}

}  // namespace sncl
