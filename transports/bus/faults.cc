#include "transports/bus/faults.h"

#include <charconv>
#include <cmath>

namespace sncl::bus {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

bool parseNumber(std::string_view s, double* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(*out);
}

bool parseCount(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// "200us" -> 200; units ns, us, ms, s.
bool parseDurationUs(std::string_view s, double* us) {
  struct Unit {
    const char* name;
    double us;
  };
  static constexpr Unit kUnits[] = {{"ns", 1e-3}, {"us", 1.0}, {"ms", 1e3}, {"s", 1e6}};
  for (const Unit& u : kUnits) {
    std::string_view n(u.name);
    if (s.size() > n.size() && s.substr(s.size() - n.size()) == n) {
      std::string_view num = s.substr(0, s.size() - n.size());
      if (n == "s" && (num.back() == 'm' || num.back() == 'u' || num.back() == 'n')) continue;
      double v = 0;
      if (!parseNumber(num, &v) || v < 0) return false;
      *us = v * u.us;
      return true;
    }
  }
  return false;
}

Result bad(std::string_view clause, std::string_view why) {
  return fail(snclInvalidArgument, "SNCL_FAULTS clause \"{}\": {} (see docs/faults.md)", clause, why);
}

Result parseTrigger(std::string_view clause, std::string_view t, Fault* f) {
  if (t.substr(0, 3) == "op=") {
    if (!parseCount(t.substr(3), &f->op) || f->op == 0) return bad(clause, "op= needs a call number >= 1");
    f->trigger = Fault::Trigger::Op;
    return snclSuccess;
  }
  if (t.substr(0, 2) == "t=") {
    if (!parseDurationUs(t.substr(2), &f->atUs)) return bad(clause, "t= needs a duration such as 20ms");
    f->trigger = Fault::Trigger::Time;
    return snclSuccess;
  }
  return bad(clause, "the trigger after '@' is op=<n> or t=<duration>");
}

Result parseClause(std::string_view clause, const topo::Graph& g, int nranks, Fault* f) {
  f->text = std::string(clause);
  std::string_view body = clause;
  if (size_t at = clause.rfind('@'); at != std::string_view::npos) {
    SNCL_CHECK(parseTrigger(clause, trim(clause.substr(at + 1)), f));
    body = trim(clause.substr(0, at));
  }
  const size_t colon = body.rfind(':');
  if (colon == std::string_view::npos) return bad(clause, "expected <subject>:<action>");
  std::string_view subject = trim(body.substr(0, colon)), action = trim(body.substr(colon + 1));

  if (subject.substr(0, 7) == "jitter=") {
    if (!parseNumber(subject.substr(7), &f->jitterFraction) || f->jitterFraction < 0 || f->jitterFraction > 1)
      return bad(clause, "jitter=<fraction> needs a number in [0, 1]");
    if (!parseDurationUs(action, &f->jitterUs)) return bad(clause, "jitter's action is a delay such as 200us");
    f->kind = Fault::Kind::Jitter;
    return snclSuccess;
  }
  if (subject.substr(0, 5) == "rank=") {
    uint64_t r = 0;
    if (!parseCount(subject.substr(5), &r) || r >= uint64_t(nranks))
      return bad(clause, fmt::format("rank=<r> needs a rank of the comm (0..{})", nranks - 1));
    if (action != "kill") return bad(clause, "a rank's action is kill");
    f->rank = int(r);
    f->kind = Fault::Kind::RankKill;
    return snclSuccess;
  }
  if (subject.substr(0, 5) == "link=") {
    std::string_view pair = subject.substr(5);
    const size_t dash = pair.find('-');
    if (dash == std::string_view::npos) return bad(clause, "link=<a>-<b> names two vertices");
    topo::VertexId a = g.findVertex(pair.substr(0, dash)), b = g.findVertex(pair.substr(dash + 1));
    if (a == topo::kNone || b == topo::kNone)
      return bad(clause, fmt::format("no vertex {} in topology {}", a == topo::kNone ? pair.substr(0, dash)
                                                                                     : pair.substr(dash + 1),
                                     g.name()));
    f->link = g.findLink(a, b);
    if (f->link == topo::kNone) return bad(clause, fmt::format("no link joins {} in topology {}", pair, g.name()));
    if (action == "down") {
      f->kind = Fault::Kind::LinkDown;
    } else if (action == "up") {
      f->kind = Fault::Kind::LinkUp;
    } else if (action.substr(0, 8) == "degrade=") {
      if (!parseNumber(action.substr(8), &f->slowdown) || f->slowdown <= 1 || f->slowdown > 1e6)
        return bad(clause, "degrade=<F> needs a slowdown factor in (1, 1e6]");
      f->kind = Fault::Kind::LinkDegrade;
    } else {
      return bad(clause, "a link's action is down, up or degrade=<F>");
    }
    return snclSuccess;
  }
  return bad(clause, "the subject is link=<a>-<b>, rank=<r> or jitter=<fraction>");
}

}  // namespace

Result parseFaults(std::string_view spec, const topo::Graph& graph, int nranks, std::vector<Fault>* out) {
  std::vector<Fault> faults;
  while (!spec.empty()) {
    const size_t semi = spec.find(';');
    std::string_view clause = trim(spec.substr(0, semi));
    spec = semi == std::string_view::npos ? std::string_view() : spec.substr(semi + 1);
    if (clause.empty()) continue;
    Fault f;
    SNCL_CHECK(parseClause(clause, graph, nranks, &f));
    faults.push_back(std::move(f));
  }
  out->insert(out->end(), faults.begin(), faults.end());
  return snclSuccess;
}

}  // namespace sncl::bus
