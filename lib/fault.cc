#include "lib/fault.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>

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
  uint64_t nonce;   // Join: fresh per round and coordinator; Report: the Join's echoed (0: a wake-up)
  uint64_t oldest;  // Report: the lowest call it can replay; Decision: the highest call to catch up
  uint32_t nplans;  // Report: the plans of calls oldest..seq; Decision: of seq..oldest
  struct {
    uint64_t seq, chunkBytes;
    int32_t algorithm, hierarchy, inner, outer;
  } plans[kKeptCalls];
  uint32_t rails, railsLost;  // Report: its transports' rails, usable and lost (lib/transport.h)
  uint32_t nlinks, ndead;
  uint32_t links[kMaxLinks];
  int32_t dead[kMaxDead];
  char text[240];
};

// Tags of the side channel: the round keeps rounds apart, the kind messages of one round.
uint32_t tagOf(Kind kind, uint32_t round) { return 0xfa000000u | ((round & 0x3fffffu) << 2) | kind; }

// A vote counts only as the answer to one coordinator's request in one round: its nonce
// tells a fresh answer from one queued long ago (a rank stopped and resumed finds the
// reports sent to it while it was stopped, and must not count them as a majority).
uint64_t freshNonce(int rank) {
  static std::mt19937_64 gen(std::random_device{}() ^ uint64_t(getpid()) << 20);
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  // The pid and the time too: a generator forked from a parent that had used it repeats.
  const uint64_t salt = uint64_t(getpid()) * 0x9e3779b97f4a7c15ull ^ uint64_t(Clock::now().time_since_epoch().count());
  return (uint64_t(uint32_t(rank) + 1) << 40) ^ ((gen() ^ salt) & ((uint64_t{1} << 40) - 1)) ^ (uint64_t{1} << 63);
}

// A rank waits this long for the lowest rank it still counts on before it gives up on it
// and turns to the next (or coordinates itself): a live rank in a call answers within a
// millisecond or so, one in no call only when it enters one.
int64_t failoverMs(int64_t timeoutMs) { return std::max<int64_t>(timeoutMs / 4, 1); }

bool majority(int heard, int nranks) { return 2 * heard > nranks; }

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

// "link(s) a-b, rail(s) 0, 1": what a decision names as lost.
std::string lostText(const topo::Graph& g, const std::vector<uint32_t>& links, uint32_t rails) {
  std::vector<int> ids;
  for (int i = 0; i < 32; ++i)
    if (rails >> i & 1) ids.push_back(i);
  const std::string railText = ids.empty() ? "" : fmt::format("rail(s) {}", fmt::join(ids, ", "));
  if (links.empty()) return railText;
  return "link(s) " + linkList(g, links) + (railText.empty() ? "" : ", " + railText);
}

void writePlans(Message* m, const std::vector<std::pair<uint64_t, Plan>>& plans) {
  m->nplans = uint32_t(std::min<size_t>(plans.size(), kKeptCalls));
  for (uint32_t i = 0; i < m->nplans; ++i) {
    const Plan& p = plans[i].second;
    m->plans[i] = {plans[i].first, p.chunkBytes, int32_t(p.algorithm), p.hierarchy, int32_t(p.inner), int32_t(p.outer)};
  }
}

// Plans off the wire have no collective: the caller sets it (the call's own).
void readPlans(const Message& m, std::vector<std::pair<uint64_t, Plan>>* out) {
  for (uint32_t i = 0; i < std::min<uint32_t>(m.nplans, kKeptCalls); ++i) {
    Plan p;
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
  if (m.seq != Decision::kNoCatchUp) readPlans(m, &out->plans);
}

// Sends, ignoring a peer that is gone: the round finds that out by its silence.
bool sendTo(snclComm* comm, int peer, const Message& m, Deadline deadline) {
  const Deadline shortly = Deadline::afterMs(std::min<int64_t>(deadline.remainingMs(), 2000));
  return comm->bootstrap->send(peer, tagOf(Kind(m.kind), m.round), &m, sizeof(m), shortly) == snclSuccess;
}

bool takenBackUp(snclComm* comm, uint32_t link) {
  for (auto& tr : comm->transports)
    if (tr->linkBackUp(link)) return true;
  return false;
}

// The links marked down in the topology (a new epoch); false when two ranks then have no
// route, naming the pair in *why.
bool markDown(snclComm* comm, const std::vector<uint32_t>& links, std::string* why) {
  const CommTopology& t = *comm->topology;
  for (uint32_t l : links)
    if (t.graph().linkState(l) != topo::LinkState::Down && !takenBackUp(comm, l)) {
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

// Coordinator: pull every live rank in, collect their answers, decide, tell them. A strict
// majority of the comm's ranks must answer (this one included), or nothing is decided: a
// minority cut off from the others (a rank stopped past the deadline, then resumed) must
// not declare the majority lost. why: causes of ranks already presumed lost.
Result coordinate(snclComm* comm, Message mine, std::vector<int> dead, std::vector<std::string> why,
                  Deadline deadline, Decision* out) {
  const int n = comm->nranks;
  const uint32_t round = mine.round;
  std::vector<Message> reports(n);
  std::vector<bool> have(n, false);
  mine.nonce = freshNonce(comm->rank);
  reports[comm->rank] = mine;
  have[comm->rank] = true;
  why.resize(size_t(n));
  Message join = mine;
  join.kind = kJoin;
  for (int r = 0; r < n; ++r)
    if (r != comm->rank && !contains(dead, r)) sendTo(comm, r, join, deadline);
  while (true) {
    bool waiting = false;
    for (int r = 0; r < n; ++r) {
      if (have[r] || contains(dead, r)) continue;
      bool got = true;
      // Wake-ups (nonce 0) and answers to another coordinator are read and dropped.
      while (got && !have[r]) {
        if (comm->bootstrap->tryRecv(r, tagOf(kReport, round), &reports[r], sizeof(Message), &got) != snclSuccess) {
          addUnique(&dead, r);
          why[r] = lastError();
          break;
        }
        if (got && reports[r].nonce == mine.nonce) {
          have[r] = true;
          std::vector<uint32_t> ignored;
          readLists(reports[r], &ignored, &dead);
        }
      }
      if (!have[r] && !contains(dead, r)) waiting = true;
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

  // Decide. Ranks may be in different calls: a link fails at an instant, and a rank whose
  // transfers did not cross it can finish its call and go on (lib/catch_up.h).
  std::vector<uint32_t> links;
  uint32_t rails = 0, railsLost = 0;
  bool canRetry = true, serves = true;  // serves: every rank ahead kept what a catch-up replays
  uint64_t lowSeq = UINT64_MAX, highSeq = 0;
  int firstError = -1;
  std::vector<int> voters;
  for (int r = 0; r < n; ++r) {
    if (!have[r]) continue;
    voters.push_back(r);
    std::vector<int> ignored;
    readLists(reports[r], &links, &ignored);
    rails |= reports[r].rails, railsLost |= reports[r].railsLost;
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
    readPlans(reports[r], &theirs);
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
  d.nonce = mine.nonce;
  const topo::Graph& g = comm->topology->graph();
  std::string text;
  if (!majority(int(voters.size()), n)) {
    d.verdict = int32_t(Verdict::CutOff);
    text = fmt::format("cut off from the majority of comm {}: fault round {} heard from {} of {} ranks (ranks {}), "
                       "a strict majority is {}; the others may go on without these ranks",
                       comm->name, round, voters.size(), n, rankList(voters), n / 2 + 1);
    links.clear();
    dead.clear();  // a minority decides nothing
  } else if (!dead.empty()) {
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
  } else if (!links.empty() || railsLost) {
    std::string unreachable;
    bool routed = markDown(comm, links, &unreachable);
    if (routed && railsLost && !(rails & ~railsLost)) routed = false, unreachable = "no other rail remains";
    const std::string lost = lostText(g, links, railsLost);
    if (routed && canRetry) {
      d.verdict = int32_t(Verdict::Retry);
      d.code = snclSuccess;
      text = fmt::format("{} lost; rerouting", lost);
      if (!sameCall) {
        text += fmt::format("; calls #{} to #{} are run again by every rank", lowSeq + 1, highSeq + 1);
        d.seq = lowSeq;
        d.oldest = highSeq;
        writePlans(&d, plans);
      }
    } else {
      d.verdict = int32_t(Verdict::LinkLost);
      text = fmt::format("{} {} down: {}", railsLost ? lost : "link " + linkList(g, links),
                         links.size() + size_t(__builtin_popcount(railsLost)) > 1 ? "are" : "is",
                         routed ? "retry is off (SNCL_RETRY=0) or its attempts are used up" : unreachable);
    }
  } else if (!sameCall) {
    d.verdict = int32_t(Verdict::Failed);
    text = "ranks were in different calls and no link was lost; the calls cannot be re-run";
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

// Any other rank: wake the lowest rank it counts on (a Report without a nonce), answer the
// Join of whichever lower rank coordinates, await that one's decision. A lower rank that
// sends no Join within the failover window is presumed lost and the next is woken; once all
// lower ranks are presumed lost, this rank coordinates. A rank answers one Join per round,
// so two coordinators never count the same vote.
Result follow(snclComm* comm, Message mine, std::vector<int> dead, Deadline deadline, Decision* out) {
  FaultState& f = comm->fault;
  const uint32_t round = mine.round;
  const int64_t window = failoverMs(comm->timeoutMs);
  const auto t0 = Clock::now();
  int coordinator = -1;
  Message m{};
  if (f.pulledBy >= 0 && f.pulledIsJoin) {
    coordinator = f.pulledBy;
    memcpy(&m, f.pulledMessage.data(), sizeof(m));
  }
  std::vector<int> woken;
  while (coordinator < 0) {
    std::vector<int> lower;  // still counted on, lowest first
    for (int r = 0; r < comm->rank && coordinator < 0; ++r) {
      if (contains(dead, r)) continue;
      bool got = false;
      if (comm->bootstrap->tryRecv(r, tagOf(kJoin, round), &m, sizeof(m), &got) != snclSuccess) addUnique(&dead, r);
      else if (got) coordinator = r;
      else lower.push_back(r);
    }
    if (coordinator >= 0) break;
    const int64_t waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    const size_t skipped = size_t(waited / window);
    if (skipped >= lower.size()) {  // every lower rank is gone or silent: coordinate
      std::vector<std::string> why(size_t(comm->nranks));
      for (int r : lower) {
        addUnique(&dead, r);
        why[size_t(r)] = fmt::format("no answer in {} ms", waited);
      }
      return coordinate(comm, mine, dead, why, deadline, out);
    }
    const int target = lower[skipped];
    if (!contains(woken, target)) {
      woken.push_back(target);
      Message wake = mine;
      wake.nonce = 0;
      if (!sendTo(comm, target, wake, deadline)) addUnique(&dead, target);
    }
    if (deadline.expired())
      return fail(snclRemoteError, "rank {}: cut off from the majority of comm {}: no coordinator answered within "
                  "the deadline ({} ms)", comm->rank, comm->name, comm->timeoutMs);
    usleep(500);
  }
  mine.nonce = m.nonce;  // the answer to this Join, and to no other
  if (!sendTo(comm, coordinator, mine, deadline))
    return fail(snclRemoteError, "rank {}: cut off from the majority of comm {}: coordinator rank {} of the fault "
                "agreement is gone", comm->rank, comm->name, coordinator);
  // The coordinator may have started later: a quarter of the deadline more than ours.
  const Deadline decisionBy = Deadline::afterMs(deadline.remainingMs() + window);
  while (true) {
    bool got = false;
    if (comm->bootstrap->tryRecv(coordinator, tagOf(kDecision, round), &m, sizeof(m), &got) != snclSuccess)
      return fail(snclRemoteError, "rank {}: cut off from the majority of comm {}: coordinator rank {} of the fault "
                  "agreement is gone: {}", comm->rank, comm->name, coordinator, lastError());
    if (got && m.nonce == mine.nonce) break;
    if (got) continue;  // a decision of another coordinator's round: not ours
    if (decisionBy.expired())
      return fail(snclRemoteError, "rank {}: cut off from the majority of comm {}: no decision from coordinator "
                  "rank {} within the deadline ({} ms)", comm->rank, comm->name, coordinator, comm->timeoutMs);
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
  for (auto& t : comm->transports) bus |= std::string(t->name()) == "bus" || __builtin_popcount(t->railsUsable()) > 1;
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
  // A peer that finished its calls and destroyed its comm closes its connection: not an
  // error of this call (a peer that died reaches it through the transport or the deadline).
  ExpectedErrors expected;
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
  for (auto& t : comm->transports) mine.rails |= t->railsUsable(), mine.railsLost |= t->railsLost();
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
  Result r = coordinates ? coordinate(comm, mine, dead, {}, deadline, out) : follow(comm, mine, dead, deadline, out);
  f.pulledBy = -1;
  if (r != snclSuccess) {  // no decision reached this rank: it decides nothing either
    out->verdict = Verdict::CutOff;
    out->links.clear();
    out->deadRanks.clear();
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

// ---- snclCommShrink's agreement on the members (docs/faults.md) ----

namespace sncl {
namespace {

enum ShrinkKind : uint32_t { kCollect = 1, kPropose = 2, kMembers = 3 };

// Every shrink message is this header and a bitmap of the comm's ranks (Propose: those the
// sender excludes; Members: the decided members), so all have one size on a comm.
struct ShrinkHeader {
  uint32_t kind;
  uint32_t instance;  // the how-many-th shrink of this comm
  int32_t from;
  int32_t status;     // Propose: the sender's argument check; Members: snclSuccess, or why there is no comm
  uint64_t nonce;     // the coordinator's, echoed by every answer and in its decision
  int64_t collectMs;  // Collect: how long the coordinator collects at most
  snclUniqueId root;  // Members: the new comm's rendezvous
  char text[400];
};

uint32_t shrinkTag(ShrinkKind kind, uint32_t instance) { return 0xfb000000u | ((instance & 0x3fffffu) << 2) | kind; }

class ShrinkMessage {
 public:
  explicit ShrinkMessage(int nranks) : n_(nranks), bytes_(sizeof(ShrinkHeader) + (size_t(nranks) + 7) / 8) {}
  ShrinkHeader& h() { return *reinterpret_cast<ShrinkHeader*>(bytes_.data()); }
  bool bit(int r) const { return (bytes_[sizeof(ShrinkHeader) + size_t(r) / 8] >> (r % 8)) & 1; }
  void set(int r) { bytes_[sizeof(ShrinkHeader) + size_t(r) / 8] |= char(1 << (r % 8)); }
  std::vector<int> ranks() const {
    std::vector<int> v;
    for (int r = 0; r < n_; ++r)
      if (bit(r)) v.push_back(r);
    return v;
  }
  void* data() { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }

 private:
  int n_;
  std::vector<char> bytes_;
};

bool sendShrink(snclComm* comm, int peer, ShrinkMessage& m, Deadline deadline) {
  const Deadline shortly = Deadline::afterMs(std::min<int64_t>(deadline.remainingMs(), 2000));
  return comm->bootstrap->send(peer, shrinkTag(ShrinkKind(m.h().kind), m.h().instance), m.data(), m.size(),
                               shortly) == snclSuccess;
}

Result tryRecvShrink(snclComm* comm, int peer, ShrinkKind kind, uint32_t instance, ShrinkMessage* m, bool* got) {
  return comm->bootstrap->tryRecv(peer, shrinkTag(kind, instance), m->data(), m->size(), got);
}

int64_t msSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// The coordinator asks every rank it does not exclude for its proposal, takes the answers
// that come by the deadline (not waiting for a rank some proposal excludes, or whose
// connection broke), decides and tells every rank that answered. Members: those that
// answered, itself included, minus the union of all exclusions.
Result coordinateMembers(snclComm* comm, uint32_t instance, const std::vector<uint8_t>& excluded, Result status,
                         const std::string& statusText, std::vector<uint8_t> broken, Deadline deadline,
                         std::vector<int>* members, snclUniqueId* root) {
  const int n = comm->nranks, self = comm->rank;
  const uint64_t nonce = freshNonce(self);
  std::vector<int> excludedBy(size_t(n), -1);  // the first rank whose proposal excludes it
  for (int r = 0; r < n; ++r)
    if (excluded[size_t(r)]) excludedBy[size_t(r)] = self;
  ShrinkMessage collect(n);
  collect.h() = ShrinkHeader{kCollect, instance, self, snclSuccess, nonce, deadline.remainingMs(), {}, {}};
  for (int r = 0; r < n; ++r)
    if (r != self && !excluded[size_t(r)] && !broken[size_t(r)] && !sendShrink(comm, r, collect, deadline))
      broken[size_t(r)] = 1;
  std::vector<uint8_t> answered(size_t(n), 0);
  answered[size_t(self)] = 1;
  int badRank = status != snclSuccess ? self : -1;
  std::string badText = statusText;
  ShrinkMessage answer(n);
  while (true) {
    bool waiting = false;
    for (int r = 0; r < n; ++r) {
      if (answered[size_t(r)] || broken[size_t(r)]) continue;
      bool got = true;
      while (got && !answered[size_t(r)]) {  // answers to another coordinator are dropped
        if (tryRecvShrink(comm, r, kPropose, instance, &answer, &got) != snclSuccess) {
          broken[size_t(r)] = 1;
          break;
        }
        if (!got || answer.h().nonce != nonce) continue;
        answered[size_t(r)] = 1;
        for (int x : answer.ranks())
          if (excludedBy[size_t(x)] < 0) excludedBy[size_t(x)] = r;
        if (answer.h().status != snclSuccess && badRank < 0) {
          badRank = r;
          badText = std::string(answer.h().text, strnlen(answer.h().text, sizeof(answer.h().text)));
        }
      }
      if (!answered[size_t(r)] && !broken[size_t(r)] && excludedBy[size_t(r)] < 0) waiting = true;
    }
    if (!waiting || deadline.expired()) break;
    usleep(500);
  }

  ShrinkMessage decision(n);
  ShrinkHeader& d = decision.h();
  d = ShrinkHeader{kMembers, instance, self, snclSuccess, nonce, 0, {}, {}};
  std::vector<int> heard, out, dropped;
  for (int r = 0; r < n; ++r) {
    if (answered[size_t(r)]) heard.push_back(r);
    if (answered[size_t(r)] && excludedBy[size_t(r)] < 0) out.push_back(r), decision.set(r);
    else if (excludedBy[size_t(r)] >= 0) dropped.push_back(r);
  }
  std::string text;
  if (badRank >= 0) {
    d.status = snclInvalidArgument;
    text = fmt::format("rank {} passed bad arguments to snclCommShrink: {}", badRank, badText);
  } else if (!majority(int(heard.size()), n)) {
    d.status = snclRemoteError;
    text = fmt::format("cut off from the majority of comm {}: the shrink heard from {} of {} ranks ({}), a strict "
                       "majority is {}; no comm is made", comm->name, heard.size(), n, rankList(heard), n / 2 + 1);
  } else if (bootstrapCreateRoot(&d.root) != snclSuccess) {
    d.status = snclSystemError;
    text = fmt::format("rank {} could not create the new comm's rendezvous: {}", self, lastError());
  } else {
    text = fmt::format("members {} of comm {} (rank {} decided)", rankList(out), comm->name, self);
    if (!dropped.empty()) {
      text += "; excluded";
      for (int x : dropped) text += fmt::format(" {} (by rank {})", x, excludedBy[size_t(x)]);
    }
  }
  snprintf(d.text, sizeof(d.text), "%s", text.c_str());
  for (int r : heard)
    if (r != self) sendShrink(comm, r, decision, deadline);
  // A rank another proposal excluded is not waited for, but it was asked: its answer may
  // come after the decision, and it then reads the decision that leaves it out (not the
  // silence of a coordinator that went on without it).
  for (int r : dropped)
    if (!answered[size_t(r)] && !excluded[size_t(r)] && !broken[size_t(r)]) sendShrink(comm, r, decision, deadline);
  log::info(log::Subsys::Fault, "comm {} rank {}: shrink #{} coordinated: {}", comm->name, self, instance, text);
  if (d.status != snclSuccess) return fail(Result(d.status), "snclCommShrink: rank {}: {}", self, text);
  *members = out;
  *root = d.root;
  return snclSuccess;
}

}  // namespace

Result faultAgreeMembers(snclComm* comm, const std::vector<int>& exclude, Result status, const std::string& statusText,
                         std::vector<int>* members, snclUniqueId* root) {
  FaultState& f = comm->fault;
  const uint32_t instance = f.shrinks++;
  const int n = comm->nranks, self = comm->rank;
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);
  const int64_t window = failoverMs(comm->timeoutMs);
  const auto t0 = Clock::now();
  std::vector<uint8_t> excluded(size_t(n), 0), broken = f.sideBroken;
  broken.resize(size_t(n), 0);
  for (int x : exclude)
    if (x >= 0 && x < n) excluded[size_t(x)] = 1;
  // Wait for a coordinator's request: the lowest rank not excluded whose connection works
  // is the one expected; one that stays silent is passed over after the failover window
  // (each lower rank still connected adds a window before this rank coordinates). A request
  // from any rank not excluded is answered: the first that comes, since a rank that
  // arrived late finds the request of the rank that coordinated in its stead.
  ShrinkMessage m(n);
  int coordinator = -1;
  while (coordinator < 0) {
    int lowerLive = 0;
    for (int r = 0; r < n && coordinator < 0; ++r) {
      if (r == self || excluded[size_t(r)] || broken[size_t(r)]) continue;
      bool got = false;
      if (tryRecvShrink(comm, r, kCollect, instance, &m, &got) != snclSuccess) broken[size_t(r)] = 1;
      else if (got) coordinator = r;
      else if (r < self) ++lowerLive;
    }
    if (coordinator >= 0) break;
    if (msSince(t0) >= lowerLive * window)
      return coordinateMembers(comm, instance, excluded, status, statusText, broken, deadline, members, root);
    if (deadline.expired())
      return fail(snclRemoteError, "snclCommShrink: rank {} is cut off from the majority of comm {}: no coordinator "
                  "asked for its proposal within the deadline ({} ms)", self, comm->name, comm->timeoutMs);
    usleep(500);
  }
  const uint64_t nonce = m.h().nonce;
  const int64_t collectMs = m.h().collectMs;
  ShrinkMessage proposal(n);
  proposal.h() = ShrinkHeader{kPropose, instance, self, status, nonce, 0, {}, {}};
  snprintf(proposal.h().text, sizeof(proposal.h().text), "%s", statusText.c_str());
  for (int r = 0; r < n; ++r)
    if (excluded[size_t(r)]) proposal.set(r);
  if (!sendShrink(comm, coordinator, proposal, deadline))
    return fail(snclRemoteError, "snclCommShrink: rank {} is cut off from the majority of comm {}: coordinator rank {} "
                "is gone", self, comm->name, coordinator);
  // The coordinator collects for collectMs at most from its request; then a margin.
  const Deadline decisionBy = Deadline::afterMs(std::max<int64_t>(collectMs, 0) + window);
  while (true) {
    bool got = false;
    if (tryRecvShrink(comm, coordinator, kMembers, instance, &m, &got) != snclSuccess)
      return fail(snclRemoteError, "snclCommShrink: rank {} is cut off from the majority of comm {}: coordinator rank "
                  "{} is gone: {}", self, comm->name, coordinator, lastError());
    if (got && m.h().nonce == nonce) break;
    if (got) continue;
    if (decisionBy.expired())
      return fail(snclRemoteError, "snclCommShrink: rank {} is cut off from the majority of comm {}: no decision from "
                  "coordinator rank {} within the deadline (it went on without this rank, or has no majority)",
                  self, comm->name, coordinator);
    usleep(500);
  }
  const std::string text(m.h().text, strnlen(m.h().text, sizeof(m.h().text)));
  if (m.h().status != snclSuccess) return fail(Result(m.h().status), "snclCommShrink: rank {}: {}", self, text);
  if (!m.bit(self))
    return fail(snclRemoteError, "snclCommShrink: rank {} was excluded by the survivors: {}", self, text);
  *members = m.ranks();
  *root = m.h().root;
  return snclSuccess;
}

}  // namespace sncl
