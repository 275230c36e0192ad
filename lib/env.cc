#include "lib/env.h"

#include <cerrno>
#include <cstdlib>

#include "lib/log.h"

namespace sncl::env {

std::optional<std::string> str(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int64_t integer(const char* name, int64_t dflt) {
  auto v = str(name);
  if (!v) return dflt;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 0);
  if (errno || end == v->c_str() || *end) {
    log::warn("{}={} is not an integer; using {}", name, *v, dflt);
    return dflt;
  }
  return x;
}

uint64_t bytes(const char* name, uint64_t dflt) {
  auto v = str(name);
  if (!v) return dflt;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v->c_str(), &end, 0);
  uint64_t mult = 1;
  if (end && *end) {
    switch (*end) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: mult = 0;
    }
    if (mult && end[1] && !((end[1] == 'B' || end[1] == 'b') && !end[2])) mult = 0;
  }
  if (errno || end == v->c_str() || mult == 0) {
    log::warn("{}={} is not a size; using {}", name, *v, dflt);
    return dflt;
  }
  return x * mult;
}

int64_t timeoutMs() {
  int64_t t = integer("SNCL_TIMEOUT_MS", 60000);
  return t > 0 ? t : 60000;
}

}  // namespace sncl::env
