// Fault specifications of the emulated bus (SNCL_FAULTS, snclBusInjectFault); the grammar
// is in docs/faults.md:
//   spec    := fault (';' fault)*
//   fault   := subject ':' action ['@' trigger]
//   subject := 'link=' vertex '-' vertex | 'rank=' N | 'jitter=' fraction
//   action  := 'down' | 'up' | 'degrade=' F | 'kill' | duration      (duration: jitter only)
//   trigger := 'op=' N | 't=' duration                                 (modeled time)
//   duration:= number ('ns' | 'us' | 'ms' | 's')
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lib/base/error.h"
#include "lib/topo/graph.h"

namespace sncl::bus {

struct Fault {
  enum class Kind : uint8_t { LinkDown, LinkUp, LinkDegrade, Jitter, RankKill };
  enum class Trigger : uint8_t { Now, Op, Time };

  Kind kind = Kind::LinkDown;
  topo::LinkId link = topo::kNone;
  int rank = -1;
  double slowdown = 1.0;        // degrade: transfers on the link take this many times longer
  double jitterFraction = 0.0;  // of chunk transfers
  double jitterUs = 0.0;        // modeled delay each of them gets
  Trigger trigger = Trigger::Now;
  uint64_t op = 0;              // Op: applies as a rank begins its op-th call (1 = the first)
  double atUs = 0.0;            // Time: modeled microseconds after the comm's setup
  std::string text;             // as written, for logs and messages
};

// Parses spec against the comm's topology (vertices by name) and rank count. Errors are
// InvalidArgument naming the clause and what is wrong.
Result parseFaults(std::string_view spec, const topo::Graph& graph, int nranks, std::vector<Fault>* out);

}  // namespace sncl::bus
