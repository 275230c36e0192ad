// Command-line pieces the benchmarks share beside the library's own snclParseSize and
// snclDataTypeFromName: comma lists. Header only: tools without the MPI harness
// (chaos_soak) use it too.
#pragma once

#include <string>
#include <vector>

namespace perf {

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
