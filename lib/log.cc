#include "lib/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

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

thread_local int tRank = -1;

}  // namespace

Level level() {
  static const Level lvl = parseLevel();
  return lvl;
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
