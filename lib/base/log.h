// Logging, levels from SNCL_DEBUG (WARN default, INFO, TRACE, NONE). Formatting by fmt.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace sncl::log {

enum class Level { None = 0, Warn = 1, Info = 2, Trace = 3 };

// INFO lines by subsystem; SNCL_DEBUG_SUBSYS (e.g. "PLAN,FAULT", "^INIT", default ALL)
// picks which are printed. Plain info() lines belong to Misc.
enum class Subsys : unsigned { Misc = 1, Init = 2, Plan = 4, Transport = 8, Bootstrap = 16, Topo = 32, Fault = 64 };

Level level();
bool enabled(Subsys s);
// Rank shown in the prefix of this thread's lines; -1 before a comm exists.
void setThreadRank(int rank);
void write(Level lvl, std::string_view msg);

template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (level() >= Level::Warn) write(Level::Warn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (level() >= Level::Info && enabled(Subsys::Misc)) write(Level::Info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void info(Subsys s, fmt::format_string<A...> f, A&&... a) {
  if (level() >= Level::Info && enabled(s)) write(Level::Info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void trace(fmt::format_string<A...> f, A&&... a) {
  if (level() >= Level::Trace) write(Level::Trace, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace sncl::log
