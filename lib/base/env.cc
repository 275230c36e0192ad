#include "lib/base/env.h"

#include <cerrno>
#include <cstdlib>

#include "lib/base/log.h"
#include "lib/base/size_text.h"

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
  uint64_t x = 0;
  if (!parseSize(*v, &x)) {
    log::warn("{}={} is not a size (e.g. 65536, 64K, 1.5M); using {}", name, *v, dflt);
    return dflt;
  }
  return x;
}

int64_t timeoutMs() {
  int64_t t = integer("SNCL_TIMEOUT_MS", 60000);
  return t > 0 ? t : 60000;
}

}  // namespace sncl::env
