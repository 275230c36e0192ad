// Longer than most files here on purpose: one recovery round (report, decision, reset,
// re-run) reads top to bottom; the membership agreement is in fault_members.cc.
#include "lib/comm/fault.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/base/trace.h"
#include "lib/comm/catch_up.h"
#include "lib/comm/comm.h"
#include "lib/comm/fault_vote.h"

namespace sncl {
namespace {

constexpr int kMaxLinks = 32;
constexpr int kMaxDead = 64;
constexpr int kMaxP2pPeers = 128;  // a rank's point-to-point peers whose counts a round carries
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
  uint32_t rails, railsLost;  // Report: its transports' rails, usable and lost (lib/transport/transport.h)
  uint32_t railsBack;         // Report: rails lost earlier that answer again on this rank
  uint64_t changes;           // Report: link changes it saw logged; Decision: every rank takes those first
  int32_t inGroup;            // Report: in a group of sends and receives, between calls seq-1 and seq
  int32_t p2pOverflow;        // Report: received from more peers than p2p holds
  uint32_t np2p;              // Report: messages received per peer; Decision: of the rank's, per peer
  struct {
    int32_t peer;
    uint32_t count;
  } p2p[kMaxP2pPeers];
  uint32_t nlinks, ndead;
  uint32_t links[kMaxLinks];
  uint64_t linkDownNs[kMaxLinks];  // Decision: when each lost link failed, as the coordinator saw it
  int32_t dead[kMaxDead];
  char text[480];
};

// Tags of the side channel: the round keeps rounds apart, the kind messages of one round.
uint32_t tagOf(Kind kind, uint32_t round) { return bootstrap_tags::kFaultRound | ((round & 0x3fffffu) << 2) | kind; }
// snclCommRevoke's notice: one per comm and sender, outside every round (it once shared
// its tag with the first shrink's first message).
constexpr uint32_t kRevokeTag = bootstrap_tags::kRevoke;


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
  out->delivered.clear();
  for (uint32_t i = 0; i < std::min<uint32_t>(m.np2p, kMaxP2pPeers); ++i) out->delivered.push_back({m.p2p[i].peer, m.p2p[i].count});
}

// The decision for rank r: how many of its messages each peer reported received. False
// when they do not fit.
bool writeDelivered(const std::vector<Message>& reports, const std::vector<bool>& have, int r, Message* d) {
  d->np2p = 0;
  for (size_t q = 0; q < reports.size(); ++q) {
    if (!have[q]) continue;
    for (uint32_t i = 0; i < std::min<uint32_t>(reports[q].np2p, kMaxP2pPeers); ++i)
      if (reports[q].p2p[i].peer == r) {
        if (d->np2p == kMaxP2pPeers) return false;
        d->p2p[d->np2p++] = {int32_t(q), reports[q].p2p[i].count};
      }
  }
  return true;
}

// Sends, ignoring a peer that is gone: the round finds that out by its silence.
bool sendTo(snclComm* comm, int peer, const Message& m, Deadline deadline) {
  const Deadline shortly = Deadline::afterMs(std::min<int64_t>(deadline.remainingMs(), 2000));
  return comm->bootstrap->send(peer, tagOf(Kind(m.kind), m.round), &m, sizeof(m), shortly) == snclSuccess;
}

bool takenBackUp(snclComm* comm, uint32_t link, uint64_t downNs) {
  for (auto& tr : comm->transports)
    if (tr->linkBackUp(link, downNs)) return true;
  return false;
}

// When a lost link failed, by its transport's clock (0: not known): read by the
// coordinator while every rank waits for its decision, so that every rank judges the link
// changes around that failure by one time, not by whenever it looked.
uint64_t linkDownNs(snclComm* comm, uint32_t link) {
  uint64_t at = 0;
  for (auto& tr : comm->transports) at = std::max(at, tr->linkDownAtNs(link));
  return at;
}

// Link changes logged before the fault (a link back up, a degrade or its end) go into the
// topology now, on every rank alike, rather than at the collective the log stamped: the
// failure being agreed on must be routed around links already back in service.
void takeLinkChanges(snclComm* comm, uint64_t changes) {
  for (auto& t : comm->transports) t->takeLinkChanges(changes);
}

// The links marked down in the topology (a new epoch), each failed at downNs[i]; false
// when two ranks then have no route, naming the pair in *why.
bool markDown(snclComm* comm, const std::vector<uint32_t>& links, const std::vector<uint64_t>& downNs,
              std::string* why) {
  const CommTopology& t = *comm->topology;
  for (size_t i = 0; i < links.size(); ++i) {
    const uint32_t l = links[i];
    if (t.graph().linkState(l) != topo::LinkState::Down && !takenBackUp(comm, l, downNs[i])) {
      if (t.setLinkState(l, topo::LinkState::Down) != snclSuccess) {
        *why = lastError();
        return false;
      }
      addUnique(&comm->fault.lostLinks, l);
      ++comm->fault.stats.linkFailures;
    }
    for (auto& tr : comm->transports) tr->linkAgreedDown(l, downNs[i]);
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

// "rank(s) 1 in call #21; rank(s) 0, 2-7 in call #22": the ranks that reported, by the
// call each was in (ranges keep it short at thousands of ranks).
std::string whereRanks(const std::vector<Message>& reports, const std::vector<bool>& have) {
  std::map<uint64_t, std::vector<int>> bySeq;
  for (size_t r = 0; r < reports.size(); ++r)
    if (have[r]) bySeq[reports[r].seq].push_back(int(r));
  std::string text;
  for (const auto& [seq, ranks] : bySeq) {
    std::string list;
    for (size_t i = 0; i < ranks.size();) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      list += fmt::format("{}{}", list.empty() ? "" : ", ", j > i ? fmt::format("{}-{}", ranks[i], ranks[j])
                                                                  : std::to_string(ranks[i]));
      i = j + 1;
    }
    text += fmt::format("{}rank(s) {} in call #{}", text.empty() ? "" : "; ", list, seq + 1);
  }
  return text;
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
  // transfers did not cross it can finish its call and go on (lib/comm/catch_up.h).
  std::vector<uint32_t> links;
  std::vector<uint64_t> downNs;  // when each failed (the links the decision marks down)
  uint32_t rails = 0, railsLost = 0, railsBack = 0;
  uint64_t changes = 0;  // link changes (a link back up, ...) every rank takes with the decision
  bool canRetry = true, serves = true;  // serves: every rank ahead kept what a catch-up replays
  bool inGroups = false, overflow = false;  // a rank is in a group of sends and receives; counts did not fit
  // Calls lowSeq..highEnd-1 are in question: the lowest not finished everywhere, to the
  // highest a rank reached (a rank in a group reached the call before it).
  uint64_t lowSeq = UINT64_MAX, highEnd = 0;
  int firstError = -1;
  std::vector<int> voters;
  for (int r = 0; r < n; ++r) {
    if (!have[r]) continue;
    voters.push_back(r);
    std::vector<int> ignored;
    readLists(reports[r], &links, &ignored);
    rails |= reports[r].rails, railsLost |= reports[r].railsLost, railsBack |= reports[r].railsBack;
    changes = std::max(changes, reports[r].changes);
    lowSeq = std::min(lowSeq, reports[r].seq);
    highEnd = std::max(highEnd, reports[r].inGroup ? reports[r].seq : reports[r].seq + 1);
    inGroups |= reports[r].inGroup != 0;
    overflow |= reports[r].p2pOverflow != 0;
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
  // Every rank in one call: it is re-run as it is. Otherwise every rank runs each call in
  // question once more, on the plan of the ranks that reached it.
  const bool sameCall = !inGroups && highEnd == lowSeq + 1;
  const uint64_t span = highEnd > lowSeq ? highEnd - lowSeq : 0;
  const bool needCatchUp = !sameCall && span > 0;
  const bool catchUp = serves && span <= uint64_t(kKeptCalls) && plans.size() == span;
  if (inGroups) {  // each rank's decision carries its peers' counts
    Message probe{};
    for (int r = 0; r < n && !overflow; ++r)
      if (have[r]) overflow = !writeDelivered(reports, have, r, &probe);
  }
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
    text += fmt::format("; where the others were: {}", whereRanks(reports, have));
    if (firstError >= 0) text += fmt::format("; rank {} saw: {}", firstError, reports[firstError].text);
  } else if (needCatchUp && !catchUp) {
    d.verdict = int32_t(Verdict::Failed);
    text = span > uint64_t(kKeptCalls)
               ? fmt::format("ranks were in calls #{} to #{} when the fault hit; at most {} calls apart are caught up",
                             lowSeq + 1, highEnd, kKeptCalls)
               : fmt::format("ranks were in different calls when the fault hit ({}), and those ahead did not keep "
                             "the calls in between (SNCL_RETRY=0 on some rank, or calls larger than its retry "
                             "budget SNCL_MEM_BUDGET?)", whereRanks(reports, have));
  } else if (inGroups && overflow) {
    d.verdict = int32_t(Verdict::Failed);
    text = fmt::format("a group of sends and receives was in flight, and a rank has exchanged messages with more "
                       "than {} peers: a fault round cannot carry their counts", kMaxP2pPeers);
  } else if (!links.empty() || railsLost || railsBack) {
    std::string unreachable;
    d.changes = changes;
    takeLinkChanges(comm, changes);
    if (links.size() > kMaxLinks) links.resize(kMaxLinks);  // what the decision carries
    for (uint32_t l : links) downNs.push_back(linkDownNs(comm, l));
    bool routed = markDown(comm, links, downNs, &unreachable);
    if (routed && railsLost && !(rails & ~railsLost)) routed = false, unreachable = "no other rail remains";
    const std::string lost = lostText(g, links, railsLost);
    if (routed && canRetry) {
      d.verdict = int32_t(Verdict::Retry);
      d.code = snclSuccess;
      // A rail back on some rank: the transports' reset takes it if it answers on all.
      const std::string back = railsBack ? fmt::format("{} answer again", lostText(g, {}, railsBack))
                                         : std::string();
      text = lost.empty() ? back + "; taking back what answers everywhere"
                          : fmt::format("{} lost; rerouting{}", lost, back.empty() ? "" : "; " + back);
      if (needCatchUp) {
        text += span == 1 ? fmt::format("; call #{} is run again by every rank", highEnd)
                          : fmt::format("; calls #{} to #{} are run again by every rank", lowSeq + 1, highEnd);
        d.seq = lowSeq;
        d.oldest = highEnd - 1;
        writePlans(&d, plans);
      }
      if (inGroups) text += "; groups of sends and receives in flight finish their remaining messages";
    } else {
      d.verdict = int32_t(Verdict::LinkLost);
      text = fmt::format("{} {} down: {}", railsLost ? lost : "link " + linkList(g, links),
                         links.size() + size_t(__builtin_popcount(railsLost)) > 1 ? "are" : "is",
                         routed ? "retry is off (SNCL_RETRY=0), its attempts are used up, or an in-place call "
                                  "larger than the retry budget (SNCL_MEM_BUDGET) was not kept" : unreachable);
    }
  } else if (needCatchUp) {
    d.verdict = int32_t(Verdict::Failed);
    text = fmt::format("ranks were in different calls ({}) and no link was lost; the calls cannot be re-run",
                       whereRanks(reports, have));
  } else {
    d.verdict = int32_t(Verdict::Failed);
    const int r = firstError >= 0 ? firstError : comm->rank;
    d.code = reports[r].code != snclSuccess ? reports[r].code : snclRemoteError;
    text = fmt::format("rank {}: {}", r, reports[r].text[0] ? reports[r].text : "failed");
  }
  // What the first rank that failed saw (a stall names the ranks that never came), unless
  // the verdict's text is that already.
  if (firstError >= 0 && d.verdict == int32_t(Verdict::Failed) && reports[firstError].text[0] &&
      text.find(reports[firstError].text) == std::string::npos)
    text += fmt::format("; rank {} saw: {}", firstError, reports[firstError].text);
  writeLists(&d, links, dead);
  std::copy_n(downNs.begin(), std::min<size_t>(downNs.size(), d.nlinks), d.linkDownNs);
  setText(&d, text);
  for (int r = 0; r < n; ++r)
    if (have[r] && r != comm->rank) {
      Message theirs = d;
      if (inGroups) writeDelivered(reports, have, r, &theirs);
      sendTo(comm, r, theirs, deadline);
    }
  if (inGroups) writeDelivered(reports, have, comm->rank, &d);
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
    takeLinkChanges(comm, m.changes);
    std::vector<uint64_t> downNs(out->links.size(), 0);  // each link's failure time, as the decision carries it
    for (size_t j = 0; j < out->links.size(); ++j)
      for (uint32_t i = 0; i < std::min<uint32_t>(m.nlinks, kMaxLinks); ++i)
        if (m.links[i] == out->links[j]) downNs[j] = m.linkDownNs[i];
    markDown(comm, out->links, downNs, &ignored);
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
  if (f.pulledBy >= 0) return true;  // pulled in while it waited between calls (lib/comm/history.cc)
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
    int32_t revoker = -1;
    if (comm->bootstrap->tryRecv(r, kRevokeTag, &revoker, sizeof(revoker), &got) == snclSuccess && got) {
      f.revokedBy = r;
      f.revoked.store(true);
      return true;
    }
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

std::string revokedText(const snclComm* comm) {
  return comm->fault.revokedBy >= 0 ? fmt::format("revoked by rank {}", comm->fault.revokedBy) : "revoked";
}

Result faultRevoke(snclComm* comm) {
  FaultState& f = comm->fault;
  f.revoked.store(true);  // this rank's call in flight stops at its next poll
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);
  // The side channel is the calls' to poll: wait until none runs (the one in flight has
  // seen the flag), bounded by the deadline.
  std::unique_lock<std::mutex> lock(comm->runMutex, std::defer_lock);
  while (!lock.try_lock()) {
    if (deadline.expired())
      return fail(snclTimeout, "snclCommRevoke: rank {}: the call in flight on comm {} did not stop in {} ms",
                  comm->rank, comm->name, comm->timeoutMs);
    usleep(200);
  }
  if (f.revokeSent) return snclSuccess;
  f.revokeSent = true;
  const int32_t me = comm->rank;
  ExpectedErrors expected;  // a peer that exited cannot be told, and need not be
  for (int r = 0; r < comm->nranks; ++r)
    if (r != comm->rank && r != f.revokedBy && !f.sideBroken[size_t(r)])
      (void)comm->bootstrap->send(r, kRevokeTag, &me, sizeof(me), deadline);
  return snclSuccess;
}

Result faultAgree(snclComm* comm, uint64_t seq, Result cause, const std::string& causeText, bool canRetry,
                  const Plan* plan, Decision* out) {
  FaultState& f = comm->fault;
  const uint32_t round = f.round++;
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);
  const int64_t startNs = trace::nowNs();  // of the round's trace event
  const bool pulledIn = f.pulledBy >= 0;
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
  for (auto& t : comm->transports) {
    mine.rails |= t->railsUsable(), mine.railsLost |= t->railsLost(), mine.railsBack |= t->railsBack();
    mine.changes = std::max(mine.changes, t->linkChangesLogged());
  }
  mine.oldest = oldestKept(comm, seq);
  std::vector<std::pair<uint64_t, Plan>> plans;
  keptPlans(comm, seq, plan, &plans);
  writePlans(&mine, plans);
  mine.inGroup = plan ? 0 : 1;
  std::vector<std::pair<int, uint32_t>> received;
  p2pDelivered(comm, &received);
  mine.p2pOverflow = received.size() > size_t(kMaxP2pPeers);
  mine.np2p = uint32_t(std::min<size_t>(received.size(), kMaxP2pPeers));
  for (uint32_t i = 0; i < mine.np2p; ++i) mine.p2p[i] = {received[i].first, received[i].second};
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
  log::info(log::Subsys::Fault, "comm {} rank {}: fault round {} for {} #{} ({}{}); saw links [{}], lost ranks [{}]",
            comm->name, comm->rank, round, plan ? "call" : "a group of sends and receives before call", seq + 1,
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
  // A fault the comm got through is worth one line of the job's log: the coordinator's.
  if (coordinates && out->verdict == Verdict::Retry)
    log::warn("comm {} rank {}: fault round {}: {}", comm->name, comm->rank, round, out->message);
  else
    log::info(log::Subsys::Fault, "comm {} rank {}: fault round {} decided{}: {}", comm->name, comm->rank, round,
              coordinates ? " (this rank coordinated)" : "", out->message);
  observeRound(comm, seq, startNs, round, *out, coordinates, pulledIn);
  return snclSuccess;
}

bool faultPending(snclComm* comm) {
  for (auto& t : comm->transports)
    if (t->faultPending()) return true;
  return false;
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

uint64_t freshNonce(int rank) {
  static std::mt19937_64 gen(std::random_device{}() ^ uint64_t(getpid()) << 20);
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  // The pid and the time too: a generator forked from a parent that had used it repeats.
  const uint64_t salt = uint64_t(getpid()) * 0x9e3779b97f4a7c15ull ^ uint64_t(Clock::now().time_since_epoch().count());
  return (uint64_t(uint32_t(rank) + 1) << 40) ^ ((gen() ^ salt) & ((uint64_t{1} << 40) - 1)) ^ (uint64_t{1} << 63);
}

std::string rankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return fmt::format("{}", fmt::join(ranks, ", "));
}

}  // namespace sncl
