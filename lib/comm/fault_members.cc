// snclCommShrink's agreement on the members (docs/faults.md).
#include "lib/comm/fault.h"

#include <cstring>

#include "lib/base/log.h"
#include "lib/comm/comm.h"
#include "lib/comm/fault_vote.h"

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

uint32_t shrinkTag(ShrinkKind kind, uint32_t instance) {
  return bootstrap_tags::kShrink | ((instance & 0x3fffffu) << 2) | kind;
}

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
