#include "lib/base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <mutex>
#include <string>

#include "lib/base/hot_tls.h"

namespace sncl::log {
namespace {

Level parseLevel() {
  const char* v = std::getenv("SNCL_DEBUG");
  if (!v) return Level::Warn;
  if (!strcasecmp(v, "NONE")) return Level::None;
  if (!strcasecmp(v, "INFO")) return Level::Info;
  if (!strcasecmp(v, "TRACE")) return Level::Trace;
  return Level::Warn;
}

SNCL_HOT_THREAD_LOCAL int tRank = -1;

unsigned parseSubsys() {
  const char* v = std::getenv("SNCL_DEBUG_SUBSYS");
  if (!v || !*v) return ~0u;
  bool exclude = *v == '^';
  std::string list(exclude ? v + 1 : v);
  static const struct {
    const char* name;
    Subsys s;
  } kNames[] = {{"MISC", Subsys::Misc}, {"INIT", Subsys::Init}, {"PLAN", Subsys::Plan}, {"TRANSPORT", Subsys::Transport},
                {"BOOTSTRAP", Subsys::Bootstrap}, {"TOPO", Subsys::Topo}, {"FAULT", Subsys::Fault}};
  unsigned mask = 0;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string name = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!strcasecmp(name.c_str(), "ALL")) mask = ~0u;
    for (const auto& n : kNames)
      if (!strcasecmp(name.c_str(), n.name)) mask |= static_cast<unsigned>(n.s);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? ~mask : mask;
}

}  // namespace

Level level() {
  static const Level lvl = parseLevel();
  return lvl;
}

bool enabled(Subsys s) {
  static const unsigned mask = parseSubsys();
  return mask & static_cast<unsigned>(s);
}

void setThreadRank(int rank) { tRank = rank; }

void write(Level lvl, std::string_view msg) {
  static char host[64] = {0};
  static std::once_flag once;
  std::call_once(once, [] {
    gethostname(host, sizeof(host) - 1);
    if (char* dot = strchr(host, '.')) *dot = 0;
  });
  const char* tag = lvl == Level::Warn ? "WARN" : lvl == Level::Info ? "INFO" : "TRACE";
  // One fwrite per line keeps lines from different ranks whole.
  std::string line = fmt::format("{}:{}:{} [{}] SNCL {} {}\n", host, getpid(),
                                 static_cast<long>(syscall(SYS_gettid)), tRank, tag, msg);
  fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace sncl::log
