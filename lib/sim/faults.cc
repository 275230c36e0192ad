#include "lib/sim/faults.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace sncl::sim {

Result parseFaults(std::string_view spec, std::vector<LinkFault>* out) {
  out->clear();
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string_view::npos) end = spec.size();
    std::string entry(spec.substr(pos, end - pos));
    pos = end + 1;
    while (!entry.empty() && entry.front() == ' ') entry.erase(0, 1);
    while (!entry.empty() && entry.back() == ' ') entry.pop_back();
    if (entry.empty()) continue;
    if (entry.rfind("link=", 0) != 0)
      return fail(snclInvalidArgument, "faults: '{}': only link faults (link=A-B:down|up|degrade=F) are simulated", entry);
    if (entry.find('@') != std::string::npos)
      return fail(snclInvalidArgument, "faults: '{}': triggers are not simulated; faults hold for the whole collective",
                  entry);
    const size_t colon = entry.find(':');
    const std::string pair = entry.substr(5, colon == std::string::npos ? std::string::npos : colon - 5);
    const size_t dash = pair.find('-');
    if (colon == std::string::npos || dash == std::string::npos || dash == 0 || dash + 1 == pair.size() ||
        pair.find('-', dash + 1) != std::string::npos)
      return fail(snclInvalidArgument, "faults: '{}': expected link=A-B:down or link=A-B:degrade=F", entry);
    LinkFault f{pair.substr(0, dash), pair.substr(dash + 1)};
    const std::string what = entry.substr(colon + 1);
    if (what == "down") {
      f.state = topo::LinkState::Down;
    } else if (what == "up") {
      f.state = topo::LinkState::Up;
    } else if (what.rfind("degrade=", 0) == 0) {
      const std::string num = what.substr(8);
      char* e = nullptr;
      errno = 0;
      const double slower = std::strtod(num.c_str(), &e);
      if (num.empty() || errno || *e || !std::isfinite(slower) || slower <= 1 || 1 / slower < topo::kMinDegradeFactor)
        return fail(snclInvalidArgument, "faults: '{}': degrade factor must be above 1 (and at most {})", entry,
                    1 / topo::kMinDegradeFactor);
      f.state = topo::LinkState::Degraded;
      f.factor = 1 / slower;
    } else {
      return fail(snclInvalidArgument, "faults: '{}': unknown link action '{}' (down, up, degrade=F)", entry, what);
    }
    out->push_back(std::move(f));
  }
  return snclSuccess;
}

Result applyFaults(topo::Graph& g, const std::vector<LinkFault>& faults) {
  for (const LinkFault& f : faults) {
    const topo::VertexId a = g.findVertex(f.a), b = g.findVertex(f.b);
    if (a == topo::kNone || b == topo::kNone)
      return fail(snclInvalidArgument, "faults: no vertex '{}'", a == topo::kNone ? f.a : f.b);
    const topo::LinkId l = g.findLink(a, b);
    if (l == topo::kNone) return fail(snclInvalidArgument, "faults: no link between '{}' and '{}'", f.a, f.b);
    SNCL_CHECK(g.setLinkState(l, f.state, f.factor));
  }
  return snclSuccess;
}

}  // namespace sncl::sim
