// Logging, levels from SNCL_DEBUG (WARN default, INFO, TRACE, NONE). Formatting by fmt.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace sncl::log {

enum class Level { None = 0, Warn = 1, Info = 2, Trace = 3 };

Level level();
// Rank shown in the prefix of this thread's lines; -1 before a comm exists.
void setThreadRank(int rank);
void write(Level lvl, std::string_view msg);

template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (level() >= Level::Warn) write(Level::Warn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (level() >= Level::Info) write(Level::Info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void trace(fmt::format_string<A...> f, A&&... a) {
  if (level() >= Level::Trace) write(Level::Trace, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace sncl::log
