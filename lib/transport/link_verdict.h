// Whether a link's trouble hurts training ("fault") or is noise it absorbs ("jitter"): the
// classifier behind the job view's link column, its alarms and its metrics
// (docs/observability.md, "Links"). The thresholds are constants here and documented there.
#pragma once

#include <cstdint>

#include "lib/transport/transport.h"

namespace sncl::linkverdict {

enum class Verdict : uint8_t { Ok, Jitter, Fault };

// A link slowed this much or more halves what a collective crossing it can move: a fault.
// Below it the planner's reroute or the slower link costs less than a stop would.
constexpr double kFaultSlowdown = 2.0;
// A link that went down this often within kFlapWindowMs is flapping: a fault while that
// lasts, even when it is up at the moment (every down forces a recovery round).
constexpr uint32_t kFlapDowns = 3;
constexpr int64_t kFlapWindowMs = 60000;
// Jitter (delays that come and go, every byte still arrives) is never a fault by itself:
// nothing is rerouted or re-run for it. It is reported once it adds this fraction of a
// transfer's mean time on average; the score says how much.
constexpr double kJitterNoticeable = 0.001;

inline bool isFaultSlowdown(double slowdown) { return slowdown >= kFaultSlowdown; }

// 1 + the mean delay jitter adds to a transfer over the mean transfer time: 1 when the
// link sees no jitter, 2 when jitter doubles its transfers on average.
inline double jitterScore(const LinkView& v) {
  if (v.transfers == 0 || v.transferNs <= 0) return 1;
  return 1 + double(v.jittered) / double(v.transfers) * v.jitterNs / v.transferNs;
}

// Downs within the flap window, from the ages of the last three.
inline uint32_t recentDowns(const LinkView& v) {
  uint32_t n = 0;
  for (int64_t age : v.downAgesMs) n += age >= 0 && age <= kFlapWindowMs;
  return n;
}

struct Judgement {
  Verdict verdict;
  const char* reason;  // "down", "slowed 3.0x", ... (static text)
};

inline Judgement judge(const LinkView& v) {
  if (v.state == LinkView::State::Down) return {Verdict::Fault, "down"};
  if (recentDowns(v) >= kFlapDowns) return {Verdict::Fault, "flapping"};
  if (v.state == LinkView::State::Degraded && isFaultSlowdown(v.slowdown)) return {Verdict::Fault, "slowed"};
  if (v.state == LinkView::State::Degraded) return {Verdict::Jitter, "slowed a little"};
  if (jitterScore(v) - 1 >= kJitterNoticeable) return {Verdict::Jitter, "jitter"};
  if (recentDowns(v) > 0) return {Verdict::Jitter, "went down and came back"};
  return {Verdict::Ok, ""};
}

inline const char* verdictName(Verdict v) {
  return v == Verdict::Fault ? "fault" : v == Verdict::Jitter ? "jitter" : "ok";
}
inline const char* stateName(LinkView::State s) {
  return s == LinkView::State::Down ? "down" : s == LinkView::State::Degraded ? "degraded" : "up";
}

}  // namespace sncl::linkverdict
