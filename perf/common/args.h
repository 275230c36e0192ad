// Command-line pieces the benchmarks share: sizes with K/M/G suffixes, comma lists.
// Header only: tools without the MPI harness (chaos_soak) use it too.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

namespace perf {

// "4M", "65536", "1.5K": false on anything else (a trailing word, a negative size).
inline bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (end == s || v < 0) return false;
  switch (*end) {
    case 'K': case 'k': v *= 1024; ++end; break;
    case 'M': case 'm': v *= 1024.0 * 1024; ++end; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end) return false;
  *out = static_cast<size_t>(v);
  return true;
}

// "a,b,,c" -> {a, b, c}.
inline std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace perf
